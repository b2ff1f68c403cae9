"""Per-token Vault transit: the key never leaves Vault, and Vault becomes a per-request dependency."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from statecodec._encoding import (
    DEFAULT_MAX_TOKEN_LENGTH,
    b64u_decode,
    b64u_encode,
    b64u_len,
    check_cap,
    check_payload,
    check_token_text,
)
from statecodec.envelope import _check_context, canonical_context
from statecodec.errors import ConfigurationError, InvalidToken, ProviderError, Reason
from statecodec.providers._vault_api import Failure, FailureKind, TransitKey, b64, parse_vault_ciphertext, unb64

_MAX_OUTAGE_BACKOFF = 30.0  # longest window, in seconds, during which calls fail without trying Vault
_GCM_OVERHEAD = 12 + 16  # Vault's AEAD ciphertext: nonce | ciphertext | tag
_HEADER = 1 + 4
_LABEL = b"statecodec/v1/vault-transit\x00"
# nonce (12) | ciphertext | tag (16) under a 256-bit key (not xchacha20-poly1305's 24-byte nonce, not aes128-gcm96)
_SERVED_KEY_TYPES = ("aes256-gcm96", "chacha20-poly1305")
_REASONS = {FailureKind.BAD_CIPHERTEXT: Reason.SEAL, FailureKind.RETIRED: Reason.UNKNOWN_KEY}
_NO_ROUND_TRIP = Failure(FailureKind.OTHER, "the start-up probe did not round-trip")


class VaultTransitCodec(TransitKey):
    """Every seal is one Vault ``transit/encrypt`` call, every unseal one ``transit/decrypt``.

    Wire format (version 0x05), unpadded base64url of::

        0x05 | key_version (4, big-endian, >= 1) | nonce (12) | ciphertext | tag (16)

    The last three fields are Vault's ``vault:vN:`` ciphertext, decoded from standard base64; ``key_version``
    is N, and the token's key id is N as 8 hex digits (``00000003``). Overhead: 33 bytes, 44 characters.
    The prefix is bound with ``"statecodec/v1/vault-transit" 0x00 0x05 0x00 || canonical_context(context)``:
    as the key-derivation context on a derived key (recommended; ``rewrap`` carries it, so `reseal` is one
    call), and also as AES-GCM associated data on a non-derived one.

    Checks before any network call: type and cap (OVERSIZED), canonical base64url, length and key version
    >= 1 (MALFORMED), version byte (FORMAT). Then Vault: tag or context mismatch -> SEAL; version retired or
    not yet created -> UNKNOWN_KEY; Vault down, denied or the key gone -> PROVIDER (seal: `ProviderError`).
    Construction serves only an allow-listed key (``aes256-gcm96`` or ``chacha20-poly1305``, not convergent,
    not exportable unless `allow_exportable_key`) and proves the binding with one encrypt and one decrypt.
    """

    VERSION = 0x05

    def __init__(
        self,
        client: Any,
        key: str,
        *,
        mount_point: str = "transit",
        context: Mapping[str, str] | None = None,
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
        outage_backoff: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        owns_client: bool = False,
        allow_exportable_key: bool = False,
    ) -> None:
        super().__init__(client, key, mount_point, owns_client)
        self._max_length = check_cap(max_token_length, b64u_len(_HEADER + _GCM_OVERHEAD))
        self._max_payload = (self._max_length * 3) // 4 - _HEADER - _GCM_OVERHEAD
        if type(outage_backoff) not in (int, float) or not 0 <= outage_backoff <= 60:
            raise ConfigurationError("outage_backoff must be seconds (0 to 60)")
        if not callable(clock):  # here, not at the first outage, where it would escape unseal as a TypeError
            raise ConfigurationError("clock must be a callable returning seconds, e.g. time.monotonic")
        if not isinstance(allow_exportable_key, bool):
            raise ConfigurationError("allow_exportable_key must be True or False")
        self._context = _check_context({"purpose": "statecodec-vault-transit"} if context is None else context)
        self._window = _OutageWindow(float(outage_backoff), clock)
        # The read goes first: `transit/encrypt` silently creates a missing key for a token allowed to `create`.
        described = self._request("keys")
        if isinstance(described, Failure):
            raise self._start_error("read", described)
        refusal = _key_refusal(described, allow_exportable_key)
        if refusal is not None:
            new = f"bao write -f {self._mount}/keys/<new-key> type=aes256-gcm96 derived=true"
            raise ConfigurationError(f"cannot use {self.describe()}: {refusal}; use a key of type aes256-gcm96: {new}")
        derived, latest, floor = (described.get(k) for k in ("derived", "latest_version", "min_decryption_version"))
        if type(derived) is not bool or type(latest) is not int or type(floor) is not int:
            raise self._start_error("read", Failure(FailureKind.OTHER, "Vault returned a malformed key description"))
        self._derived, self._key_ids = derived, tuple(range(latest, max(floor, 1) - 1, -1))  # newest first
        bound = b64(_LABEL + bytes([self.VERSION, 0]) + canonical_context(self._context))
        self._binding = {"context": bound} if derived else {"context": bound, "associated_data": bound}
        probe = b"statecodec start-up probe"  # seal and open under the binding; learns the latest key version
        sealed = self._seal(probe)
        if isinstance(sealed, Failure):
            raise self._start_error("encrypt", sealed)
        opened = self._open(self._parse(sealed))
        if opened != probe:
            raise self._start_error("decrypt", opened if isinstance(opened, Failure) else _NO_ROUND_TRIP)

    def _start_error(self, what: str, failure: Failure) -> ProviderError:
        return ProviderError(f"cannot use {self.describe()}: {what} failed: {failure.detail}")

    @property
    def derived(self) -> bool:
        return self._derived

    @property
    def context(self) -> Mapping[str, str]:
        return self._context

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Key versions (8 hex digits) that could decrypt at start-up, newest first."""
        return tuple(f"{v:08x}" for v in self._key_ids)

    @property
    def primary_key_id(self) -> str:
        return f"{self._primary:08x}"

    @property
    def max_token_length(self) -> int:
        return self._max_length

    def _call(self, op: str, body: dict[str, Any]) -> Mapping[str, Any] | Failure:
        """One call under the binding, through the outage window."""
        started, down = self._window.start()
        if down is not None:
            return down
        out = self._request(op, {**body, **self._binding})
        if isinstance(out, Failure) and out.kind is FailureKind.OUTAGE:
            self._window.failed(started, out)
        else:
            self._window.answered()  # Vault answered: it is up, whatever it thought of the token
        return out

    def _parse(self, token: str) -> str:
        """Strict local checks, then the Vault ciphertext text; no network."""
        raw = b64u_decode(check_token_text(token, self._max_length))
        if len(raw) < _HEADER + _GCM_OVERHEAD:
            raise InvalidToken(Reason.MALFORMED)
        if raw[0] != self.VERSION:
            raise InvalidToken(Reason.FORMAT)
        version = int.from_bytes(raw[1:_HEADER], "big")
        if version == 0:
            raise InvalidToken(Reason.MALFORMED)
        return f"vault:v{version}:{b64(raw[_HEADER:])}"

    def _token(self, out: Mapping[str, Any] | Failure) -> str | Failure:
        if isinstance(out, Failure):
            return out
        parsed = parse_vault_ciphertext(out.get("ciphertext"))
        if parsed is None or len(parsed[1]) < _GCM_OVERHEAD:
            return Failure(FailureKind.OTHER, "Vault returned a malformed ciphertext")
        self._primary = parsed[0]
        return b64u_encode(bytes([self.VERSION]) + parsed[0].to_bytes(4, "big") + parsed[1])

    def _seal(self, payload: bytes | Failure) -> str | Failure:
        return (
            payload if isinstance(payload, Failure) else self._token(self._call("encrypt", {"plaintext": b64(payload)}))
        )

    def _open(self, ciphertext: str) -> bytes | Failure:
        out = self._call("decrypt", {"ciphertext": ciphertext})
        payload = out if isinstance(out, Failure) else unb64(out.get("plaintext"))
        return Failure(FailureKind.OTHER, "Vault returned a malformed plaintext") if payload is None else payload

    def seal(self, payload: bytes) -> str:
        """One ``transit/encrypt`` call; `ProviderError` when Vault cannot seal."""
        check_payload(payload, self._max_payload)
        token = self._seal(payload)
        if isinstance(token, Failure):
            raise ProviderError(f"cannot seal with {self.describe()}: {token.detail}")
        return token

    def unseal(self, token: str) -> bytes:
        """One ``transit/decrypt`` call after strict local checks; only `InvalidToken` escapes."""
        payload = self._open(self._parse(token))
        if isinstance(payload, Failure):
            raise InvalidToken(_REASONS.get(payload.kind, Reason.PROVIDER))
        return payload

    def reseal(self, token: str) -> str:
        """The same payload under Vault's latest key version: `InvalidToken` for a bad token, else `ProviderError`."""
        ciphertext = self._parse(token)
        if self._derived:
            new = self._token(self._call("rewrap", {"ciphertext": ciphertext}))
        else:  # rewrap cannot carry associated data: decrypt, then encrypt
            new = self._seal(self._open(ciphertext))
        if isinstance(new, str):
            return new
        reason = _REASONS.get(new.kind, Reason.PROVIDER)
        if reason is Reason.PROVIDER:
            raise ProviderError(f"cannot reseal with {self.describe()}: {new.detail}")
        raise InvalidToken(reason)


