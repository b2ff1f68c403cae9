"""HashiCorp Vault / OpenBao transit: a data-key wrapper and a per-token transit codec.

Threat: the transit key never leaves Vault, so whoever reaches Vault with the
right token can mint or open state, and whoever makes Vault unreachable stops
every per-token call. Two modes answer different policies:

- `VaultKeyWrapper` for `EnvelopeCodec` (recommended): data keys come from
  ``transit/datakey/wrapped`` and are unwrapped with ``transit/decrypt`` once at
  start-up; tokens are then sealed locally, and a Vault outage after start-up
  changes nothing.
- `VaultTransitCodec`: every seal is one ``transit/encrypt`` call and every
  unseal one ``transit/decrypt`` call, for teams whose policy says key material
  never leaves Vault. Each call is one HTTP round trip over a pooled connection
  with bounded timeouts; when Vault cannot answer, `unseal` fails closed with
  `InvalidToken(Reason.PROVIDER)` and `seal` raises `ProviderError`, quickly.

Tokens are parsed strictly (type, length cap, canonical base64url, layout)
before any network call, so junk never reaches Vault. Messages name the mount,
key and cause; they never hold a Vault token, key material, payload or token.

Requires ``pip install 'statecodec[vault]'`` (hvac).

Settings for `statecodec.config` (``STATECODEC_CODEC=vault-envelope`` or
``vault-transit``); each ``STATECODEC_VAULT_*`` variable falls back to the
standard Vault variable in brackets when read from the environment:

``STATECODEC_VAULT_ADDR`` [``VAULT_ADDR``]
    Vault's address, ``https://vault.example:8200``. Required.
``STATECODEC_VAULT_TOKEN`` [``VAULT_TOKEN``] / ``STATECODEC_VAULT_TOKEN_FILE``
    Token auth: the token, or a file holding it. Secret.
``STATECODEC_VAULT_ROLE_ID``, ``STATECODEC_VAULT_SECRET_ID`` / ``STATECODEC_VAULT_SECRET_ID_FILE``
    AppRole auth (instead of a token); ``STATECODEC_VAULT_APPROLE_MOUNT``
    names the auth mount (default ``approle``). The secret id is secret.
``STATECODEC_VAULT_NAMESPACE`` [``VAULT_NAMESPACE``]
    Namespace (Vault Enterprise, OpenBao namespaces). Optional.
``STATECODEC_VAULT_CACERT`` [``VAULT_CACERT``]
    TLS: a CA bundle to verify Vault's certificate against.
``STATECODEC_VAULT_CLIENT_CERT`` [``VAULT_CLIENT_CERT``], ``STATECODEC_VAULT_CLIENT_KEY`` [``VAULT_CLIENT_KEY``]
    Mutual TLS: client certificate and key files (both or neither).
``STATECODEC_VAULT_SKIP_VERIFY`` [``VAULT_SKIP_VERIFY``]
    ``true`` skips TLS verification (development only).
``STATECODEC_VAULT_MOUNT``
    Transit mount path (default ``transit``).
``STATECODEC_VAULT_KEY``
    Transit key name. Required.
``STATECODEC_VAULT_TIMEOUT``
    Per-call read timeout in seconds (default 1; the connect timeout is at most 0.5).
``STATECODEC_VAULT_CONTEXT``
    Transit mode only: the context bound to every token (``k=v,k=v`` or a
    JSON object); default ``purpose=statecodec-vault-transit``.

Envelope mode also reads ``STATECODEC_WRAPPED_KEYS`` (or ``..._FILE``) and
``STATECODEC_KMS_CONTEXT`` / ``STATECODEC_KMS_AUDIENCE`` as every envelope
provider does (see `statecodec.providers`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode, b64u_encode, b64u_len
from statecodec.config import max_token_length_setting, read_settings_file, setting
from statecodec.envelope import MAX_WRAPPED_KEY_LENGTH, EnvelopeCodec, canonical_context
from statecodec.errors import ConfigurationError, InvalidToken, ProviderError, Reason, SealError
from statecodec.keys import MIN_KEY_LENGTH
from statecodec.providers import build_envelope_codec, parse_context
from statecodec.providers._retry import RetryPolicy, call_with_retries, check_retry
from statecodec.providers._vault_api import (
    DEFAULT_TIMEOUT,
    MAX_KEY_VERSION,
    Failure,
    Transit,
    b64,
    call_failure,
    classify,
    hint,
    parse_vault_ciphertext,
    unb64,
    vault_client,
)

_MAX_SECRET_FILE_BYTES = 64 * 1024  # a token or secret id, with room to spare; never read without bound

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_TRANSIT_CONTEXT",
    "MAX_OUTAGE_BACKOFF",
    "PROVIDER_NAME",
    "TRANSIT_VERSION",
    "VaultKeyWrapper",
    "VaultTransitCodec",
    "envelope_codec_from_settings",
    "transit_codec_from_settings",
    "vault_client",
    "vault_client_from_settings",
    "wrapper_from_settings",
]

PROVIDER_NAME = "vault"
TRANSIT_VERSION = 0x05
"""Version byte of `VaultTransitCodec` tokens."""
MAX_OUTAGE_BACKOFF = 30.0
"""Longest window, in seconds, during which per-token calls fail without trying Vault."""
DEFAULT_TRANSIT_CONTEXT: Mapping[str, str] = MappingProxyType({"purpose": "statecodec-vault-transit"})

_GCM_OVERHEAD = 12 + 16  # Vault's AEAD ciphertext: nonce | ciphertext | tag
_HEADER = 1 + 4
_TRANSIT_LABEL = b"statecodec/v1/vault-transit\x00"
_R_MALFORMED = Reason.MALFORMED
_R_PROVIDER = Reason.PROVIDER


# ---------------------------------------------------------------------------
# Envelope mode


class VaultKeyWrapper:
    """A Vault transit key as a `KeyWrapper`: data keys wrapped by Vault, bound to a context.

    The context (a str-to-str mapping, see `statecodec.envelope`) is bound as
    AES-GCM associated data on every call and, on a derived key
    (``derived=true``, recommended), also as the key-derivation context, so a
    wrapped key opens only under the context it was made for. A wrapped blob
    is Vault's ciphertext text, ``vault:vN:<base64>``, as ASCII bytes.

    Vault policy: ``update`` on ``<mount>/datakey/wrapped/<key>`` (provisioning)
    and ``<mount>/decrypt/<key>`` (start-up); nothing else at run time.
    """

    __slots__ = ("_owns_client", "_retry", "_transit")

    name = PROVIDER_NAME

    def __init__(
        self,
        client: Any,
        key: str,
        *,
        mount_point: str = "transit",
        retry: RetryPolicy | None = None,
        owns_client: bool = False,
    ) -> None:
        self._transit = Transit(client, key, mount_point)
        self._retry = check_retry(retry, RetryPolicy(attempts=3, base_delay=0.1, max_delay=1.0))
        self._owns_client = owns_client

    def describe(self) -> str:
        return self._transit.describe()

    def close(self) -> None:
        """Close the HTTP connection pool when this wrapper owns the client (built from settings)."""
        if self._owns_client:
            self._transit.client.adapter.close()

    def __enter__(self) -> VaultKeyWrapper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"VaultKeyWrapper({self.describe()!r})"

    def __reduce__(self) -> tuple[object, ...]:
        # Also refuses copy.copy and copy.deepcopy: no silent duplicate of a credential holder.
        raise TypeError("VaultKeyWrapper holds a Vault client and its token and is not picklable")

    @staticmethod
    def _binding(context: Mapping[str, str]) -> dict[str, str]:
        bound = b64(canonical_context(context))
        # `context` derives the key on a derived transit key and is ignored otherwise;
        # `associated_data` is authenticated by AES-GCM on every key type.
        return {"context": bound, "associated_data": bound}

    def _call(self, op: str, body: dict[str, Any]) -> Mapping[str, Any]:
        def transient(exc: BaseException) -> bool:
            return classify(exc).kind in {"unreachable", "timeout", "server", "throttled"}

        try:
            data, _ = call_with_retries(lambda: self._transit.call(op, body), transient=transient, policy=self._retry)
        except Exception as exc:
            failure = call_failure(exc, "malformed Vault reply")
        else:
            return data
        t = self._transit
        raise ProviderError(f"transit {op} on {t.mount}/{t.key} failed: {failure.detail}{hint(failure, t, op)}")

    def wrap(self, data_key: bytes, context: Mapping[str, str]) -> bytes:
        """Encrypt `data_key` with ``transit/encrypt``, binding `context`."""
        if not isinstance(data_key, bytes) or len(data_key) < MIN_KEY_LENGTH:
            raise ConfigurationError(f"data keys are at least {MIN_KEY_LENGTH} bytes")
        data = self._call("encrypt", {"plaintext": b64(data_key), **self._binding(context)})
        return self._blob(data.get("ciphertext"))

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes:
        """A fresh 256-bit data key from ``transit/datakey/wrapped``; Vault never returns it in clear."""
        data = self._call("datakey/wrapped", {"bits": 256, **self._binding(context)})
        return self._blob(data.get("ciphertext"))

    def _blob(self, ciphertext: object) -> bytes:
        try:
            parse_vault_ciphertext(ciphertext)
        except ValueError:
            ciphertext = None
        if not isinstance(ciphertext, str):
            raise ProviderError(f"{self.describe()}: Vault returned a malformed ciphertext")
        return ciphertext.encode("ascii")

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes:
        """The data key in `blob`, via ``transit/decrypt`` under `context`; `ProviderError` otherwise."""
        if not isinstance(blob, bytes) or len(blob) > MAX_WRAPPED_KEY_LENGTH:
            raise ProviderError(f"{self.describe()}: the wrapped key is not a Vault ciphertext")
        # Both errors are raised outside their handlers, so no parser error (and the input it
        # keeps) rides along as __context__.
        ciphertext = blob.decode("ascii", "replace")
        try:
            parse_vault_ciphertext(ciphertext)
        except ValueError:
            ciphertext = ""
        if not ciphertext:
            raise ProviderError(
                f"{self.describe()}: the wrapped key is not a Vault transit ciphertext (vault:vN:...); "
                "was it made by another provider?"
            )
        data = self._call("decrypt", {"ciphertext": ciphertext, **self._binding(context)})
        try:
            key: bytes | None = unb64(data.get("plaintext"))
        except ValueError:
            key = None
        if key is None:
            raise ProviderError(f"{self.describe()}: Vault returned a malformed plaintext")
        return key


# ---------------------------------------------------------------------------
# Per-token transit mode


class VaultTransitCodec:
    """Every seal is one Vault ``transit/encrypt`` call, every unseal one ``transit/decrypt``.

    Wire format (version 0x05), unpadded base64url of::

        0x05 | key_version (4, big-endian, >= 1) | nonce (12) | ciphertext | tag (16)

    The last three fields are Vault's ``vault:vN:`` ciphertext, decoded from
    standard base64; ``key_version`` is N, so the key id of a token is N as 8
    hex digits (``00000003`` for ``vault:v3:``). Vault's AES-256-GCM (or
    ChaCha20-Poly1305) authenticates it under the transit key's version N.

    The token's prefix is bound with ``"statecodec/v1/vault-transit" 0x00 0x05
    0x00 || canonical_context(context)``: on a derived key (``derived=true``,
    recommended) as the key-derivation context, which ``transit/rewrap``
    carries, so `reseal` is one ``rewrap`` call; on a non-derived key as
    AES-GCM associated data, which ``rewrap`` cannot carry, so `reseal` is
    ``decrypt`` then ``encrypt`` there. The key's description says which, at start-up.

    Checks in order, all before any network call: type str, length cap
    (OVERSIZED), canonical base64url and minimum length (MALFORMED), version
    byte (FORMAT), key version >= 1 (MALFORMED). Then Vault: tag or context
    mismatch -> SEAL; version below ``min_decryption_version`` or not yet
    created -> UNKNOWN_KEY; Vault unreachable, sealed, slow, denied or the key
    gone -> PROVIDER. Overhead: 33 bytes, 44 characters.

    Rotation happens in Vault (``rotate``, then ``min_decryption_version``
    after one token lifetime). Construction reads the key's description
    (which proves it exists without creating it) and serves only a key that
    keeps the codec's duties: type ``aes256-gcm96`` or ``chacha20-poly1305``
    (others change the strength or the overhead), no ``convergent_encryption``
    (it makes seal deterministic), not ``exportable`` and no
    ``allow_plaintext_backup`` (the key could leave Vault) unless
    `allow_exportable_key` says so, e.g. for a key restored from a backup;
    anything else is a `ConfigurationError` that names the type to use.
    Then one encrypt and one decrypt prove the binding round-trips; a Vault
    failure is a `ProviderError` naming the cause. After a
    failure that means Vault cannot answer (unreachable, timeout, sealed,
    5xx), calls fail at once for `outage_backoff` seconds instead of each
    waiting for the timeout; the window doubles while the outage lasts (up to
    `MAX_OUTAGE_BACKOFF`), so one slow probe per window is all an outage costs
    the event loop. Calls already in flight when a window opens do not count
    again: however many callers a stall catches, the codec serves again within
    one `outage_backoff` of Vault answering. Any answer closes the window.

    Vault policy: ``read`` on ``<mount>/keys/<key>`` (the start-up check; it
    returns no key material), ``update`` on ``<mount>/encrypt/<key>`` and
    ``<mount>/decrypt/<key>``, and on ``<mount>/rewrap/<key>`` for `reseal`.
    """

    VERSION = TRANSIT_VERSION

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
        self._transit = Transit(client, key, mount_point)
        if isinstance(max_token_length, bool) or not isinstance(max_token_length, int):
            raise ConfigurationError("max_token_length must be an int (characters)")
        overhead = _HEADER + _GCM_OVERHEAD
        if max_token_length < b64u_len(overhead):
            raise ConfigurationError(f"max_token_length must be at least {b64u_len(overhead)} characters")
        if isinstance(outage_backoff, bool) or not isinstance(outage_backoff, (int, float)):
            raise ConfigurationError("outage_backoff must be seconds (0 to 60)")
        if not (0 <= outage_backoff <= 60):
            raise ConfigurationError("outage_backoff must be seconds (0 to 60)")
        if not callable(clock):
            # Checked here, not at the first outage, where it would escape unseal as a TypeError.
            raise ConfigurationError("clock must be a callable returning seconds, e.g. time.monotonic")
        ctx = DEFAULT_TRANSIT_CONTEXT if context is None else context
        if (
            not isinstance(ctx, Mapping)
            or not ctx
            or not all(isinstance(k, str) and k and isinstance(v, str) for k, v in ctx.items())
        ):
            raise ConfigurationError("context must be a non-empty mapping of str to str, e.g. {'audience': 'billing'}")
        bound = b64(_TRANSIT_LABEL + bytes([self.VERSION, 0]) + canonical_context(ctx))
        self._max_length = max_token_length
        self._min_raw = overhead
        self._max_payload = (max_token_length * 3) // 4 - overhead
        self._window = _OutageWindow(float(outage_backoff), clock)
        self._owns_client = owns_client
        self._context = MappingProxyType(dict(ctx))
        if not isinstance(allow_exportable_key, bool):
            raise ConfigurationError("allow_exportable_key must be True or False")
        self._derived, self._key_ids = self._check_key(allow_exportable_key)
        self._binding = _transit_binding(bound, self._derived)
        self._primary = self._probe()

    # -- start-up ---------------------------------------------------------

    def _fail_start(self, what: str, failure: Failure) -> ProviderError:
        ops = "keys encrypt decrypt rewrap"
        return ProviderError(
            f"cannot use {self.describe()}: {what} failed: {failure.detail}{hint(failure, self._transit, ops)}"
        )

    def _start_call(self, what: str, call: Callable[[], Mapping[str, Any]]) -> Mapping[str, Any]:
        try:
            return call()
        except Exception as exc:
            failure = call_failure(exc)
        # Raised outside the handler: a requests exception keeps the request, Vault token header and all.
        raise self._fail_start(what, failure)

    def _check_key(self, allow_exportable_key: bool) -> tuple[bool, tuple[int, ...]]:
        """(derived, decryptable versions newest first) of a key this codec serves as documented.

        The read goes first: it proves the key exists without creating it
        (``transit/encrypt`` silently creates a missing key for a token allowed
        to ``create``), and it is the only way to know the key's type.
        """
        data = self._start_call("read", self._transit.read_key)
        refusal = _key_refusal(data, allow_exportable_key)
        if refusal is not None:
            t = self._transit
            raise ConfigurationError(
                f"cannot use {self.describe()}: {refusal}; use a key of type aes256-gcm96, e.g. "
                f"bao write -f {t.mount}/keys/<new-key> type=aes256-gcm96 derived=true, and name it in "
                "STATECODEC_VAULT_KEY"
            )
        derived = data.get("derived")
        versions = _key_versions(data)
        if type(derived) is not bool or versions is None:
            raise self._fail_start("read", Failure("reply", "Vault returned a malformed key description"))
        return derived, versions

    def _probe(self) -> int:
        """Seal and open a probe under the codec's binding; returns the key's latest version."""
        probe = b"statecodec start-up probe"
        enc = self._start_call(
            "encrypt", lambda: self._transit.call("encrypt", {"plaintext": b64(probe), **self._binding})
        )
        ciphertext = enc.get("ciphertext")
        try:
            version, _ = parse_vault_ciphertext(ciphertext)
        except ValueError:
            version = 0
        if version == 0:
            raise self._fail_start("encrypt", Failure("reply", "Vault returned a malformed ciphertext"))
        body = {"ciphertext": ciphertext, **self._binding}
        dec = self._start_call("decrypt", lambda: self._transit.call("decrypt", body))
        try:
            ok = unb64(dec.get("plaintext")) == probe
        except ValueError:
            ok = False
        if not ok:
            raise self._fail_start("decrypt", Failure("reply", "the start-up probe did not round-trip"))
        return version

    # -- properties -------------------------------------------------------

    def describe(self) -> str:
        return self._transit.describe()

    @property
    def derived(self) -> bool:
        """Whether the transit key is derived (the context binds by key derivation)."""
        return self._derived

    @property
    def context(self) -> Mapping[str, str]:
        return self._context

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Key versions (8 hex digits) that could decrypt at start-up, newest first."""
        return tuple(f"{v:08x}" for v in self._key_ids or (self._primary,))

    @property
    def primary_key_id(self) -> str:
        """The version of the latest seal (Vault seals under its latest version)."""
        return f"{self._primary:08x}"

    @property
    def max_token_length(self) -> int:
        return self._max_length

    def __repr__(self) -> str:
        return f"VaultTransitCodec({self.describe()!r}, primary_key_id={self.primary_key_id!r})"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("VaultTransitCodec holds a Vault session and is not picklable")

    def close(self) -> None:
        """Close the HTTP connection pool when this codec built the client (from settings)."""
        if self._owns_client:
            self._transit.client.adapter.close()

    def __enter__(self) -> VaultTransitCodec:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- per token --------------------------------------------------------

    def _note(self, failure: Failure, started: float) -> None:
        if failure.outage:
            self._window.failed(started, failure.detail)
        else:
            self._window.answered()  # Vault answered: it is up, whatever it thought of the token

    def _parse(self, token: str) -> str:
        """Strict local checks, then the Vault ciphertext text; no network."""
        if type(token) is not str:
            raise InvalidToken(_R_MALFORMED)
        if len(token) > self._max_length:
            raise InvalidToken(Reason.OVERSIZED)
        raw = b64u_decode(token)
        if len(raw) < self._min_raw:
            raise InvalidToken(_R_MALFORMED)
        if raw[0] != self.VERSION:
            raise InvalidToken(Reason.FORMAT)
        version = int.from_bytes(raw[1:_HEADER], "big")
        if version == 0:
            raise InvalidToken(_R_MALFORMED)
        return f"vault:v{version}:{b64(raw[_HEADER:])}"

    def _token(self, ciphertext: object) -> str | None:
        try:
            version, raw = parse_vault_ciphertext(ciphertext)
        except ValueError:
            return None
        if len(raw) < _GCM_OVERHEAD:
            return None
        self._primary = version
        return b64u_encode(bytes([self.VERSION]) + version.to_bytes(4, "big") + raw)

    def seal(self, payload: bytes) -> str:
        """One ``transit/encrypt`` call; `ProviderError` when Vault cannot seal."""
        if not isinstance(payload, bytes):
            raise TypeError(f"seal takes bytes, got {type(payload).__name__}")
        if len(payload) > self._max_payload:
            raise SealError(
                f"payload of {len(payload)} bytes exceeds the {self._max_payload}-byte maximum "
                f"for max_token_length={self._max_length}"
            )
        started, down = self._window.start()
        if down is not None:
            raise ProviderError(f"cannot seal with {self.describe()}: {down} (backing off)")
        try:
            data = self._transit.call("encrypt", {"plaintext": b64(payload), **self._binding})
        except Exception as exc:
            failure = call_failure(exc)
        else:
            token = self._token(data.get("ciphertext"))
            if token is not None:
                self._window.answered()
                return token
            failure = Failure("reply", "Vault returned a malformed ciphertext")
        self._note(failure, started)
        raise ProviderError(f"cannot seal with {self.describe()}: {failure.detail}")

    def unseal(self, token: str) -> bytes:
        """One ``transit/decrypt`` call after strict local checks; only `InvalidToken` escapes."""
        ciphertext = self._parse(token)
        started, down = self._window.start()
        if down is not None:
            raise InvalidToken(_R_PROVIDER)
        try:
            data = self._transit.call("decrypt", {"ciphertext": ciphertext, **self._binding})
            payload = unb64(data.get("plaintext"))
        except Exception as exc:
            failure = call_failure(exc)
        else:
            self._window.answered()
            return payload
        # Raised outside the handler so no Vault exception rides along as __context__.
        self._note(failure, started)
        raise InvalidToken(_reason(failure))

    def reseal(self, token: str) -> str:
        """The same payload under Vault's latest key version, without it leaving Vault when derived.

        Derived key: one ``transit/rewrap`` call. Non-derived key: ``rewrap``
        cannot carry associated data, so ``decrypt`` then ``encrypt``. A bad
        token raises `InvalidToken`; Vault failing raises `ProviderError`.
        """
        ciphertext = self._parse(token)
        if not self._derived:
            try:
                payload = self.unseal(token)
            except InvalidToken as exc:
                if exc.reason is not _R_PROVIDER:
                    raise
            else:
                return self.seal(payload)
            raise ProviderError(f"cannot reseal with {self.describe()}: Vault could not decrypt the token")
        started, down = self._window.start()
        if down is not None:
            raise ProviderError(f"cannot rewrap with {self.describe()}: {down} (backing off)")
        try:
            data = self._transit.call("rewrap", {"ciphertext": ciphertext, **self._binding})
        except Exception as exc:
            failure = call_failure(exc)
        else:
            new = self._token(data.get("ciphertext"))
            if new is not None:
                self._window.answered()
                return new
            failure = Failure("reply", "Vault returned a malformed ciphertext")
        self._note(failure, started)
        reason = _reason(failure)
        if reason is _R_PROVIDER:
            raise ProviderError(f"cannot rewrap with {self.describe()}: {failure.detail}")
        raise InvalidToken(reason)


