"""The conformance kit passes sound codecs and names the broken guarantee of unsound ones."""

from __future__ import annotations

import base64
import json
import logging
import os
import tracemalloc
from typing import Any

import pytest
from mcp.server.request_state import AESGCMRequestStateCodec, InvalidRequestState

from statecodec import AESGCMCodec, ConfigurationError, InvalidToken, JWSCodec, Reason
from statecodec.testing import assert_conformant, check_codec
from tests.sdk_guide_codec import GuideEnvelopeCodec

FAST: dict[str, Any] = {"max_examples": 10, "max_payload": 4096, "max_mutations": 2_000, "oversized_length": 1 << 20}
CHECKS = {"round_trip", "fresh_token", "url_safe", "char_change", "bit_flip", "truncation", "extension"}
CHECKS |= {"non_canonical", "oversized", "non_str", "garbage", "foreign", "error_type", "no_leak"}


def test_every_check_runs_and_assert_conformant_raises_with_the_whole_report() -> None:
    report = assert_conformant(AESGCMCodec.ephemeral(), foreign=AESGCMCodec.ephemeral(), max_examples=10)
    assert set(report.checks) == CHECKS
    assert report.checks["char_change"] > 1000  # every position, every substitute
    with pytest.raises(AssertionError, match=r"(?s)FAIL.*url_safe: token has characters outside"):
        assert_conformant(_NotUrlSafe(), **FAST)
    deterministic = assert_conformant(_Wrapped(JWSCodec.ephemeral()), deterministic=True, **FAST)  # no fresh_token
    assert set(deterministic.checks) == CHECKS - {"fresh_token", "foreign"}  # no foreign codec given
    assert any("fresh_token: skipped" in note for note in deterministic.notes)


def test_sdk_builtin_codec_report() -> None:
    """The SDK's built-in codec: sound crypto, but no length cap (a multi-megabyte requestState is decoded
    in full), no type guard (its boundary checks `isinstance(wire, str)` first), and a chain that keeps a
    non-ASCII token whole (base64's UnicodeEncodeError, whose `.object` is the input, as `__context__`)."""
    report = check_codec(AESGCMRequestStateCodec([os.urandom(32)]), error_type=InvalidRequestState, **FAST)
    assert report.failed_checks() == {"oversized", "error_type", "no_leak"}
    type_failures = [detail for check, detail in report.failures if check == "error_type"]
    assert all(d.startswith("non_str:") for d in type_failures)
    assert any("bytes raised TypeError" in d for d in type_failures)
    assert any(detail.endswith("bit 7 holds payload or token text") for _, detail in report.failures)
    # The example codec of the SDK's guide ("Bring your own crypto") has the same first two gaps.
    guide = check_codec(GuideEnvelopeCodec(os.urandom(32)), error_type=InvalidRequestState, **FAST)
    assert guide.failed_checks() == {"oversized", "error_type"}
    assert "no length check first" in str(guide)


# --- Deliberately broken codecs: each must fail the check named for it. ---


class _Wrapped:
    """A sound codec; each subclass breaks one step around its unseal."""

    def __init__(self, inner: Any = None) -> None:
        self.inner = inner or AESGCMCodec.ephemeral()

    def seal(self, payload: bytes) -> str:
        return str(self.inner.seal(payload))

    def unseal(self, token: str) -> bytes:
        return bytes(self.inner.unseal(token))


class _Lenient(_Wrapped):
    """Authenticated, but reads the token leniently (padding and whitespace dropped)."""

    def unseal(self, token: str) -> bytes:
        return super().unseal(token.strip().rstrip("=") if isinstance(token, str) else token)


class _Unauthenticated(_Wrapped):
    def seal(self, payload: bytes) -> str:
        return os.urandom(4).hex() + payload.hex()

    def unseal(self, token: str) -> bytes:
        try:
            return bytes.fromhex(token[8:])
        except (ValueError, TypeError):
            raise InvalidToken(Reason.MALFORMED) from None


class _Leaky(_Wrapped):
    """Refuses correctly but puts the token in its error message and log."""

    def unseal(self, token: str) -> bytes:
        try:
            return super().unseal(token)
        except InvalidToken:
            logging.getLogger("leaky").warning("bad token %s", token)
            raise InvalidToken(Reason.SEAL) from ValueError(f"bad token {token!r}")


