"""HashiCorp Vault / OpenBao transit (``pip install 'statecodec[vault]'``): a data-key wrapper and a per-token codec.

Threat: whoever reaches Vault with the right token can mint or open state; whoever makes it unreachable stops
every per-token call. No message holds a Vault token, key material, payload or token. Operation: docs/vault.md.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
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
from statecodec._settings import max_token_length_setting, named_errors, seconds, seconds_setting, setting, text_or_file
from statecodec.envelope import EnvelopeCodec, _check_context, canonical_context
from statecodec.errors import ConfigurationError, InvalidToken, ProviderError, Reason
from statecodec.providers import build_envelope_codec, context_setting
from statecodec.providers._retry import RetryPolicy, check_retry
from statecodec.providers._vault_api import (
    Failure,
    FailureKind,
    TransitKey,
    b64,
    check_address,
    check_key_name,
    parse_ciphertext,
    unb64,
    vault_client,
)

__all__ = ["VaultKeyWrapper", "VaultTransitCodec", "vault_client"]

_MAX_SECRET_FILE_BYTES = 64 * 1024  # a token or secret id, with room to spare
_MAX_OUTAGE_BACKOFF = 30.0  # longest window, in seconds, during which calls fail without trying Vault
_GCM_OVERHEAD = 12 + 16  # Vault's AEAD ciphertext: nonce | ciphertext | tag
_HEADER = 1 + 4
_LABEL = b"statecodec/v1/vault-transit\x00"
# nonce (12) | ciphertext | tag (16) under a 256-bit key (not xchacha20-poly1305's 24-byte nonce, not aes128-gcm96)
_SERVED_KEY_TYPES = ("aes256-gcm96", "chacha20-poly1305")
_REASONS = {FailureKind.BAD_CIPHERTEXT: Reason.SEAL, FailureKind.RETIRED: Reason.UNKNOWN_KEY}
_NO_ROUND_TRIP = Failure(FailureKind.OTHER, "the start-up probe did not round-trip")


class VaultKeyWrapper(TransitKey):
    """A Vault transit key as a `KeyWrapper`: a wrapped key opens only under the context it was made for.

    The context is bound as AES-GCM associated data and, on a derived key (recommended), as the key-derivation
    context too. A wrapped blob is Vault's ciphertext text, ``vault:vN:<base64>``, as ASCII bytes.
    """

    __slots__ = ("_retry",)

    def __init__(
        self,
        client: Any,
        key: str,
        *,
        mount_point: str = "transit",
        retry: RetryPolicy | None = None,
        owns_client: bool = False,
    ) -> None:
        super().__init__(client, key, mount_point, owns_client)
        self._retry = check_retry(retry, RetryPolicy(attempts=3, base_delay=0.1, max_delay=1.0))

    def _call(self, op: str, context: Mapping[str, str], **fields: object) -> Mapping[str, Any]:
        bound = b64(canonical_context(context))
        out = self._request(op, {**fields, "context": bound, "associated_data": bound}, self._retry)
        if isinstance(out, Failure):
            raise ProviderError(f"transit {op} on {self._mount}/{self._key} failed: {out.detail}")
        return out

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes:
        """A fresh 256-bit data key from ``transit/datakey/wrapped``; Vault never returns it in clear."""
        ciphertext = self._call("datakey/wrapped", context, bits=256).get("ciphertext")
        if parse_ciphertext(ciphertext) is None:
            raise ProviderError(f"{self.describe()}: Vault returned a malformed ciphertext")
        return str(ciphertext).encode("ascii")

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes:
        """The data key in `blob`, via ``transit/decrypt`` under `context`; `ProviderError` otherwise."""
        ciphertext = blob.decode("ascii", "replace") if isinstance(blob, bytes) else ""  # sized by EnvelopeCodec
        if parse_ciphertext(ciphertext) is None:  # made by another provider?
            raise ProviderError(f"{self.describe()}: the wrapped key is not a Vault transit ciphertext (vault:vN:...)")
        key = unb64(self._call("decrypt", context, ciphertext=ciphertext).get("plaintext"))
        if key is None:
            raise ProviderError(f"{self.describe()}: Vault returned a malformed plaintext")
        return key


class VaultTransitCodec(TransitKey):
    """Every seal is one Vault ``transit/encrypt`` call, every unseal one ``transit/decrypt``.

    Wire format (version 0x05), unpadded base64url of::

        0x05 | key_version (4, big-endian, >= 1) | nonce (12) | ciphertext | tag (16)

    The last three fields are Vault's ``vault:vN:`` ciphertext, decoded from standard base64; ``key_version``
    is N, and the token's key id is N as 8 hex digits (``00000003``). Overhead: 33 bytes, 44 characters.
    The prefix is bound with ``"statecodec/v1/vault-transit" 0x00 0x05 0x00 || canonical_context(context)``:
    as the key-derivation context on a derived key (recommended; ``rewrap`` carries it, so `reseal` is one
    call), and also as AES-GCM associated data on a non-derived one. Key requirements and reasons: docs/vault.md.
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
        outage_backoff = seconds("outage_backoff", outage_backoff, low=0, high=60)
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
        parsed = parse_ciphertext(out.get("ciphertext"))
        if parsed is None or len(parsed[1]) < _GCM_OVERHEAD:
            return Failure(FailureKind.OTHER, "Vault returned a malformed ciphertext")
        self._primary = parsed[0]
        return b64u_encode(bytes([self.VERSION]) + parsed[0].to_bytes(4, "big") + parsed[1])

    def _seal(self, payload: bytes | Failure) -> str | Failure:
        if isinstance(payload, Failure):
            return payload
        return self._token(self._call("encrypt", {"plaintext": b64(payload)}))

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

    Only a call started after the window was set can double it: a stall is one failure, not one per caller.
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


