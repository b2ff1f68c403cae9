"""Interoperability both ways with jwcrypto and joserfc (and PyJWT for JWS), for every supported algorithm.

Another stack holds the same key (the ring's derived JWK, a raw JWK, or the
recipient's EC/OKP key): our tokens must open there, theirs must open here,
and their tokens with anything outside the profile must be refused here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519
from hypothesis import given, settings
from hypothesis import strategies as st
from joserfc import jwe as rfc_jwe
from joserfc import jws as rfc_jws
from joserfc.errors import SecurityWarning
from joserfc.jwk import ECKey, OctKey, OKPKey
from jwcrypto import jwe as cr_jwe
from jwcrypto import jwk as cr_jwk
from jwcrypto import jws as cr_jws

from statecodec import InvalidToken, JWECodec, JWSCodec
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.jose import derived_jwk

SECRET = bytes(range(32))
RAW_JWK = {"kty": "oct", "kid": "shared-1", "k": b64u_encode(bytes(range(160, 192)))}
PAYLOAD = b'{"state":"interop","n":1}'
ECDH_ALGS = ["ECDH-ES+A256KW", "A256GCM"]


PrivateKey = ec.EllipticCurvePrivateKey | x25519.X25519PrivateKey | ed25519.Ed25519PrivateKey


def _private_jwk(key: PrivateKey) -> dict[str, str]:
    """The private JWK of a key, built from its raw numbers (what another stack would be configured with)."""
    if isinstance(key, ec.EllipticCurvePrivateKey):
        numbers = key.private_numbers()
        return {
            "kty": "EC",
            "crv": "P-256",
            "x": b64u_encode(numbers.public_numbers.x.to_bytes(32, "big")),
            "y": b64u_encode(numbers.public_numbers.y.to_bytes(32, "big")),
            "d": b64u_encode(numbers.private_value.to_bytes(32, "big")),
        }
    crv = "X25519" if isinstance(key, x25519.X25519PrivateKey) else "Ed25519"
    return {
        "kty": "OKP",
        "crv": crv,
        "x": b64u_encode(key.public_key().public_bytes_raw()),
        "d": b64u_encode(key.private_bytes_raw()),
    }


@dataclass
class Case:
    """One configuration: our codec, and the same key as a JWK for the other libraries."""

    name: str
    codec: JWECodec
    alg: str
    jwk: dict[str, str]  # private (or symmetric) JWK, with the kid our codec uses


def _jwe_cases() -> list[Case]:
    cases = []
    alg: Literal["dir", "A256KW"]
    for alg in ("dir", "A256KW"):
        cases.append(Case(f"{alg}-ring", JWECodec([SECRET], alg=alg), alg, derived_jwk(SECRET, alg)))
        cases.append(Case(f"{alg}-raw", JWECodec.from_jwks([RAW_JWK], alg=alg), alg, RAW_JWK))
    for key in (ec.generate_private_key(ec.SECP256R1()), x25519.X25519PrivateKey.generate()):
        codec = JWECodec.ecdh([key])
        jwk = {**_private_jwk(key), "kid": codec.primary_key_id}
        cases.append(Case(f"ECDH-ES+A256KW-{jwk['crv']}", codec, "ECDH-ES+A256KW", jwk))
    return cases


JWE_CASES = _jwe_cases()


def _public(jwk: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in jwk.items() if k != "d"}


def _rfc_key(jwk: dict[str, str], *, private: bool = True) -> Any:
    chosen: dict[str, str | list[str]] = dict(jwk if private else _public(jwk))
    if jwk["kty"] == "oct":
        return OctKey.import_key(chosen)
    if jwk["kty"] == "EC":
        return ECKey.import_key(chosen)
    return OKPKey.import_key(chosen)


def _cr_key(jwk: dict[str, str], *, private: bool = True) -> cr_jwk.JWK:
    return cr_jwk.JWK(**(jwk if private else _public(jwk)))


def jwcrypto_seal(case: Case, payload: bytes, header: dict[str, Any] | None = None) -> str:
    protected = header or {"alg": case.alg, "enc": "A256GCM", "kid": case.jwk["kid"]}
    token = cr_jwe.JWE(payload, json.dumps(protected))
    token.add_recipient(_cr_key(case.jwk, private=False))
    return str(token.serialize(compact=True))


def jwcrypto_open(case: Case, token: str) -> bytes:
    parsed = cr_jwe.JWE()
    parsed.deserialize(token, _cr_key(case.jwk))
    return bytes(parsed.payload)


def joserfc_seal(case: Case, payload: bytes, header: dict[str, Any] | None = None) -> str:
    protected = header or {"alg": case.alg, "enc": "A256GCM", "kid": case.jwk["kid"]}
    algorithms = [protected["alg"], protected["enc"]]
    return rfc_jwe.encrypt_compact(protected, payload, _rfc_key(case.jwk, private=False), algorithms=algorithms)


def joserfc_open(case: Case, token: str) -> bytes:
    plaintext = rfc_jwe.decrypt_compact(token, _rfc_key(case.jwk), algorithms=[case.alg, "A256GCM"]).plaintext
    assert plaintext is not None
    return plaintext


def reason(codec: JWECodec | JWSCodec, token: str) -> str:
    with pytest.raises(InvalidToken) as info:
        codec.unseal(token)
    return info.value.reason.value


# --- JWE ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", JWE_CASES, ids=lambda c: c.name)
def test_our_jwe_opens_in_jwcrypto_and_joserfc(case: Case) -> None:
    token = case.codec.seal(PAYLOAD)
    assert jwcrypto_open(case, token) == PAYLOAD
    assert joserfc_open(case, token) == PAYLOAD


@pytest.mark.parametrize("case", JWE_CASES, ids=lambda c: c.name)
def test_their_jwe_opens_here(case: Case) -> None:
    assert case.codec.unseal(jwcrypto_seal(case, PAYLOAD)) == PAYLOAD
    assert case.codec.unseal(joserfc_seal(case, PAYLOAD)) == PAYLOAD


@settings(max_examples=15, deadline=None)
@given(payload=st.binary(max_size=2048), which=st.sampled_from(JWE_CASES))
def test_round_trips_across_libraries(payload: bytes, which: Case) -> None:
    assert which.codec.unseal(joserfc_seal(which, payload)) == payload
    assert joserfc_open(which, which.codec.seal(payload)) == payload
    if payload:  # jwcrypto reports an empty plaintext as "no recipient matched"
        assert which.codec.unseal(jwcrypto_seal(which, payload)) == payload
        assert jwcrypto_open(which, which.codec.seal(payload)) == payload


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"zip": "DEF"}, "header"),
        ({"typ": "JWE"}, "header"),
        ({"cty": "JWT"}, "header"),
        ({"jku": "https://attacker.example/jwks"}, "header"),
        ({"x5u": "https://attacker.example/cert"}, "header"),
        ({"enc": "A256CBC-HS512"}, "alg"),
        ({"enc": "A128GCM"}, "alg"),
    ],
)
def test_their_jwe_with_a_forbidden_header_is_refused(extra: dict[str, str], expected: str) -> None:
    # dir fixes the key size to the enc; A256KW wraps a content key of any size.
    case = next(c for c in JWE_CASES if c.name == ("A256KW-raw" if "enc" in extra else "dir-raw"))
    header = {"alg": case.alg, "enc": "A256GCM", "kid": case.jwk["kid"], **extra}
    token = jwcrypto_seal(case, PAYLOAD, header)
    assert jwcrypto_open(case, token) == PAYLOAD  # a valid JWE, by the general library's rules
    assert reason(case.codec, token) == expected


def test_their_jwe_with_another_key_management_is_refused() -> None:
    """Same key bytes, other algorithms: A128KW-sized keys do not exist here, and A256KW is not dir."""
    direct = next(c for c in JWE_CASES if c.name == "dir-raw")
    wrapped = Case("A256KW", direct.codec, "A256KW", RAW_JWK)
    assert reason(direct.codec, joserfc_seal(wrapped, PAYLOAD)) == "alg"
    assert reason(direct.codec, jwcrypto_seal(wrapped, PAYLOAD)) == "alg"
    p256 = next(c for c in JWE_CASES if c.name == "ECDH-ES+A256KW-P-256")
    direct_agreement = {"alg": "ECDH-ES", "enc": "A256GCM", "kid": p256.jwk["kid"]}
    assert reason(p256.codec, jwcrypto_seal(p256, PAYLOAD, direct_agreement)) == "alg"


def test_their_jwe_json_serialization_is_refused() -> None:
    case = next(c for c in JWE_CASES if c.name == "dir-raw")
    token = cr_jwe.JWE(PAYLOAD, json.dumps({"alg": "dir", "enc": "A256GCM", "kid": case.jwk["kid"]}))
    token.add_recipient(_cr_key(case.jwk))
    assert reason(case.codec, str(token.serialize())) == "malformed"


def test_a_jwe_encrypted_to_another_curve_key_is_refused() -> None:
    p256 = next(c for c in JWE_CASES if c.name == "ECDH-ES+A256KW-P-256")
    stranger = ec.generate_private_key(ec.SECP256R1())
    foreign = Case("foreign", p256.codec, "ECDH-ES+A256KW", {**_private_jwk(stranger), "kid": p256.jwk["kid"]})
    assert reason(p256.codec, joserfc_seal(foreign, PAYLOAD)) == "seal"


# --- JWS ---------------------------------------------------------------------------------------

ED_KEY = ed25519.Ed25519PrivateKey.generate()
ED_CODEC = JWSCodec.eddsa([ED_KEY])
ED_JWK = {**_private_jwk(ED_KEY), "kid": ED_CODEC.primary_key_id}
HS_JWK = derived_jwk(SECRET, "HS256")
HS_CODEC = JWSCodec([SECRET])
ED25519_CODEC = JWSCodec.eddsa([ED_KEY], alg="Ed25519")
JWS_CASES = {"HS256": (HS_CODEC, HS_JWK), "EdDSA": (ED_CODEC, ED_JWK), "Ed25519": (ED25519_CODEC, ED_JWK)}


@contextmanager
def joserfc_warns(alg: str) -> Iterator[None]:
    """joserfc warns on the polymorphic "EdDSA" name (deprecated by RFC 9864); nothing else should warn."""
    if alg == "EdDSA":
        with pytest.warns(SecurityWarning, match="RFC 9864"):
            yield
    else:
        yield


@pytest.mark.parametrize("alg", JWS_CASES)
def test_our_jws_verifies_in_jwcrypto_joserfc_and_pyjwt(alg: str) -> None:
    codec, jwk = JWS_CASES[alg]
    token = codec.seal(PAYLOAD)
    parsed = cr_jws.JWS()
    parsed.deserialize(token)
    parsed.verify(_cr_key(jwk, private=False), alg=alg)
    assert parsed.payload == PAYLOAD
    with joserfc_warns(alg):
        verified = rfc_jws.deserialize_compact(token, _rfc_key(jwk, private=False), algorithms=[alg])
    assert verified.payload == PAYLOAD
    if alg == "HS256":
        assert pyjwt.api_jws.decode(token, b64u_decode(jwk["k"]), algorithms=["HS256"]) == PAYLOAD


@pytest.mark.parametrize("alg", JWS_CASES)
def test_their_jws_verifies_here(alg: str) -> None:
    codec, jwk = JWS_CASES[alg]
    header = {"alg": alg, "kid": jwk["kid"]}
    signed = cr_jws.JWS(PAYLOAD)
    signed.add_signature(_cr_key(jwk), None, json.dumps(header))
    assert codec.unseal(signed.serialize(compact=True)) == PAYLOAD
    with joserfc_warns(alg):
        token = rfc_jws.serialize_compact(header, PAYLOAD, _rfc_key(jwk), algorithms=[alg])
    assert codec.unseal(token) == PAYLOAD
    if alg == "HS256":
        token = pyjwt.api_jws.encode(
            PAYLOAD, b64u_decode(jwk["k"]), algorithm="HS256", headers={"kid": jwk["kid"], "typ": None}
        )
        assert codec.unseal(token) == PAYLOAD


def test_their_jws_with_a_forbidden_header_is_refused() -> None:
    key = b64u_decode(HS_JWK["k"])
    kid = HS_JWK["kid"]
    # PyJWT adds "typ": "JWT" unless told not to: outside the profile.
    assert reason(HS_CODEC, pyjwt.api_jws.encode(PAYLOAD, key, algorithm="HS256", headers={"kid": kid})) == "header"
    # The alg is refused before any key is chosen; a 48-byte key keeps PyJWT from warning about HS384.
    hs384 = pyjwt.api_jws.encode(PAYLOAD, key + key[:16], algorithm="HS384", headers={"kid": kid, "typ": None})
    assert reason(HS_CODEC, hs384) == "alg"
    unencoded = rfc_jws.serialize_compact(
        {"alg": "HS256", "kid": kid, "b64": False, "crit": ["b64"]}, b"payload", _rfc_key(HS_JWK)
    )
    assert reason(HS_CODEC, unencoded) in {"header", "malformed"}
    embedded = cr_jws.JWS(PAYLOAD)
    embedded.add_signature(_cr_key(HS_JWK), None, json.dumps({"alg": "HS256", "kid": kid, "jwk": {"kty": "oct"}}))
    assert reason(HS_CODEC, embedded.serialize(compact=True)) == "header"


def test_eddsa_and_ed25519_names_do_not_cross() -> None:
    """One key, two names: each codec accepts only the name it is configured with."""
    assert reason(ED25519_CODEC, ED_CODEC.seal(PAYLOAD)) == "alg"
    assert reason(ED_CODEC, ED25519_CODEC.seal(PAYLOAD)) == "alg"


def test_their_jws_to_the_jwe_codec_and_their_jwe_to_the_jws_codec() -> None:
    signed = rfc_jws.serialize_compact({"alg": "HS256", "kid": HS_JWK["kid"]}, PAYLOAD, _rfc_key(HS_JWK))
    assert reason(JWECodec([SECRET]), signed) == "malformed"
    case = next(c for c in JWE_CASES if c.name == "dir-ring")
    assert reason(HS_CODEC, joserfc_seal(case, PAYLOAD)) == "malformed"