class _OutageWindow:
    """While Vault cannot answer, calls fail at once for `base` seconds, doubling (at most 30 s) while it lasts.

    One rule: a failure opens or doubles the window only if its call started at or after the moment the current
    window was set. Calls in flight when Vault stalled are one failure, not one each, so however many callers a
    stall catches, the codec serves again within one `base` of Vault answering. Any answer closes the window.
    """

    __slots__ = ("_base", "_clock", "_down", "_lock", "_next", "_set_at", "_until")

    def __init__(self, base: float, clock: Callable[[], float]) -> None:
        self._base, self._clock = base, clock
        self._lock = threading.Lock()  # calls from several threads update the window together
        self._next = base  # the next window's length: doubled and capped, never 2**n (which overflows)
        self._set_at = self._until = float("-inf")
        self._down = Failure(FailureKind.OTHER, "")

    def start(self) -> tuple[float, Failure | None]:
        """(now, why Vault is down while the window is open, else None)."""
        now = self._clock()
        return now, (self._down if now < self._until else None)

    def failed(self, started: float, failure: Failure) -> None:
        """Vault could not answer a call that started at `started` (a time from `start`)."""
        with self._lock:
            if started < self._set_at:
                return  # the call was in flight when the current window was set
            now = self._clock()
            window = min(self._next, _MAX_OUTAGE_BACKOFF)
            self._set_at, self._until, self._next = now, now + window, window * 2
            self._down = Failure(failure.kind, f"{failure.detail} (backing off)")

    def answered(self) -> None:
        with self._lock:
            self._until = float("-inf")
            self._next = self._base


def _key_refusal(data: Mapping[str, Any], allow_exportable_key: bool) -> str | None:
    """Why a key's description breaks a codec duty, or None; a flag Vault leaves out counts as set."""
    kind = data.get("type")
    if kind not in _SERVED_KEY_TYPES:
        return f"its type {kind!r:.40} is not served (only {' or '.join(_SERVED_KEY_TYPES)})"
    if data.get("convergent_encryption", False) is not False:
        return "it has convergent_encryption, which makes seal deterministic (equal states would give equal tokens)"
    custody = data.get("exportable") is False and data.get("allow_plaintext_backup") is False
    if not (custody or allow_exportable_key):  # True for a key restored from a backup
        return "it is exportable or allows plaintext backups: the key can leave Vault (see allow_exportable_key)"
    return None