class _OutageWindow:
    """While Vault cannot answer, calls fail at once instead of each waiting for the timeout.

    One rule. A call that fails because Vault could not answer opens the
    window, or doubles it (up to `MAX_OUTAGE_BACKOFF`), only if the call
    started at or after the moment the current window was set: calls already
    in flight when Vault stalled are one failure, not one each, so N
    concurrent callers cannot push the window past what one caller would. Any
    answer from Vault closes the window and resets its length to `base`. A
    `base` of 0 turns the window off.
    """

    __slots__ = ("_base", "_cause", "_clock", "_lock", "_next", "_set_at", "_until")

    def __init__(self, base: float, clock: Callable[[], float]) -> None:
        self._base = base
        self._clock = clock
        self._lock = threading.Lock()  # calls from several threads update the window together
        self._next = base  # the next window's length: doubled and capped, never 2**n (which overflows)
        self._set_at = float("-inf")
        self._until = float("-inf")
        self._cause = ""

    def start(self) -> tuple[float, str | None]:
        """(now, the outage's cause while the window is open, else None): refuse without Vault when open."""
        now = self._clock()
        return now, (self._cause if now < self._until else None)

    def failed(self, started: float, cause: str) -> None:
        """Vault could not answer a call that started at `started` (a time from `start`)."""
        with self._lock:
            if self._base == 0 or started < self._set_at:
                return  # no window, or the call was in flight when the current window was set
            now = self._clock()
            window = min(self._next, MAX_OUTAGE_BACKOFF)
            self._set_at = now
            self._until = now + window
            self._next = window * 2
            self._cause = cause

    def answered(self) -> None:
        """Vault answered a call: it is up, so the window closes."""
        with self._lock:
            self._until = float("-inf")
            self._next = self._base


