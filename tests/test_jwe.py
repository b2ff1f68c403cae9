"""JWECodec: frozen vectors, conformance, every refusal with its reason, the received epk, configuration."""

from __future__ import annotations

import json
import os
import pickle
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, x25519
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st

from statecodec import AESGCMCodec, ConfigurationError, InvalidToken, JWECodec, JWSCodec, KeyRing, SealError
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.config import codec_from_env
from statecodec.jose import derived_jwk
from statecodec.jose._jwk import load_jwk
from statecodec.jose.jwe import concat_kdf
from tests.codecs import CODECS
from tests.mcp_flows import assert_mcp_rejects, run_mcp_flows
from tests.secrecy import assert_unreachable

VECTORS: dict[str, Any] = json.loads((Path(__file__).parent / "vectors" / "jwe.json").read_text("utf-8"))
SECRET = bytes(range(32))
OTHER = bytes(range(64, 96))
RAW = bytes(range(160, 192))
RAW_JWK = {"kty": "oct", "kid": "raw-1", "k": b64u_encode(RAW)}
P256_KEY = ec.generate_private_key(ec.SECP256R1())
X25519_KEY = x25519.X25519PrivateKey.generate()
IV = bytes(12)
PAYLOAD = b'{"state":"jwe-test"}'


def reason(codec: JWECodec, token: object) -> str:
    with pytest.raises(InvalidToken) as info:
        codec.unseal(token)  # type: ignore[arg-type]
    return info.value.reason.value


def codec_of(vector: dict[str, Any]) -> JWECodec:
    if "ring" in vector:
        return JWECodec([b64u_decode(k) for k in vector["ring"]], alg=vector["alg"])
    return JWECodec.from_jwks(vector["jwks"], alg=vector["alg"])


def forge(header: str | bytes, key: bytes = RAW, ek64: str = "", payload: bytes = PAYLOAD) -> str:
    """A token whose tag verifies under `key` with any header text: only header checks can refuse it."""
    raw = header.encode() if isinstance(header, str) else header
    h64 = b64u_encode(raw)
    sealed = AESGCM(key).encrypt(IV, payload, h64.encode())
    return f"{h64}.{ek64}.{b64u_encode(IV)}.{b64u_encode(sealed[:-16])}.{b64u_encode(sealed[-16:])}"


def segments(token: str) -> dict[str, Any]:
    header: dict[str, Any] = json.loads(b64u_decode(token.split(".")[0]))
    return header


# --- frozen vectors ----------------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=lambda v: v["name"])
def test_valid_vectors_unseal(vector: dict[str, Any]) -> None:
    assert codec_of(vector).unseal(vector["token"]) == bytes.fromhex(vector["payload"])


@pytest.mark.parametrize("vector", [v for v in VECTORS["valid"] if "randoms" in v], ids=lambda v: v["name"])
def test_seal_reproduces_vectors_exactly(vector: dict[str, Any]) -> None:
    """With the recorded randomness, seal emits the frozen token byte for byte: the format cannot drift."""
    codec = codec_of({**vector, "ring": vector["ring"][vector.get("sealed_with", 0) :]} if "ring" in vector else vector)
    randoms = [bytes.fromhex(r) for r in vector["randoms"]]
    with mock.patch.object(os, "urandom", side_effect=lambda n: randoms.pop(0)):
        assert codec.seal(bytes.fromhex(vector["payload"])) == vector["token"]
    assert randoms == []


@pytest.mark.parametrize("vector", [v for v in VECTORS["valid"] if "derived_jwk" in v], ids=lambda v: v["name"])
def test_derived_jwk_is_frozen(vector: dict[str, Any]) -> None:
    secret = b64u_decode(vector["ring"][vector["sealed_with"]])
    assert derived_jwk(secret, vector["alg"]) == vector["derived_jwk"]
    # The same key, configured as a raw JWK on another stack, opens the ring codec's token.
    assert JWECodec.from_jwks([vector["derived_jwk"]], alg=vector["alg"]).unseal(vector["token"]) == bytes.fromhex(
        vector["payload"]
    )


@pytest.mark.parametrize("vector", VECTORS["invalid"], ids=lambda v: v["name"])
def test_invalid_vectors_are_refused_with_their_reason(vector: dict[str, Any]) -> None:
    assert reason(codec_of(vector), vector["token"]) == vector["reason"]


