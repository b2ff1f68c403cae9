"""JWSCodec: RFC and frozen vectors, conformance, refusals with reasons, what a client can read."""

from __future__ import annotations

import hashlib
import hmac
import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from hypothesis import given, settings
from hypothesis import strategies as st

from statecodec import AESGCMCodec, BoundCodec, ConfigurationError, InvalidToken, JWECodec, JWSCodec, KeyRing, SealError
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.config import codec_from_env
from statecodec.jose import derived_jwk
from tests.codecs import CODECS
from tests.mcp_flows import STATE_MARKER, TOOL, assert_mcp_rejects, mint_token, run_mcp_flows
from tests.test_jwe import BIG_CAP, WRONG_COUNT_JUNK, refusal_peak

VECTORS: dict[str, Any] = json.loads((Path(__file__).parent / "vectors" / "jws.json").read_text("utf-8"))
SECRET = bytes(range(32))
OTHER = bytes(range(64, 96))
RAW = bytes(range(160, 192))
RAW_JWK = {"kty": "oct", "kid": "raw-1", "k": b64u_encode(RAW)}
ED_KEY = ed25519.Ed25519PrivateKey.generate()
PAYLOAD = b'{"state":"jws-test"}'


def reason(codec: JWSCodec, token: object) -> str:
    with pytest.raises(InvalidToken) as info:
        codec.unseal(token)  # type: ignore[arg-type]
    return info.value.reason.value


def codec_of(vector: dict[str, Any]) -> JWSCodec:
    if "ring" in vector:
        return JWSCodec([b64u_decode(k) for k in vector["ring"]])
    return JWSCodec.from_jwks(vector["jwks"], alg=vector["alg"])


def forge(header: str, key: bytes = RAW, payload: bytes = PAYLOAD) -> str:
    """An HS256 token whose MAC verifies under `key` with any header text: only header checks refuse it."""
    signing_input = b64u_encode(header.encode()) + "." + b64u_encode(payload)
    return signing_input + "." + b64u_encode(hmac.digest(key, signing_input.encode(), "sha256"))


def header_of(token: str) -> dict[str, Any]:
    header: dict[str, Any] = json.loads(b64u_decode(token.split(".")[0]))
    return header


# --- vectors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=lambda v: v["name"])
def test_valid_vectors_verify(vector: dict[str, Any]) -> None:
    assert codec_of(vector).unseal(vector["token"]) == bytes.fromhex(vector["payload"])


@pytest.mark.parametrize("vector", [v for v in VECTORS["valid"] if v["deterministic"]], ids=lambda v: v["name"])
def test_deterministic_vectors_are_reproduced_by_seal(vector: dict[str, Any]) -> None:
    codec = codec_of({**vector, "ring": vector["ring"][vector["sealed_with"] :]} if "ring" in vector else vector)
    assert codec.seal(bytes.fromhex(vector["payload"])) == vector["token"]


def test_rfc_7520_4_4_is_accepted_as_published() -> None:
    rfc = next(v for v in VECTORS["valid"] if v["name"].startswith("RFC 7520"))
    assert header_of(rfc["token"]) == {"alg": "HS256", "kid": "018c0ae5-4d9b-471b-bfd6-eef314bc7037"}


@pytest.mark.parametrize("vector", VECTORS["rfc_signatures"], ids=lambda v: v["name"])
def test_rfc_8037_signature_is_reproduced(vector: dict[str, Any]) -> None:
    private = ed25519.Ed25519PrivateKey.from_private_bytes(b64u_decode(vector["jwk"]["d"]))
    assert b64u_encode(private.sign(vector["signing_input"].encode())) == vector["signature"]
    codec = JWSCodec.from_jwks([vector["jwk"]], alg="EdDSA")
    # The codec's own token over the same key verifies with the bare public key.
    token = codec.seal(b"Example of Ed25519 signing")
    h64, p64, s64 = token.split(".")
    private.public_key().verify(b64u_decode(s64), f"{h64}.{p64}".encode())


@pytest.mark.parametrize("vector", VECTORS["invalid"], ids=lambda v: v["name"])
def test_invalid_vectors_are_refused_with_their_reason(vector: dict[str, Any]) -> None:
    assert reason(codec_of(vector), vector["token"]) == vector["reason"]


@pytest.mark.parametrize("vector", [v for v in VECTORS["valid"] if "derived_jwk" in v], ids=lambda v: v["name"])
def test_derived_jwk_is_frozen(vector: dict[str, Any]) -> None:
    assert derived_jwk(b64u_decode(vector["ring"][0]), "HS256") == vector["derived_jwk"]
    assert JWSCodec.from_jwks([vector["derived_jwk"]]).unseal(vector["token"]) == bytes.fromhex(vector["payload"])


