"""Vectors of compact JWE (`JWECodec`): every algorithm configuration, re-derived from recorded randomness.

Threat: a JWE that drifts (header text, member order, key derivation, key
wrap) stops interoperating with every other JOSE stack that reads it, and a
refusal that drifts may become an acceptance. Each valid vector opens under
its configuration; where it records ``randoms`` (the content key and IV
draws, in order) and, for ECDH-ES+A256KW, the ``ephemeral_key``, sealing is
re-run with them and must give the token byte for byte. Each invalid vector
pins the reason the configured codec refuses it with.

Members beyond the common ones (``docs/formats.md``, "Vector files")::

    rfc_note?, concat_kdf?                                   (top level)
    valid:   alg, ring + sealed_with | jwks, payload, token, minted_by?, derived_jwk?, randoms?, ephemeral_key?
    invalid: alg, ring | jwks, token, reason, max_token_length?
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from cryptography.hazmat.primitives.asymmetric import ec, x25519
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.keywrap import aes_key_wrap

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
from statecodec.errors import ConfigurationError, Reason
from statecodec.jose import JWECodec, derived_jwk
from statecodec.jose._ecdh import agree, concat_kdf
from statecodec.jose._jwk import AgreementPrivateKey, curve_name, load_agreement_key
from statecodec.jose.jwe import ENC, _Direct, _KeyWrap

__all__ = ["GENERATORS", "private_jwk", "verify"]

ALGS = ("dir", "A256KW", "ECDH-ES+A256KW")
_ECDH = "ECDH-ES+A256KW"
_CEK, _IV = 32, 12
_TOP = {"schema": s.text, "codec": s.text, "description": s.text, "valid": s.array, "invalid": s.array}
_TOP_OPTIONAL = {"rfc_note": s.text, "concat_kdf": s.array}
_VALID = {"name": s.text, "alg": s.text, "payload": s.hex_text, "token": s.text}
_VALID_OPTIONAL = {
    **KEY_MEMBERS,
    "sealed_with": s.index,
    "minted_by": s.text,
    "derived_jwk": s.jwk,
    "randoms": s.hex_list,
    "ephemeral_key": s.jwk,
}
_INVALID = {"name": s.text, "alg": s.text, "token": s.text, "reason": s.reason}
_INVALID_OPTIONAL = {**KEY_MEMBERS, "max_token_length": s.index}
_KDF = {
    "name": s.text,
    "alice": s.jwk,
    "bob": s.jwk,
    "algorithm_id": s.text,
    "bits": s.index,
    "apu": s.b64u,
    "apv": s.b64u,
    "derived_key": s.b64u,
}


def _codec(v: Mapping[str, Any], *, sealing: bool = False) -> JWECodec:
    """The vector's codec; `sealing`: over a ring, the one whose first key is ``ring[sealed_with]``."""
    cap = v.get("max_token_length", DEFAULT_MAX_TOKEN_LENGTH)
    if "ring" in v:
        return JWECodec(sealing_ring(v) if sealing else ring_secrets(v), alg=v["alg"], max_token_length=cap)
    return JWECodec.from_jwks(v["jwks"], alg=v["alg"], max_token_length=cap)


def _seal_with_randoms(
    codec: JWECodec, payload: bytes, randoms: Sequence[bytes], ephemeral: AgreementPrivateKey | None
) -> str:
    """`codec.seal(payload)` with recorded draws in place of fresh ones. For vectors only.

    An IV or content key must never repeat; this exists so fixed vectors can
    be derived and re-derived, and is deliberately not part of the codec's
    public API. The test suite proves it equal to ``seal`` under the same draws.
    """
    draws = list(randoms)
    primary = codec._primary
    if isinstance(primary, _Direct):
        prefix, aad, aead = codec._prefix + ".", codec._aad, primary.aead
    elif isinstance(primary, _KeyWrap):
        cek = draws.pop(0)
        prefix, aad, aead = codec._prefix + b64u_encode(aes_key_wrap(primary.kek, cek)) + ".", codec._aad, AESGCM(cek)
    else:
        if ephemeral is None or curve_name(ephemeral) != primary.crv:
            raise ConfigurationError(f"ephemeral_key must be a private {primary.crv} key")
        kek = concat_kdf(agree(ephemeral, primary.public), _ECDH, 256)
        cek = draws.pop(0)
        header = codec._ecdh_header(primary.kid, ephemeral.public_key())
        prefix = header + "." + b64u_encode(aes_key_wrap(kek, cek)) + "."
        aad, aead = header.encode("ascii"), AESGCM(cek)
    (iv,) = draws
    sealed = aead.encrypt(iv, payload, aad)
    return f"{prefix}{b64u_encode(iv)}.{b64u_encode(sealed[:-16])}.{b64u_encode(sealed[-16:])}"


