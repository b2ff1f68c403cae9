"""Strict base64url: exactly one string decodes to given bytes, and only InvalidToken escapes."""

from __future__ import annotations

import base64
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecodec._encoding import b64u_decode, b64u_encode, b64u_len, check_token_text
from statecodec.errors import InvalidToken, Reason
from tests.secrecy import chain_texts

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
CANONICAL = re.compile(r"[A-Za-z0-9_-]*")
SETTINGS = settings(max_examples=150, deadline=None)
# Characters a lenient decoder would accept or skip: the standard alphabet, padding, whitespace.
NEAR_MISS = "+/= \t\r\n\x0b.\x00é\u2028\ud800"


def reference_is_canonical(text: str) -> bool:
    """An independent statement of canonical unpadded base64url, via the stdlib decoder."""
    if not CANONICAL.fullmatch(text) or len(text) % 4 == 1:
        return False
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return base64.urlsafe_b64encode(data).decode().rstrip("=") == text


def rejected(text: object, decode: object = b64u_decode) -> Reason:
    """The reason code `decode(text)` is refused with; any other exception propagates."""
    with pytest.raises(InvalidToken) as info:
        decode(text)  # type: ignore[operator]
    return info.value.reason


@SETTINGS
@given(st.binary(max_size=512))
def test_round_trip_and_shape(data: bytes) -> None:
    assert b64u_decode("") == b""
    text = b64u_encode(data)
    assert b64u_decode(text) == data
    assert CANONICAL.fullmatch(text)
    assert len(text) == b64u_len(len(data))  # a 64 KiB payload under the default cap: tests/test_redteam.py
    assert text == base64.urlsafe_b64encode(data).decode().rstrip("=")


@SETTINGS
@given(st.text(alphabet=ALPHABET + NEAR_MISS, max_size=40))
def test_accepts_exactly_the_canonical_strings(text: str) -> None:
    """Differential: the decoder agrees with an independent canonical check on every input."""
    if reference_is_canonical(text):
        assert b64u_encode(b64u_decode(text)) == text
    else:
        assert rejected(text) is Reason.MALFORMED


@pytest.mark.parametrize("n", [1, 2, 4, 5, 31, 32])
def test_non_zero_trailing_bits_are_rejected(n: int) -> None:
    """Of the 64 possible last characters only those with zero unused bits decode."""
    text = b64u_encode(bytes(range(n)))
    unused_bits = {2: 4, 3: 2}[len(text) % 4]
    accepted = [last for last in ALPHABET if reference_is_canonical(text[:-1] + last)]
    assert all(b64u_encode(b64u_decode(text[:-1] + c)) == text[:-1] + c for c in accepted)
    assert all(rejected(text[:-1] + c) is Reason.MALFORMED for c in set(ALPHABET) - set(accepted))
    assert len(accepted) == 64 >> unused_bits
    assert all(ALPHABET.index(c) % (1 << unused_bits) == 0 for c in accepted)
    assert text[-1] in accepted


SUB = type("Sub", (str,), {})("A")
NOT_STR: list[object] = [b"AAAA", bytearray(b"AAAA"), memoryview(b"AAAA"), None, 0, 1.5, ["AAAA"], object(), SUB]
EDGE_STR = ["\ud800", "AA\udfff", "AAAA\x00", "AA==", "A", "AAAAA", "A===", "AB=C", "=AAA", "AAA!", "AA AA", "AB\n"]


@pytest.mark.parametrize("value", NOT_STR + EDGE_STR)
def test_edge_values_are_rejected_with_invalid_token_only(value: object) -> None:
    assert rejected(value) is Reason.MALFORMED
    if not isinstance(value, str) or type(value) is not str:
        assert rejected(value, lambda v: check_token_text(v, 10)) is Reason.MALFORMED


def test_rejection_keeps_no_token_text_in_the_exception_chain() -> None:
    token = b64u_encode(b"do not log this token") + "\u00e9"
    with pytest.raises(InvalidToken) as info:
        b64u_decode(token)
    assert not [text for text in chain_texts(info.value) if token[:-1] in text]

