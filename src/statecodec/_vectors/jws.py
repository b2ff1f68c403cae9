"""Vectors of compact JWS (`JWSCodec`): HS256 over a ring or JWKs, and Ed25519, both deterministic.

Threat: a JWS that drifts (header text, key derivation, ``kid``) stops
verifying on every other stack, and a drifted refusal may accept a forged
header. HMAC and Ed25519 signatures are deterministic, so every vector
marked ``deterministic`` must be reproduced by ``seal`` itself, byte for
byte, and every invalid vector refused with its pinned reason.

Members beyond the common ones (``docs/formats.md``, "Vector files")::

    rfc_signatures?                                           (top level)
    valid:   alg, ring + sealed_with | jwks, payload, token, deterministic, minted_by?, derived_jwk?, kid?
    invalid: alg, ring | jwks, token, reason, max_token_length?
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ed25519

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode, b64u_encode
from statecodec._vectors import _schema as s
from statecodec._vectors._jose import (
    KEY_MEMBERS,
    check_keys,
    derived_jwk_problems,
    header_segment,
    private_jwk,
    ring_secrets,
    sealing_ring,
    symmetric_keys,
)
from statecodec._vectors.ring import _PAYLOADS
from statecodec.errors import ConfigurationError, InvalidToken, Reason
from statecodec.jose import JWSCodec, derived_jwk
from statecodec.jose._jwk import thumbprint

__all__ = ["GENERATORS", "verify"]

ALGS = ("HS256", "EdDSA", "Ed25519")
_TOP = {"schema": s.text, "codec": s.text, "description": s.text, "valid": s.array, "invalid": s.array}
_TOP_OPTIONAL = {"rfc_signatures": s.array}
_VALID = {"name": s.text, "alg": s.text, "payload": s.hex_text, "token": s.text, "deterministic": s.boolean}
_VALID_OPTIONAL = {**KEY_MEMBERS, "sealed_with": s.index, "minted_by": s.text, "derived_jwk": s.jwk, "kid": s.text}
_INVALID = {"name": s.text, "alg": s.text, "token": s.text, "reason": s.reason}
_INVALID_OPTIONAL = {**KEY_MEMBERS, "max_token_length": s.index}
_SIGNATURE = {"name": s.text, "jwk": s.jwk, "signing_input": s.text, "signature": s.b64u}


def _codec(v: Mapping[str, Any], *, sealing: bool = False) -> JWSCodec:
    """The vector's codec; `sealing`: over a ring, the one whose first key is ``ring[sealed_with]``."""
    cap = v.get("max_token_length", DEFAULT_MAX_TOKEN_LENGTH)
    if "ring" in v:
        if v["alg"] != "HS256":
            raise ConfigurationError("a ring signs with HS256 only; give jwks for EdDSA")
        return JWSCodec(sealing_ring(v) if sealing else ring_secrets(v), max_token_length=cap)
    return JWSCodec.from_jwks(v["jwks"], alg=v["alg"], max_token_length=cap)