@pytest.mark.parametrize("vector", VECTORS["concat_kdf"], ids=lambda v: v["name"])
def test_concat_kdf_matches_rfc_7518_appendix_c(vector: dict[str, Any]) -> None:
    alice, bob = load_jwk(vector["alice"], 0, "ECDH-ES+A256KW")[1], load_jwk(vector["bob"], 1, "ECDH-ES+A256KW")[1]
    assert isinstance(alice, ec.EllipticCurvePrivateKey)
    assert isinstance(bob, ec.EllipticCurvePrivateKey)
    apu, apv = b64u_decode(vector["apu"]), b64u_decode(vector["apv"])
    key = concat_kdf(alice.exchange(ec.ECDH(), bob.public_key()), vector["algorithm_id"], vector["bits"], apu, apv)
    assert b64u_encode(key) == vector["derived_key"]


def test_rfc_note_names_the_unsupported_rfc_examples() -> None:
    assert "5.6 dir/A128GCM" in VECTORS["rfc_note"]
    assert "5.8 A128KW/A128GCM" in VECTORS["rfc_note"]


# --- the wire header -----------------------------------------------------------------------


def test_emitted_headers_are_exactly_the_documented_ones() -> None:
    kid = KeyRing([SECRET]).key_ids[0]
    assert segments(JWECodec([SECRET]).seal(b"x")) == {"alg": "dir", "enc": "A256GCM", "kid": kid}
    assert list(segments(JWECodec([SECRET], alg="A256KW").seal(b"x"))) == ["alg", "enc", "kid"]
    token = JWECodec([SECRET]).seal(b"x")
    assert token.split(".")[0] == b64u_encode(b'{"alg":"dir","enc":"A256GCM","kid":"%s"}' % kid.encode())
    assert token.split(".")[1] == ""
    p256 = segments(JWECodec.ecdh([P256_KEY]).seal(b"x"))
    assert list(p256) == ["alg", "enc", "kid", "epk"]
    assert list(p256["epk"]) == ["kty", "crv", "x", "y"]
    assert p256["epk"]["crv"] == "P-256"
    okp = segments(JWECodec.ecdh([X25519_KEY]).seal(b"x"))["epk"]
    assert list(okp) == ["kty", "crv", "x"]
    assert okp["kty"] == "OKP"


def test_a256kw_uses_a_fresh_content_key_and_ecdh_a_fresh_ephemeral_key() -> None:
    kw = JWECodec([SECRET], alg="A256KW")
    assert len({kw.seal(b"x").split(".")[1] for _ in range(5)}) == 5
    ecdh = JWECodec.ecdh([P256_KEY])
    assert len({segments(ecdh.seal(b"x"))["epk"]["x"] for _ in range(5)}) == 5


def test_the_protected_header_is_bound_as_associated_data() -> None:
    """Re-serializing the header (same meaning, other bytes) breaks the tag: the bytes are bound."""
    codec = JWECodec.from_jwks([RAW_JWK])
    token = codec.seal(PAYLOAD)
    h64, *rest = token.split(".")
    spaced = json.dumps(json.loads(b64u_decode(h64)), indent=1).encode()
    assert reason(codec, ".".join([b64u_encode(spaced), *rest])) == "seal"


# --- refusals -----------------------------------------------------------------------------------

ALLOWED = {"alg", "enc", "kid"}
MEMBER = st.text(min_size=1, max_size=12).filter(lambda s: s not in ALLOWED | {"epk"})
JSON_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=8), st.lists(st.integers(), max_size=2)
)


@settings(max_examples=40, deadline=None)
@given(name=MEMBER, value=JSON_VALUE)
def test_any_member_outside_the_profile_is_refused_even_with_a_valid_tag(name: str, value: object) -> None:
    codec = JWECodec.from_jwks([RAW_JWK])
    header = {"alg": "dir", "enc": "A256GCM", "kid": "raw-1", name: value}
    assert reason(codec, forge(json.dumps(header))) == "header"


@settings(max_examples=40, deadline=None)
@given(alg=st.text(max_size=20), enc=st.text(max_size=20))
def test_any_other_algorithm_pair_is_refused(alg: str, enc: str) -> None:
    codec = JWECodec.from_jwks([RAW_JWK])
    header = {"alg": alg, "enc": enc, "kid": "raw-1"}
    got = reason(codec, forge(json.dumps(header)))
    assert got == ("seal" if (alg, enc) == ("dir", "A256GCM") else "alg")


