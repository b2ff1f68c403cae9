"""JWSCodec: the format, what a client can read, refusals with reasons; and what both compact codecs share.

tests/test_redteam.py runs the codec contract on every JWS configuration; tests/test_vectors.py reads every vector.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from statecodec import AESGCMCodec, ConfigurationError, InvalidToken, JWECodec, JWSCodec, KeyRing
from statecodec._encoding import b64u_decode, b64u_encode
from tests.codecs import reason
from tests.mcp_flows import STATE_MARKER, TOOL, mint_token
from tests.test_jwe import MISCONFIGURED, PAYLOAD, RAW_JWK, SECRET, header_of
from tests.test_jwe import forge_jws as forge

ED_KEY = ed25519.Ed25519PrivateKey.generate()
ED_PUBLIC = JWSCodec.eddsa([ED_KEY]).public_jwks()["keys"][0]


# --- the format ---------------------------------------------------------------------------------


def test_eddsa_and_ed25519_name_one_key_two_ways_and_never_cross() -> None:
    """HS256 and EdDSA headers are pinned byte for byte by the vectors; Ed25519 (RFC 9864) differs by its name."""
    eddsa, named = JWSCodec.eddsa([ED_KEY]), JWSCodec.eddsa([ED_KEY], alg="Ed25519")
    assert header_of(named.seal(b"x")) == {"alg": "Ed25519", "kid": eddsa.primary_key_id}
    assert reason(named, eddsa.seal(PAYLOAD)) == reason(eddsa, named.seal(PAYLOAD)) == "alg"
    rotated = JWSCodec.eddsa([ed25519.Ed25519PrivateKey.generate(), ED_KEY.public_key()])  # a verify-only old key
    assert rotated.unseal(eddsa.seal(PAYLOAD)) == PAYLOAD
    assert reason(eddsa, rotated.seal(PAYLOAD)) == "unknown_key"


def test_what_a_client_reads_in_the_sdk_envelope() -> None:
    """Under RequestStateSecurity, the client reads the whole envelope: state, target, audience, times."""
    envelope = json.loads(b64u_decode(mint_token(JWSCodec([SECRET])).split(".")[1]))
    assert {"v", "iat", "exp", "m", "t", "a", "aud", "s"} <= set(envelope)
    assert envelope["t"] == TOOL
    assert STATE_MARKER in envelope["s"]


# --- refusals, each with its reason -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ('{"alg":"HS256","kid":"raw-1","crit":["b64"],"b64":false}', "header"),
        ('{"alg":"HS256","kid":"raw-1","kid":"raw-1"}', "header"),
        ('{"alg":"HS256","kid":"raw-1","enc":"A256GCM"}', "header"),  # JWE members, outside the JWS profile
        ('{"alg":"HS256","kid":"raw-1","epk":{"kty":"OKP"}}', "header"),
        ('{"alg":"none","kid":"raw-1"}', "alg"),
        ('{"alg":"HS384","kid":"raw-1"}', "alg"),
        ('{"alg":"EdDSA","kid":"raw-1"}', "alg"),
        ('{"alg":"hs256","kid":"raw-1"}', "alg"),
        ('{"kid":"raw-1"}', "alg"),
        ('{"alg":"HS256"}', "header"),
        ('{"alg":"HS256","kid":["raw-1"]}', "header"),
        ('{"alg":"HS256","kid":"raw-2"}', "unknown_key"),
        ('{"alg":"HS256","kid":"raw-1"', "malformed"),
        ('"HS256"', "malformed"),
        (json.dumps({"alg": "HS256", "kid": "raw-1", "pad": "x" * 800}), "oversized"),
    ],
)
def test_forbidden_headers_are_refused_even_with_a_valid_mac(header: str, expected: str) -> None:
    assert reason(JWSCodec.from_jwks([RAW_JWK]), forge(header)) == expected


def test_segments_and_signature_lengths_and_alg_none_with_an_empty_signature() -> None:
    codec = JWSCodec([SECRET])
    h, p, s = codec.seal(PAYLOAD).split(".")
    for token in (f"{h}.{p}", f"{h}.{p}.{s}.", f"{h}.{p}.{s[:-1]}", f"{h}.{p}.{s}AAAA"):
        assert reason(codec, token) == "malformed"
    assert reason(codec, f"{h}.{p}.{'A' * len(s)}") == "seal"
    token = b64u_encode(b'{"alg":"none","kid":"raw-1"}') + "." + b64u_encode(PAYLOAD) + "."
    assert reason(JWSCodec.from_jwks([RAW_JWK]), token) == "alg"


# --- what both compact codecs share -------------------------------------------------------------

BIG_CAP = 2**20  # an operator-raised cap; the junk below is exactly that long
JUNK = {
    "dots": "." * BIG_CAP,
    "short-segments": ("ab." * BIG_CAP)[:BIG_CAP],
    "long-first-segment": "A" * (BIG_CAP - 4) + "....",
    "long-last-segment": "...." + "A" * (BIG_CAP - 4),
    "jwe-count-repeated": "A...." * (BIG_CAP // 5),
    "jws-count-repeated": "A.." * (BIG_CAP // 3),
}


def refusal_peak(codec: AESGCMCodec | JWECodec | JWSCodec, token: str) -> int:
    """Peak bytes allocated while `codec` refuses `token`: counted, so deterministic (no clock involved)."""
    tracemalloc.start()
    try:
        with pytest.raises(InvalidToken):
            codec.unseal(token)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("cls", [JWECodec, JWSCodec])
@pytest.mark.parametrize("junk", JUNK.values(), ids=JUNK)
def test_no_junk_costs_more_memory_than_the_aesgcm_parse(cls: type[JWECodec | JWSCodec], junk: str) -> None:
    """Dots are counted before any split: a cap-length run of them makes no segment."""
    peak = refusal_peak(cls([SECRET], max_token_length=BIG_CAP), junk)
    assert peak <= refusal_peak(AESGCMCodec(KeyRing.generate(), max_token_length=BIG_CAP), junk)
    if junk.count(".") + 1 not in (3, 5):
        assert peak < BIG_CAP // 64


@pytest.mark.parametrize(
    ("build", "match"),
    [
        *MISCONFIGURED,  # JWECodec's
        (lambda: JWSCodec.from_jwks([{**RAW_JWK, "k": b64u_encode(bytes(range(16)))}]), "32 bytes"),
        (lambda: JWSCodec.from_jwks([RAW_JWK], alg="RS256"), "alg"),
        (lambda: JWSCodec.from_jwks([RAW_JWK], alg="EdDSA"), "Ed25519"),
        (lambda: JWSCodec([SECRET], alg="EdDSA"), "from_jwks"),
        (lambda: JWSCodec.eddsa([ED_KEY.public_key()]), "private"),
        (lambda: JWSCodec.eddsa([ED_KEY], alg="HS256"), "alg"),  # type: ignore[arg-type]
        (lambda: JWSCodec.eddsa([ED_KEY, ED_KEY]), "share the kid"),
        (lambda: JWSCodec.ephemeral(alg="HS512"), "alg"),  # type: ignore[arg-type]
        (lambda: JWSCodec([SECRET], max_token_length=40), "smallest token"),
        (lambda: JWSCodec.from_jwks([ED_PUBLIC], alg="EdDSA"), "private"),
        (lambda: JWSCodec.from_jwks([{**ED_PUBLIC, "d": b64u_encode(SECRET)}], alg="EdDSA"), "does not match"),
        (lambda: JWSCodec([SECRET]).public_jwks(), "no public half"),
    ],
)
def test_misconfiguration_fails_at_construction(build: Callable[[], object], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        build()
