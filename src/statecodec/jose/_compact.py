"""What the compact JOSE codecs share: the token length cap, the key index by ``kid``, the payload check.

Threat: a cap or a key index checked one way in `JWECodec` and another in
`JWSCodec` is a refusal that holds for one format and not the other. Both
codecs validate ``max_token_length`` and refuse duplicate ``kid`` values
here, at construction, and derive the largest payload ``seal`` accepts from
the same cap ``unseal`` enforces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from statecodec.errors import ConfigurationError, SealError

__all__ = ["CompactCodec"]

# cryptography's AES-GCM raises OverflowError on 2**31 bytes or more; no token here may reach that.
_TOKEN_LENGTH_LIMIT = 2**31 - 1


class _Keyed(Protocol):
    @property
    def kid(self) -> str: ...


_K = TypeVar("_K", bound=_Keyed)


class CompactCodec(Generic[_K]):
    """Configuration and accessors common to `JWECodec` and `JWSCodec`; `_K` is the per-``kid`` key object."""

    __slots__ = ("_alg", "_by_kid", "_kids", "_max_length", "_max_payload", "_primary")

    _alg: str
    _by_kid: dict[str, _K]
    _kids: tuple[str, ...]
    _max_length: int
    _max_payload: int
    _primary: _K

    @staticmethod
    def _check_max_length(max_token_length: object) -> None:
        if isinstance(max_token_length, bool) or not isinstance(max_token_length, int):
            raise ConfigurationError("max_token_length must be an int (characters)")
        if max_token_length > _TOKEN_LENGTH_LIMIT:
            raise ConfigurationError(f"max_token_length must be at most {_TOKEN_LENGTH_LIMIT} characters")

    def _index(self, alg: str, keys: Sequence[_K]) -> None:
        """Keys by ``kid``, in order; the first seals."""
        by_kid: dict[str, _K] = {}
        for key in keys:
            if key.kid in by_kid:
                raise ConfigurationError(f"two keys share the kid {key.kid!r}; list each key once")
            by_kid[key.kid] = key
        self._alg = alg
        self._by_kid = by_kid
        self._kids = tuple(by_kid)
        self._primary = keys[0]

    def _fit(self, max_token_length: int, fixed: int) -> None:
        """Accept a cap of at least the `fixed` characters every token carries besides its payload."""
        if max_token_length < fixed:
            raise ConfigurationError(
                f"max_token_length={max_token_length} is below the smallest token ({fixed} characters)"
            )
        self._max_length = max_token_length
        # The largest payload whose token fits the cap: seal refuses what unseal would refuse.
        self._max_payload = (max_token_length - fixed) * 3 // 4

    def _check_payload(self, payload: object) -> None:
        """Off the hot path: `seal` calls it only for a payload that is not `bytes` or is too long."""
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise TypeError(f"seal takes bytes, got {type(payload).__name__}")
        if len(payload) > self._max_payload:
            raise SealError(
                f"payload of {len(payload)} bytes exceeds the {self._max_payload}-byte maximum "
                f"for max_token_length={self._max_length}"
            )

    @property
    def alg(self) -> str:
        """The configured algorithm, the only one this codec emits or accepts."""
        return self._alg

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ``kid`` of every key, the sealing key first."""
        return self._kids

    @property
    def primary_key_id(self) -> str:
        return self._kids[0]

    @property
    def max_token_length(self) -> int:
        return self._max_length

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError(f"{type(self).__name__} holds keys and is not picklable")