def _parse(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    top = s.members(data, "vectors file", _TOP, _TOP_OPTIONAL)
    valid = [s.members(v, f"valid[{i}]", _VALID, _VALID_OPTIONAL) for i, v in enumerate(top["valid"])]
    invalid = [s.members(v, f"invalid[{i}]", _INVALID, _INVALID_OPTIONAL) for i, v in enumerate(top["invalid"])]
    for i, v in enumerate(valid):
        where = f"valid[{i}]"
        check_keys(v, where, ALGS, valid=True)
        if "randoms" in v:
            sizes = [len(bytes.fromhex(r)) for r in v["randoms"]]
            expected = [_IV] if v["alg"] == "dir" else [_CEK, _IV]
            if sizes != expected:
                raise ConfigurationError(f"{where}.randoms for {v['alg']} are {expected} bytes long, in that order")
        if ("ephemeral_key" in v) != (v["alg"] == _ECDH and "randoms" in v):
            raise ConfigurationError(f"{where}: ephemeral_key goes with randoms, and only for {_ECDH}")
    for i, v in enumerate(invalid):
        check_keys(v, f"invalid[{i}]", ALGS, valid=False)
    s.unique_names(valid, "valid")
    s.unique_names(invalid, "invalid")
    kdfs = [s.members(k, f"concat_kdf[{i}]", _KDF) for i, k in enumerate(top.get("concat_kdf", []))]
    return {"concat_kdf": kdfs}, valid, invalid


def verify(data: Mapping[str, Any]) -> s.VectorReport:
    """Validate the whole file, then open, re-derive and refuse every vector through `JWECodec`."""
    top, valid, invalid = _parse(data)
    report = s.VectorReport(codec="jwe")
    for v in valid:
        report.valid += 1
        report.fail("valid", v["name"], _check_valid(v))
    for iv in invalid:
        report.invalid += 1
        report.fail("invalid", iv["name"], s.refusal(functools.partial(_codec, iv), iv["token"], iv["reason"]))
    for kdf in top["concat_kdf"]:
        report.reference += 1
        report.fail("concat_kdf", kdf["name"], _check_kdf(kdf))
    return report


def _check_valid(v: Mapping[str, Any]) -> list[str]:
    payload = bytes.fromhex(v["payload"])
    try:
        codec = _codec(v)
        sealer = _codec(v, sealing=True)
    except ConfigurationError as exc:
        return [f"codec refused: {exc}"]
    problems = s.opens(lambda: codec.unseal(v["token"]), payload)
    if "randoms" in v:
        ephemeral = None
        if "ephemeral_key" in v:
            try:
                ephemeral, _ = load_agreement_key(v["ephemeral_key"], 0)
            except ConfigurationError as exc:
                return [*problems, f"ephemeral_key refused: {exc}"]
        try:
            resealed = _seal_with_randoms(sealer, payload, [bytes.fromhex(r) for r in v["randoms"]], ephemeral)
        except ConfigurationError as exc:
            return [*problems, str(exc)]
        if resealed != v["token"]:
            problems.append(
                f"re-sealing payload with the recorded randoms gives another token "
                f"({s.first_difference(resealed, v['token'])})"
            )
    return problems + derived_jwk_problems(v, payload, JWECodec.from_jwks)


def _check_kdf(kdf: Mapping[str, Any]) -> list[str]:
    try:
        alice, _ = load_agreement_key(kdf["alice"], 0)
        _, bob = load_agreement_key(kdf["bob"], 1)
    except ConfigurationError as exc:
        return [f"key refused: {exc}"]
    if alice is None:
        return ["alice needs her private key"]
    if not 8 <= kdf["bits"] <= 256 or kdf["bits"] % 8:
        return ["bits must be a whole number of bytes from 8 to 256"]
    try:
        z = agree(alice, bob)
    except Exception:  # another curve, a low-order point: whatever the agreement refuses, report it
        return ["alice and bob are not keys of one curve"]
    key = concat_kdf(z, kdf["algorithm_id"], kdf["bits"], b64u_decode(kdf["apu"]), b64u_decode(kdf["apv"]))
    return [] if b64u_encode(key) == kdf["derived_key"] else ["Concat KDF output differs from derived_key"]


# -- generating ------------------------------------------------------------------------------------

_P256_D = int.from_bytes(bytes(range(0x11, 0x31)), "big")
_P256_EPHEMERAL_D = int.from_bytes(bytes(range(0x31, 0x51)), "big")
_X25519_D = bytes(range(0x51, 0x71))
_X25519_EPHEMERAL_D = bytes(range(0x71, 0x91))
_SHAPES = tuple(
    p
    for p in _PAYLOADS
    if p[0] in {"empty payload", "ascii payload", "non-ASCII bytes", "every byte value", "request-state envelope"}
)


def _draws(index: int, alg: str) -> list[bytes]:
    iv = bytes((0xC0 + 13 * index + j) & 0xFF for j in range(_IV))
    cek = bytes((0x30 + 11 * index + j) & 0xFF for j in range(_CEK))
    return [iv] if alg == "dir" else [cek, iv]


def _valid(
    name: str,
    index: int,
    alg: str,
    payload: bytes,
    keys: Mapping[str, Any],
    ephemeral: AgreementPrivateKey | None = None,
) -> dict[str, Any]:
    v: dict[str, Any] = {"name": name, "alg": alg, "minted_by": "statecodec", **keys}
    randoms = _draws(index, alg)
    sealer = _codec(v, sealing=True)
    token = _seal_with_randoms(sealer, payload, randoms, ephemeral)
    if "ring" in v:
        v["derived_jwk"] = derived_jwk(ring_secrets(v)[v["sealed_with"]], alg)
    v["randoms"] = [r.hex() for r in randoms]
    if ephemeral is not None:
        v["ephemeral_key"] = private_jwk(ephemeral)
    return {**v, "payload": payload.hex(), "token": token}


def _invalid(label: str, alg: str, keys: Mapping[str, Any], token: str, kid: str) -> list[dict[str, Any]]:
    h64, ek64, iv64, ct64, tag64 = token.split(".")

    def bad(name: str, text: str, reason: Reason, cap: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"name": f"{label}: {name}", "alg": alg, **keys, "token": text, "reason": reason.value}
        if cap is not None:
            out["max_token_length"] = cap
        return out

    def header(**members: Any) -> str:
        return ".".join([header_segment(members), ek64, iv64, ct64, tag64])

    cases = [
        bad("tag bit flipped", ".".join([h64, ek64, iv64, ct64, s.flip(tag64)]), Reason.SEAL),
        bad("ciphertext bit flipped", ".".join([h64, ek64, iv64, s.flip(ct64, 0, 0x80), tag64]), Reason.SEAL),
        bad("IV bit flipped", ".".join([h64, ek64, s.flip(iv64, 0), ct64, tag64]), Reason.SEAL),
        bad("alg none", header(alg="none", enc=ENC, kid=kid), Reason.ALG),
        bad("alg PBES2-HS256+A128KW", header(alg="PBES2-HS256+A128KW", enc=ENC, kid=kid, p2c=1, p2s=""), Reason.ALG),
        bad("enc A128GCM", header(alg=alg, enc="A128GCM", kid=kid), Reason.ALG),
        bad("zip member", header(alg=alg, enc=ENC, kid=kid, zip="DEF"), Reason.HEADER),
        bad("jku member", header(alg=alg, enc=ENC, kid=kid, jku="https://attacker.example/jwks"), Reason.HEADER),
        bad("unknown kid", header(alg=alg, enc=ENC, kid="not-a-key-of-this-codec"), Reason.UNKNOWN_KEY),
        bad("four segments", ".".join([h64, ek64, iv64, ct64]), Reason.MALFORMED),
        bad("IV of 8 bytes", ".".join([h64, ek64, b64u_encode(bytes(8)), ct64, tag64]), Reason.MALFORMED),
        bad("padded tag", ".".join([h64, ek64, iv64, ct64, tag64 + "=="]), Reason.MALFORMED),
        bad("one character over max_token_length", token, Reason.OVERSIZED, cap=len(token) - 1),
    ]
    if alg == "dir":
        cases.append(
            bad("encrypted key present", ".".join([h64, b64u_encode(bytes(40)), iv64, ct64, tag64]), Reason.MALFORMED)
        )
    else:
        cases.append(bad("wrapped key bit flipped", ".".join([h64, s.flip(ek64, 0), iv64, ct64, tag64]), Reason.SEAL))
        cases.append(bad("encrypted key empty", ".".join([h64, "", iv64, ct64, tag64]), Reason.MALFORMED))
    return cases


def _kid_of(token: str) -> str:
    return cast("str", json.loads(b64u_decode(token.split(".")[0]))["kid"])


def _symmetric(alg: str) -> list[list[dict[str, Any]]]:
    ring, rotated, raw = symmetric_keys()
    valid = [_valid(f"{alg} over a ring: {name}", i, alg, p, ring) for i, (name, p) in enumerate(_SHAPES)]
    valid.append(_valid(f"{alg}, retired key still unseals", len(valid), alg, b"before rotation", rotated))
    valid.append(_valid(f"{alg} with a raw JWK", len(valid), alg, b'{"step":2}', raw))
    ascii_token = valid[1]["token"]
    return [valid, _invalid(alg, alg, {"ring": ring["ring"]}, ascii_token, _kid_of(ascii_token))]


def _agreement(curve: str) -> list[list[dict[str, Any]]]:
    if curve == "P-256":
        key: AgreementPrivateKey = ec.derive_private_key(_P256_D, ec.SECP256R1())
        eph: AgreementPrivateKey = ec.derive_private_key(_P256_EPHEMERAL_D, ec.SECP256R1())
    else:
        key = x25519.X25519PrivateKey.from_private_bytes(_X25519_D)
        eph = x25519.X25519PrivateKey.from_private_bytes(_X25519_EPHEMERAL_D)
    keys = {"jwks": [private_jwk(key)]}
    valid = [_valid(f"{_ECDH} {curve}: {name}", i, _ECDH, p, keys, eph) for i, (name, p) in enumerate(_SHAPES)]
    ascii_token = valid[1]["token"]
    return [valid, _invalid(f"{_ECDH} {curve}", _ECDH, keys, ascii_token, _kid_of(ascii_token))]


def _file(description: str, *parts: list[list[dict[str, Any]]]) -> dict[str, Any]:
    return {
        "schema": s.SCHEMA,
        "codec": "jwe",
        "description": description,
        "valid": [v for part in parts for v in part[0]],
        "invalid": [v for part in parts for v in part[1]],
    }


_NOTE = (
    "Compact JWE tokens of JWECodec ({}). Payloads are hex; 'randoms' are the content key and IV draws in "
    "order and 'ephemeral_key' the ECDH-ES ephemeral key, which make sealing reproduce 'token' exactly. "
    "Keys are test values: never use them."
)
GENERATORS: Mapping[str, Callable[[], dict[str, Any]]] = {
    "jwe": lambda: _file(
        _NOTE.format("every configuration"),
        _symmetric("dir"),
        _symmetric("A256KW"),
        _agreement("P-256"),
        _agreement("X25519"),
    ),
    "jwe-dir": lambda: _file(_NOTE.format("dir"), _symmetric("dir")),
    "jwe-a256kw": lambda: _file(_NOTE.format("A256KW"), _symmetric("A256KW")),
    "jwe-ecdh-es-p256": lambda: _file(_NOTE.format("ECDH-ES+A256KW, P-256"), _agreement("P-256")),
    "jwe-ecdh-es-x25519": lambda: _file(_NOTE.format("ECDH-ES+A256KW, X25519"), _agreement("X25519")),
}
"""Generator name -> a JWE vectors file for one configuration (``jwe``: all of them in one file)."""