# --- wire header -----------------------------------------------------------------------------


def test_emitted_headers_are_exactly_the_documented_ones() -> None:
    kid = KeyRing([SECRET]).key_ids[0]
    token = JWSCodec([SECRET]).seal(b"x")
    assert token.split(".")[0] == b64u_encode(b'{"alg":"HS256","kid":"%s"}' % kid.encode())
    ed = JWSCodec.eddsa([ED_KEY])
    assert header_of(ed.seal(b"x")) == {"alg": "EdDSA", "kid": ed.primary_key_id}
    assert header_of(JWSCodec.eddsa([ED_KEY], alg="Ed25519").seal(b"x")) == {"alg": "Ed25519", "kid": ed.primary_key_id}
    assert ed.public_jwks()["keys"][0]["kid"] == ed.primary_key_id


def test_the_payload_is_readable_by_anyone_holding_the_token() -> None:
    """Sign-only: integrity, no secrecy. The second segment is the payload, base64url-encoded."""
    token = JWSCodec([SECRET]).seal(PAYLOAD)
    assert b64u_decode(token.split(".")[1]) == PAYLOAD


def test_what_a_client_reads_in_the_sdk_envelope() -> None:
    """Under RequestStateSecurity, the client reads the whole envelope: state, target, audience, times."""
    token = mint_token(JWSCodec([SECRET]))
    envelope = json.loads(b64u_decode(token.split(".")[1]))
    assert {"v", "iat", "exp", "m", "t", "a", "aud", "s"} <= set(envelope)
    assert envelope["t"] == TOOL
    assert STATE_MARKER in envelope["s"]


def test_a_keyed_principal_binding_is_not_testable_offline() -> None:
    """Through BoundCodec the principal tag is an HMAC under the binding key: a reader cannot check a guess."""
    principal = "alice@example.com"
    jws = JWSCodec([SECRET])
    one = BoundCodec(jws, audience="svc", binding_key=bytes(range(100, 132)), clock=lambda: 1_767_225_600)
    two = BoundCodec(jws, audience="svc", binding_key=bytes(range(200, 232)), clock=lambda: 1_767_225_600)
    a = b64u_decode(one.seal(b"state", principal=principal).split(".")[1])
    b = b64u_decode(two.seal(b"state", principal=principal).split(".")[1])
    assert a != b  # the same principal, state and time: only the key differs the tag
    readable = a + b
    assert principal.encode() not in readable
    assert hashlib.sha256(principal.encode()).digest()[:8] not in readable
    assert one.unseal(one.seal(b"state", principal=principal), principal=principal) == b"state"


# --- refusals ----------------------------------------------------------------------------------

MEMBER = st.text(min_size=1, max_size=12).filter(lambda s: s not in {"alg", "kid"})


@settings(max_examples=40, deadline=None)
@given(name=MEMBER, value=st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)))
def test_any_member_outside_the_profile_is_refused_even_with_a_valid_mac(name: str, value: object) -> None:
    header = json.dumps({"alg": "HS256", "kid": "raw-1", name: value})
    assert reason(JWSCodec.from_jwks([RAW_JWK]), forge(header)) == "header"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ('{"alg":"HS256","kid":"raw-1","b64":false}', "header"),
        ('{"alg":"HS256","kid":"raw-1","crit":["b64"],"b64":false}', "header"),
        ('{"alg":"HS256","kid":"raw-1","typ":"JWT"}', "header"),
        ('{"alg":"HS256","kid":"raw-1","jwk":{"kty":"oct","k":"AAAA"}}', "header"),
        ('{"alg":"HS256","kid":"raw-1","jku":"https://attacker.example/jwks"}', "header"),
        ('{"alg":"HS256","kid":"raw-1","x5u":"https://attacker.example/c"}', "header"),
        ('{"alg":"HS256","kid":"raw-1","x5c":["MIIB"]}', "header"),
        ('{"alg":"HS256","kid":"raw-1","kid":"raw-1"}', "header"),
        ('{"alg":"none","kid":"raw-1"}', "alg"),
        ('{"alg":"HS384","kid":"raw-1"}', "alg"),
        ('{"alg":"RS256","kid":"raw-1"}', "alg"),
        ('{"alg":"EdDSA","kid":"raw-1"}', "alg"),
        ('{"alg":"hs256","kid":"raw-1"}', "alg"),
        ('{"kid":"raw-1"}', "alg"),
        ('{"alg":"HS256"}', "header"),
        ('{"alg":"HS256","kid":["raw-1"]}', "header"),
        ('{"alg":"HS256","kid":"raw-2"}', "unknown_key"),
        ('{"alg":"HS256","kid":"raw-1"', "malformed"),
        ('"HS256"', "malformed"),
    ],
)
def test_forbidden_headers_are_refused_even_with_a_valid_mac(header: str, expected: str) -> None:
    assert reason(JWSCodec.from_jwks([RAW_JWK]), forge(header)) == expected


