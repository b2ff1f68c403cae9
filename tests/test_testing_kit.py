"""The conformance kit passes sound codecs and names the broken guarantee of unsound ones."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
from typing import Any

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from mcp.server.request_state import AESGCMRequestStateCodec, InvalidRequestState

from statecodec import AESGCMCodec, InvalidToken, XAESGCMCodec
from statecodec.testing import assert_conformant, check_codec
from tests.sdk_guide_codec import GuideEnvelopeCodec

FAST: dict[str, Any] = {"max_examples": 10, "max_mutations": 2_000, "oversized_length": 1 << 20}


def test_statecodec_ring_codecs_pass_under_their_own_error_type() -> None:
    for codec, other in (
        (AESGCMCodec.ephemeral(), AESGCMCodec.ephemeral()),
        (XAESGCMCodec.ephemeral(), XAESGCMCodec.ephemeral()),
    ):
        report = assert_conformant(codec, error_type=InvalidToken, foreign=other)
        assert report.ok
        assert report.checks["char_change"] > 1000  # every position, every substitute
        assert report.checks["round_trip"] >= 50


def test_sdk_builtin_codec_report() -> None:
    """The SDK's built-in codec: sound crypto, but no length cap and no type guard.

    Its boundary checks `isinstance(wire, str)` before calling the codec, so the
    non-str failures do not reach the wire through MCPServer; the missing length
    cap does: a multi-megabyte requestState is copied and base64-decoded in full.
    """
    report = check_codec(AESGCMRequestStateCodec([os.urandom(32)]), error_type=InvalidRequestState, **FAST)
    assert report.failed_checks() == {"oversized", "error_type"}
    type_failures = [f.detail for f in report.failures if f.check == "error_type"]
    assert all(d.startswith("non_str:") for d in type_failures)
    assert any("bytes raised TypeError" in d for d in type_failures)


def test_sdk_guide_envelope_codec_report() -> None:
    """The guide's example codec has the same two gaps as the built-in one."""
    report = check_codec(GuideEnvelopeCodec(os.urandom(32)), error_type=InvalidRequestState, **FAST)
    assert report.failed_checks() == {"oversized", "error_type"}
    assert "not checked before copying or decoding" in str(report)


def test_default_error_type_is_invalid_token() -> None:
    assert check_codec(AESGCMCodec.ephemeral(), **FAST).ok
    report = check_codec(AESGCMRequestStateCodec([os.urandom(32)]), **FAST)
    assert "error_type" in report.failed_checks()
    assert any("raised InvalidRequestState, not InvalidToken" in f.detail for f in report.failures)


# --- Deliberately broken codecs: each must fail exactly the check named for it. ---


class _Lenient:
    """Authenticated, but decodes base64 leniently (padding, whitespace accepted)."""

    def __init__(self) -> None:
        self._a = AESGCM(os.urandom(32))

    def seal(self, payload: bytes) -> str:
        n = os.urandom(12)
        return base64.urlsafe_b64encode(n + self._a.encrypt(n, payload, None)).decode().rstrip("=")

    def unseal(self, token: str) -> bytes:
        if not isinstance(token, str) or len(token) > 200_000:
            raise InvalidRequestState("type")
        try:
            raw = base64.urlsafe_b64decode(token + "==")
            return self._a.decrypt(raw[:12], raw[12:], None)
        except (ValueError, InvalidTag, IndexError):
            raise InvalidRequestState("bad") from None


class _Unauthenticated:
    """Encodes without any integrity: every change is 'accepted'."""

    def seal(self, payload: bytes) -> str:
        return os.urandom(4).hex() + payload.hex()

    def unseal(self, token: str) -> bytes:
        if not isinstance(token, str) or len(token) > 200_000:
            raise InvalidRequestState("type")
        try:
            return bytes.fromhex(token[8:])
        except ValueError:
            raise InvalidRequestState("bad") from None


class _Deterministic:
    """A MAC with no randomness: the same payload always gives the same token."""

    key = os.urandom(32)

    def seal(self, payload: bytes) -> str:
        tag = hmac.new(self.key, payload, hashlib.sha256).hexdigest()
        return tag + payload.hex()

    def unseal(self, token: str) -> bytes:
        if not isinstance(token, str) or len(token) > 200_000 or len(token) < 64:
            raise InvalidRequestState("bad")
        try:
            payload = bytes.fromhex(token[64:])
        except ValueError:
            raise InvalidRequestState("bad") from None
        if token[64:] != payload.hex():
            raise InvalidRequestState("bad")
        if not hmac.compare_digest(token[:64], hmac.new(self.key, payload, hashlib.sha256).hexdigest()):
            raise InvalidRequestState("bad")
        return payload


class _Leaky(_Deterministic):
    """Rejects correctly but puts the token in its error message and log."""

    def seal(self, payload: bytes) -> str:
        return os.urandom(8).hex() + super().seal(payload)

    def unseal(self, token: str) -> bytes:
        try:
            return super().unseal(token[16:] if isinstance(token, str) else token)
        except InvalidRequestState:
            logging.getLogger("leaky").warning("bad token %s", token)
            raise InvalidRequestState(f"bad token {token!r}") from None


class _RaisesValueError(_Deterministic):
    def unseal(self, token: str) -> bytes:
        try:
            return super().unseal(token)
        except InvalidRequestState:
            raise ValueError("nope") from None


class _NotUrlSafe(_Deterministic):
    def seal(self, payload: bytes) -> str:
        return "+" + os.urandom(4).hex() + super().seal(payload)

    def unseal(self, token: str) -> bytes:
        if not isinstance(token, str) or not token.startswith("+"):
            raise InvalidRequestState("bad")
        return super().unseal(token[9:])


class _Broken:
    def seal(self, payload: bytes) -> str:
        return "x"

    def unseal(self, token: str) -> bytes:
        if token == "x":
            return b"wrong"
        raise InvalidRequestState("bad")


@pytest.mark.parametrize(
    ("codec", "expected"),
    [
        (_Lenient(), "non_canonical"),
        (_Unauthenticated(), "char_change"),
        (_Deterministic(), "fresh_token"),
        (_Leaky(), "no_leak"),
        (_RaisesValueError(), "error_type"),
        (_NotUrlSafe(), "url_safe"),
        (_Broken(), "round_trip"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_kit_names_the_broken_guarantee(codec: object, expected: str) -> None:
    report = check_codec(codec, error_type=InvalidRequestState, **FAST)  # type: ignore[arg-type]
    assert not report.ok
    assert expected in report.failed_checks(), str(report)
    with pytest.raises(AssertionError, match=expected):
        assert_conformant(codec, error_type=InvalidRequestState, **FAST)  # type: ignore[arg-type]


def test_foreign_tokens_must_be_refused() -> None:
    ring = AESGCMCodec.ephemeral()
    # The "foreign" codec shares the ring, so its tokens are accepted: the kit must say so.
    report = check_codec(ring, foreign=ring, error_type=InvalidToken, **FAST)
    assert report.failed_checks() == {"foreign"}


def test_report_is_bounded_and_mentions_sampling() -> None:
    report = check_codec(_Unauthenticated(), error_type=InvalidRequestState, max_examples=5, max_mutations=100)
    per_check = [f for f in report.failures if f.check == "char_change"]
    assert len(per_check) == 11  # ten details and one "omitted" line
    assert any("sampled" in n for n in report.notes)


def test_bad_arguments_are_refused() -> None:
    from statecodec import ConfigurationError

    with pytest.raises(ConfigurationError):
        check_codec(AESGCMCodec.ephemeral(), max_examples=0)
