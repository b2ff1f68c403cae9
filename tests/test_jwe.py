"""JWECodec: the format, every refusal with its reason, the received epk, configuration.

tests/test_redteam.py runs the codec contract on every JWE configuration; tests/test_vectors.py reads every vector.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, x25519
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import example, given, settings
from hypothesis import strategies as st

from statecodec import ConfigurationError, JWECodec, JWSCodec
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.config import codec_from_env
from statecodec.jose._jwk import load_jwk
from statecodec.jose.jwe import concat_kdf
from tests.codecs import CODECS, reason
from tests.mcp_flows import run_mcp_flows
from tests.secrecy import refused

VECTORS: dict[str, Any] = json.loads((Path(__file__).parent / "vectors" / "jwe.json").read_text("utf-8"))
SECRET = bytes(range(32))
OTHER = bytes(range(64, 96))
RAW = bytes(range(160, 192))
RAW_JWK = {"kty": "oct", "kid": "raw-1", "k": b64u_encode(RAW)}
P256_KEY = ec.generate_private_key(ec.SECP256R1())
P256_CODEC = JWECodec.ecdh([P256_KEY])
P256_PUBLIC, ECDH = P256_CODEC.public_jwks()["keys"][0], "ECDH-ES+A256KW"
X25519_KEY = x25519.X25519PrivateKey.generate()
X25519_CODEC = JWECodec.ecdh([X25519_KEY])
PAYLOAD = b'{"state":"jwe-test"}'


def forge(header: str, ek64: str = "") -> str:
    """A token whose tag verifies under RAW with any header text: only the header checks can refuse it."""
    h64, iv = b64u_encode(header.encode()), bytes(12)
    sealed = AESGCM(RAW).encrypt(iv, PAYLOAD, h64.encode())
    return f"{h64}.{ek64}.{b64u_encode(iv)}.{b64u_encode(sealed[:-16])}.{b64u_encode(sealed[-16:])}"


def forge_jws(header: str) -> str:
    """An HS256 token whose MAC verifies under RAW_JWK with any header text: only header checks refuse it. (An
    HS256 token to an EdDSA codec, whatever keys its MAC, the public key too, is refused by alg before any key:
    tests/test_redteam.py.)"""
    signing_input = b64u_encode(header.encode()) + "." + b64u_encode(PAYLOAD)
    return signing_input + "." + b64u_encode(hmac.digest(RAW, signing_input.encode(), "sha256"))


def header_of(token: str) -> dict[str, Any]:
    header: dict[str, Any] = json.loads(b64u_decode(token.split(".")[0]))
    return header


# --- the format ---------------------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["concat_kdf"], ids=lambda v: v["name"])
def test_concat_kdf_matches_rfc_7518_appendix_c(vector: dict[str, Any]) -> None:
    alice, bob = load_jwk(vector["alice"], 0, "ECDH-ES+A256KW")[1], load_jwk(vector["bob"], 1, "ECDH-ES+A256KW")[1]
    assert isinstance(alice, ec.EllipticCurvePrivateKey)
    assert isinstance(bob, ec.EllipticCurvePrivateKey)
    z = alice.exchange(ec.ECDH(), bob.public_key())
    key = concat_kdf(z, vector["algorithm_id"], vector["bits"], b64u_decode(vector["apu"]), b64u_decode(vector["apv"]))
    assert b64u_encode(key) == vector["derived_key"]


def test_ecdh_headers_in_order_and_fresh_content_and_ephemeral_keys() -> None:
    """dir and A256KW headers are pinned byte for byte by the vectors; an ECDH-ES one by its member order."""
    p256, okp = header_of(P256_CODEC.seal(b"x")), header_of(X25519_CODEC.seal(b"x"))
    assert list(p256) == ["alg", "enc", "kid", "epk"]
    assert (list(p256["epk"]), list(okp["epk"])) == (["kty", "crv", "x", "y"], ["kty", "crv", "x"])
    assert len({JWECodec([SECRET], alg="A256KW").seal(b"x").split(".")[1] for _ in range(5)}) == 5
    assert len({header_of(P256_CODEC.seal(b"x"))["epk"]["x"] for _ in range(5)}) == 5


def test_the_protected_header_is_bound_as_associated_data_and_capped() -> None:
    """Re-serializing the header (same meaning, other bytes) breaks the tag: the bytes are bound. An oversized header
    is refused before decoding (a token one character over the cap, in every codec: tests/test_redteam.py)."""
    codec = JWECodec.from_jwks([RAW_JWK])
    h64, *rest = codec.seal(PAYLOAD).split(".")
    spaced = json.dumps(json.loads(b64u_decode(h64)), indent=1).encode()
    assert reason(codec, ".".join([b64u_encode(spaced), *rest])) == "seal"
    header = json.dumps({"alg": "dir", "enc": "A256GCM", "kid": "raw-1", "pad": "x" * 800})
    assert reason(codec, forge(header)) == "oversized"


# --- refusals, each with its reason -----------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    name=(st.sampled_from(["b64", "crit", "typ", "jwk", "jku", "x5c", "x5u"]) | st.text(min_size=1, max_size=12))
    .filter(lambda s: s not in {"alg", "enc", "kid", "epk"}),
    value=st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.lists(st.integers(), max_size=2),
)
@example(name="zip", value="DEF")  # what jwcrypto and joserfc would send
@example(name="typ", value="JWE")
@example(name="typ", value="JWT")  # what PyJWT adds unless told not to
@example(name="jku", value="https://attacker.example/jwks")
@example(name="jwk", value={"kty": "oct"})  # a key embedded by the sender
def test_any_member_outside_the_profile_is_refused_even_with_a_valid_tag(name: str, value: object) -> None:
    """In a JWE, and in a JWS whose MAC verifies (`forge_jws`)."""
    header = {"alg": "dir", "enc": "A256GCM", "kid": "raw-1", name: value}
    assert reason(JWECodec.from_jwks([RAW_JWK]), forge(json.dumps(header))) == "header"
    signed = forge_jws(json.dumps({"alg": "HS256", "kid": "raw-1", name: value}))
    assert reason(JWSCodec.from_jwks([RAW_JWK]), signed) == "header"
    with_epk = {"alg": "dir", "enc": "A256GCM", "kid": "raw-1", "epk": {"kty": "OKP", "crv": "X25519", "x": "AA"}}
    assert reason(JWECodec.from_jwks([RAW_JWK]), forge(json.dumps(with_epk))) == "header"


@settings(max_examples=40, deadline=None)
@given(alg=st.text(max_size=20) | st.sampled_from(["A256KW", "ECDH-ES", "RSA1_5", "PBES2-HS512+A256KW"]))
@example(alg="A128GCM")  # an enc downgrade
@example(alg="A256CBC-HS512")
@example(alg="dir")  # the profile's own pairs: a genuine token for the direct codec, no encrypted key for the other
@example(alg="A256GCM")
def test_any_other_algorithm_pair_is_refused(alg: str) -> None:
    direct, wrapped = JWECodec.from_jwks([RAW_JWK]), JWECodec.from_jwks([RAW_JWK], alg="A256KW")
    for codec, pair in ((direct, (alg, "A256GCM")), (direct, ("dir", alg)), (wrapped, (alg, "A256GCM"))):
        token = forge(json.dumps({"alg": pair[0], "enc": pair[1], "kid": "raw-1"}))
        if pair == ("dir", "A256GCM") and codec is direct:  # forge's tag verifies: this one is genuine
            assert codec.unseal(token) == PAYLOAD
        else:
            assert reason(codec, token) == ("alg" if pair != (codec.alg, "A256GCM") else "malformed")


def test_encrypted_key_segment_rules() -> None:
    kw = JWECodec.from_jwks([RAW_JWK], alg="A256KW")
    h, ek, iv, ct, tag = kw.seal(PAYLOAD).split(".")
    for bad, expected in (("", "malformed"), (ek[:-4], "malformed"), (b64u_encode(bytes(40)), "seal")):
        assert reason(kw, f"{h}.{bad}.{iv}.{ct}.{tag}") == expected
    direct = forge('{"alg":"dir","enc":"A256GCM","kid":"raw-1"}', "AAAA")
    assert reason(JWECodec.from_jwks([RAW_JWK]), direct) == "malformed"


# --- the received ephemeral key ---------------------------------------------------------------------

P = 2**255 - 19
ORDER_8 = 0x00B8495F16056286FDB1329CEB8D09DA6AC49FF1FAE35616AEB8413B7C7AEBE0
ORDER_8_TOO = 0x57119FD0DD4E22D8868E1C58C45C44045BEF839C55B1D0B1248C50A3BC959C5F
# Low-order X25519 u-coordinates, non-canonical encodings of them, and one with the top bit set.
LOW_ORDER_U = [0, 1, ORDER_8, ORDER_8_TOO, P - 1, P, P + 1, 2**255 + 9]


def with_epk(codec: JWECodec, epk: object) -> str:
    """A genuine token of `codec` whose header's epk is replaced (removed if `epk` is None)."""
    token = codec.seal(PAYLOAD)
    header = {k: v for k, v in header_of(token).items() if k != "epk"}
    if epk is not None:
        header["epk"] = epk
    return ".".join([b64u_encode(json.dumps(header, separators=(",", ":")).encode()), *token.split(".")[1:]])


