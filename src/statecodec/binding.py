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
import json
import struct
import time
from collections.abc import Callable, Iterator, Mapping
from hmac import compare_digest
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
_LATEST_SEAL = _MAX_TIME - MAX_TTL  # a token sealed before this expires inside the 5-byte iat range
_PRINCIPAL_FLAG = 0x01
_BASE_LENGTH = 32
_TAG_LENGTH = 16
# The fixed claims read in one call: version and flags, iat << 24 | lifetime, scope, binding tag.
_CLAIMS = struct.Struct(">HQ6s16s")
_PLAIN = CLAIMS_VERSION << 8
_PRINCIPAL_BOUND = CLAIMS_VERSION << 8 | _PRINCIPAL_FLAG
_EMPTY_CONTEXT = b"\x00\x00\x00\x00"
_SCOPE_TAG_LENGTH = 3
_PRINCIPAL_INFO = b"statecodec/v1/binding/principal"
_BINDING_INFO = b"statecodec/v1/binding/binding"
_NO_PRINCIPAL = b"\x00"
_PRINCIPAL_MARK = b"\x01"
_AUDIENCE_LABEL = b"statecodec/v1/binding/audience\x00"
_PURPOSE_LABEL = b"statecodec/v1/binding/purpose\x00"



def _canonical_json_encoder() -> Callable[[object], str]:
    """JSON with sorted keys, ASCII only and no whitespace, as fast as the stdlib can make it.

    `JSONEncoder.encode` builds a new C encoder on every call, which costs more
    than encoding a typical arguments object. This builds the same C encoder
    once, without the cycle-tracking table, which is the encoder's only state
    between calls (so one instance serves every thread). A cyclic value then
    raises `RecursionError` instead of `ValueError`; arguments parsed from
    JSON cannot be cyclic. Without the C accelerator, or if its signature ever
    changes, this falls back to `JSONEncoder.encode`.
    """
    encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has the accelerator
        return encoder.encode
    try:
        chunks = make(None, encoder.default, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, True)

        def encode(value: object) -> str:
            return "".join(chunks(value, 0))

        probe = {"b": [1.5, "\u00e9\U0001f600", None, True, -0.0, 10**20], "a": {"y": "", "x": {}}}
        if encode(probe) == encoder.encode(probe):
            return encode
    except TypeError:  # pragma: no cover - a future signature
        pass
    return encoder.encode  # pragma: no cover


_canonical_json = _canonical_json_encoder()
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
        arguments = p.get("arguments")
        target, args = str(p.get("name", "")), _canonical_json(arguments) if arguments else "{}"
    # The encoding of {"args", "method", "target"} built directly, keys already in order:
    # this runs on every round, and a test holds it equal to encode_context.
    context = BindingContext.__new__(BindingContext)
    context._items = {"method": method, "target": target, "args": args}
    a, m, t = args.encode("ascii"), _text(method), _text(target)
    context.encoded = b"".join(
        (_MCP_HEAD, len(a).to_bytes(4, "big"), a, _MCP_METHOD, len(m).to_bytes(4, "big"), m,
         _MCP_TARGET, len(t).to_bytes(4, "big"), t)
    )  # fmt: skip
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


