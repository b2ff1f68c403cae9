"""Interoperability both ways with jwcrypto and joserfc (and PyJWT for JWS), for every supported algorithm.

Another stack holds the same key (the ring's derived JWK, a raw JWK, or the recipient's EC/OKP key): our
tokens must open there, and theirs must open here.
"""

from __future__ import annotations

import json
from typing import Any

import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519
from joserfc import jwe as rfc_jwe
from joserfc import jws as rfc_jws
from joserfc.jwk import import_key
from jwcrypto import jwe as cr_jwe
from jwcrypto import jwk as cr_jwk
from jwcrypto import jws as cr_jws

from statecodec import ConfigurationError, JWECodec, JWSCodec
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.jose import derived_jwk
from tests.codecs import reason

SECRET = bytes(range(32))
RAW_JWK = {"kty": "oct", "kid": "shared-1", "k": b64u_encode(bytes(range(160, 192)))}
PAYLOADS = [b'{"state":"interop","n":1}', bytes(range(256)) * 8]


def rfc_key(jwk: dict[str, str]) -> Any:
    data: dict[str, str | list[str]] = dict(jwk)
    return import_key(data)


JWE = {f"{alg}-ring": (JWECodec([SECRET], alg=alg), derived_jwk(SECRET, alg)) for alg in ("dir", "A256KW")}
JWE |= {f"{alg}-raw": (JWECodec.from_jwks([RAW_JWK], alg=alg), RAW_JWK) for alg in ("dir", "A256KW")}
for _key in (ec.generate_private_key(ec.SECP256R1()), x25519.X25519PrivateKey.generate()):
    _ecdh = JWECodec.ecdh([_key])
    _jwk = _ecdh.private_jwks()["keys"][0]  # another stack holds the private JWK Set the codec exports
    JWE[f"ECDH-ES+A256KW-{_jwk['crv']}"] = (_ecdh, _jwk)


def header(codec: JWECodec, jwk: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"alg": codec.alg, "enc": "A256GCM", "kid": jwk["kid"], **extra}


def jwcrypto_seal(jwk: dict[str, str], payload: bytes, protected: dict[str, Any]) -> str:
    token = cr_jwe.JWE(payload, json.dumps(protected))
    token.add_recipient(cr_jwk.JWK(**jwk))
    return str(token.serialize(compact=True))


def jwcrypto_open(jwk: dict[str, str], token: str) -> bytes:
    parsed = cr_jwe.JWE()
    parsed.deserialize(token, cr_jwk.JWK(**jwk))
    return bytes(parsed.payload)


def joserfc_seal(jwk: dict[str, str], payload: bytes, protected: dict[str, Any]) -> str:
    algorithms = [protected["alg"], protected["enc"]]
    return rfc_jwe.encrypt_compact(protected, payload, rfc_key(jwk), algorithms=algorithms)


def joserfc_open(jwk: dict[str, str], alg: str, token: str) -> bytes:
    plaintext = rfc_jwe.decrypt_compact(token, rfc_key(jwk), algorithms=[alg, "A256GCM"]).plaintext
    assert plaintext is not None
    return plaintext


# --- JWE ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", JWE)
def test_jwe_round_trips_both_ways_with_jwcrypto_and_joserfc(name: str) -> None:
    codec, jwk = JWE[name]
    assert codec.primary_key_id == jwk["kid"]
    for payload in PAYLOADS:
        ours = codec.seal(payload)
        assert jwcrypto_open(jwk, ours) == payload
        assert joserfc_open(jwk, codec.alg, ours) == payload
        assert codec.unseal(jwcrypto_seal(jwk, payload, header(codec, jwk))) == payload
        assert codec.unseal(joserfc_seal(jwk, payload, header(codec, jwk))) == payload


def test_their_jwe_to_another_key_under_our_kid_is_refused() -> None:
    """Headers outside the profile, whoever made the token: tests/test_jwe.py and tests/test_jws.py forge
    them with a valid tag or MAC. Here: another stack encrypting to a stranger's key under our kid."""
    p256, p256_jwk = JWE["ECDH-ES+A256KW-P-256"]
    stranger = {**cr_jwk.JWK.generate(kty="EC", crv="P-256").export(as_dict=True), "kid": p256_jwk["kid"]}
    assert reason(p256, joserfc_seal(stranger, PAYLOADS[0], header(p256, stranger))) == "seal"


# --- JWS ---------------------------------------------------------------------------------------