@pytest.mark.parametrize("alg", ["A256KW", "ECDH-ES+A256KW", "ECDH-ES", "RSA-OAEP", "RSA1_5", "PBES2-HS512+A256KW"])
def test_a_dir_codec_refuses_other_key_management_and_vice_versa(alg: str) -> None:
    assert reason(JWECodec.from_jwks([RAW_JWK]), forge(f'{{"alg":"{alg}","enc":"A256GCM","kid":"raw-1"}}')) == "alg"
    kw = JWECodec.from_jwks([RAW_JWK], alg="A256KW")
    if alg != "A256KW":
        assert reason(kw, forge(f'{{"alg":"{alg}","enc":"A256GCM","kid":"raw-1"}}')) == "alg"
    assert reason(kw, forge('{"alg":"dir","enc":"A256GCM","kid":"raw-1"}')) == "alg"


def test_segment_counts_tell_jws_from_jwe() -> None:
    codec = JWECodec([SECRET])
    h, ek, iv, ct, tag = codec.seal(PAYLOAD).split(".")
    full = f"{h}.{ek}.{iv}.{ct}.{tag}"
    for token in (f"{h}.{ct}.{tag}", f"{h}.{ek}.{iv}.{ct}", f"{full}.", f"{full}.x", f"{h}.{full}"):
        assert reason(codec, token) == "malformed"


def test_oversized_tokens_and_headers_are_refused_before_decoding() -> None:
    codec = JWECodec([SECRET], max_token_length=400)
    assert reason(codec, "A" * 401) == "oversized"
    big = JWECodec.from_jwks([RAW_JWK])
    header = json.dumps({"alg": "dir", "enc": "A256GCM", "kid": "raw-1", "pad": "x" * 800})
    assert reason(big, forge(header)) == "oversized"


def refusal_peak(codec: AESGCMCodec | JWECodec | JWSCodec, token: str) -> int:
    """Peak bytes allocated while `codec` refuses `token`: counted, so deterministic (no clock involved)."""
    tracemalloc.start()
    try:
        with pytest.raises(InvalidToken):
            codec.unseal(token)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# An operator-raised cap; the junk below is exactly that long.
BIG_CAP = 2**20
WRONG_COUNT_JUNK = {"dots": "." * BIG_CAP, "short-segments": ("ab." * BIG_CAP)[:BIG_CAP]}


@pytest.mark.parametrize("junk", WRONG_COUNT_JUNK.values(), ids=WRONG_COUNT_JUNK)
def test_a_wrong_segment_count_is_refused_before_any_segment_is_made(junk: str) -> None:
    """A cap-length run of dots must not cost a list of a million segments: dots are counted first."""
    assert refusal_peak(JWECodec([SECRET], max_token_length=BIG_CAP), junk) < BIG_CAP // 64


