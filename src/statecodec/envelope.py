"""Envelope encryption: data keys wrapped by a KMS, unwrapped once, tokens sealed locally.

Threat: a codec that calls a KMS per token stalls the event loop for every request and makes the KMS a per-request
dependency. `EnvelopeCodec` unwraps each data key exactly once, at construction; then seal and unseal are local
AES-256-GCM. The configuration holds only wrapped blobs (unpadded base64url, comma-separated, the sealing key
first), useless without the KMS key and its context.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode
from statecodec.aead import _Ring, check_ring_cap
from statecodec.errors import ConfigurationError, InvalidToken, ProviderError
from statecodec.keys import KEY_ID_LENGTH, MIN_KEY_LENGTH, check_unique_ids, derive_key, format_keys

__all__ = ["MAX_WRAPPED_KEY_LENGTH", "EnvelopeCodec", "KeyWrapper", "canonical_context", "default_context",
           "format_wrapped_keys", "new_wrapped_key", "parse_wrapped_keys", "wrapped_key_id"]

# Largest wrapped data key handed to a provider, in bytes: AWS KMS blobs of a 32-byte key are under 200
# bytes, Cloud KMS under 150, Vault under 120; a hostile configuration cannot ship megabytes to the KMS.
MAX_WRAPPED_KEY_LENGTH = 4096

_KEY_INFO = b"statecodec/v1/envelope/aes-256-gcm"
_KEY_ID_LABEL = b"statecodec/v1/envelope/key-id"
_DEFAULT_CONTEXT: Mapping[str, str] = MappingProxyType({"purpose": "statecodec-envelope"})
_MAX_CONTEXT_PAIRS = 16
_MAX_CONTEXT_TEXT = 256
_HOW_TO_PROVISION = "print one with `statecodec kms new-data-key`"


@runtime_checkable
class KeyWrapper(Protocol):
    """A KMS key that unwraps data keys under a bound context, and provisions new ones. Duties:

    - `unwrap(blob, context)` returns the data key only if `blob` was produced by this key under exactly
      `context` (the provider authenticates it); anything else raises `ProviderError`.
    - Every failure is a `ProviderError` naming the key and the cause (unreachable, throttled, access denied,
      wrong key or context, corrupted), after bounded retries where retrying can help, never key material.
    - `describe()` names the key and nothing secret; `new_wrapped_key(context)` returns a fresh random
      32-byte data key in wrapped form only.
    """

    def describe(self) -> str: ...

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes: ...

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes: ...


def default_context(audience: str | None = None) -> dict[str, str]:
    """The default bound context: names statecodec and, when given, the audience."""
    return {**_DEFAULT_CONTEXT, **({} if audience is None else {"audience": audience})}


def _check_context(context: Mapping[str, str] | None) -> Mapping[str, str]:
    """The one context rule of envelope codecs: a small, non-empty mapping of str to str, frozen."""
    if context is None:
        return _DEFAULT_CONTEXT
    if not isinstance(context, Mapping):
        raise ConfigurationError("context must be a mapping of str to str, e.g. {'audience': 'billing'}")
    if not context:
        raise ConfigurationError("an empty context binds a wrapped key to nothing; omit it for the default")
    if len(context) > _MAX_CONTEXT_PAIRS:
        raise ConfigurationError(f"context has {len(context)} entries; at most {_MAX_CONTEXT_PAIRS}")
    for k, v in context.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ConfigurationError("context keys and values must be str")
        if not k or len(k) > _MAX_CONTEXT_TEXT or len(v) > _MAX_CONTEXT_TEXT:
            raise ConfigurationError(f"context keys must be non-empty and keys and values at most "
                                     f"{_MAX_CONTEXT_TEXT} characters")
    return MappingProxyType(dict(context))


def canonical_context(context: Mapping[str, str]) -> bytes:
    """The one byte string of a context (Cloud KMS AAD, Vault): compact JSON with sorted keys, so two
    mappings give the same bytes exactly when they hold the same pairs."""
    return json.dumps(dict(context), sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _check_blob(index: int, blob: object) -> bytes:
    if isinstance(blob, str):
        try:
            blob = b64u_decode(blob.strip())
        except InvalidToken:
            raise ConfigurationError(f"wrapped_keys[{index}] is not unpadded base64url (alphabet A-Z a-z 0-9 - _, no "
                                     f"'='); {_HOW_TO_PROVISION}") from None
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise ConfigurationError(f"wrapped_keys[{index}] must be bytes or base64url text")
    raw = bytes(blob)
    if not raw:
        raise ConfigurationError(f"wrapped_keys[{index}] is empty")
    if len(raw) > MAX_WRAPPED_KEY_LENGTH:
        raise ConfigurationError(f"wrapped_keys[{index}] is {len(raw)} bytes, over the {MAX_WRAPPED_KEY_LENGTH}-byte "
                                 "maximum for a wrapped data key; is it the right value?")
    return raw


def parse_wrapped_keys(text: str) -> list[bytes]:
    """Wrapped blobs from the text form: base64url, comma- or newline-separated, primary first."""
    # A comment is a whole line, as in key files: dropped before splitting, so a comma in it is no key.
    lines = [line for line in text.splitlines() if not line.strip().startswith("#")]
    items = [p.strip() for line in lines for p in line.split(",") if p.strip()]
    if not items:
        raise ConfigurationError(f"no wrapped keys found; {_HOW_TO_PROVISION}")
    return [_check_blob(i, item) for i, item in enumerate(items)]


format_wrapped_keys = format_keys  # the text form of wrapped blobs too (not secret without the KMS key)


class EnvelopeCodec(_Ring):
    """AES-256-GCM tokens under KMS-wrapped data keys; the KMS is called only at start-up, to unwrap each blob once
    through `wrapper` under `context` (a failure: `ProviderError` naming the ring position, key id, provider key and
    cause). Version 0x03: the AES-GCM layout under another version byte, so a token never crosses between a local
    ring and an envelope ring (docs/formats.md)."""

    VERSION = 0x03
    NONCE_LENGTH = 12
    __slots__ = ("_context", "_wrapped", "_wrapper")

    def __init__(
        self, wrapper: KeyWrapper, wrapped_keys: Sequence[bytes | str], *, context: Mapping[str, str] | None = None,
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
    ) -> None:
        if isinstance(wrapped_keys, (bytes, bytearray, str)) or not isinstance(wrapped_keys, Iterable):
            raise ConfigurationError("wrapped_keys must be a list, not a single value: write wrapped_keys=[blob], "
                                     "or parse the text form with parse_wrapped_keys(text)")
        for attr in ("unwrap", "describe"):
            if not callable(getattr(wrapper, attr, None)):
                raise ConfigurationError(f"wrapper must implement KeyWrapper (missing {attr}())")
        blobs = [_check_blob(i, b) for i, b in enumerate(wrapped_keys)]
        if not blobs:
            raise ConfigurationError(f"an envelope ring needs at least one wrapped data key; {_HOW_TO_PROVISION}")
        ids = [wrapped_key_id(blob) for blob in blobs]
        check_unique_ids("wrapped_keys[{}]", blobs, ids, _HOW_TO_PROVISION)
        ctx = _check_context(context)
        check_ring_cap(max_token_length, self.NONCE_LENGTH)  # before any provider call
        pairs = enumerate(zip(ids, blobs, strict=True))
        entries = [(kid, AESGCM(self._unwrap(wrapper, i, kid, blob, ctx))) for i, (kid, blob) in pairs]
        super().__init__(self.VERSION, self.NONCE_LENGTH, entries, max_token_length)
        self._wrapper, self._wrapped, self._context = wrapper, tuple(blobs), ctx

    @staticmethod
    def _unwrap(wrapper: KeyWrapper, index: int, kid: bytes, blob: bytes, context: Mapping[str, str]) -> bytes:
        where = f"wrapped_keys[{index}] (key id {kid.hex()})"
        try:
            data_key = wrapper.unwrap(blob, context)
        except ProviderError as exc:  # the provider's message already names its key
            raise ProviderError(f"cannot unwrap {where}: {exc}") from None
        except Exception as exc:  # a provider bug must still fail as a named start-up error
            raise ProviderError(f"cannot unwrap {where} via {wrapper.describe()}: {type(exc).__name__}") from exc
        if not isinstance(data_key, bytes) or len(data_key) < MIN_KEY_LENGTH:
            raise ProviderError(f"cannot unwrap {where} via {wrapper.describe()}: the provider returned a data key "
                                f"that is not {MIN_KEY_LENGTH}+ bytes; the wrapped blob is not a statecodec data key")
        return derive_key(data_key, _KEY_INFO)

    @property
    def wrapper(self) -> KeyWrapper:
        return self._wrapper

    @property
    def context(self) -> Mapping[str, str]:
        """The context every wrapped key of this ring is bound to (read-only)."""
        return self._context

    @property
    def wrapped_keys(self) -> tuple[bytes, ...]:
        return self._wrapped

    def __repr__(self) -> str:
        return f"EnvelopeCodec(provider={self._wrapper.describe()!r}, key_ids={list(self.key_ids)!r})"


def wrapped_key_id(blob: bytes) -> bytes:
    """An envelope ring's key id: a digest of the wrapped data key, so known without the KMS (`rotate pull`)."""
    return hashlib.sha256(_KEY_ID_LABEL + blob).digest()[:KEY_ID_LENGTH]


def new_wrapped_key(wrapper: KeyWrapper, context: Mapping[str, str] | None = None) -> bytes:
    """Ask `wrapper` for a fresh data key in wrapped form, checked against the length bound."""
    blob = wrapper.new_wrapped_key(_check_context(context))
    if not isinstance(blob, bytes) or not blob or len(blob) > MAX_WRAPPED_KEY_LENGTH:
        raise ProviderError(f"{wrapper.describe()} returned a wrapped key of unexpected size")
    return blob