@pytest.mark.parametrize("u", LOW_ORDER_U, ids=lambda u: hex(u)[:10])
def test_x25519_low_order_and_non_canonical_points_are_refused(u: int) -> None:
    encoded = b64u_encode((u % 2**256).to_bytes(32, "little"))
    assert reason(X25519_CODEC, with_epk(X25519_CODEC, {"kty": "OKP", "crv": "X25519", "x": encoded})) == "header"


def test_epk_must_be_a_point_on_the_recipients_curve_with_its_key_type_and_members() -> None:
    p_epk, x_epk = header_of(P256_CODEC.seal(b"x"))["epk"], header_of(X25519_CODEC.seal(b"x"))["epk"]
    y, zero = b64u_decode(p_epk["y"]), b64u_encode(bytes(32))
    cases: list[tuple[JWECodec, object]] = [
        (P256_CODEC, {**p_epk, "y": b64u_encode(y[:-1] + bytes([y[-1] ^ 1]))}),  # P-256 points off the curve
        (P256_CODEC, {**p_epk, "x": zero, "y": zero}),
        (P256_CODEC, x_epk),  # another curve
        (X25519_CODEC, p_epk),
        (P256_CODEC, {**p_epk, "kty": "OKP"}),
        (P256_CODEC, {**p_epk, "crv": "P-384"}),
        (X25519_CODEC, {**x_epk, "kty": "EC"}),
        (X25519_CODEC, {**x_epk, "crv": "X448"}),
        (P256_CODEC, {**p_epk, "d": p_epk["x"]}),  # any extra member, a private part above all
        (X25519_CODEC, {**x_epk, "use": "enc"}),
        (P256_CODEC, {k: v for k, v in p_epk.items() if k != "y"}),
        (P256_CODEC, {**p_epk, "x": p_epk["x"] + "A"}),
        (X25519_CODEC, {**x_epk, "x": 5}),
        (P256_CODEC, "not an object"),
        (P256_CODEC, [p_epk]),
        (P256_CODEC, None),  # no epk at all
    ]
    for codec, epk in cases:
        assert reason(codec, with_epk(codec, epk)) == "header"