@pytest.mark.parametrize(
    "junk",
    [*WRONG_COUNT_JUNK.values(), "A" * (BIG_CAP - 4) + "....", "...." + "A" * (BIG_CAP - 4), "A...." * (BIG_CAP // 5)],
    ids=[*WRONG_COUNT_JUNK, "long-header", "long-tag", "repeated-count"],
)
def test_no_junk_costs_more_memory_than_the_aesgcm_parse(junk: str) -> None:
    aesgcm = refusal_peak(AESGCMCodec(KeyRing.generate(), max_token_length=BIG_CAP), junk)
    assert refusal_peak(JWECodec([SECRET], max_token_length=BIG_CAP), junk) <= aesgcm


def test_seal_refuses_what_unseal_would_refuse() -> None:
    for codec in (JWECodec([SECRET], max_token_length=300), JWECodec.ecdh([P256_KEY], max_token_length=600)):
        fits = codec._max_payload
        token = codec.seal(bytes(fits))
        assert len(token) <= codec.max_token_length
        assert codec.unseal(token) == bytes(fits)
        with pytest.raises(SealError):
            codec.seal(bytes(fits + 1))
    with pytest.raises(TypeError, match="bytes"):
        JWECodec([SECRET]).seal("text")  # type: ignore[arg-type]
    assert JWECodec([SECRET]).unseal(JWECodec([SECRET]).seal(bytearray(b"ab"))) == b"ab"  # type: ignore[arg-type]


def test_encrypted_key_segment_rules() -> None:
    direct = JWECodec.from_jwks([RAW_JWK])
    assert reason(direct, forge('{"alg":"dir","enc":"A256GCM","kid":"raw-1"}', ek64="AAAA")) == "malformed"
    kw = JWECodec.from_jwks([RAW_JWK], alg="A256KW")
    h, ek, iv, ct, tag = kw.seal(PAYLOAD).split(".")
    assert reason(kw, f"{h}..{iv}.{ct}.{tag}") == "malformed"
    assert reason(kw, f"{h}.{ek[:-4]}.{iv}.{ct}.{tag}") == "malformed"
    wrong = b64u_encode(bytes(40))
    assert reason(kw, f"{h}.{wrong}.{iv}.{ct}.{tag}") == "seal"


def test_rotation_and_unknown_keys() -> None:
    old, new = JWECodec([SECRET]), JWECodec([OTHER, SECRET])
    assert new.unseal(old.seal(PAYLOAD)) == PAYLOAD
    assert new.key_ids == (KeyRing([OTHER]).key_ids[0], KeyRing([SECRET]).key_ids[0])
    assert new.primary_key_id == new.key_ids[0]
    assert reason(JWECodec([OTHER]), old.seal(PAYLOAD)) == "unknown_key"


def test_keys_are_separated_per_algorithm_and_from_aesgcm() -> None:
    """One secret yields unrelated dir, A256KW and HS256 keys: a token of one cannot be opened as another."""
    keys = {alg: derived_jwk(SECRET, alg)["k"] for alg in ("dir", "A256KW", "HS256")}
    assert len(set(keys.values())) == 3
    assert len({derived_jwk(SECRET, alg)["kid"] for alg in keys}) == 1


# --- the received ephemeral key ----------------------------------------------------------------

P256_CODEC = JWECodec.ecdh([P256_KEY])
X25519_CODEC = JWECodec.ecdh([X25519_KEY])
P = 2**255 - 19
# Low-order X25519 u-coordinates (0, 1, the order-8 points) and non-canonical encodings of them.
LOW_ORDER_U = [
    0,
    1,
    0x00B8495F16056286FDB1329CEB8D09DA6AC49FF1FAE35616AEB8413B7C7AEBE0,
    0x57119FD0DD4E22D8868E1C58C45C44045BEF839C55B1D0B1248C50A3BC959C5F,
    P - 1,
    P,
    P + 1,
]


def with_epk(codec: JWECodec, epk: object, *, drop_epk: bool = False) -> str:
    """A genuine token of `codec` whose header's epk is replaced (the rest left as is)."""
    token = codec.seal(PAYLOAD)
    header = segments(token)
    if drop_epk:
        del header["epk"]
    else:
        header["epk"] = epk
    h64 = b64u_encode(json.dumps(header, separators=(",", ":")).encode())
    return ".".join([h64, *token.split(".")[1:]])


def test_p256_points_off_the_curve_are_refused() -> None:
    epk = segments(P256_CODEC.seal(b"x"))["epk"]
    y = bytearray(b64u_decode(epk["y"]))
    y[-1] ^= 1
    assert reason(P256_CODEC, with_epk(P256_CODEC, {**epk, "y": b64u_encode(bytes(y))})) == "header"
    zero = b64u_encode(bytes(32))
    assert reason(P256_CODEC, with_epk(P256_CODEC, {**epk, "x": zero, "y": zero})) == "header"


@pytest.mark.parametrize("u", LOW_ORDER_U, ids=lambda u: hex(u)[:10])
def test_x25519_low_order_and_non_canonical_points_are_refused(u: int) -> None:
    encoded = b64u_encode((u % 2**256).to_bytes(32, "little"))
    assert reason(X25519_CODEC, with_epk(X25519_CODEC, {"kty": "OKP", "crv": "X25519", "x": encoded})) == "header"


def test_x25519_top_bit_set_is_refused() -> None:
    epk = segments(X25519_CODEC.seal(b"x"))["epk"]
    u = bytearray(b64u_decode(epk["x"]))
    u[31] |= 0x80
    assert reason(X25519_CODEC, with_epk(X25519_CODEC, {**epk, "x": b64u_encode(bytes(u))})) == "header"


def test_epk_must_match_the_recipients_key_type_and_members() -> None:
    p_epk = segments(P256_CODEC.seal(b"x"))["epk"]
    x_epk = segments(X25519_CODEC.seal(b"x"))["epk"]
    cases: list[tuple[JWECodec, object]] = [
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
    ]
    for codec, epk in cases:
        assert reason(codec, with_epk(codec, epk)) == "header"
    assert reason(P256_CODEC, with_epk(P256_CODEC, None, drop_epk=True)) == "header"


def test_an_epk_on_a_symmetric_codec_is_an_unknown_member() -> None:
    header = {"alg": "dir", "enc": "A256GCM", "kid": "raw-1", "epk": {"kty": "OKP", "crv": "X25519", "x": "AA"}}
    assert reason(JWECodec.from_jwks([RAW_JWK]), forge(json.dumps(header))) == "header"


def test_a_public_key_seals_and_only_the_private_key_unseals() -> None:
    sealer = JWECodec.ecdh([P256_KEY.public_key()])
    assert sealer.key_ids == P256_CODEC.key_ids
    token = sealer.seal(PAYLOAD)
    assert P256_CODEC.unseal(token) == PAYLOAD
    assert reason(sealer, token) == "unknown_key"
    published = JWECodec.from_jwks(P256_CODEC.public_jwks(), alg="ECDH-ES+A256KW")
    assert P256_CODEC.unseal(published.seal(PAYLOAD)) == PAYLOAD


def test_a_ring_of_curves_rotates() -> None:
    both = JWECodec.ecdh([X25519_KEY, P256_KEY])
    assert both.unseal(P256_CODEC.seal(PAYLOAD)) == PAYLOAD
    assert X25519_CODEC.unseal(both.seal(PAYLOAD)) == PAYLOAD


# --- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: JWECodec([SECRET], alg="ECDH-ES+A256KW"), "from_jwks"),  # type: ignore[arg-type]
        (lambda: JWECodec([SECRET], alg="RSA1_5"), "alg"),  # type: ignore[arg-type]
        (lambda: JWECodec.from_jwks([RAW_JWK], alg="A128KW"), "alg"),  # type: ignore[arg-type]
        (lambda: JWECodec([b"short"]), "32 bytes"),
        (lambda: JWECodec(SECRET), "list"),  # type: ignore[arg-type]
        (lambda: JWECodec([SECRET], max_token_length=50), "smallest token"),
        (lambda: JWECodec([SECRET], max_token_length=True), "int"),
        (lambda: JWECodec.from_jwks([{**RAW_JWK, "k": b64u_encode(bytes(range(16)))}]), "exactly 32"),
        (lambda: JWECodec.from_jwks([{k: v for k, v in RAW_JWK.items() if k != "kid"}]), "kid"),
        (lambda: JWECodec.from_jwks([RAW_JWK, {**RAW_JWK, "k": b64u_encode(OTHER)}]), "share the kid"),
        (lambda: JWECodec.from_jwks([RAW_JWK, {**RAW_JWK, "kid": "raw-2"}]), "duplicates"),
        (lambda: JWECodec.from_jwks([{**RAW_JWK, "use": "sig"}]), "use"),
        (lambda: JWECodec.from_jwks([{**RAW_JWK, "alg": "A128KW"}]), "alg"),
        (lambda: JWECodec.from_jwks([{**RAW_JWK, "k": "not base64!"}]), "base64url"),
        (lambda: JWECodec.from_jwks([{**RAW_JWK, "kty": "RSA"}]), "oct"),
        (lambda: JWECodec.from_jwks({"keys": []}), "empty"),
        (lambda: JWECodec.from_jwks("{}"), "JWK Set"),
        (lambda: JWECodec.from_jwks([RAW_JWK], alg="ECDH-ES+A256KW"), "P-256"),
        (lambda: JWECodec.ecdh([]), "non-empty"),
        (lambda: JWECodec.ecdh([P256_KEY, X25519_KEY.public_key()]), "only the first key may be public"),
        (lambda: JWECodec.ecdh([ec.generate_private_key(ec.SECP384R1())]), "P-256"),
        (lambda: JWECodec.ecdh([P256_KEY, P256_KEY]), "share the kid"),
        (lambda: JWECodec.ephemeral(curve="P-384", alg="ECDH-ES+A256KW"), "curve"),  # type: ignore[arg-type]
    ],
)
def test_misconfiguration_fails_at_construction(build: Callable[[], object], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        build()


def test_ecdh_jwk_validation() -> None:
    jwks = P256_CODEC.public_jwks()["keys"][0]
    bad_point = {**jwks, "y": jwks["x"]}
    with pytest.raises(ConfigurationError, match="not a valid P-256 key"):
        JWECodec.from_jwks([bad_point], alg="ECDH-ES+A256KW")
    private_jwk = {**jwks, "d": b64u_encode(os.urandom(32))}
    with pytest.raises(ConfigurationError, match="does not match"):
        JWECodec.from_jwks([private_jwk], alg="ECDH-ES+A256KW")
    with pytest.raises(ConfigurationError, match="only the first key may be public"):
        JWECodec.from_jwks([jwks, jwks], alg="ECDH-ES+A256KW")
    with pytest.raises(ConfigurationError, match="no public half"):
        JWECodec([SECRET]).public_jwks()


def test_no_secret_in_repr_and_no_pickling() -> None:
    codec = JWECodec.from_jwks([RAW_JWK])
    assert RAW_JWK["k"] not in repr(codec)
    assert repr(codec) == "JWECodec(alg='dir', enc='A256GCM', key_ids=['raw-1'])"
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(codec)


ECDH_ENV = {"STATECODEC_CODEC": "jwe", "STATECODEC_JWE_ALG": "ECDH-ES+A256KW"}


def test_configuration_kind_jwe(tmp_path: Path) -> None:
    ring_text = b64u_encode(SECRET)
    env = {"STATECODEC_CODEC": "jwe", "STATECODEC_KEYS": ring_text, "STATECODEC_JWE_ALG": "A256KW"}
    codec = codec_from_env(env)
    assert isinstance(codec, JWECodec)
    assert codec.alg == "A256KW"
    assert JWECodec([SECRET], alg="A256KW").unseal(codec.seal(b"x")) == b"x"
    assert isinstance(codec_from_env({"STATECODEC_CODEC": "jwe", "STATECODEC_KEYS": ring_text}), JWECodec)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**P256_CODEC.public_jwks()["keys"][0], "d": "x"}]}))
    with pytest.raises(ConfigurationError, match="STATECODEC_JWKS_FILE"):
        codec_from_env({**ECDH_ENV, "STATECODEC_JWKS_FILE": str(jwks)})
    jwks.write_text(json.dumps({"keys": [RAW_JWK]}))
    from_file = codec_from_env({"STATECODEC_CODEC": "jwe", "STATECODEC_JWKS_FILE": str(jwks)})
    assert JWECodec.from_jwks([RAW_JWK]).unseal(from_file.seal(b"y")) == b"y"
    with pytest.raises(ConfigurationError, match="needs STATECODEC_JWKS_FILE"):
        codec_from_env({**ECDH_ENV, "STATECODEC_KEYS": ring_text})
    with pytest.raises(ConfigurationError, match="STATECODEC_JWE_ALG must be one of"):
        codec_from_env({"STATECODEC_CODEC": "jwe", "STATECODEC_JWE_ALG": "RSA1_5", "STATECODEC_KEYS": ring_text})
    jwks.write_text("{not json " + RAW_JWK["k"])
    with pytest.raises(ConfigurationError, match="not valid JSON") as info:
        codec_from_env({"STATECODEC_CODEC": "jwe", "STATECODEC_JWKS_FILE": str(jwks)})
    # The parser's error holds the whole file (JSONDecodeError.doc), and with it the key.
    assert_unreachable(info.value, RAW)


