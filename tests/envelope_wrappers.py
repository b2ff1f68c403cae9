"""In-memory `KeyWrapper`s for unit tests of `EnvelopeCodec` (no network)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from statecodec.envelope import canonical_context
from statecodec.errors import ProviderError


class LocalWrapper:
    """AES-256-GCM under a local wrapping key, the context bound as AAD; counts unwraps."""

    def __init__(self, wrapping_key: bytes | None = None) -> None:
        self._aead = AESGCM(wrapping_key or os.urandom(32))
        self.unwraps = 0
        self.fail_with: Exception | None = None

    def describe(self) -> str:
        return "local test key"

    def wrap(self, data_key: bytes, context: Mapping[str, str]) -> bytes:
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, data_key, canonical_context(context))

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes:
        self.unwraps += 1
        if self.fail_with is not None:
            raise self.fail_with
        try:
            return self._aead.decrypt(blob[:12], blob[12:], canonical_context(context))
        except (InvalidTag, ValueError):
            raise ProviderError("local test key: wrong context or corrupted wrapped key") from None

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes:
        return self.wrap(os.urandom(32), context)


class TableWrapper:
    """Answers fixed (blob, context) -> data key pairs: the frozen-vector wrapper."""

    def __init__(self, table: Mapping[tuple[bytes, bytes], bytes]) -> None:
        self._table = dict(table)

    def describe(self) -> str:
        return "fixed test table"

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes:
        try:
            return self._table[(blob, canonical_context(context))]
        except KeyError:
            raise ProviderError("fixed test table: unknown blob or context") from None

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes:
        raise ProviderError("fixed test table: wrapping is not supported")
