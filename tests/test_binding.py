"""BoundCodec: every claim refuses the attack it is there for, and nothing else escapes."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecodec import AESGCMCodec, BoundCodec, ConfigurationError, InvalidToken, KeyRing, SealError
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.binding import mcp_request_context

CODEC_KEY = bytes(range(32))
BINDING_KEY = bytes(range(100, 132))
OTHER_BINDING_KEY = bytes(range(200, 232))
T0 = 1_767_225_600  # 2026-01-01T00:00:00Z
PRINCIPAL = "alice@example.com"
CONTEXT = {"method": "tools/call", "target": "provision", "args": "9f86d081"}


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Plain:
    """A transparent codec (no integrity, no secrecy): shows exactly what the claims reveal."""

    def seal(self, payload: bytes) -> str:
        return b64u_encode(payload)

    def unseal(self, token: str) -> bytes:
        return b64u_decode(token)


def bound(clock: Clock | None = None, *, codec: Any = None, binding_key: Any = BINDING_KEY, **kw: Any) -> BoundCodec:
    kw.setdefault("audience", "billing")
    inner = AESGCMCodec([CODEC_KEY]) if codec is None else codec
    return BoundCodec(inner, binding_key=binding_key, clock=clock or Clock(), **kw)


def reason_of(codec: BoundCodec, token: str, **kw: Any) -> str:
    with pytest.raises(InvalidToken) as info:
        codec.unseal(token, **kw)
    return info.value.reason.value


def test_round_trip_of_any_bytes_like_state_in_any_context_order() -> None:
    codec = bound()
    for state in (b"state", bytearray(b"state"), memoryview(b"state")):
        token = codec.seal(state, principal=PRINCIPAL, context=CONTEXT)  # type: ignore[arg-type]
        assert codec.unseal(token, principal=PRINCIPAL, context=dict(reversed(CONTEXT.items()))) == b"state"


def test_caller_bugs_raise_type_error_whatever_the_token() -> None:
    codec = bound()
    token = codec.seal(b"s", principal=PRINCIPAL)

    class Str(str):
        __slots__ = ()

    for kw in ({"principal": Str(PRINCIPAL)}, {"principal": PRINCIPAL.encode()}, {"context": {"n": 1}}):
        with pytest.raises(TypeError):
            codec.seal(b"s", **kw)
        for presented in (token, ""):  # a bug is a bug before the token is looked at
            with pytest.raises(TypeError):
                codec.unseal(presented, **kw)
    with pytest.raises(TypeError):
        codec.seal("state")  # type: ignore[arg-type]


# --- time ------------------------------------------------------------------------------------


def test_expiry_is_iat_plus_ttl_and_restamped_on_each_seal() -> None:
    clock = Clock(T0 + 0.9)
    codec = bound(clock, ttl=100)
    token = codec.seal(b"s")
    clock.now = T0 + 99.999
    assert codec.unseal(token) == b"s"
    clock.now = T0 + 100
    assert reason_of(codec, token) == "expired"
    assert codec.unseal(codec.seal(b"t")) == b"t"  # a new seal gets a new lifetime


def test_a_lowered_ttl_shortens_tokens_already_issued() -> None:
    clock = Clock()
    token, lowered = bound(clock, ttl=600).seal(b"s"), bound(clock, ttl=60)
    clock.now = T0 + 59
    assert lowered.unseal(token) == b"s"
    clock.now = T0 + 60
    assert reason_of(lowered, token) == "expired"
    with pytest.raises(InvalidToken):
        lowered.reseal(token)
    assert bound(clock, ttl=600).unseal(token) == b"s"  # the token itself still says 600 s
    assert reason_of(bound(clock, ttl=6000), bound(Clock(), ttl=60).seal(b"s")) == "expired"  # raising lengthens none


def test_clock_ahead_of_the_verifier_within_skew_is_accepted_beyond_is_not() -> None:
    token = bound(Clock(T0 + 60), future_skew=60).seal(b"s")
    assert bound(Clock(T0), future_skew=60).unseal(token) == b"s"
    assert reason_of(bound(Clock(T0), future_skew=59), token) == "not_yet_valid"


def test_nan_clock_rejects_on_unseal_and_refuses_to_seal() -> None:
    assert reason_of(bound(Clock(math.nan)), bound().seal(b"s")) == "not_yet_valid"
    for bad in (math.nan, math.inf, -1.0, float(1 << 41)):
        with pytest.raises(SealError):
            bound(Clock(bad)).seal(b"s")


# --- audience, purpose, principal, context -----------------------------------------------------


def test_state_from_another_audience_or_purpose_is_refused() -> None:
    token = bound(audience="billing", purpose="mcp").seal(b"s")
    assert reason_of(bound(audience="shipping", purpose="mcp"), token) == "audience"
    assert reason_of(bound(audience="billing", purpose="oauth-state"), token) == "purpose"
    with pytest.raises(InvalidToken, match="audience"):
        bound(audience="shipping", purpose="mcp").reseal(token)


def test_principal_mismatch_and_drift_both_ways() -> None:
    codec = bound()
    mine, anonymous = codec.seal(b"s", principal=PRINCIPAL), codec.seal(b"s")
    assert reason_of(codec, mine, principal="mallory@example.com") == "principal"
    assert reason_of(codec, mine) == "principal"  # minted with, presented without
    assert reason_of(codec, anonymous, principal=PRINCIPAL) == "principal"  # minted without, presented with
    assert reason_of(codec, codec.seal(b"s", principal=""), principal=PRINCIPAL) == "principal"
    assert codec.unseal(mine, principal=PRINCIPAL) == b"s"


def test_principal_tag_is_keyed_and_reveals_nothing_under_a_readable_codec() -> None:
    payload = b64u_decode(bound(codec=Plain()).seal(b"", principal=PRINCIPAL))
    assert PRINCIPAL.encode() not in payload
    for digest in (hashlib.sha256, hashlib.sha1, hashlib.md5):
        assert digest(PRINCIPAL.encode()).digest()[:16] not in payload
    # Without the binding key the tag cannot be recomputed: another key gives another tag.
    other = bound(codec=Plain(), binding_key=OTHER_BINDING_KEY)
    assert payload[32:48] != b64u_decode(other.seal(b"", principal=PRINCIPAL))[32:48]
    assert reason_of(other, b64u_encode(payload), principal=PRINCIPAL) == "principal"


@pytest.mark.parametrize(
    "presented",
    [None, {**CONTEXT, "args": "0"}, {**CONTEXT, "extra": ""}, {"method": "tools/call", "target": "provision"},
     {"method": "tools/call", "target": "provisionargs", "args": ""}],
    ids=["absent", "other-args", "extra-key", "missing-key", "shifted-boundary"],
)  # fmt: skip
def test_any_other_context_is_refused(presented: dict[str, str] | None) -> None:
    codec = bound()
    token = codec.seal(b"s", principal=PRINCIPAL, context=CONTEXT)
    assert reason_of(codec, token, principal=PRINCIPAL, context=presented) == "binding"
    assert reason_of(codec, codec.seal(b"s", context=presented), context=CONTEXT) == "binding"
    # The context is keyed too: the same context under another binding key is refused.
    assert reason_of(bound(binding_key=OTHER_BINDING_KEY), codec.seal(b"", context=CONTEXT), context=CONTEXT) == (
        "binding"
    )


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=4), st.dictionaries(st.text(), st.text()))
def test_a_token_binds_exactly_its_context(a: dict[str, str], b: dict[str, str]) -> None:
    codec = bound(codec=Plain())
    token = codec.seal(b"s", context=a)
    if a == b:
        assert codec.unseal(token, context=b) == b"s"
    else:
        assert reason_of(codec, token, context=b) == "binding"


def test_binding_key_ring_rotates_without_dropping_bound_tokens() -> None:
    old_ring, new_ring = bound(binding_key=BINDING_KEY), bound(binding_key=KeyRing([OTHER_BINDING_KEY, BINDING_KEY]))
    token = old_ring.seal(b"s", principal=PRINCIPAL, context=CONTEXT)
    assert new_ring.unseal(token, principal=PRINCIPAL, context=CONTEXT) == b"s"
    assert reason_of(new_ring, token, principal=PRINCIPAL, context={}) == "binding"
    fresh = new_ring.seal(b"s", principal=PRINCIPAL, context=CONTEXT)
    assert reason_of(old_ring, fresh, principal=PRINCIPAL, context=CONTEXT) == "principal"


# --- bounded parsing, no leaks -----------------------------------------------------------------


def _claims(version: int = 1, flags: int = 0, lifetime: int = 600) -> bytes:
    genuine = b64u_decode(bound(codec=Plain()).seal(b""))
    return bytes([version, flags]) + genuine[2:7] + lifetime.to_bytes(3, "big") + genuine[10:32]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [(b"", "malformed"), (b"\x01", "malformed"), (_claims()[:31], "malformed"), (_claims(version=2), "malformed"),
     (_claims(version=0), "malformed"), (_claims(flags=2), "malformed"), (_claims(flags=0x81), "malformed"),
     (_claims(flags=1), "malformed"), (_claims(flags=1) + bytes(15), "malformed"), (_claims(lifetime=0), "expired")],
)  # fmt: skip
def test_malformed_claims_are_malformed(payload: bytes, reason: str) -> None:
    # flags=1 without the 16-byte principal tag is malformed too; a zero lifetime is already expired.
    assert reason_of(bound(codec=Plain()), b64u_encode(payload)) == reason


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=80), st.none() | st.just(PRINCIPAL), st.none() | st.just(CONTEXT))
def test_arbitrary_inner_payloads_raise_only_invalid_token(
    payload: bytes, principal: str | None, context: dict[str, str] | None
) -> None:
    with pytest.raises(InvalidToken):
        bound(codec=Plain()).unseal(b64u_encode(payload), principal=principal, context=context)


def test_no_principal_or_context_in_messages_reprs_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    codec = bound()
    token = codec.seal(b"s", principal=PRINCIPAL, context=CONTEXT)
    texts: list[str] = [repr(codec), str(codec)]
    for kw in ({"principal": "mallory"}, {"principal": PRINCIPAL, "context": {"method": "secret-value"}}, {}):
        with pytest.raises(InvalidToken) as info:
            codec.unseal(token, **kw)
        texts += [str(info.value), repr(info.value), repr(info.value.args)]
    joined = "\n".join(texts + [r.getMessage() for r in caplog.records])
    for secret in (PRINCIPAL, "mallory", "secret-value", *CONTEXT.values(), token, BINDING_KEY.hex()):
        assert secret not in joined
    with pytest.raises(TypeError):
        pickle.dumps(codec)


# --- configuration, reseal ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"binding_key": b"short"}, "binding_key is 5 bytes"),
        ({"binding_key": b"a" * 40}, "distinct byte values"),
        ({"binding_key": "text-key-" * 5}, "binding_key must be bytes"),
        ({"ttl": 0}, "ttl=0"),
        ({"ttl": 1.5}, "ttl must be an int"),
        ({"future_skew": 3601}, "future_skew=3601"),
        ({"audience": ""}, "audience must be a non-empty str"),
        ({"clock": 1.0}, "clock must"),
        ({"codec": object()}, "codec must have seal"),
    ],
)
def test_misconfiguration_fails_at_construction_saying_how_to_fix(kw: dict[str, Any], fragment: str) -> None:
    args: dict[str, Any] = {"codec": AESGCMCodec([CODEC_KEY]), "audience": "billing", "binding_key": BINDING_KEY, **kw}
    with pytest.raises(ConfigurationError, match=fragment):
        BoundCodec(**args)


def test_reseal_keeps_claims_so_expiry_does_not_restart() -> None:
    new_key, clock = bytes(range(50, 82)), Clock()
    during = bound(clock, codec=AESGCMCodec([new_key, CODEC_KEY]), ttl=100)
    after = bound(clock, codec=AESGCMCodec([new_key]), ttl=100)
    token = bound(clock, ttl=100).seal(b"s", principal=PRINCIPAL, context=CONTEXT)
    clock.now = T0 + 90
    moved = during.reseal(token)
    assert reason_of(after, token, principal=PRINCIPAL, context=CONTEXT) == "unknown_key"
    assert after.unseal(moved, principal=PRINCIPAL, context=CONTEXT) == b"s"
    clock.now = T0 + 100
    assert reason_of(after, moved, principal=PRINCIPAL, context=CONTEXT) == "expired"


# --- MCP request context -----------------------------------------------------------------------


def test_mcp_request_context_binds_method_target_and_arguments() -> None:
    call = mcp_request_context("tools/call", {"name": "t", "arguments": {"a": 1, "b": [2]}, "requestState": "x"})
    same = mcp_request_context("tools/call", {"arguments": {"b": [2], "a": 1}, "name": "t", "inputResponses": {}})
    assert call == same == {"method": "tools/call", "target": "t", "args": '{"a":1,"b":[2]}'}
    assert call != mcp_request_context("prompts/get", {"name": "t", "arguments": {"a": 1, "b": [2]}})
    resource = {"method": "resources/read", "target": "report://2026", "args": ""}
    assert mcp_request_context("resources/read", {"uri": "report://2026", "arguments": {"a": 1}}) == resource
    arguments: object
    for arguments in (None, {}, [], ""):
        assert mcp_request_context("tools/call", {"name": "t", "arguments": arguments})["args"] == "{}"
    assert mcp_request_context("tools/call", None) == {"method": "tools/call", "target": "", "args": "{}"}
    # The bytes the binding tag covers: ASCII-escaped, and NaN as Python's JSON writes it.
    unusual = mcp_request_context("tools/call", {"name": "t", "arguments": {"\u00e9": "\U0001f600", "n": math.nan}})
    assert unusual["args"] == '{"n":NaN,"\\u00e9":"\\ud83d\\ude00"}'


# --- the frozen format: read by tests/test_vectors.py, re-derived there from docs/formats.md -------

VECTORS: dict[str, Any] = json.loads((Path(__file__).parent / "vectors" / "binding.json").read_text("utf-8"))


@pytest.mark.parametrize("v", VECTORS["valid"], ids=lambda v: v["name"])
def test_seal_writes_the_vector_claims_byte_for_byte(v: dict[str, Any]) -> None:
    config = {k: v[k] for k in ("audience", "purpose", "ttl", "future_skew")}
    readable = BoundCodec(Plain(), binding_key=b64u_decode(VECTORS["binding_key"]), clock=Clock(v["now"]), **config)
    sealed = b64u_decode(readable.seal(v["state"].encode(), principal=v["principal"], context=v["context"]))
    assert sealed == bytes.fromhex(v["claims"]) + v["state"].encode()