ED_KEY = ed25519.Ed25519PrivateKey.generate()
HS_JWK, HS_CODEC = derived_jwk(SECRET, "HS256"), JWSCodec([SECRET])
JWS = {"HS256": (HS_CODEC, HS_JWK)}  # an Ed25519 codec's peer holds the private JWK Set it exports
for _alg in ("EdDSA", "Ed25519"):
    _codec = JWSCodec.eddsa([ED_KEY], alg=_alg)
    JWS[_alg] = (_codec, _codec.private_jwks()["keys"][0])


@pytest.mark.parametrize("alg", JWS)
@pytest.mark.filterwarnings("ignore:.*RFC 9864:joserfc.errors.SecurityWarning")  # joserfc on the name "EdDSA"
def test_jws_verifies_both_ways_with_jwcrypto_joserfc_and_pyjwt(alg: str) -> None:
    codec, jwk = JWS[alg]
    assert codec.primary_key_id == jwk["kid"]
    ours = codec.seal(PAYLOADS[0])
    parsed = cr_jws.JWS()
    parsed.deserialize(ours)
    parsed.verify(cr_jwk.JWK(**jwk), alg=alg)
    assert parsed.payload == PAYLOADS[0]
    verified = rfc_jws.deserialize_compact(ours, rfc_key(jwk), algorithms=[alg])
    assert verified.payload == PAYLOADS[0]
    signed = cr_jws.JWS(PAYLOADS[0])
    signed.add_signature(cr_jwk.JWK(**jwk), None, json.dumps({"alg": alg, "kid": jwk["kid"]}))
    assert codec.unseal(signed.serialize(compact=True)) == PAYLOADS[0]
    theirs = rfc_jws.serialize_compact({"alg": alg, "kid": jwk["kid"]}, PAYLOADS[0], rfc_key(jwk), algorithms=[alg])
    assert codec.unseal(theirs) == PAYLOADS[0]
    if alg != "Ed25519":  # PyJWT names that algorithm EdDSA only
        key: Any = b64u_decode(jwk["k"]) if alg == "HS256" else pyjwt.PyJWK(jwk).key
        public = key if alg == "HS256" else key.public_key()
        assert pyjwt.api_jws.decode(ours, public, algorithms=[alg]) == PAYLOADS[0]
        pyjwt_token = pyjwt.api_jws.encode(PAYLOADS[0], key, algorithm=alg, headers={"kid": jwk["kid"], "typ": None})
        assert codec.unseal(pyjwt_token) == PAYLOADS[0]


# --- exported private JWK Sets -------------------------------------------------------------------


def test_a_codec_exports_no_private_key_it_does_not_hold() -> None:
    recipient = ec.generate_private_key(ec.SECP256R1())
    retired = x25519.X25519PrivateKey.generate()
    codec = JWECodec.ecdh([recipient.public_key()])
    (jwk,) = codec.private_jwks()["keys"]
    assert "d" not in jwk
    assert jwk == codec.public_jwks()["keys"][0]
    two = JWECodec.ecdh([recipient, retired])
    assert [("d" in k, k["crv"]) for k in two.private_jwks()["keys"]] == [(True, "P-256"), (True, "X25519")]
    assert jwcrypto_open(two.private_jwks()["keys"][0], codec.seal(PAYLOADS[0])) == PAYLOADS[0]
    for symmetric in (JWECodec([SECRET]), JWSCodec([SECRET])):  # a ring's peer derives its JWK instead
        with pytest.raises(ConfigurationError, match="derived_jwk"):
            symmetric.private_jwks()


@pytest.mark.parametrize("name", ["ECDH-ES+A256KW-P-256", "ECDH-ES+A256KW-X25519", "EdDSA", "Ed25519"])
def test_the_private_jwks_of_an_asymmetric_codec_is_its_key_and_rebuilds_it(name: str) -> None:
    codec, jwk = JWE[name] if name in JWE else JWS[name]  # the JWK the interop tests above hand the other stacks
    assert (jwk["use"], jwk["alg"]) == (("enc", "ECDH-ES+A256KW") if name in JWE else ("sig", name))
    assert jwk["kid"] == cr_jwk.JWK(**jwk).thumbprint()  # its RFC 7638 thumbprint, as jwcrypto computes it
    assert {k: v for k, v in jwk.items() if k != "d"} == codec.public_jwks()["keys"][0]
    rebuilt: Any = type(codec).from_jwks(codec.private_jwks())  # without naming the alg: each exported JWK names it
    assert (rebuilt.alg, rebuilt.unseal(codec.seal(PAYLOADS[0]))) == (codec.alg, PAYLOADS[0])
    assert codec.unseal(rebuilt.seal(PAYLOADS[0])) == PAYLOADS[0]