def test_a_public_key_seals_and_only_the_private_key_unseals() -> None:
    sealer = JWECodec.from_jwks(P256_CODEC.public_jwks(), alg="ECDH-ES+A256KW")
    assert sealer.key_ids == P256_CODEC.key_ids
    token = sealer.seal(PAYLOAD)
    assert P256_CODEC.unseal(token) == PAYLOAD
    assert reason(sealer, token) == "unknown_key"
    both = JWECodec.ecdh([X25519_KEY, P256_KEY])  # a ring across curves rotates too
    assert both.unseal(P256_CODEC.seal(PAYLOAD)) == PAYLOAD
    assert X25519_CODEC.unseal(both.seal(PAYLOAD)) == PAYLOAD


# --- configuration ------------------------------------------------------------------------------


MISCONFIGURED: list[tuple[Callable[[], object], str]] = [  # each is refused: tests/test_jws.py
    (lambda: JWECodec([SECRET], alg="ECDH-ES+A256KW"), "from_jwks"),
    (lambda: JWECodec.from_jwks([RAW_JWK], alg="A128KW"), "alg"),
    (lambda: JWECodec([SECRET], max_token_length=50), "smallest token"),
    (lambda: JWECodec.from_jwks([{**RAW_JWK, "k": b64u_encode(bytes(range(16)))}]), "exactly 32"),
    (lambda: JWECodec.from_jwks([{k: v for k, v in RAW_JWK.items() if k != "kid"}]), "kid"),
    (lambda: JWECodec.from_jwks([RAW_JWK, {**RAW_JWK, "kid": "raw-2"}]), "duplicates"),
    (lambda: JWECodec.from_jwks([{**RAW_JWK, "use": "sig"}]), "use"),
    (lambda: JWECodec.from_jwks([{**RAW_JWK, "alg": "A128KW"}]), "alg"),
    (lambda: JWECodec.from_jwks([{**RAW_JWK, "k": "not base64!"}]), "base64url"),
    (lambda: JWECodec.from_jwks([{**RAW_JWK, "kty": "RSA"}]), "oct"),
    (lambda: JWECodec.from_jwks({"keys": []}), "non-empty"),
    (lambda: JWECodec.from_jwks([RAW_JWK], alg="ECDH-ES+A256KW"), "P-256"),
    (lambda: JWECodec.ecdh([]), "non-empty"),
    (lambda: JWECodec.ecdh([X25519_KEY, X25519_KEY.public_key()]), "only the first key may be public"),
    (lambda: JWECodec.ecdh([ec.generate_private_key(ec.SECP384R1())]), "P-256"),
    (lambda: JWECodec.ecdh([X25519_KEY, X25519_KEY]), "share the kid"),
    (lambda: JWECodec.ephemeral(curve="P-384", alg="ECDH-ES+A256KW"), "curve"),  # type: ignore[arg-type]
    (lambda: JWECodec.from_jwks([{**P256_PUBLIC, "y": P256_PUBLIC["x"]}], alg=ECDH), "not a valid P-256 key"),
    (lambda: JWECodec.from_jwks([{**P256_PUBLIC, "d": b64u_encode(OTHER)}], alg=ECDH), "does not match"),
    (lambda: JWECodec.from_jwks([P256_PUBLIC, P256_PUBLIC], alg=ECDH), "only the first key may be public"),
    (lambda: JWECodec([SECRET]).public_jwks(), "no public half"),
    (lambda: JWECodec.from_jwks([{**RAW_JWK, "kid": "\u00e9" * 128}]), "shorter, ASCII kid"),
]