def test_an_hs256_token_made_with_the_public_key_is_refused_by_eddsa() -> None:
    """The classic confusion: HMAC keyed with the EdDSA public key bytes. The configured alg is EdDSA."""
    ed = JWSCodec.eddsa([ED_KEY])
    public = ED_KEY.public_key().public_bytes_raw()
    assert reason(ed, forge(json.dumps({"alg": "HS256", "kid": ed.primary_key_id}), key=public)) == "alg"


def test_alg_none_with_an_empty_signature_is_refused() -> None:
    token = b64u_encode(b'{"alg":"none","kid":"raw-1"}') + "." + b64u_encode(PAYLOAD) + "."
    assert reason(JWSCodec.from_jwks([RAW_JWK]), token) == "alg"


def test_segments_and_signature_lengths() -> None:
    codec = JWSCodec([SECRET])
    h, p, s = codec.seal(PAYLOAD).split(".")
    assert reason(codec, f"{h}.{p}") == "malformed"
    assert reason(codec, f"{h}.{p}.{s}.") == "malformed"
    assert reason(codec, f"{h}.{p}.{s[:-1]}") == "malformed"
    assert reason(codec, f"{h}.{p}.{s}AAAA") == "malformed"
    assert reason(codec, f"{h}.{p}.{'A' * len(s)}") in {"seal", "malformed"}
    assert reason(codec, JWECodec([SECRET]).seal(PAYLOAD)) == "malformed"


def test_jws_and_jwe_never_open_each_other() -> None:
    jwe, jws = JWECodec([SECRET]), JWSCodec([SECRET])
    assert reason(jws, jwe.seal(PAYLOAD)) == "malformed"
    with pytest.raises(InvalidToken) as info:
        jwe.unseal(jws.seal(PAYLOAD))
    assert info.value.reason.value == "malformed"


def test_oversized_and_size_caps() -> None:
    codec = JWSCodec([SECRET], max_token_length=200)
    assert reason(codec, "A" * 201) == "oversized"
    fits = codec._max_payload
    token = codec.seal(bytes(fits))
    assert len(token) <= 200
    assert codec.unseal(token) == bytes(fits)
    with pytest.raises(SealError):
        codec.seal(bytes(fits + 1))
    with pytest.raises(TypeError, match="bytes"):
        codec.seal("text")  # type: ignore[arg-type]
    header = json.dumps({"alg": "HS256", "kid": "raw-1", "pad": "x" * 800})
    assert reason(JWSCodec.from_jwks([RAW_JWK]), forge(header)) == "oversized"


@pytest.mark.parametrize("junk", WRONG_COUNT_JUNK.values(), ids=WRONG_COUNT_JUNK)
def test_a_wrong_segment_count_is_refused_before_any_segment_is_made(junk: str) -> None:
    """A cap-length run of dots must not cost a list of a million segments: dots are counted first."""
    assert refusal_peak(JWSCodec([SECRET], max_token_length=BIG_CAP), junk) < BIG_CAP // 64