_SERVED_KEY_TYPES = ("aes256-gcm96", "chacha20-poly1305")
"""Transit key types whose ciphertext is nonce (12) | ciphertext | tag (16) under a 256-bit key: the
documented format, overhead and strength. Every other type is refused at start-up."""


def _key_refusal(data: Mapping[str, Any], allow_exportable_key: bool) -> str | None:
    """Why Vault's description of a transit key (``read <mount>/keys/<key>``) breaks a codec duty, or None.

    Allow-listed, so a flag Vault leaves out or a type added later is refused, not served.
    """
    kind = data.get("type")
    if kind not in _SERVED_KEY_TYPES:
        # xchacha20-poly1305 (24-byte nonce) mints tokens over the cap; aes128-gcm96 is not AES-256.
        return f"its type {kind!r:.40} is not served (only {' or '.join(_SERVED_KEY_TYPES)})"
    if data.get("convergent_encryption", False) is not False:
        return "it has convergent_encryption, which makes seal deterministic (equal states would give equal tokens)"
    if not allow_exportable_key and (
        data.get("exportable") is not False or data.get("allow_plaintext_backup") is not False
    ):
        return (
            "it is exportable or allows plaintext backups, so the key can leave Vault, which per-token mode exists "
            "to prevent (allow_exportable_key=True serves a key restored from a backup anyway)"
        )
    return None


