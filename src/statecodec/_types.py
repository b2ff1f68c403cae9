"""The codec contract, defined once: every codec, wrapper, kit and tool here speaks it; the one no-pickling rule;
and what a codec over its own keys, or around another, reports as its keys."""

from __future__ import annotations

from typing import Protocol, cast, runtime_checkable

from statecodec.errors import ConfigurationError


@runtime_checkable
class Codec(Protocol):
    """Authenticated sealing of opaque state that comes back from an attacker.

    The shape the MCP SDK's `RequestStateSecurity(codec=...)` accepts, and all the rest of statecodec relies on:

    - `unseal(seal(payload)) == payload` for every payload up to the codec's cap; an encrypting codec gives
      two different tokens for the same payload (a signing codec, whose payload the client reads, may not).
    - `seal` returns URL-safe ASCII (RFC 3986 unreserved characters). The token never chooses how it is
      verified: configuration fixes the algorithm, and the format marker (a version prefix, or a JOSE
      header that is compared, never obeyed) is bound under the tag or signature.
    - `unseal` raises `statecodec.InvalidToken` with a `Reason` code for every token it did not mint
      unmodified: malformed, non-canonical, truncated, extended, tampered, oversized, of another format,
      or made under a key it does not hold. No other exception type ever escapes it.
    - The length cap is checked before any decoding; tag and signature comparisons are constant-time.
    - No key material, payload or token text appears in any message, `repr`, exception cause or log record.
    - Both methods are synchronous and run on the server's event loop: key material is cached at
      construction, so no network call per token.
    - Misconfiguration fails at construction with `ConfigurationError` saying how to fix it; a payload
      over the cap makes `seal` raise `SealError`; a key provider failure is a `ProviderError`.

    `statecodec.testing.assert_conformant(codec)` checks the token duties.
    """

    def seal(self, payload: bytes) -> str:
        """An opaque URL-safe token protecting `payload`."""

    def unseal(self, token: str) -> bytes:
        """The payload of a token this codec minted unmodified; `InvalidToken` for anything else."""


def require_codec(codec: object, what: str = "codec") -> Codec:
    """The one check that `codec` is a codec, done where it is given, not at the first token."""
    if not (callable(getattr(codec, "seal", None)) and callable(getattr(codec, "unseal", None))):
        raise ConfigurationError(f"{what} must have seal(bytes) -> str and unseal(str) -> bytes")
    return cast(Codec, codec)


class HoldsSecrets:
    """The base of every object that holds keys or credentials: pickle, `copy` and `deepcopy` raise `TypeError`
    (a pickle would put the secret on disk or on the wire; a silent duplicate outlives its owner's `close()`)."""

    __slots__ = ()

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError(f"{type(self).__name__} holds secrets and is not picklable")


class OwnKeys(HoldsSecrets):
    """A codec over keys of its own: their ids, the sealing key's first, and its cap on a token's length."""

    __slots__ = ("_key_ids", "_max_length")
    _key_ids: tuple[str, ...]
    _max_length: int

    @property
    def key_ids(self) -> tuple[str, ...]:
        return self._key_ids

    @property
    def primary_key_id(self) -> str:
        return self._key_ids[0]

    @property
    def max_token_length(self) -> int:
        return self._max_length

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key_ids={list(self._key_ids)!r})"


class WrapsCodec:
    """A codec around another (`codec`): its key ids are the inner codec's, so rotation sees through wrappers."""

    __slots__ = ()
    codec: Codec

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(getattr(self.codec, "key_ids", ()))

    @property
    def primary_key_id(self) -> str | None:
        return self.key_ids[0] if self.key_ids else None
