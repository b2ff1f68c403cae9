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
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from statecodec._types import Codec
from statecodec.errors import ConfigurationError, InvalidToken, Reason, SealError
from statecodec.keys import KeyRing, derive_key

__all__ = [
    "CLAIMS_VERSION",
    "MAX_FUTURE_SKEW",
    "MAX_TTL",
    "BindingContext",
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
_BINDING_INFO = b"statecodec/v1/binding/binding"
_NO_PRINCIPAL = b"\x00"
_PRINCIPAL_MARK = b"\x01"
_AUDIENCE_LABEL = b"statecodec/v1/binding/audience\x00"
_PURPOSE_LABEL = b"statecodec/v1/binding/purpose\x00"
# One encoder for every call: json.dumps builds a new encoder whenever options are given.
_canonical_json = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode
_HOW_TO_GENERATE = "Generate one with `statecodec keygen` and keep it apart from the codec keys."


def _text(value: str) -> bytes:
    # Digest inputs are never decoded, so surrogatepass keeps every str encodable.
    return value.encode("utf-8", "surrogatepass")


def _field(value: str) -> bytes:
    """`lp` of the UTF-8 of `value`."""
    data = value.encode("utf-8", "surrogatepass")
    return len(data).to_bytes(4, "big") + data


def _lp(data: bytes) -> bytes:
    """Length-prefixed field: 4-byte big-endian length, then the bytes (unambiguous concatenation)."""
    return len(data).to_bytes(4, "big") + data


def encode_context(context: Mapping[str, str] | None) -> bytes:
    """The canonical, unambiguous encoding of a request context that the binding MACs.

    ``count (4) || for each entry in key order: len(key) (4) || key || len(value) (4) || value``,
    UTF-8, lengths big-endian; key order is code-point order, which is also the
    order of the UTF-8 bytes. Distinct mappings never share an encoding.
    """
    if type(context) is BindingContext:
        return context.encoded
    if not context:
        return b"\x00\x00\x00\x00"
    out = bytearray(len(context).to_bytes(4, "big"))
    for key in sorted(context, key=_str_key):
        value = context[key]
        if type(value) is not str:
            raise TypeError("context must map str to str; digest other values first")
        k = key.encode("utf-8", "surrogatepass")
        v = value.encode("utf-8", "surrogatepass")
        out += len(k).to_bytes(4, "big")
        out += k
        out += len(v).to_bytes(4, "big")
        out += v
    return bytes(out)


def _principal_field(principal: object) -> bytes:
    if type(principal) is not str:
        raise TypeError(f"principal must be str or None, got {type(principal).__name__}")
    return _field(principal)


def _str_key(key: object) -> str:
    if type(key) is not str:
        raise TypeError("context must map str to str; digest other values first")
    return key


class BindingContext(Mapping[str, str]):
    """A request context encoded once, for the `unseal` and the `seal` of the same round.

    Immutable, and equal to any mapping with the same items; binding with it is
    the same as binding with that mapping. Its `repr` shows no values.
    """

    __slots__ = ("_items", "encoded")

    def __init__(self, context: Mapping[str, str] | None = None) -> None:
        items = dict(context or {})
        self.encoded = encode_context(items)  # validates: str keys and values only
        self._items = items

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"BindingContext(keys={sorted(self._items)!r})"


def mcp_request_context(method: str, params: Mapping[str, Any] | None) -> BindingContext:
    """The request identity an MCP multi-round token should bind: method, target, arguments.

    Mirrors the SDK boundary's allowlist: `resources/read` binds its `uri`;
    `tools/call` and `prompts/get` bind `name` and the canonical JSON of
    `arguments` (sorted keys, ASCII, no whitespace). Fields outside the
    allowlist (the state itself, input responses, `_meta`) never join the
    binding. Compute it once per round and pass it to both `unseal` and `seal`.
    """
    p: Mapping[str, Any] = params or {}
    if method == "resources/read":
        target, args = str(p.get("uri", "")), ""
    else:
        target, args = str(p.get("name", "")), _canonical_json(p.get("arguments") or {})
    # The encoding of {"args", "method", "target"} built directly, keys already in order:
    # this runs on every round, and a test holds it equal to encode_context.
    context = BindingContext.__new__(BindingContext)
    context._items = {"method": method, "target": target, "args": args}
    context.encoded = b"".join(
        (_MCP_HEAD, _field(args), _MCP_METHOD, _field(method), _MCP_TARGET, _field(target))
    )
    return context


_MCP_HEAD = b"\x00\x00\x00\x03" + _lp(b"args")
_MCP_METHOD = _lp(b"method")
_MCP_TARGET = _lp(b"target")


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


# Memo bounds: entries per table before it is cleared, and the largest input kept. The
# context holds client-chosen arguments, so both bounds matter: at most 1 MiB per table.
_MEMO_SIZE = 1024
_MEMO_MAX_INPUT = 1024
_IPAD = bytes(b ^ 0x36 for b in range(256))
_OPAD = bytes(b ^ 0x5C for b in range(256))


class _Mac:
    """HMAC-SHA256 (RFC 2104) truncated to 16 bytes, over a fixed prefix then the data.

    The padded key blocks and the prefix are absorbed once at construction;
    each tag then costs two hash-state copies instead of a fresh HMAC set-up.
    The output is exactly ``HMAC-SHA256(key, prefix || data)[:16]``.
    """

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes, prefix: bytes) -> None:
        block = key.ljust(64, b"\x00")  # HKDF output, 32 bytes: shorter than the SHA-256 block
        self._inner = hashlib.sha256(block.translate(_IPAD) + prefix)
        self._outer = hashlib.sha256(block.translate(_OPAD))

    def tag(self, data: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(data)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()[:_TAG_LENGTH]


class _BindingKey:
    """The binding and principal MACs of one binding key.

    The binding tag covers the principal (when bound) and the context, so one
    MAC decides acceptance; the principal tag only names the cause when the
    binding tag does not match. The tag of "no principal, empty context" is
    computed once.

    A round unseals and then seals under the same principal and context, so
    tags are memoised in a small bounded table keyed by the exact MAC input:
    the seal that answers a round reuses the unseal's MAC. The inputs are
    server-side values (the authenticated principal, the request identity), a
    tag is no secret, and each table holds at most 1,024 inputs of at most
    1 KiB: client-chosen arguments can churn it but never grow it.
    """

    __slots__ = ("_binding", "_binding_memo", "_empty", "_principal", "_principal_memo")

    def __init__(self, binding: _Mac, principal: _Mac) -> None:
        self._binding = binding
        self._principal = principal
        self._empty = binding.tag(_NO_PRINCIPAL + encode_context(None))
        # One table per MAC key: a binding input and a principal input never share a slot.
        self._binding_memo: dict[bytes, bytes] = {}
        self._principal_memo: dict[bytes, bytes] = {}

    @staticmethod
    def _tag(mac: _Mac, memo: dict[bytes, bytes], data: bytes) -> bytes:
        if len(data) > _MEMO_MAX_INPUT:
            return mac.tag(data)
        tag = memo.get(data)
        if tag is None:
            tag = mac.tag(data)
            if len(memo) >= _MEMO_SIZE:
                memo.clear()
            memo[data] = tag
        return tag

    def binding_tag(self, principal: bytes | None, context: Mapping[str, str] | None) -> bytes:
        if principal is None:
            if not context:
                return self._empty
            data = _NO_PRINCIPAL + encode_context(context)
        else:
            data = _PRINCIPAL_MARK + principal + encode_context(context)
        return self._tag(self._binding, self._binding_memo, data)

    def principal_tag(self, principal: bytes) -> bytes:
        return self._tag(self._principal, self._principal_memo, principal)


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
        16      16    binding tag: HMAC-SHA256(Kb, lp(audience) lp(purpose) P encode_context(context))[:16]
        32      16    principal tag, only when flagged: HMAC-SHA256(Kp, lp(audience) lp(purpose) lp(principal))[:16]
        32|48   ...   state

    ``lp(x)`` is a 4-byte length then ``x`` (UTF-8); ``P`` is ``0x00`` when no
    principal is bound and ``0x01 lp(principal)`` when one is. ``Kb`` and
    ``Kp`` are HKDF-SHA256 of the binding key under
    ``statecodec/v1/binding/binding`` and ``statecodec/v1/binding/principal``.
    The binding tag, on every token, binds audience, purpose, principal and
    context at full strength and alone decides acceptance; the 3-byte audience
    and purpose fields and the principal tag only name the cause of a refusal.

    Checks after the inner codec verifies, in order: layout (`malformed`),
    audience, purpose, issued no later than now + `future_skew`
    (`not_yet_valid`), now before expiry (`expired`), principal presence
    (`principal`), binding tag; on a binding mismatch, the principal tag tells
    `principal` from `binding`. `seal(state)` / `unseal(token)` with no
    keywords bind no principal and an empty context, so a `BoundCodec` is
    itself a codec. An inner codec's own refusal passes through; any other
    exception from a foreign inner codec's `unseal` becomes `InvalidToken(seal)`.
    """

    __slots__ = (
        "_clock",
        "_codec",
        "_keys",
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
        sample = clock()
        if isinstance(sample, bool) or not isinstance(sample, (int, float)):
            # datetime.now and friends fail here, not on the first token.
            raise ConfigurationError(
                f"clock must return seconds since the epoch as an int or float (e.g. time.time), "
                f"got {type(sample).__name__}"
            )
        self.audience = _check_label("audience", audience)
        self.purpose = _check_label("purpose", purpose)
        self._ttl = _check_seconds("ttl", ttl, 1, MAX_TTL)
        self._skew = _check_seconds("future_skew", future_skew, 0, MAX_FUTURE_SKEW)
        ring = _binding_ring(binding_key)
        self._codec = codec
        self._clock = clock
        prefix = _field(audience) + _field(purpose)
        self._scope = (
            hashlib.sha256(_AUDIENCE_LABEL + _text(audience)).digest()[:_SCOPE_TAG_LENGTH]
            + hashlib.sha256(_PURPOSE_LABEL + _text(purpose)).digest()[:_SCOPE_TAG_LENGTH]
        )
        self._keys = tuple(
            _BindingKey(_Mac(derive_key(s, _BINDING_INFO), prefix), _Mac(derive_key(s, _PRINCIPAL_INFO), prefix))
            for s in ring
        )

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
        key = self._keys[0]
        if principal is None:
            flags = 0
            tail = b""
            bound = None
        else:
            bound = _principal_field(principal)
            flags = _PRINCIPAL_FLAG
            tail = key.principal_tag(bound)
        head = ((CLAIMS_VERSION << 72) | (flags << 64) | (int(now) << 24) | self._ttl).to_bytes(10, "big")
        return self._codec.seal(head + self._scope + key.binding_tag(bound, context) + tail + bytes(state))

    def _open(self, token: str) -> tuple[bytes, int]:
        """Inner unseal plus the checks that need no principal or context: (payload, state offset)."""
        if type(token) is not str:
            raise InvalidToken(Reason.MALFORMED)
        failed = False
        try:
            payload = self._codec.unseal(token)
        except InvalidToken:
            raise
        except Exception:  # deny on error: a foreign inner codec's refusal or bug fails closed
            failed = True
        if failed:
            # Raised outside the handler: the inner exception may hold token text, and
            # `from None` would still keep it reachable as __context__.
            raise InvalidToken(Reason.SEAL)
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
        # Audience and purpose are public names, so a plain comparison leaks nothing.
        if payload[10:16] != self._scope:
            raise InvalidToken(Reason.AUDIENCE if payload[10:13] != self._scope[:3] else Reason.PURPOSE)
        times = int.from_bytes(payload[2:10], "big")
        iat = times >> 24
        now = self._clock()
        # Stated positively so a NaN (or non-numeric) clock rejects instead of accepting or raising.
        if not (isinstance(now, (int, float)) and iat <= now + self._skew):
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
        without one, or the reverse), `binding`. A `principal` that is not a
        `str`, or a context that does not map `str` to `str`, is the caller's
        bug and raises `TypeError`, as in `seal`.
        """
        payload, offset = self._open(token)
        bound = None if principal is None else _principal_field(principal)
        if (offset != _BASE_LENGTH) != (bound is not None):
            raise InvalidToken(Reason.PRINCIPAL)
        claim = payload[16:_BASE_LENGTH]
        for key in self._keys:
            if hmac.compare_digest(claim, key.binding_tag(bound, context)):
                return payload[offset:]
        # Refused either way; the principal tag only tells the log which claim differs.
        if bound is not None:
            claim = payload[_BASE_LENGTH:offset]
            if not any(hmac.compare_digest(claim, key.principal_tag(bound)) for key in self._keys):
                raise InvalidToken(Reason.PRINCIPAL)
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