# Memo bounds: entries per table before it is cleared, and the largest key kept (characters
# of principal plus bytes of context encoding). The context holds client-chosen arguments,
# so both bounds matter: a few MiB per table at worst (a str holds up to 4 bytes a character).
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
    tags are memoised in a small bounded table: the seal that answers a round
    reuses the unseal's MAC. The table is keyed by the principal `str` and the
    context's encoding, so a hit hashes nothing new: `str` and `bytes` cache
    their hashes, and a `BindingContext` carries its encoding. The inputs are
    server-side values (the authenticated principal, the request identity), a
    tag is no secret, and each table holds at most 1,024 entries of at most
    1,024 characters and bytes: client-chosen arguments can churn it but never
    grow it.
    """

    __slots__ = ("_binding", "_binding_memo", "_empty", "_principal", "_principal_memo")

    def __init__(self, binding: _Mac, principal: _Mac) -> None:
        self._binding = binding
        self._principal = principal
        self._empty = binding.tag(_NO_PRINCIPAL + _EMPTY_CONTEXT)
        # One table per MAC key: a binding input and a principal input never share a slot.
        self._binding_memo: dict[tuple[str | None, bytes], bytes] = {}
        self._principal_memo: dict[str, bytes] = {}

    def binding_tag(self, principal: str | None, context: Mapping[str, str] | None) -> bytes:
        """The binding tag; `principal` is a `str` (checked by the caller) or None."""
        if type(context) is BindingContext:
            encoded = context.encoded
        elif not context:
            if principal is None:
                return self._empty
            encoded = _EMPTY_CONTEXT
        else:
            encoded = encode_context(context)
        memo = self._binding_memo
        slot = (principal, encoded)
        tag = memo.get(slot)
        if tag is None:
            if principal is None:
                tag = self._binding.tag(_NO_PRINCIPAL + encoded)
            else:
                tag = self._binding.tag(_PRINCIPAL_MARK + _field(principal) + encoded)
            _remember(memo, slot, tag, len(encoded) + (0 if principal is None else len(principal)))
        return tag

    def principal_tag(self, principal: str) -> bytes:
        memo = self._principal_memo
        tag = memo.get(principal)
        if tag is None:
            tag = self._principal.tag(_field(principal))
            _remember(memo, principal, tag, len(principal))
        return tag


def _remember(memo: dict[Any, bytes], slot: object, tag: bytes, size: int) -> None:
    """Keep a computed tag unless its key is too large; a full table is cleared, never grown."""
    if size <= _MEMO_MAX_INPUT:
        if len(memo) >= _MEMO_SIZE:
            memo.clear()
        memo[slot] = tag


class BoundCodec:
    """Binds every token of an inner codec to a lifetime, an audience, a purpose, and optionally
    a principal and a request context.

    The inner codec seals ``claims || state``; the claims (32 bytes, 48 when
    principal-bound) are, all integers big-endian::

        offset  size  field
        0       1     version 0x01
        1       1     flags: 0x01 principal-bound; every other bit zero
        2       5     iat: issued-at, whole seconds since the Unix epoch
        7       3     lifetime: seconds, the ttl at sealing; expiry is at iat + min(lifetime, ttl)
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
    (`not_yet_valid`), now before iat + the lesser of the token's lifetime
    and this codec's `ttl` (`expired`: lowering `ttl` shortens tokens already
    issued, raising it lengthens none), principal presence
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
        "_plain_head",
        "_principal_head",
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
        # Version, flags and lifetime: the claims head of every seal, missing only iat.
        self._plain_head = CLAIMS_VERSION << 72 | self._ttl
        self._principal_head = self._plain_head | _PRINCIPAL_FLAG << 64
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
        if not (isinstance(now, (int, float)) and 0 <= now < _LATEST_SEAL):
            raise SealError("the clock returned a time outside 0..2^40 seconds since the epoch")
        key = self._keys[0]
        if principal is None:
            head = self._plain_head | int(now) << 24
            tags = key.binding_tag(None, context)
        elif type(principal) is str:
            head = self._principal_head | int(now) << 24
            tags = key.binding_tag(principal, context) + key.principal_tag(principal)
        else:
            raise TypeError(f"principal must be str or None, got {type(principal).__name__}")
        return self._codec.seal(head.to_bytes(10, "big") + self._scope + tags + state)

    def _open(self, token: str) -> tuple[bytes, bytes, int]:
        """Inner unseal plus the checks that need no principal or context.

        Returns the payload, its binding tag and the offset of the state.
        """
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
        if not isinstance(payload, bytes) or len(payload) < _BASE_LENGTH:
            raise InvalidToken(Reason.MALFORMED)
        version_flags, times, scope, tag = _CLAIMS.unpack_from(payload)
        if version_flags == _PLAIN:
            offset = _BASE_LENGTH
        elif version_flags == _PRINCIPAL_BOUND and len(payload) >= _BASE_LENGTH + _TAG_LENGTH:
            offset = _BASE_LENGTH + _TAG_LENGTH
        else:
            raise InvalidToken(Reason.MALFORMED)
        # Audience and purpose are public names, so a plain comparison leaks nothing.
        if scope != self._scope:
            raise InvalidToken(Reason.AUDIENCE if scope[:3] != self._scope[:3] else Reason.PURPOSE)
        iat = times >> 24
        # The configured ttl is a ceiling: lowering it shortens tokens already issued.
        lifetime = min(times & MAX_TTL, self._ttl)
        now = self._clock()
        # Accept only if now is a number in [iat - skew, iat + lifetime): a NaN or a
        # non-numeric clock fails the first test and is refused as not yet valid.
        if not (isinstance(now, (int, float)) and iat - self._skew <= now < iat + lifetime):
            raise InvalidToken(
                Reason.EXPIRED if isinstance(now, (int, float)) and iat - self._skew <= now else Reason.NOT_YET_VALID
            )
        return payload, tag, offset

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
        payload, tag, offset = self._open(token)
        if principal is None:
            if offset != _BASE_LENGTH:
                raise InvalidToken(Reason.PRINCIPAL)
        elif type(principal) is not str:
            raise TypeError(f"principal must be str or None, got {type(principal).__name__}")
        elif offset == _BASE_LENGTH:
            raise InvalidToken(Reason.PRINCIPAL)
        keys = self._keys
        if compare_digest(tag, keys[0].binding_tag(principal, context)):
            return payload[offset:]
        for key in keys[1:]:  # binding keys being rotated out, tried only after the primary fails
            if compare_digest(tag, key.binding_tag(principal, context)):
                return payload[offset:]
        # Refused either way; the principal tag only tells the log which claim differs.
        if principal is not None:
            claim = payload[_BASE_LENGTH:offset]
            if not any(compare_digest(claim, key.principal_tag(principal)) for key in self._keys):
                raise InvalidToken(Reason.PRINCIPAL)
        raise InvalidToken(Reason.BINDING)

    def reseal(self, token: str) -> str:
        """Re-seal a live token under the inner codec's current primary key, claims unchanged.

        The claims bytes are carried over as they are, so the expiry does not
        restart and the principal and context bindings still hold. The token
        must be live and for this audience and purpose; principal and context
        are checked when it is finally unsealed.
        """
        payload, _, _ = self._open(token)
        return self._codec.seal(payload)

    def __repr__(self) -> str:
        return (
            f"BoundCodec({self._codec!r}, audience={self.audience!r}, purpose={self.purpose!r}, "
            f"ttl={self._ttl}, future_skew={self._skew})"
        )

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("BoundCodec holds keys and is not picklable")