class _RaisesValueError(_Wrapped):
    def unseal(self, token: str) -> bytes:
        try:
            return super().unseal(token)
        except InvalidToken:
            raise ValueError("nope") from None


class _RaisesOnSurrogates(_Wrapped):
    def unseal(self, token: str) -> bytes:
        if isinstance(token, str):
            token.encode("utf-8")  # UnicodeEncodeError on a lone surrogate
        return super().unseal(token)


class _KeepsNonAsciiInputInChain(_Wrapped):
    def unseal(self, token: str) -> bytes:
        if isinstance(token, str):
            try:
                token.encode("ascii")
            except UnicodeEncodeError as exc:  # .object is the whole token
                raise InvalidToken(Reason.MALFORMED) from exc
        return super().unseal(token)


class _ContextBehindCause(_Wrapped):
    """An explicit cause hides the parser error (whose .doc is the token) from tracebacks only."""

    def unseal(self, token: str) -> bytes:
        try:
            return super().unseal(token)
        except InvalidToken:
            if isinstance(token, str):
                try:
                    json.loads(token)
                except ValueError:
                    raise InvalidToken(Reason.MALFORMED) from ValueError("not a token")
            raise


class _HeaderEcho(_Wrapped):
    """A JWS whose header check keeps the parser's error (and the header text) as __context__."""

    def unseal(self, token: str) -> bytes:
        if type(token) is str and "." in token:
            try:
                json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "==").decode("utf-8", "replace"))
            except ValueError:
                raise InvalidToken(Reason.MALFORMED) from None
        return super().unseal(token)


class _NotUrlSafe(_Wrapped):
    def seal(self, payload: bytes) -> str:
        return "+" + super().seal(payload)

    def unseal(self, token: str) -> bytes:
        if not isinstance(token, str) or not token.startswith("+"):
            raise InvalidToken(Reason.MALFORMED)
        return super().unseal(token[1:])


class _Broken(_Wrapped):
    def unseal(self, token: str) -> bytes:
        return super().unseal(token)[:-1]


_SOUND = _Wrapped()
BROKEN: list[tuple[Any, str, dict[str, Any]]] = [
    (_Lenient(), "non_canonical", {}),
    (_Unauthenticated(), "char_change", {}),
    (_Wrapped(JWSCodec.ephemeral()), "fresh_token", {}),  # sign-only, not declared deterministic
    (_Leaky(), "no_leak", {}),
    (_RaisesValueError(), "error_type", {}),
    (_RaisesOnSurrogates(), "error_type", {}),
    (_KeepsNonAsciiInputInChain(), "no_leak", {}),
    (_ContextBehindCause(), "no_leak", {}),
    (_HeaderEcho(JWSCodec.ephemeral()), "no_leak", {"deterministic": True}),
    (_NotUrlSafe(), "url_safe", {}),
    (_Broken(), "round_trip", {}),
    (_SOUND, "foreign", {"foreign": _SOUND}),  # its "foreign" codec is itself, whose tokens it rightly opens
]


@pytest.mark.parametrize(("codec", "expected", "kwargs"), BROKEN, ids=[f"{type(c).__name__}-{e}" for c, e, _ in BROKEN])
def test_kit_names_the_broken_guarantee(codec: Any, expected: str, kwargs: dict[str, Any]) -> None:
    report = check_codec(codec, **{**FAST, **kwargs})
    assert expected in report.failed_checks(), str(report)


def test_report_is_bounded_sampling_is_bounded_and_tracing_is_left_as_found() -> None:
    tracemalloc.start()
    try:
        report = check_codec(_Unauthenticated(), max_examples=5, max_mutations=100)
        assert tracemalloc.is_tracing()
    finally:
        tracemalloc.stop()
    assert sum(1 for check, _ in report.failures if check == "char_change") == 11  # ten, then "omitted"
    assert report.checks["bit_flip"] < 8 * 40  # sampled positions, not all of them
    with pytest.raises(ConfigurationError):
        check_codec(AESGCMCodec.ephemeral(), max_examples=0)


def test_records_the_kit_probes_reach_no_other_handler(caplog: pytest.LogCaptureFixture) -> None:
    """The kit's junk (lone surrogates) stays out of pytest's capture, which `pytest -n` serialises."""
    assert "no_leak" in check_codec(_Leaky(), **FAST).failed_checks()  # the kit itself still saw the leak
    assert not caplog.records
    assert caplog.handler in logging.getLogger().handlers