def _key_versions(data: Mapping[str, Any]) -> tuple[int, ...] | None:
    """Versions at or above ``min_decryption_version``, newest first; None when the description is malformed."""
    keys = data.get("keys")
    floor = data.get("min_decryption_version")
    if not isinstance(keys, dict) or type(floor) is not int:
        return None
    if not all(isinstance(v, str) and v.isascii() and v.isdigit() for v in keys):
        return None
    return tuple(v for v in sorted((int(v) for v in keys), reverse=True) if v >= floor and 1 <= v <= MAX_KEY_VERSION)


def _transit_binding(bound: str, derived: bool) -> dict[str, str]:
    # Derived keys bind through `context` (carried by rewrap); others through associated data.
    return {"context": bound} if derived else {"context": bound, "associated_data": bound}


def _reason(failure: Failure) -> Reason:
    if failure.kind == "bad_ciphertext":
        return Reason.SEAL
    if failure.kind == "retired":
        return Reason.UNKNOWN_KEY
    return _R_PROVIDER


# ---------------------------------------------------------------------------
# Configuration


def _get(settings: Mapping[str, str], name: str, fallback: str | None = None) -> str | None:
    """`name`'s stripped value, else the standard Vault variable `fallback`'s, else None."""
    value = setting(settings, name, required=False)
    if value is None and fallback is not None:
        value = setting(settings, fallback, required=False)
    return value


