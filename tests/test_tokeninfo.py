"""Token descriptions: right for every format, and nothing but InvalidToken on junk."""

from __future__ import annotations

import os
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecodec import AESGCMCodec, InvalidToken, JWECodec, JWSCodec, Reason, XAESGCMCodec
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.envelope import EnvelopeCodec
from statecodec.tokeninfo import describe_token
from tests.codecs import CODECS

# format, nonce length, tag length of each codec's tokens (a BoundCodec's are its inner codec's)
LAYOUTS: dict[type, tuple[str, int | None, int]] = {AESGCMCodec: ("aesgcm", 12, 16), XAESGCMCodec: ("xaesgcm", 24, 16)}
LAYOUTS |= {EnvelopeCodec: ("envelope", 12, 16), JWECodec: ("jwe", 12, 16), JWSCodec: ("jws", None, 32)}


@pytest.mark.parametrize("name", CODECS)
@pytest.mark.parametrize("size", [0, 300])
def test_every_codec_token_is_described(name: str, size: int) -> None:
    codec, inner = CODECS[name], cast(Any, getattr(CODECS[name], "codec", CODECS[name]))
    token = codec.seal(os.urandom(size))
    fmt, nonce, tag = LAYOUTS[type(inner)]
    info = describe_token(token)
    assert (info.format, info.version, info.key_id) == (fmt, getattr(inner, "VERSION", None), inner.primary_key_id)
    assert (info.token_length, info.payload_length) == (len(token), len(inner.unseal(token)))
    assert (info.nonce_length, info.tag_length) == (nonce, 64 if "ed" in name else tag)
    assert (info.algorithm, info.encrypted) == (getattr(inner, "alg", None), fmt != "jws")
    assert info.encryption == ("A256GCM" if fmt == "jwe" else None)
    if fmt not in ("jwe", "jws"):
        assert info.decoded_length == len(b64u_decode(token))


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("", Reason.MALFORMED),
        (None, Reason.MALFORMED),
        ("A", Reason.MALFORMED),
        ("AA", Reason.FORMAT),  # one zero byte: version 0 is no format
        (b64u_encode(bytes([0x01]) + bytes(20)), Reason.MALFORMED),  # shorter than a header + nonce + tag
        (b64u_encode(bytes([0x7F]) + bytes(60)), Reason.FORMAT),
        ("A" * 200_000, Reason.OVERSIZED),
        ("a.b", Reason.MALFORMED),
        (b64u_encode(b"[]") + ".e30.AA", Reason.MALFORMED),
        (b64u_encode(b'{"alg": 1}') + ".e30.AA", Reason.HEADER),
        (b64u_encode(b'{"alg": "x", "kid": "\\u0000"}') + ".e30.AA", Reason.HEADER),
        (b64u_encode(b'{"alg": "x", "enc": "A256GCM"}') + ".e30.AA", Reason.HEADER),
        (b64u_encode(b'{"alg": "x", "alg": "y"}') + ".e30.AA", Reason.HEADER),
        (b64u_encode(b'{"alg": "dir"}') + "....", Reason.HEADER),
        (b64u_encode(b"{" * 600) + ".e30.AA", Reason.MALFORMED),
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
    assert info.payload_length >= 0


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=100), st.sampled_from([0x01, 0x02, 0x03]))
def test_any_bytes_under_a_known_version(body: bytes, version: int) -> None:
    token = b64u_encode(bytes([version]) + body)
    if len(body) < 4 + 12 + 16 + (12 if version == 0x02 else 0):
        with pytest.raises(InvalidToken, match=r"^malformed$"):
            describe_token(token)
        return
    info = describe_token(token)
    assert (info.version, info.key_id, info.decoded_length) == (version, body[:4].hex(), len(body) + 1)