# From settings (`statecodec.config`, `statecodec kms`): the STATECODEC_VAULT_* table in docs/vault.md.
_VAULT_NAMES = {"ADDR", "TOKEN", "NAMESPACE", "CACERT", "CLIENT_CERT", "CLIENT_KEY", "SKIP_VERIFY"}


def _get(settings: Mapping[str, str], name: str) -> str | None:
    """``STATECODEC_VAULT_<name>``, else the standard ``VAULT_<name>`` where there is one, else None."""
    value = setting(settings, f"STATECODEC_VAULT_{name}", required=False)
    return setting(settings, f"VAULT_{name}", required=False) if value is None and name in _VAULT_NAMES else value


def _secret(settings: Mapping[str, str], name: str) -> str | None:
    """``STATECODEC_VAULT_<name>`` or the file ``..._FILE`` names (not both), else ``VAULT_<name>`` (a shell's)."""
    text, source = text_or_file(settings, f"STATECODEC_VAULT_{name}", _MAX_SECRET_FILE_BYTES, "hold one secret")
    if text is None:
        return _get(settings, name)
    if not text.strip():
        raise ConfigurationError(f"{source} is empty")
    return text.strip()


def vault_client_from_settings(settings: Mapping[str, str]) -> Any:
    """An authenticated client from ``STATECODEC_VAULT_*`` settings."""
    url = _get(settings, "ADDR")
    if url is None:
        raise ConfigurationError("STATECODEC_VAULT_ADDR (or VAULT_ADDR) is not set; e.g. https://vault.example:8200")
    with named_errors("STATECODEC_VAULT_ADDR (or VAULT_ADDR)"):
        check_address(url)
    role_id, secret_id = _get(settings, "ROLE_ID"), _secret(settings, "SECRET_ID")
    token = None if role_id or secret_id else _secret(settings, "TOKEN")
    if token is None and not (role_id and secret_id):
        raise ConfigurationError(
            "give exactly one Vault auth: STATECODEC_VAULT_TOKEN_FILE (or STATECODEC_VAULT_TOKEN, VAULT_TOKEN), or "
            "AppRole: both STATECODEC_VAULT_ROLE_ID and STATECODEC_VAULT_SECRET_ID_FILE (or ..._SECRET_ID)"
        )
    skip = (_get(settings, "SKIP_VERIFY") or "false").lower()
    if skip not in {"true", "false", "1", "0"}:
        raise ConfigurationError("STATECODEC_VAULT_SKIP_VERIFY must be true or false")
    cert, cert_key = _get(settings, "CLIENT_CERT"), _get(settings, "CLIENT_KEY")
    if (cert is None) != (cert_key is None):
        raise ConfigurationError("set both STATECODEC_VAULT_CLIENT_CERT and STATECODEC_VAULT_CLIENT_KEY, or neither")
    # 1 s: vault_client's default.
    timeout = seconds_setting(settings, "STATECODEC_VAULT_TIMEOUT", default=1.0, low=0, high=60, low_open=True)
    return vault_client(
        url,
        token=token,
        role_id=role_id,
        secret_id=secret_id,
        approle_mount_point=_get(settings, "APPROLE_MOUNT") or "approle",
        namespace=_get(settings, "NAMESPACE"),
        verify=False if skip in {"true", "1"} else _get(settings, "CACERT") or True,
        cert=(cert, cert_key) if cert is not None and cert_key is not None else None,
        timeout=timeout,
    )


@contextlib.contextmanager
def _client(settings: Mapping[str, str]) -> Iterator[tuple[Any, str, str]]:
    """(client, key, mount) from `settings`; the client is closed if the block fails."""
    key = _get(settings, "KEY")
    if key is None:
        raise ConfigurationError("STATECODEC_VAULT_KEY is not set; name the transit key, e.g. statecodec")
    with named_errors("STATECODEC_VAULT_KEY"):
        check_key_name(key)
    client = vault_client_from_settings(settings)
    try:
        yield client, key, _get(settings, "MOUNT") or "transit"
    except BaseException:
        client.adapter.close()
        raise


def wrapper_from_settings(settings: Mapping[str, str]) -> VaultKeyWrapper:
    """A `VaultKeyWrapper` that owns its client; close it after use."""
    with _client(settings) as (client, key, mount):
        return VaultKeyWrapper(client, key, mount_point=mount, owns_client=True)


def envelope_codec_from_settings(settings: Mapping[str, str]) -> EnvelopeCodec:
    """``STATECODEC_CODEC=vault-envelope``: wrapped keys unwrapped once through Vault, then the pool is closed."""
    return build_envelope_codec(settings, wrapper_from_settings)


def transit_codec_from_settings(settings: Mapping[str, str]) -> VaultTransitCodec:
    """``STATECODEC_CODEC=vault-transit``: one Vault call per seal and per unseal."""
    context = context_setting(settings, "STATECODEC_VAULT_CONTEXT")
    cap = max_token_length_setting(settings)
    with _client(settings) as (client, key, mount):
        return VaultTransitCodec(
            client, key, mount_point=mount, context=context, max_token_length=cap, owns_client=True
        )
