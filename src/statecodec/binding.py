"""Claims around any codec: expiry, audience, purpose, principal and request binding.

Threat: genuine state replayed after it lapsed, or minted by another service sharing the keys, for another user or
another request. `BoundCodec` stamps claims that stop each inside the sealed payload of any codec (docs/binding.md);
no principal or context value ever reaches a message, `repr` or log.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from hmac import compare_digest
from typing import Any

from statecodec._settings import DEFAULT_FUTURE_SKEW, DEFAULT_TTL, MAX_FUTURE_SKEW, seconds
from statecodec._types import Codec, HoldsSecrets, WrapsCodec, require_codec
from statecodec.errors import ConfigurationError, InvalidToken, Reason, SealError
from statecodec.keys import TAG_LENGTH, KeyRing, field, lp, mac

__all__ = ["BoundCodec", "mcp_request_context"]

_V1, _V2 = 0x01, 0x02
_TAG_AT = {_V1: 16, _V2: 20}  # where the binding tag starts: version 0x02 carries the binding key's id at 16..19
_PRINCIPAL_FLAG = 0x01
_MAX_TTL = (1 << 24) - 1  # the format's 3-byte lifetime field (about 194 days); settings stop at _settings.MAX_TTL
_LATEST_SEAL = (1 << 40) - _MAX_TTL  # a token sealed before this expires inside the 5-byte iat range
# (Kb, Kp) labels per version: a tag of one version never verifies as the other's (no downgrade, no upgrade).
_INFO = {
    _V1: (b"statecodec/v1/binding/binding", b"statecodec/v1/binding/principal"),
    _V2: (b"statecodec/v2/binding/binding", b"statecodec/v2/binding/principal"),
}
_AUDIENCE_LABEL = b"statecodec/v1/binding/audience\x00"
_PURPOSE_LABEL = b"statecodec/v1/binding/purpose\x00"
# The context's "args": the exact bytes the binding tag covers. One encoder for the process (it keeps no state between
# calls): json.dumps with keywords builds a new JSONEncoder per call, 1.5x the time (2.6 against 1.7 us a call in one
# run of benchmarks/binding.py, "parts").
_ARGS_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)


def _macs(ring: KeyRing, version: int, prefix: bytes) -> list[tuple[bytes, hmac.HMAC, hmac.HMAC]]:
    """(key id, Kb, Kp) per ring key, in ring order, each an HMAC keyed once and fed `prefix`, for `mac` to copy."""
    binding, principal = (ring.subkeys(info) for info in _INFO[version])
    return [(kid, hmac.new(kb, prefix, "sha256"), hmac.new(kp, prefix, "sha256")) for (kid, kb), (_, kp) in
            zip(binding, principal, strict=True)]  # fmt: skip


def _bound_input(principal: str | None, context: Mapping[str, str] | None) -> bytes:
    """``P C`` of the format; anything but str (a str subclass included) is the caller's bug."""
    if principal is not None and type(principal) is not str:
        raise TypeError(f"principal must be str or None, got {type(principal).__name__}")
    items = sorted(context.items()) if context else ()
    parts = [field(principal), len(items).to_bytes(4, "big")]
    for key, value in items:
        if type(key) is not str or type(value) is not str:
            raise TypeError("context must map str to str; digest other values first")
        parts += (lp(key), lp(value))
    return b"".join(parts)


def mcp_request_context(method: str, params: Mapping[str, Any] | None) -> dict[str, str]:
    """The request identity an MCP multi-round token should bind, as the SDK boundary's allowlist does: method,
    target (`uri` or `name`) and the canonical JSON of `arguments`; pass it to both `unseal` and `seal` of a round."""
    p: Mapping[str, Any] = params or {}
    if method == "resources/read":
        return {"method": method, "target": str(p.get("uri", "")), "args": ""}
    arguments = p.get("arguments") or {}
    return {"method": method, "target": str(p.get("name", "")), "args": _ARGS_JSON.encode(arguments)}