def test_configuration_kinds_jwe_and_jws(tmp_path: Path) -> None:
    ring, jws_vectors = b64u_encode(SECRET), json.loads((Path(__file__).parent / "vectors" / "jws.json").read_text())
    capped = JWECodec.from_env({"STATECODEC_KEYS": ring, "STATECODEC_MAX_TOKEN_LENGTH": "500"})
    assert (capped.alg, capped.max_token_length) == ("dir", 500)
    jws = codec_from_env({"STATECODEC_CODEC": "jws", "STATECODEC_KEYS": ring})
    assert JWSCodec([SECRET]).unseal(jws.seal(b"x")) == b"x"
    jwks, ecdh = tmp_path / "jwks.json", {"STATECODEC_CODEC": "jwe", "STATECODEC_JWE_ALG": ECDH}
    jwks.write_text(json.dumps({"keys": [jws_vectors["rfc_signatures"][0]["jwk"]]}))
    assert JWSCodec.from_env({"STATECODEC_JWS_ALG": "Ed25519", "STATECODEC_JWKS_FILE": str(jwks)}).alg == "Ed25519"
    with pytest.raises(ConfigurationError, match="STATECODEC_JWS_ALG=EdDSA needs STATECODEC_JWKS_FILE"):
        codec_from_env({"STATECODEC_CODEC": "jws", "STATECODEC_JWS_ALG": "EdDSA", "STATECODEC_KEYS": ring})
    jwks.write_text(json.dumps({"keys": [{**P256_PUBLIC, "d": "x"}]}))
    with pytest.raises(ConfigurationError, match="STATECODEC_JWKS_FILE"):
        codec_from_env({**ecdh, "STATECODEC_JWKS_FILE": str(jwks)})
    jwks.write_text(json.dumps({"keys": [RAW_JWK]}))
    in_file = {"STATECODEC_CODEC": "jwe", "STATECODEC_JWKS_FILE": str(jwks)}
    from_file = codec_from_env(in_file)
    assert JWECodec.from_jwks([RAW_JWK]).unseal(from_file.seal(b"y")) == b"y"
    with pytest.raises(ConfigurationError, match="needs STATECODEC_JWKS_FILE"):
        codec_from_env({**ecdh, "STATECODEC_KEYS": ring})
    with pytest.raises(ConfigurationError, match="STATECODEC_JWE_ALG must be one of"):
        codec_from_env({"STATECODEC_CODEC": "jwe", "STATECODEC_JWE_ALG": "RSA1_5", "STATECODEC_KEYS": ring})
    jwks.write_text("{not json " + RAW_JWK["k"])
    # The parser's error holds the whole file (JSONDecodeError.doc), and with it the key.
    assert "not valid JSON" in refused(lambda: codec_from_env(in_file), RAW)


@pytest.mark.parametrize("name", ["jwe-dir", "jwe-a256kw", "jwe-ecdh-x25519", "jws-hs256", "jws-eddsa"])
def test_mcp_flows_complete(name: str) -> None:
    codec: Any = CODECS[name]
    for token in run_mcp_flows(codec, confidential=name.startswith("jwe")).sealed:
        assert token.count(".") == (4 if name.startswith("jwe") else 2)
        assert header_of(token)["alg"] == codec.alg
