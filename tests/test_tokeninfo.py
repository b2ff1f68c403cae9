"""Token descriptions: right for every format, and nothing but InvalidToken on junk."""

from __future__ import annotations

import json
import os
import tracemalloc

import jwt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jwcrypto import jwe, jwk

from statecodec import AESGCMCodec, InvalidToken, Reason, XAESGCMCodec, generate_key
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.envelope import EnvelopeCodec
from statecodec.providers.vault import VaultTransitCodec
from statecodec.tokeninfo import TokenInfo, describe_token

KEY = generate_key()


@pytest.mark.parametrize(("codec_cls", "name", "nonce"), [(AESGCMCodec, "aesgcm", 12), (XAESGCMCodec, "xaesgcm", 24)])
@pytest.mark.parametrize("size", [0, 300])
def test_ring_formats(codec_cls: type[AESGCMCodec | XAESGCMCodec], name: str, nonce: int, size: int) -> None:
    codec = codec_cls([KEY])
    payload = os.urandom(size)
    token = codec.seal(payload)
    info = describe_token(token)
    assert (info.format, info.version, info.key_id) == (name, codec_cls.VERSION, codec.primary_key_id)
    assert (info.token_length, info.decoded_length) == (len(token), len(b64u_decode(token)))
    assert (info.nonce_length, info.tag_length, info.payload_length, info.encrypted) == (nonce, 16, size, True)


@pytest.mark.parametrize(("codec", "name"), [(EnvelopeCodec, "envelope"), (VaultTransitCodec, "vault-transit")])
def test_provider_layouts(codec: type[EnvelopeCodec | VaultTransitCodec], name: str) -> None:
    version = codec.VERSION
    token = b64u_encode(bytes([version]) + (3).to_bytes(4, "big") + os.urandom(12 + 7 + 16))
    info = describe_token(token)
    assert (info.format, info.key_id, info.payload_length) == (name, "00000003", 7)


def test_jwe_header_is_described() -> None:
    key = jwk.JWK.generate(kty="oct", size=256)
    header = {"alg": "dir", "enc": "A256GCM", "kid": "ring-1"}
    obj = jwe.JWE(b"x" * 50, json.dumps(header))
    obj.add_recipient(key)
    token = obj.serialize(compact=True)
    info = describe_token(token)
    assert info.format == "jwe"
    assert (info.algorithm, info.encryption, info.key_id) == ("dir", "A256GCM", "ring-1")
    assert info.payload_length == 50
    assert info.nonce_length == 12
    assert info.tag_length == 16
    assert info.encrypted


def test_jws_header_is_described() -> None:
    token = jwt.encode({"s": "state"}, "k" * 32, algorithm="HS256", headers={"kid": "k1"})
    info = describe_token(token)
    assert info.format == "jws"
    assert (info.algorithm, info.encryption, info.key_id) == ("HS256", None, "k1")
    assert not info.encrypted
    assert info.payload_length == len(json.dumps({"s": "state"}, separators=(",", ":")))


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("", Reason.MALFORMED),
        (None, Reason.MALFORMED),
        (b"AAAA", Reason.MALFORMED),
        ("A", Reason.MALFORMED),
        ("AA", Reason.FORMAT),  # one zero byte: version 0 is no format
        (b64u_encode(bytes([0x01]) + bytes(20)), Reason.MALFORMED),  # shorter than a header + nonce + tag
        (b64u_encode(bytes([0x7F]) + bytes(60)), Reason.FORMAT),
        ("A" * 200_000, Reason.OVERSIZED),
        ("a.b", Reason.MALFORMED),
        ("a.b.c.d", Reason.MALFORMED),
        (b64u_encode(b"[]") + ".e30.AA", Reason.MALFORMED),
        (b64u_encode(b'{"alg": 1}') + ".e30.AA", Reason.HEADER),
        (b64u_encode(b'{"alg": "x", "kid": "\\u0000"}') + ".e30.AA", Reason.HEADER),
        (b64u_encode(b'{"alg": "x", "enc": "A256GCM"}') + ".e30.AA", Reason.HEADER),
        (b64u_encode(b'{"alg": "x", "alg": "y"}') + ".e30.AA", Reason.HEADER),
        (b64u_encode(b'{"alg": "dir"}') + "....", Reason.HEADER),
        (b64u_encode(b"{" * 600) + ".e30.AA", Reason.MALFORMED),
        ("A" * 2000 + ".e30.AA", Reason.OVERSIZED),
        (b64u_encode(b"\xff\xfe") + ".e30.AA", Reason.MALFORMED),
    ],
)
def test_junk_is_refused_with_a_reason(token: object, reason: Reason) -> None:
    with pytest.raises(InvalidToken) as info:
        describe_token(token)
    assert info.value.reason is reason
    assert str(info.value) == reason.value


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), st.text(alphabet="ABCdef-_.0123", max_size=300)))
def test_any_text_is_described_or_refused(text: str) -> None:
    try:
        info = describe_token(text)
    except InvalidToken:
        return
    assert isinstance(info, TokenInfo)
    assert info.payload_length >= 0


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=100), st.sampled_from([0x01, 0x02, 0x03, 0x05]))
def test_any_bytes_under_a_known_version(body: bytes, version: int) -> None:
    token = b64u_encode(bytes([version]) + body)
    if len(body) < 4 + 12 + 16 + (12 if version == 0x02 else 0):
        with pytest.raises(InvalidToken, match=r"^malformed$"):
            describe_token(token)
        return
    info = describe_token(token)
    assert (info.version, info.key_id, info.decoded_length) == (version, body[:4].hex(), len(body) + 1)


def test_custom_cap() -> None:
    token = AESGCMCodec([KEY]).seal(b"x" * 100)
    with pytest.raises(InvalidToken, match="oversized"):
        describe_token(token, max_length=len(token) - 1)
    assert describe_token(token, max_length=len(token)).payload_length == 100


def test_a_run_of_dots_is_refused_before_any_segment_is_made() -> None:
    """Dots are counted before the text is split: a cap-length run of them costs no list of segments."""
    cap = 2**20
    dots = "." * cap
    tracemalloc.start()
    try:
        with pytest.raises(InvalidToken, match="malformed"):
            describe_token(dots, max_length=cap)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < cap // 64