def _scope_field(name: str, value: object, label: bytes) -> bytes:
    """The 3-byte claim naming an audience or a purpose, which must be a non-empty str."""
    if type(value) is not str or not value:
        raise ConfigurationError(f"{name} must be a non-empty str naming this service or use, e.g. 'billing-api'")
    return hashlib.sha256(label + value.encode("utf-8", "surrogatepass")).digest()[:3]


class BoundCodec(HoldsSecrets, WrapsCodec):
    """Binds an inner codec's tokens to a lifetime, an audience, a purpose, and maybe a principal and a context.

    The binding tag, an HMAC under the binding key the claims name, alone decides acceptance; lowering `ttl` shortens
    tokens already issued. Claims version 0x01 is still read until its tokens expire, and ``seal_version=1`` seals it
    during a rolling upgrade (layout and checks: docs/formats.md). Without keywords it is itself a codec.
    """

    __slots__ = ("_by_id", "_clock", "_scope", "_sealing", "_v1", "audience", "codec", "future_skew", "purpose", "ttl")

    def __init__(
        self, codec: Codec, *, audience: str, binding_key: bytes | KeyRing, purpose: str = "request-state",
        ttl: int = DEFAULT_TTL, future_skew: int = DEFAULT_FUTURE_SKEW, clock: Callable[[], float] = time.time,
        seal_version: int = _V2,
    ) -> None:
        require_codec(codec)
        sample = clock() if callable(clock) else None
        if isinstance(sample, bool) or not isinstance(sample, (int, float)):  # datetime.now fails here, not later
            got = f"a clock returning {type(sample).__name__}" if callable(clock) else type(clock).__name__
            raise ConfigurationError(f"clock must be a callable returning epoch seconds (time.time), got {got}")
        self._scope = _scope_field("audience", audience, _AUDIENCE_LABEL)
        self._scope += _scope_field("purpose", purpose, _PURPOSE_LABEL)
        self.ttl = int(seconds("ttl", ttl, low=1, high=_MAX_TTL, integer=True))
        self.future_skew = int(seconds("future_skew", future_skew, low=0, high=MAX_FUTURE_SKEW, integer=True))
        try:
            ring = binding_key if isinstance(binding_key, KeyRing) else KeyRing([binding_key])
        except ConfigurationError as exc:  # KeyRing names the key by position; here it has a name
            raise ConfigurationError(f"binding_key {str(exc).removeprefix('key 0 ')}") from None
        if seal_version not in (_V1, _V2):
            raise ConfigurationError(f"seal_version must be 2 (the default) or 1 (only while instances that read only "
                                     f"version 1 remain), got {seal_version!r}")
        prefix = lp(audience) + lp(purpose)  # lp(audience) lp(purpose) opens every tag's input
        self._v1 = [(kb, kp) for _, kb, kp in _macs(ring, _V1, prefix)]  # version 0x01: tried in ring order
        by_id = _macs(ring, _V2, prefix)
        self._by_id = {kid: (kb, kp) for kid, kb, kp in by_id}
        self._sealing = (seal_version, b"", *self._v1[0]) if seal_version == _V1 else (seal_version, *by_id[0])
        self.codec, self._clock = codec, clock  # the inner codec
        self.audience, self.purpose = audience, purpose

    def seal(self, state: bytes, *, principal: str | None = None, context: Mapping[str, str] | None = None) -> str:
        """Seal `state` with fresh claims: issued now, expiring `ttl` seconds from now."""
        bound_input = _bound_input(principal, context)
        now = self._clock()
        # Positive check: a NaN, infinite or pre-epoch clock fails it and refuses to mint.
        if not (isinstance(now, (int, float)) and 0 <= now < _LATEST_SEAL):
            raise SealError("the clock returned a time outside 0..2^40 seconds since the epoch")
        version, kid, binding_key, principal_key = self._sealing
        flags = 0 if principal is None else _PRINCIPAL_FLAG
        header = bytes([version, flags]) + int(now).to_bytes(5, "big") + self.ttl.to_bytes(3, "big") + self._scope + kid
        signed = header if version == _V2 else b""  # version 0x01 tags cover no header
        claims = header + mac(binding_key, signed + bound_input)
        if principal is not None:
            claims += mac(principal_key, signed + lp(principal))
        return self.codec.seal(claims + state)

    def _open(self, token: str) -> tuple[bytes, int, int]:
        """Inner unseal plus every check that needs no principal or context: (payload, tag start, state start)."""
        if type(token) is not str:  # whatever the inner codec would make of it
            raise InvalidToken(Reason.MALFORMED)
        try:
            payload: bytes | None = self.codec.unseal(token)
        except InvalidToken:
            raise
        except Exception:  # deny on error: a foreign inner codec's refusal or bug fails closed
            payload = None
        if payload is None:  # raised outside the handler: even `from None` keeps the inner error as __context__
            raise InvalidToken(Reason.SEAL)
        tag_at = _TAG_AT.get(payload[0], 0) if isinstance(payload, bytes) and payload else 0
        if not (tag_at and len(payload) > 1 and payload[1] in (0, _PRINCIPAL_FLAG)
                and len(payload) >= (state_at := tag_at + TAG_LENGTH * (1 + payload[1]))):
            raise InvalidToken(Reason.MALFORMED)
        # Audience and purpose are public names, so a plain comparison leaks nothing.
        if payload[10:16] != self._scope:
            raise InvalidToken(Reason.AUDIENCE if payload[10:13] != self._scope[:3] else Reason.PURPOSE)
        iat = int.from_bytes(payload[2:7], "big")
        lifetime = min(int.from_bytes(payload[7:10], "big"), self.ttl)  # the configured ttl is a ceiling
        now = self._clock()
        # Accept only if now is a number in [iat - skew, iat + lifetime): a NaN clock is not yet valid.
        if not (isinstance(now, (int, float)) and iat - self.future_skew <= now):
            raise InvalidToken(Reason.NOT_YET_VALID)
        if not now < iat + lifetime:
            raise InvalidToken(Reason.EXPIRED)
        return payload, tag_at, state_at

    def unseal(self, token: str, *, principal: str | None = None, context: Mapping[str, str] | None = None) -> bytes:
        """The state of a token this codec minted for the same principal and context (checks: docs/formats.md);
        a principal or context that is not `str` is the caller's bug: `TypeError`, as in `seal`, whatever the token."""
        bound_input = _bound_input(principal, context)
        payload, tag_at, state_at = self._open(token)
        if (principal is None) != (payload[1] == 0):
            raise InvalidToken(Reason.PRINCIPAL)
        if payload[0] == _V2:
            keys = self._by_id.get(payload[16:20])  # one key, whatever the ring's length: refusals cost as much
            if keys is None:
                raise InvalidToken(Reason.UNKNOWN_KEY)
            candidates, signed = [keys], payload[:20]
        else:  # version 0x01 names no key: every ring key is tried, primary first, for its tokens' lifetime
            candidates, signed = self._v1, b""
        tag, message = payload[tag_at : tag_at + TAG_LENGTH], signed + bound_input
        for key, _ in candidates:
            if compare_digest(tag, mac(key, message)):
                return payload[state_at:]
        # Refused either way; the principal tag only tells the log which claim differs.
        if principal is not None:
            claim, message = payload[tag_at + TAG_LENGTH : state_at], signed + lp(principal)
            if not any(compare_digest(claim, mac(key, message)) for _, key in candidates):
                raise InvalidToken(Reason.PRINCIPAL)
        raise InvalidToken(Reason.BINDING)

    def reseal(self, token: str) -> str:
        """Re-seal a live token under the inner codec's primary key, its claims byte for byte (the expiry stays)."""
        return self.codec.seal(self._open(token)[0])

    def __repr__(self) -> str:
        scope = f"audience={self.audience!r}, purpose={self.purpose!r}"
        return f"BoundCodec({self.codec!r}, {scope}, ttl={self.ttl}, future_skew={self.future_skew})"
