"""Claims around any codec: expiry, audience, purpose, principal and request binding.

Threat: a token that verifies is not yet a token that belongs here. A client
can replay genuine state after it should have lapsed, present state minted by
another service that shares the keys, move state minted for one user into
another user's session, or carry state from one request (tool, arguments,
form, cursor) into another. `BoundCodec` stamps claims that stop each of
these inside the sealed payload of any codec, and checks them after the inner
codec has verified the token. The principal and the request context are
bound with a keyed MAC, so they stay unrecoverable even when the inner codec
only signs and the client can read the claims.

Every refusal is `InvalidToken` with its own reason code (`expired`,
`not_yet_valid`, `audience`, `purpose`, `principal`, `binding`,
`malformed`); no principal or context value ever reaches a message, a `repr`
or a log.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from statecodec.errors import ConfigurationError, InvalidToken, Reason, SealError
from statecodec.keys import KeyRing, derive_key

__all__ = [
    "CLAIMS_VERSION",
    "MAX_FUTURE_SKEW",
    "MAX_TTL",
    "BoundCodec",
    "Codec",
    "encode_context",
    "mcp_request_context",
]

CLAIMS_VERSION = 0x01
MAX_TTL = (1 << 24) - 1
"""Largest lifetime the 3-byte lifetime field holds: 16,777,215 s (about 194 days)."""
MAX_FUTURE_SKEW = 3600
_MAX_TIME = 1 << 40
_PRINCIPAL_FLAG = 0x01
_BASE_LENGTH = 32
_TAG_LENGTH = 16
_SCOPE_TAG_LENGTH = 3
_PRINCIPAL_INFO = b"statecodec/v1/binding/principal"
_CONTEXT_INFO = b"statecodec/v1/binding/context"
_AUDIENCE_LABEL = b"statecodec/v1/binding/audience\x00"
_PURPOSE_LABEL = b"statecodec/v1/binding/purpose\x00"
_HOW_TO_GENERATE = "Generate one with `statecodec keygen` and keep it apart from the codec keys."


class Codec(Protocol):
    """The codec contract: `unseal` raises only `InvalidToken` for any token it did not mint."""

    def seal(self, payload: bytes) -> str: ...

    def unseal(self, token: str) -> bytes: ...


def _text(value: str) -> bytes:
    # Digest inputs are never decoded, so surrogatepass keeps every str encodable.
    return value.encode("utf-8", "surrogatepass")


def _lp(data: bytes) -> bytes:
    """Length-prefixed field: 4-byte big-endian length, then the bytes (unambiguous concatenation)."""
    return len(data).to_bytes(4, "big") + data


def encode_context(context: Mapping[str, str] | None) -> bytes:
    """The canonical, unambiguous encoding of a request context that the binding MACs.

    ``count (4) || for each entry sorted by UTF-8 key: len(key) (4) || key || len(value) (4) || value``,
    all lengths big-endian. Distinct mappings never share an encoding, whatever the strings hold.
    """
    if context is None or not context:
        return b"\x00\x00\x00\x00"
    items: list[tuple[bytes, bytes]] = []
    for key, value in context.items():
        if type(key) is not str or type(value) is not str:
            raise TypeError("context must map str to str; digest other values first")
        items.append((_text(key), _text(value)))
    items.sort()
    return len(items).to_bytes(4, "big") + b"".join(_lp(k) + _lp(v) for k, v in items)


def mcp_request_context(method: str, params: Mapping[str, Any] | None) -> dict[str, str]:
    """The request identity an MCP multi-round token should bind: method, target, arguments digest.

    Mirrors the SDK boundary's allowlist: `resources/read` binds its `uri`;
    `tools/call` and `prompts/get` bind `name` and a SHA-256 digest of the
    canonical JSON of `arguments`. Fields outside the allowlist (the state
    itself, input responses, `_meta`) never join the binding.
    """
    p: Mapping[str, Any] = params or {}
    if method == "resources/read":
        return {"method": method, "target": str(p.get("uri", "")), "args": ""}
    args = p.get("arguments") or {}
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    digest = hashlib.sha256(canonical.encode("ascii")).hexdigest()
    return {"method": method, "target": str(p.get("name", "")), "args": digest}


def _check_seconds(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{name} must be an int number of seconds, got {type(value).__name__}")
    if not (low <= value <= high):
        raise ConfigurationError(f"{name}={value} is outside {low}..{high} seconds")
    return value


def _check_label(name: str, value: object) -> str:
    if type(value) is not str or not value:
        raise ConfigurationError(
            f"{name} must be a non-empty str naming this service or use, e.g. {name}='billing-api'"
        )
    return value


def _binding_ring(binding_key: object) -> KeyRing:
    if isinstance(binding_key, KeyRing):
        return binding_key
    if not isinstance(binding_key, (bytes, bytearray, memoryview)):
        raise ConfigurationError(
            "binding_key must be bytes (one key of at least 32 random bytes) or a KeyRing "
            f"(rotation: first key binds, every key verifies). {_HOW_TO_GENERATE}"
        )
    try:
        return KeyRing([bytes(binding_key)])
    except ConfigurationError as exc:
        raise ConfigurationError(f"binding_key: {str(exc).removeprefix('keys[0] ')}") from None


class BoundCodec:
    """Binds every token of an inner codec to a lifetime, an audience, a purpose, and optionally
    a principal and a request context.

    The inner codec seals ``claims || state``; the claims (32 bytes, 48 when
    principal-bound) are, all integers big-endian::

        offset  size  field
        0       1     version 0x01
        1       1     flags: 0x01 principal-bound; every other bit zero
        2       5     iat: issued-at, whole seconds since the Unix epoch
        7       3     lifetime: seconds; the token expires at iat + lifetime
        10      3     SHA-256("statecodec/v1/binding/audience" 0x00 audience)[:3]
        13      3     SHA-256("statecodec/v1/binding/purpose" 0x00 purpose)[:3]
        16      16    context tag: HMAC-SHA256(Kc, lp(audience) lp(purpose) encode_context(context))[:16]
        32      16    principal tag, only when flagged: HMAC-SHA256(Kp, lp(audience) lp(purpose) lp(principal))[:16]
        32|48   ...   state

    ``lp(x)`` is a 4-byte length then ``x`` (UTF-8). ``Kc`` and ``Kp`` are
    HKDF-SHA256 of the binding key under ``statecodec/v1/binding/context``
    and ``statecodec/v1/binding/principal``. The 3-byte audience and purpose
    fields only name the cause of a refusal: the context tag, present on every
    token, binds both at full strength.

    Checks after the inner codec verifies, in order: layout (`malformed`),
    audience, purpose, issued no later than now + `future_skew`
    (`not_yet_valid`), now before expiry (`expired`), principal presence and
    tag (`principal`), context tag (`binding`). `seal(state)` / `unseal(token)`
    with no keywords bind no principal and an empty context, so a `BoundCodec`
    is itself a codec. An inner codec's own refusal passes through; any other
    exception from a foreign inner codec's `unseal` becomes `InvalidToken(seal)`.
    """

    __slots__ = (
        "_clock",
        "_codec",
        "_empty_tags",
        "_keys",
        "_prefix",
        "_scope",
        "_skew",
        "_ttl",
        "audience",
        "purpose",
    )

    def __init__(
        self,
        codec: Codec,
        *,
        audience: str,
        binding_key: bytes | KeyRing,
        purpose: str = "request-state",
        ttl: int = 600,
        future_skew: int = 60,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not callable(getattr(codec, "seal", None)) or not callable(getattr(codec, "unseal", None)):
            raise ConfigurationError("codec must have seal(bytes) -> str and unseal(str) -> bytes")
        if not callable(clock):
            raise ConfigurationError("clock must be a callable returning seconds since the epoch")
        self.audience = _check_label("audience", audience)
        self.purpose = _check_label("purpose", purpose)
        self._ttl = _check_seconds("ttl", ttl, 1, MAX_TTL)
        self._skew = _check_seconds("future_skew", future_skew, 0, MAX_FUTURE_SKEW)
        ring = _binding_ring(binding_key)
        self._codec = codec
        self._clock = clock
        self._prefix = _lp(_text(audience)) + _lp(_text(purpose))
        self._scope = (
            hashlib.sha256(_AUDIENCE_LABEL + _text(audience)).digest()[:_SCOPE_TAG_LENGTH]
            + hashlib.sha256(_PURPOSE_LABEL + _text(purpose)).digest()[:_SCOPE_TAG_LENGTH]
        )
        self._keys = tuple((derive_key(s, _PRINCIPAL_INFO), derive_key(s, _CONTEXT_INFO)) for s in ring)
        # The empty-context tag depends only on the key, audience and purpose: computed once.
        empty = self._prefix + encode_context(None)
        self._empty_tags = tuple(hmac.digest(kc, empty, "sha256")[:_TAG_LENGTH] for _, kc in self._keys)

    @property
    def ttl(self) -> int:
        return self._ttl

    @property
    def future_skew(self) -> int:
        return self._skew

    @property
    def codec(self) -> Codec:
        """The inner codec."""
        return self._codec

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The inner codec's key ids, primary first (empty when it has none)."""
        ids: tuple[str, ...] = tuple(getattr(self._codec, "key_ids", ()))
        return ids

    @property
    def primary_key_id(self) -> str | None:
        ids = self.key_ids
        return ids[0] if ids else None

    def _context_tag(self, index: int, context: Mapping[str, str] | None) -> bytes:
        if not context:
            return self._empty_tags[index]
        return hmac.digest(self._keys[index][1], self._prefix + encode_context(context), "sha256")[:_TAG_LENGTH]

    def _principal_tag(self, index: int, principal: str) -> bytes:
        return hmac.digest(self._keys[index][0], self._prefix + _lp(_text(principal)), "sha256")[:_TAG_LENGTH]

    def seal(
        self, state: bytes, *, principal: str | None = None, context: Mapping[str, str] | None = None
    ) -> str:
        """Seal `state` with fresh claims: issued now, expiring `ttl` seconds from now."""
        if not isinstance(state, (bytes, bytearray, memoryview)):
            raise TypeError(f"seal takes bytes, got {type(state).__name__}")
        now = self._clock()
        # Positive check: a NaN, infinite or pre-epoch clock fails it and refuses to mint.
        if not (isinstance(now, (int, float)) and 0 <= now < _MAX_TIME - MAX_TTL):
            raise SealError("the clock returned a time outside 0..2^40 seconds since the epoch")
        iat = int(now)
        flags = 0
        tail = b""
        if principal is not None:
            if type(principal) is not str:
                raise TypeError(f"principal must be str or None, got {type(principal).__name__}")
            flags = _PRINCIPAL_FLAG
            tail = self._principal_tag(0, principal)
        head = ((CLAIMS_VERSION << 72) | (flags << 64) | (iat << 24) | self._ttl).to_bytes(10, "big")
        return self._codec.seal(head + self._scope + self._context_tag(0, context) + tail + bytes(state))

    def _open(self, token: str) -> tuple[bytes, int]:
        """Inner unseal plus the checks that need no principal or context: (payload, state offset)."""
        if type(token) is not str:
            raise InvalidToken(Reason.MALFORMED)
        try:
            payload = self._codec.unseal(token)
        except InvalidToken:
            raise
        except Exception:  # deny on error: a foreign inner codec's refusal or bug must fail closed
            raise InvalidToken(Reason.SEAL) from None
        # Accept only if: bytes, long enough for the flagged layout, known version, known flags.
        if not isinstance(payload, bytes) or len(payload) < _BASE_LENGTH or payload[0] != CLAIMS_VERSION:
            raise InvalidToken(Reason.MALFORMED)
        flags = payload[1]
        if flags == 0:
            offset = _BASE_LENGTH
        elif flags == _PRINCIPAL_FLAG and len(payload) >= _BASE_LENGTH + _TAG_LENGTH:
            offset = _BASE_LENGTH + _TAG_LENGTH
        else:
            raise InvalidToken(Reason.MALFORMED)
        scope = self._scope
        if not hmac.compare_digest(payload[10:13], scope[:3]):
            raise InvalidToken(Reason.AUDIENCE)
        if not hmac.compare_digest(payload[13:16], scope[3:]):
            raise InvalidToken(Reason.PURPOSE)
        times = int.from_bytes(payload[2:10], "big")
        iat = times >> 24
        now = self._clock()
        # Stated positively so a NaN clock rejects instead of accepting.
        if not (iat <= now + self._skew):
            raise InvalidToken(Reason.NOT_YET_VALID)
        if not (now < iat + (times & MAX_TTL)):
            raise InvalidToken(Reason.EXPIRED)
        return payload, offset

    def unseal(
        self, token: str, *, principal: str | None = None, context: Mapping[str, str] | None = None
    ) -> bytes:
        """Return the state of a token this codec minted for the same principal and context.

        Raises `InvalidToken` with the inner codec's reason or one of
        `malformed`, `audience`, `purpose`, `not_yet_valid`, `expired`,
        `principal` (including drift: bound to a principal and presented
        without one, or the reverse), `binding`.
        """
        payload, offset = self._open(token)
        if principal is not None and type(principal) is not str:
            raise TypeError(f"principal must be str or None, got {type(principal).__name__}")
        indexes: range | tuple[int] = range(len(self._keys))
        if (offset != _BASE_LENGTH) != (principal is not None):
            raise InvalidToken(Reason.PRINCIPAL)
        if principal is not None:
            claim = payload[_BASE_LENGTH:offset]
            for i in indexes:
                if hmac.compare_digest(claim, self._principal_tag(i, principal)):
                    # The same binding key minted both tags: check the context under it alone.
                    indexes = (i,)
                    break
            else:
                raise InvalidToken(Reason.PRINCIPAL)
        claim = payload[16:_BASE_LENGTH]
        for i in indexes:
            if hmac.compare_digest(claim, self._context_tag(i, context)):
                return payload[offset:]
        raise InvalidToken(Reason.BINDING)

    def reseal(self, token: str) -> str:
        """Re-seal a live token under the inner codec's current primary key, claims unchanged.

        The claims bytes are carried over as they are, so the expiry does not
        restart and the principal and context bindings still hold. The token
        must be live and for this audience and purpose; principal and context
        are checked when it is finally unsealed.
        """
        payload, _ = self._open(token)
        return self._codec.seal(payload)

    def __repr__(self) -> str:
        return (
            f"BoundCodec({self._codec!r}, audience={self.audience!r}, purpose={self.purpose!r}, "
            f"ttl={self._ttl}, future_skew={self._skew})"
        )

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("BoundCodec holds keys and is not picklable")
