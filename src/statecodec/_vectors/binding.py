"""Vectors of the binding claims (`BoundCodec`, claims version 0x01) around an AES-GCM ring.

Threat: the claims decide lifetime, audience, purpose, principal and request
context; a drift in their layout or MAC input would accept what it should
refuse, or strand every bound token. Each valid vector pins ``(now, nonce,
inputs, state) -> claims, token`` byte for byte; each refusal replays a
vector's token at another time or with other inputs and pins the reason
(``null``: it must still be accepted, the edge of a window).

Members beyond the common ones (``docs/formats.md``, "Vector files")::

    codec_keys, binding_key                      (top level)
    valid:     audience, purpose, ttl, future_skew, now, state, principal, context, nonce, claims, token
    refusals:  vector, now, principal, context ("same" | object | null), audience?, purpose?, reason | null
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statecodec._encoding import b64u_decode, b64u_encode
from statecodec._vectors import _schema as s
from statecodec._vectors.ring import _seal_with_nonce
from statecodec.aead import AESGCMCodec
from statecodec.binding import BoundCodec
from statecodec.errors import ConfigurationError
from statecodec.keys import KeyRing, format_keys

__all__ = ["generate", "verify"]

VERSION = 0x01
_CONTEXT = s.nullable(s.string_map)


def _context_or_same(value: object, where: str) -> None:
    if value != "same":
        _CONTEXT(value, where)


_TOP = {
    "schema": s.text,
    "codec": s.text,
    "format_version": s.index,
    "description": s.text,
    "codec_keys": s.text,
    "binding_key": s.b64u,
    "valid": s.array,
    "refusals": s.array,
}
_VALID = {
    "name": s.text,
    "audience": s.text,
    "purpose": s.text,
    "ttl": s.index,
    "future_skew": s.index,
    "now": s.number,
    "state": s.text,
    "principal": s.nullable(s.text),
    "context": _CONTEXT,
    "nonce": s.hex_text,
    "claims": s.hex_text,
    "token": s.text,
}
_REFUSAL = {
    "vector": s.text,
    "now": s.number,
    "principal": s.nullable(s.text),
    "context": _context_or_same,
    "reason": s.reason_or_null,
}
_REFUSAL_OPTIONAL = {"audience": s.text, "purpose": s.text}


class _FixedNonce:
    """The inner ring with `nonce` in place of a random one, for re-deriving a frozen token. Never reuse."""

    def __init__(self, ring: AESGCMCodec, nonce: bytes) -> None:
        self._ring = ring
        self._nonce = nonce

    def seal(self, payload: bytes) -> str:
        return _seal_with_nonce(self._ring, payload, self._nonce)

    def unseal(self, token: str) -> bytes:
        return self._ring.unseal(token)


def _bound(top: Mapping[str, Any], v: Mapping[str, Any], now: float, inner: Any = None, **over: str) -> BoundCodec:
    ring = AESGCMCodec(KeyRing.parse(top["codec_keys"])) if inner is None else inner
    return BoundCodec(
        ring,
        audience=over.get("audience", v["audience"]),
        purpose=over.get("purpose", v["purpose"]),
        ttl=v["ttl"],
        future_skew=v["future_skew"],
        binding_key=b64u_decode(top["binding_key"]),
        clock=lambda: now,
    )


def _parse(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    top = s.members(data, "vectors file", _TOP)
    if top["format_version"] != VERSION:
        raise ConfigurationError(f"format_version of binding is {VERSION}")
    valid = [s.members(v, f"valid[{i}]", _VALID) for i, v in enumerate(top["valid"])]
    s.unique_names(valid, "valid")
    names = {v["name"] for v in valid}
    refusals = []
    for i, r in enumerate(top["refusals"]):
        refusal = s.members(r, f"refusals[{i}]", _REFUSAL, _REFUSAL_OPTIONAL)
        if refusal["vector"] not in names:
            raise ConfigurationError(f"refusals[{i}].vector names no valid vector")
        refusals.append(refusal)
    return top, valid, refusals


def verify(data: Mapping[str, Any]) -> s.VectorReport:
    """Validate the whole file, then open, re-derive and replay every vector through `BoundCodec`."""
    top, valid, refusals = _parse(data)
    report = s.VectorReport(codec="binding")
    for v in valid:
        report.valid += 1
        report.fail("valid", v["name"], _check_valid(top, v))
    by_name = {v["name"]: v for v in valid}
    for i, r in enumerate(refusals):
        report.invalid += 1
        expected = "accepted" if r["reason"] is None else r["reason"]
        report.fail(
            "refusal", f"refusals[{i}] ({r['vector']} -> {expected})", _check_refusal(top, by_name[r["vector"]], r)
        )
    return report


def _check_valid(top: Mapping[str, Any], v: Mapping[str, Any]) -> list[str]:
    try:
        codec = _bound(top, v, v["now"])
        ring = AESGCMCodec(KeyRing.parse(top["codec_keys"]))
        signer = _bound(top, v, v["now"], _FixedNonce(ring, bytes.fromhex(v["nonce"])))
    except ConfigurationError as exc:
        return [f"codec refused: {exc}"]
    state, claims = v["state"].encode(), bytes.fromhex(v["claims"])
    problems = s.opens(lambda: codec.unseal(v["token"], principal=v["principal"], context=v["context"]), state)
    problems += [f"inner {p}" for p in s.opens(lambda: ring.unseal(v["token"]), claims + state)]
    try:
        resealed = signer.seal(state, principal=v["principal"], context=v["context"])
    except Exception as exc:  # a clock or input BoundCodec refuses to mint under: report it, by type only
        return [*problems, f"re-sealing refused: {type(exc).__name__}"]
    if resealed != v["token"]:
        problems.append(
            f"re-sealing at now under nonce gives another token ({s.first_difference(resealed, v['token'])})"
        )
    return problems


def _check_refusal(top: Mapping[str, Any], v: Mapping[str, Any], r: Mapping[str, Any]) -> list[str]:
    over = {k: r[k] for k in ("audience", "purpose") if k in r}
    try:
        codec = _bound(top, v, r["now"], **over)
    except ConfigurationError as exc:
        return [f"codec refused: {exc}"]
    context = v["context"] if r["context"] == "same" else r["context"]
    state = v["state"].encode()
    if r["reason"] is None:
        return s.opens(lambda: codec.unseal(v["token"], principal=r["principal"], context=context), state)
    problem = s.refused(lambda: codec.unseal(v["token"], principal=r["principal"], context=context), r["reason"])
    return [] if problem is None else [problem]


# -- generating ------------------------------------------------------------------------------------

_CODEC_KEY = bytes(range(0x20))
_BINDING_KEY = bytes(range(0x64, 0x84))
_T0 = 1767225600  # 2026-01-01T00:00:00Z
_ARGS = "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"


def _valid(name: str, nonce_start: int, **inputs: Any) -> dict[str, Any]:
    top = {"codec_keys": format_keys([_CODEC_KEY]), "binding_key": b64u_encode(_BINDING_KEY)}
    nonce = bytes(range(nonce_start, nonce_start + 12))
    ring = AESGCMCodec([_CODEC_KEY])
    v = {"name": name, **inputs}
    codec = _bound(top, v, inputs["now"], _FixedNonce(ring, nonce))
    token = codec.seal(inputs["state"].encode(), principal=inputs["principal"], context=inputs["context"])
    claims = ring.unseal(token)[: -len(inputs["state"].encode()) or None]
    return {**v, "nonce": nonce.hex(), "claims": claims.hex(), "token": token}


def generate() -> dict[str, Any]:
    """The standard binding set: four tokens, and a replay for every reason and window edge."""
    mcp = {"method": "tools/call", "target": "provision", "args": _ARGS}
    common = {"audience": "billing", "purpose": "request-state", "ttl": 600, "future_skew": 60}
    valid = [
        _valid("plain", 0xB0, **common, now=_T0, state="", principal=None, context=None),
        _valid(
            "principal and context",
            0xBC,
            **common,
            now=_T0 + 0.75,
            state='{"step":2,"region":"eu-west-1"}',
            principal="alice@example.com",
            context=mcp,
        ),
        _valid(
            "oauth state, context only",
            0xC8,
            audience="login.example.com",
            purpose="oauth-state",
            ttl=300,
            future_skew=30,
            now=_T0 + 12345,
            state="r=/dashboard",
            principal=None,
            context={"client_id": "web", "redirect_uri": "https://app.example.com/cb"},
        ),
        _valid(
            "unicode principal, longest ttl",
            0xD4,
            audience="wizard",
            purpose="form-step",
            ttl=2**24 - 1,
            future_skew=0,
            now=_T0,
            state="étape 3",
            principal="üser-一",
            context={},
        ),
    ]
    pc, alice = "principal and context", "alice@example.com"

    def replay(
        vector: str, now: float, reason: str | None, principal: str | None = None, context: Any = "same", **over: str
    ) -> dict[str, Any]:
        return {"vector": vector, "now": now, "principal": principal, "context": context, **over, "reason": reason}

    refusals = [
        # iat is whole seconds (_T0), so the window is [_T0 - future_skew, _T0 + ttl).
        replay(pc, _T0 + 600, "expired", alice),
        replay(pc, _T0 + 599.999, None, alice),
        replay(pc, _T0 - 60.001, "not_yet_valid", alice),
        replay(pc, _T0 - 60, None, alice),
        replay(pc, _T0 + 1, "principal", "bob@example.com"),
        replay(pc, _T0 + 1, "principal", None),
        replay(pc, _T0 + 1, "binding", alice, {**mcp, "args": ""}),
        replay("plain", _T0 + 1, "principal", alice, None),
        replay("plain", _T0 + 1, "audience", None, None, audience="shipping"),
        replay("plain", _T0 + 1, "purpose", None, None, purpose="oauth-state"),
        replay("oauth state, context only", _T0 + 12645, "expired"),
        replay("oauth state, context only", _T0 + 12644, "binding", None, {"client_id": "web"}),
        replay("unicode principal, longest ttl", _T0 + 1, None, "üser-一"),
    ]
    return {
        "schema": s.SCHEMA,
        "codec": "binding",
        "format_version": VERSION,
        "description": (
            "BoundCodec claims (version 0x01) around AESGCMCodec (format 0x01). 'now' is the clock at seal time, "
            "'nonce' the AES-GCM nonce, 'claims' the exact claims prefix sealed before the UTF-8 'state'. Refusals "
            "replay a vector's token at another time or with other inputs ('context': 'same' reuses the vector's; "
            "'reason': null means accepted). Secrets are test values: never use them."
        ),
        "codec_keys": format_keys([_CODEC_KEY]),
        "binding_key": b64u_encode(_BINDING_KEY),
        "valid": valid,
        "refusals": refusals,
    }