def _parse(data: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    top = s.members(data, "vectors file", _TOP, _TOP_OPTIONAL)
    valid = [s.members(v, f"valid[{i}]", _VALID, _VALID_OPTIONAL) for i, v in enumerate(top["valid"])]
    invalid = [s.members(v, f"invalid[{i}]", _INVALID, _INVALID_OPTIONAL) for i, v in enumerate(top["invalid"])]
    for i, v in enumerate(valid):
        check_keys(v, f"valid[{i}]", ALGS, valid=True)
    for i, v in enumerate(invalid):
        check_keys(v, f"invalid[{i}]", ALGS, valid=False)
    s.unique_names(valid, "valid")
    s.unique_names(invalid, "invalid")
    signatures = [s.members(r, f"rfc_signatures[{i}]", _SIGNATURE) for i, r in enumerate(top.get("rfc_signatures", []))]
    return valid, invalid, signatures


def verify(data: Mapping[str, Any]) -> s.VectorReport:
    """Validate the whole file, then verify, re-sign and refuse every vector through `JWSCodec`."""
    valid, invalid, signatures = _parse(data)
    report = s.VectorReport(codec="jws")
    for v in valid:
        report.valid += 1
        report.fail("valid", v["name"], _check_valid(v))
    for iv in invalid:
        report.invalid += 1
        report.fail("invalid", iv["name"], s.refusal(functools.partial(_codec, iv), iv["token"], iv["reason"]))
    for sig in signatures:
        report.reference += 1
        report.fail("rfc_signature", sig["name"], _check_signature(sig))
    return report


def _check_valid(v: Mapping[str, Any]) -> list[str]:
    payload = bytes.fromhex(v["payload"])
    try:
        codec = _codec(v)
        sealer = _codec(v, sealing=True)
    except ConfigurationError as exc:
        return [f"codec refused: {exc}"]
    problems = s.opens(lambda: codec.unseal(v["token"]), payload)
    if v["deterministic"]:
        resigned = sealer.seal(payload)
        if resigned != v["token"]:
            problems.append(f"signing payload again gives another token ({s.first_difference(resigned, v['token'])})")
    if "kid" in v and sealer.primary_key_id != v["kid"]:
        problems.append("kid differs from the sealing key's kid")
    # A ring vector that reached here is HS256: `_codec` refuses a ring under any other alg.
    return problems + derived_jwk_problems(v, payload, JWSCodec.from_jwks)


def _check_signature(sig: Mapping[str, Any]) -> list[str]:
    try:
        private = ed25519.Ed25519PrivateKey.from_private_bytes(b64u_decode(sig["jwk"]["d"]))
    except (KeyError, TypeError, ValueError, InvalidToken):
        return ['jwk is not a private Ed25519 key with "d"']
    signature = b64u_encode(private.sign(sig["signing_input"].encode()))
    return [] if signature == sig["signature"] else ["Ed25519 signature over signing_input differs"]


# -- generating ------------------------------------------------------------------------------------

_ED_SEED = bytes(range(0x91, 0xB1))


def _valid(name: str, alg: str, payload: bytes, keys: Mapping[str, Any]) -> dict[str, Any]:
    v: dict[str, Any] = {"name": name, "alg": alg, "minted_by": "statecodec", **keys}
    sealer = _codec(v, sealing=True)
    if "ring" in v:
        v["derived_jwk"] = derived_jwk(ring_secrets(v)[v["sealed_with"]], alg)
    else:
        # A JWK without "kid" is named by its RFC 7638 thumbprint: pinned here, computed apart from the codec.
        jwk = keys["jwks"][0]
        if "kid" in jwk:
            v["kid"] = jwk["kid"]
        else:
            v["kid"] = thumbprint(ed25519.Ed25519PrivateKey.from_private_bytes(b64u_decode(jwk["d"])).public_key())
    return {**v, "payload": payload.hex(), "token": sealer.seal(payload), "deterministic": True}


def _invalid(alg: str, keys: Mapping[str, Any], token: str) -> list[dict[str, Any]]:
    h64, p64, s64 = token.split(".")
    kid = json.loads(b64u_decode(h64))["kid"]

    def bad(name: str, text: str, reason: Reason, cap: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"name": f"{alg}: {name}", "alg": alg, **keys, "token": text, "reason": reason.value}
        if cap is not None:
            out["max_token_length"] = cap
        return out

    def header(**members: Any) -> str:
        return ".".join([header_segment(members), p64, s64])

    other = "EdDSA" if alg == "HS256" else "HS256"
    return [
        bad("signature bit flipped", ".".join([h64, p64, s.flip(s64)]), Reason.SEAL),
        bad("payload changed", ".".join([h64, b64u_encode(b'{"step":3}'), s64]), Reason.SEAL),
        bad("alg none", header(alg="none", kid=kid), Reason.ALG),
        bad(f"alg {other}", header(alg=other, kid=kid), Reason.ALG),
        bad("typ member", header(alg=alg, kid=kid, typ="JWT"), Reason.HEADER),
        bad("crit member", header(alg=alg, kid=kid, crit=["b64"], b64=False), Reason.HEADER),
        bad("jwk member", header(alg=alg, kid=kid, jwk={"kty": "oct", "k": "AA"}), Reason.HEADER),
        bad("unknown kid", header(alg=alg, kid="not-a-key-of-this-codec"), Reason.UNKNOWN_KEY),
        bad("two segments", f"{h64}.{p64}", Reason.MALFORMED),
        bad("signature one character short", ".".join([h64, p64, s64[:-1]]), Reason.MALFORMED),
        bad("JWE compact (five segments)", f"{h64}..{p64}.{s64}.{s64}", Reason.MALFORMED),
        bad("one character over max_token_length", token, Reason.OVERSIZED, cap=len(token) - 1),
    ]


def _hs256() -> list[list[dict[str, Any]]]:
    ring, rotated, raw = symmetric_keys()
    valid = [_valid(f"HS256 over a ring: {name}", "HS256", p, ring) for name, p in _PAYLOADS]
    valid.append(_valid("HS256, retired key still verifies", "HS256", b"before rotation", rotated))
    valid.append(_valid("HS256 with a raw JWK", "HS256", b'{"step":2}', raw))
    return [valid, _invalid("HS256", {"ring": ring["ring"]}, valid[1]["token"])]


def _eddsa() -> list[list[dict[str, Any]]]:
    keys = {"jwks": [private_jwk(ed25519.Ed25519PrivateKey.from_private_bytes(_ED_SEED))]}
    valid = [_valid(f"EdDSA: {name}", "EdDSA", p, keys) for name, p in _PAYLOADS]
    return [valid, _invalid("EdDSA", keys, valid[1]["token"])]


def _file(what: str, *parts: list[list[dict[str, Any]]]) -> dict[str, Any]:
    return {
        "schema": s.SCHEMA,
        "codec": "jws",
        "description": (
            f"Compact JWS tokens of JWSCodec ({what}). Payloads are hex; HMAC and Ed25519 are deterministic, so "
            "signing 'payload' again reproduces 'token'. Keys are test values: never use them."
        ),
        "valid": [v for part in parts for v in part[0]],
        "invalid": [v for part in parts for v in part[1]],
    }


GENERATORS: Mapping[str, Callable[[], dict[str, Any]]] = {
    "jws": lambda: _file("HS256 and EdDSA", _hs256(), _eddsa()),
    "jws-hs256": lambda: _file("HS256", _hs256()),
    "jws-eddsa": lambda: _file("EdDSA", _eddsa()),
}
"""Generator name -> a JWS vectors file for one algorithm (``jws``: both in one file)."""