def _secret(settings: Mapping[str, str], name: str, fallback: str | None = None) -> str | None:
    """A secret from `name`, or from the file named by `name`_FILE (not both), else from `fallback`.

    The fallback (``VAULT_TOKEN``, inherited from a shell) yields to an explicit `name`_FILE.
    """
    value = _get(settings, name)
    path = _get(settings, name + "_FILE")
    if value is not None and path is not None:
        raise ConfigurationError(f"both {name} and {name}_FILE are set; set exactly one")
    if path is None:
        return value if value is not None or fallback is None else _get(settings, fallback)
    raw = read_settings_file(Path(path), _MAX_SECRET_FILE_BYTES, f"{name}_FILE {path}", "it should hold one secret")
    try:
        text: str | None = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        # Raised below, outside the handler: the UnicodeDecodeError holds the whole file, the
        # secret with it, and `from None` would still keep it reachable as __context__.
        text = None
    if text is None:
        raise ConfigurationError(f"{name}_FILE {path} is not UTF-8 text")
    if not text:
        raise ConfigurationError(f"{name}_FILE {path} is empty")
    return text


def vault_client_from_settings(settings: Mapping[str, str]) -> Any:
    """An authenticated client from ``STATECODEC_VAULT_*`` settings (see the module docstring)."""
    url = _get(settings, "STATECODEC_VAULT_ADDR", "VAULT_ADDR")
    if url is None:
        raise ConfigurationError("STATECODEC_VAULT_ADDR (or VAULT_ADDR) is not set; e.g. https://vault.example:8200")
    role_id = _get(settings, "STATECODEC_VAULT_ROLE_ID")
    secret_id = _secret(settings, "STATECODEC_VAULT_SECRET_ID")
    token = None if role_id or secret_id else _secret(settings, "STATECODEC_VAULT_TOKEN", "VAULT_TOKEN")
    if token is None and not (role_id or secret_id):
        raise ConfigurationError(
            "no Vault credentials: set STATECODEC_VAULT_TOKEN (or VAULT_TOKEN, or STATECODEC_VAULT_TOKEN_FILE), "
            "or STATECODEC_VAULT_ROLE_ID and STATECODEC_VAULT_SECRET_ID for AppRole"
        )
    skip = _get(settings, "STATECODEC_VAULT_SKIP_VERIFY", "VAULT_SKIP_VERIFY")
    if skip is not None and skip.lower() not in {"true", "false", "1", "0"}:
        raise ConfigurationError("STATECODEC_VAULT_SKIP_VERIFY must be true or false")
    cacert = _get(settings, "STATECODEC_VAULT_CACERT", "VAULT_CACERT")
    verify: bool | str = cacert if cacert is not None else True
    if skip is not None and skip.lower() in {"true", "1"}:
        verify = False
    cert_path = _get(settings, "STATECODEC_VAULT_CLIENT_CERT", "VAULT_CLIENT_CERT")
    key_path = _get(settings, "STATECODEC_VAULT_CLIENT_KEY", "VAULT_CLIENT_KEY")
    if (cert_path is None) != (key_path is None):
        raise ConfigurationError("set both STATECODEC_VAULT_CLIENT_CERT and STATECODEC_VAULT_CLIENT_KEY, or neither")
    cert = (cert_path, key_path) if cert_path is not None and key_path is not None else None
    timeout_text = _get(settings, "STATECODEC_VAULT_TIMEOUT")
    timeout: float | tuple[float, float] = DEFAULT_TIMEOUT
    if timeout_text is not None:
        try:
            timeout = float(timeout_text)
        except ValueError:
            raise ConfigurationError("STATECODEC_VAULT_TIMEOUT must be seconds, e.g. 2") from None
    return vault_client(
        url,
        token=token,
        role_id=role_id,
        secret_id=secret_id,
        approle_mount_point=_get(settings, "STATECODEC_VAULT_APPROLE_MOUNT") or "approle",
        namespace=_get(settings, "STATECODEC_VAULT_NAMESPACE", "VAULT_NAMESPACE"),
        verify=verify,
        cert=cert,
        timeout=timeout,
    )