# --- in a real MCPServer -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["jwe-dir", "jwe-a256kw", "jwe-ecdh-x25519"])
def test_mcp_flows_complete(name: str) -> None:
    codec: Any = CODECS[name]
    report = run_mcp_flows(codec)
    for token in report.sealed:
        assert token.count(".") == 4
        assert segments(token)["alg"] == codec.alg


def test_mcp_refuses_a_rewritten_header_and_logs_the_reason() -> None:
    codec = JWECodec([SECRET])
    kid = codec.primary_key_id

    def to_a256kw(token: str) -> str:
        header = b64u_encode(json.dumps({"alg": "A256KW", "enc": "A256GCM", "kid": kid}).encode())
        return ".".join([header, *token.split(".")[1:]])

    def with_zip(token: str) -> str:
        header = b64u_encode(json.dumps({"alg": "dir", "enc": "A256GCM", "kid": kid, "zip": "DEF"}).encode())
        return ".".join([header, *token.split(".")[1:]])

    assert_mcp_rejects(codec, to_a256kw, reason="alg")
    assert_mcp_rejects(codec, with_zip, reason="header")
    assert_mcp_rejects(codec, lambda t: ".".join(t.split(".")[::2]), reason="malformed")
    assert_mcp_rejects(codec, lambda t: t, reason="unknown_key", minted_by=JWECodec([OTHER]))