@pytest.mark.parametrize(
    "junk",
    [*WRONG_COUNT_JUNK.values(), "A" * (BIG_CAP - 2) + "..", ".." + "A" * (BIG_CAP - 2), "A.." * (BIG_CAP // 3)],
    ids=[*WRONG_COUNT_JUNK, "long-header", "long-signature", "repeated-count"],
)
def test_no_junk_costs_more_memory_than_the_aesgcm_parse(junk: str) -> None:
    aesgcm = refusal_peak(AESGCMCodec(KeyRing.generate(), max_token_length=BIG_CAP), junk)
    assert refusal_peak(JWSCodec([SECRET], max_token_length=BIG_CAP), junk) <= aesgcm


def test_rotation_unknown_keys_and_verify_only_keys() -> None:
    old, new = JWSCodec([SECRET]), JWSCodec([OTHER, SECRET])
    assert new.unseal(old.seal(PAYLOAD)) == PAYLOAD
    assert reason(JWSCodec([OTHER]), old.seal(PAYLOAD)) == "unknown_key"
    signer = JWSCodec.eddsa([ED_KEY])
    other = ed25519.Ed25519PrivateKey.generate()
    rotated = JWSCodec.eddsa([other, ED_KEY.public_key()])
    assert rotated.unseal(signer.seal(PAYLOAD)) == PAYLOAD
    assert reason(signer, rotated.seal(PAYLOAD)) == "unknown_key"


# --- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: JWSCodec.from_jwks([{**RAW_JWK, "k": b64u_encode(bytes(range(16)))}]), "32 bytes"),
        (lambda: JWSCodec.from_jwks([{**RAW_JWK, "use": "enc"}]), "use"),
        (lambda: JWSCodec.from_jwks([{**RAW_JWK, "alg": "HS512"}]), "alg"),
        (lambda: JWSCodec.from_jwks([RAW_JWK], alg="RS256"), "alg"),  # type: ignore[arg-type]
        (lambda: JWSCodec.from_jwks([RAW_JWK], alg="EdDSA"), "Ed25519"),
        (lambda: JWSCodec.eddsa([ED_KEY.public_key()]), "private"),
        (lambda: JWSCodec.eddsa([]), "non-empty"),
        (lambda: JWSCodec.eddsa([ED_KEY], alg="HS256"), "alg"),  # type: ignore[arg-type]
        (lambda: JWSCodec.eddsa([ED_KEY, ED_KEY]), "share the kid"),
        (lambda: JWSCodec.ephemeral(alg="HS512"), "alg"),  # type: ignore[arg-type]
        (lambda: JWSCodec([SECRET], max_token_length=40), "smallest token"),
        (lambda: JWSCodec([b"short"]), "32 bytes"),
    ],
)
def test_misconfiguration_fails_at_construction(build: Callable[[], object], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        build()


def test_ed25519_jwk_checks() -> None:
    public = JWSCodec.eddsa([ED_KEY]).public_jwks()["keys"][0]
    with pytest.raises(ConfigurationError, match="private"):
        JWSCodec.from_jwks([public], alg="EdDSA")
    other = JWSCodec.ephemeral(alg="EdDSA").public_jwks()["keys"][0]
    mismatched = {**public, "d": b64u_encode(bytes(range(32)))}
    with pytest.raises(ConfigurationError, match="does not match"):
        JWSCodec.from_jwks([mismatched], alg="EdDSA")
    with pytest.raises(ConfigurationError, match="no public half"):
        JWSCodec([SECRET]).public_jwks()
    assert other["kid"] != public["kid"]


def test_repr_and_pickle() -> None:
    codec = JWSCodec.from_jwks([RAW_JWK])
    assert repr(codec) == "JWSCodec(alg='HS256', key_ids=['raw-1'])"
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(codec)


def test_configuration_kind_jws(tmp_path: Path) -> None:
    ring = b64u_encode(SECRET)
    codec = codec_from_env({"STATECODEC_CODEC": "jws", "STATECODEC_KEYS": ring})
    assert isinstance(codec, JWSCodec)
    assert JWSCodec([SECRET]).unseal(codec.seal(b"x")) == b"x"
    rfc = VECTORS["rfc_signatures"][0]["jwk"]
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [rfc]}))
    ed = codec_from_env({"STATECODEC_CODEC": "jws", "STATECODEC_JWS_ALG": "EdDSA", "STATECODEC_JWKS_FILE": str(jwks)})
    assert isinstance(ed, JWSCodec)
    assert ed.alg == "EdDSA"
    with pytest.raises(ConfigurationError, match="needs STATECODEC_JWKS_FILE"):
        codec_from_env({"STATECODEC_CODEC": "jws", "STATECODEC_JWS_ALG": "EdDSA", "STATECODEC_KEYS": ring})
    with pytest.raises(ConfigurationError, match="STATECODEC_JWS_ALG must be one of"):
        codec_from_env({"STATECODEC_CODEC": "jws", "STATECODEC_JWS_ALG": "none", "STATECODEC_KEYS": ring})


# --- in a real MCPServer -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["jws-hs256", "jws-eddsa"])
def test_mcp_flows_complete(name: str) -> None:
    report = run_mcp_flows(CODECS[name], confidential=False)
    for token in report.sealed:
        assert token.count(".") == 2


def test_mcp_refuses_a_rewritten_header_and_a_forged_payload() -> None:
    codec = JWSCodec([SECRET])
    kid = codec.primary_key_id

    def alg_none(token: str) -> str:
        return b64u_encode(json.dumps({"alg": "none", "kid": kid}).encode()) + "." + token.split(".")[1] + "."

    def new_payload(token: str) -> str:
        h, p, s = token.split(".")
        envelope = json.loads(b64u_decode(p))
        envelope["exp"] += 10_000
        return f"{h}.{b64u_encode(json.dumps(envelope).encode())}.{s}"

    assert_mcp_rejects(codec, alg_none, reason="alg")
    assert_mcp_rejects(codec, new_payload, reason="seal")