def _key_settings(settings: Mapping[str, str]) -> tuple[str, str]:
    key = _get(settings, "STATECODEC_VAULT_KEY")
    if key is None:
        raise ConfigurationError("STATECODEC_VAULT_KEY is not set; name the transit key, e.g. statecodec")
    return key, _get(settings, "STATECODEC_VAULT_MOUNT") or "transit"


def wrapper_from_settings(settings: Mapping[str, str]) -> VaultKeyWrapper:
    """A `VaultKeyWrapper` that owns its client, from ``STATECODEC_VAULT_*`` settings; close it after use."""
    key, mount = _key_settings(settings)
    client = vault_client_from_settings(settings)
    try:
        return VaultKeyWrapper(client, key, mount_point=mount, owns_client=True)
    except BaseException:
        client.adapter.close()
        raise


def envelope_codec_from_settings(settings: Mapping[str, str]) -> EnvelopeCodec:
    """``STATECODEC_CODEC=vault-envelope``: wrapped keys unwrapped once through Vault at start-up."""
    # Envelope mode needs Vault only at start-up: the connection pool is closed on return.
    return build_envelope_codec(settings, wrapper_from_settings)


def transit_codec_from_settings(settings: Mapping[str, str]) -> VaultTransitCodec:
    """``STATECODEC_CODEC=vault-transit``: one Vault call per seal and per unseal."""
    key, mount = _key_settings(settings)
    text = _get(settings, "STATECODEC_VAULT_CONTEXT")
    try:
        context = parse_context(text) if text is not None else None
    except ConfigurationError as exc:
        raise ConfigurationError(f"STATECODEC_VAULT_CONTEXT: {exc}") from None
    max_length = max_token_length_setting(settings)
    client = vault_client_from_settings(settings)
    try:
        return VaultTransitCodec(
            client, key, mount_point=mount, context=context, max_token_length=max_length, owns_client=True
        )
    except BaseException:
        client.adapter.close()
        raise
