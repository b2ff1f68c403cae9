"""BoundCodec: every claim refuses the attack it is there for, and nothing else escapes."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import math
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from statecodec import AESGCMCodec, BoundCodec, InvalidToken, KeyRing, SealError
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.binding import mcp_request_context
from tests.codecs import reason
from tests.plugins import Clock
from tests.secrecy import refused

CODEC_KEY = bytes(range(32))
BINDING_KEY = bytes(range(100, 132))
OTHER_BINDING_KEY = bytes(range(200, 232))
T0 = 1_767_225_600  # 2026-01-01T00:00:00Z
PRINCIPAL = "alice@example.com"
CONTEXT = {"method": "tools/call", "target": "provision", "args": "9f86d081"}
KIDS = {k: bytes.fromhex(KeyRing([k]).key_ids[0]) for k in (BINDING_KEY, OTHER_BINDING_KEY, CODEC_KEY)}


# No integrity, no secrecy: shows what the claims reveal, and lets a test rewrite them as the inner keys could.
PLAIN = SimpleNamespace(seal=b64u_encode, unseal=b64u_decode)


def bound(clock: Clock | None = None, *, codec: Any = None, binding_key: Any = BINDING_KEY, **kw: Any) -> BoundCodec:
    kw.setdefault("audience", "billing")
    inner = AESGCMCodec([CODEC_KEY]) if codec is None else codec
    return BoundCodec(inner, binding_key=binding_key, clock=clock or Clock(T0), **kw)


def test_round_trip_of_any_bytes_like_state_in_any_context_order() -> None:
    codec = bound()
    for state in (b"state", bytearray(b"state"), memoryview(b"state")):
        token = codec.seal(state, principal=PRINCIPAL, context=CONTEXT)  # type: ignore[arg-type]
        assert codec.unseal(token, principal=PRINCIPAL, context=dict(reversed(CONTEXT.items()))) == b"state"


@pytest.mark.parametrize("kw", [{"principal": b"p"}, {"principal": type("S", (str,), {})("p")}, {"context": {"n": 1}}])
def test_caller_bugs_raise_type_error_whatever_the_token(kw: dict[str, Any]) -> None:
    codec = bound()
    for presented in (codec.seal(b"s", principal="p"), ""):  # a bug is a bug before the token is looked at
        with pytest.raises(TypeError):
            codec.unseal(presented, **kw)
    with pytest.raises(TypeError):
        codec.seal(b"s", **kw)


# --- time, principal, context (the window edges, audience and purpose: the vectors below) -------------------------


def test_a_lowered_ttl_shortens_tokens_already_issued() -> None:
    clock = Clock(T0)
    token, lowered = bound(clock, ttl=600).seal(b"s"), bound(clock, ttl=60)
    clock.now = T0 + 59
    assert lowered.unseal(token) == b"s"
    clock.now = T0 + 60
    assert reason(lowered, token) == "expired"
    with pytest.raises(InvalidToken):
        lowered.reseal(token)
    assert bound(clock, ttl=600).unseal(token) == b"s"  # the token itself still says 600 s
    assert reason(bound(clock, ttl=6000), bound(Clock(T0), ttl=60).seal(b"s")) == "expired"  # raising lengthens none


def test_nan_clock_rejects_on_unseal_and_refuses_to_seal() -> None:
    for broken in (math.nan, None):  # a clock that stops returning numbers refuses with InvalidToken too
        clock = Clock(T0)
        codec, clock.now = bound(clock), broken  # type: ignore[assignment]
        assert reason(codec, bound().seal(b"s")) == "not_yet_valid"
    for bad in (math.nan, math.inf, -1.0, float(1 << 41)):
        with pytest.raises(SealError):
            bound(Clock(bad)).seal(b"s")


def test_principal_tag_is_keyed_and_reveals_nothing_under_a_readable_codec() -> None:
    payload = b64u_decode(bound(codec=PLAIN).seal(b"", principal=PRINCIPAL))
    assert PRINCIPAL.encode() not in payload
    for digest in (hashlib.sha256, hashlib.sha1, hashlib.md5):
        assert digest(PRINCIPAL.encode()).digest()[:16] not in payload
    other = bound(codec=PLAIN, binding_key=OTHER_BINDING_KEY)  # without the binding key, no tag to test a guess
    assert payload[36:52] != b64u_decode(other.seal(b"", principal=PRINCIPAL))[36:52]
    later = b64u_decode(bound(Clock(T0 + 1), codec=PLAIN).seal(b"", principal=PRINCIPAL))  # nor a stable pseudonym
    assert payload[36:52] != later[36:52]
    assert reason(bound(), bound().seal(b"s", principal=""), principal=PRINCIPAL) == "principal"


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=4), st.dictionaries(st.text(), st.text()))
@example(CONTEXT, {**CONTEXT, "args": "0"})
@example(CONTEXT, {**CONTEXT, "extra": ""})
@example(CONTEXT, {})
@example({"target": "provision", "args": "x"}, {"target": "provisionargs", "args": "x"})  # a shifted boundary
def test_a_token_binds_exactly_its_context(a: dict[str, str], b: dict[str, str]) -> None:
    codec = bound(codec=PLAIN)
    token = codec.seal(b"s", principal=PRINCIPAL, context=a)
    if a == b:
        assert codec.unseal(token, principal=PRINCIPAL, context=b or None) == b"s"
    else:  # another value, a key more or less, a shifted boundary: the context's, not the principal's
        assert reason(codec, token, principal=PRINCIPAL, context=b) == "binding"


# --- the binding key ring, its key ids and the two versions --------------------------------------------------------


def rewritten(token: str, version: int | None = None, key_id: bytes = b"") -> str:
    """A PLAIN token with another key id (`key_id` alone), or rewritten to `version` 1 (id dropped) or 2 (inserted)."""
    raw = b64u_decode(token)
    head = bytes([version or raw[0]]) + raw[1:16]
    return b64u_encode(head + (raw[20:] if version == 1 else key_id + raw[16 if version == 2 else 20 :]))


def test_binding_key_ring_rotates_without_dropping_bound_tokens() -> None:
    old_ring, new_ring = bound(binding_key=BINDING_KEY), bound(binding_key=KeyRing([OTHER_BINDING_KEY, BINDING_KEY]))
    for version in (1, 2):
        token = bound(binding_key=BINDING_KEY, seal_version=version).seal(b"s", principal=PRINCIPAL, context=CONTEXT)
        assert new_ring.unseal(token, principal=PRINCIPAL, context=CONTEXT) == b"s"
        assert reason(new_ring, token, principal=PRINCIPAL, context={}) == "binding"
    fresh = new_ring.seal(b"s", principal=PRINCIPAL, context=CONTEXT)
    assert reason(old_ring, fresh, principal=PRINCIPAL, context=CONTEXT) == "unknown_key"  # named, not tried


@pytest.mark.parametrize("principal", [None, PRINCIPAL])
def test_a_rewritten_key_id_or_version_verifies_under_no_key(principal: str | None) -> None:
    """Claims rewritten by a holder of the inner codec's keys: another ring key's id is verified under that key; a
    version 0x02 token rewritten as 0x01 (to be tried under every key) or the reverse, under the other version's
    labels. Each is refused as any wrong tag is."""
    ring = bound(codec=PLAIN, binding_key=KeyRing([BINDING_KEY, OTHER_BINDING_KEY]))
    mine, other, old = (
        bound(codec=PLAIN, binding_key=k, seal_version=v).seal(b"s", principal=principal, context=CONTEXT)
        for k, v in ((BINDING_KEY, 2), (OTHER_BINDING_KEY, 2), (BINDING_KEY, 1))
    )
    assert [ring.unseal(t, principal=principal, context=CONTEXT) for t in (mine, other, old)] == [b"s"] * 3
    forged = [rewritten(mine, key_id=KIDS[OTHER_BINDING_KEY]), rewritten(other, key_id=KIDS[BINDING_KEY]),
              rewritten(mine, version=1), rewritten(old, version=2, key_id=KIDS[BINDING_KEY])]  # fmt: skip
    reasons = {reason(ring, f, principal=principal, context=CONTEXT) for f in forged}
    assert reasons == {"principal" if principal else "binding"}
    assert reason(ring, rewritten(ring.seal(b"s"), key_id=KIDS[CODEC_KEY])) == "unknown_key"


def test_unseal_computes_one_mac_whatever_the_ring_refusals_included(monkeypatch: pytest.MonkeyPatch) -> None:
    """With 200 binding keys, a token under the oldest, accepted or refused, costs what it costs under one key. A
    version 0x01 token still costs a MAC per key (twice when refused with a principal), for its lifetime only."""
    oldest = bytes(range(60, 92))
    ring = KeyRing([i.to_bytes(2, "big") + bytes(range(30)) for i in range(199)] + [oldest])
    macs: list[hmac.HMAC] = []

    def counted(keyed: hmac.HMAC, copy: Any = hmac.HMAC.copy) -> hmac.HMAC:
        macs.append(keyed)
        return copy(keyed)  # type: ignore[no-any-return]

    monkeypatch.setattr(hmac.HMAC, "copy", counted)

    def cost(token: str, context: dict[str, str], now: float = T0) -> int:
        macs.clear()
        with contextlib.suppress(InvalidToken):
            bound(Clock(now), binding_key=ring).unseal(token, principal=PRINCIPAL, context=context)
        return len(macs)

    for version, accepted, rejected in ((2, 1, 2), (1, 200, 400)):
        token = bound(binding_key=oldest, seal_version=version).seal(b"s", principal=PRINCIPAL, context=CONTEXT)
        assert (cost(token, CONTEXT), cost(token, {})) == (accepted, rejected)
    assert cost(token, {}, now=T0 + 600) == 0  # once expired, a version 0x01 token costs no MAC at all


# --- bounded parsing, no leaks -----------------------------------------------------------------


def _claims(version: int = 2, flags: int = 0, lifetime: int = 600) -> bytes:
    genuine = b64u_decode(bound(codec=PLAIN).seal(b""))
    return bytes([version, flags]) + genuine[2:7] + lifetime.to_bytes(3, "big") + genuine[10:36]


@pytest.mark.parametrize(
    ("payload", "expected"),
    [(b"", "malformed"), (b"\x02", "malformed"), (_claims()[:35], "malformed"), (_claims(version=3), "malformed"),
     (_claims(version=0), "malformed"), (_claims(flags=2), "malformed"), (_claims(flags=0x81), "malformed"),
     (_claims(flags=1), "malformed"), (_claims(flags=1) + bytes(15), "malformed"), (_claims(lifetime=0), "expired"),
     (_claims(version=1)[:31], "malformed"), (_claims(version=1, flags=1)[:32] + bytes(15), "malformed")],
)  # fmt: skip
def test_malformed_claims_are_malformed(payload: bytes, expected: str) -> None:
    # flags=1 without the 16-byte principal tag is malformed too; a zero lifetime is already expired.
    assert reason(bound(codec=PLAIN), b64u_encode(payload)) == expected


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([b"", b"\x01", b"\x02\x00", b"\x02\x01"]), st.binary(max_size=80), st.sampled_from([None, "p"]))
def test_arbitrary_inner_payloads_raise_only_invalid_token(head: bytes, tail: bytes, principal: str | None) -> None:
    with pytest.raises(InvalidToken):
        bound(codec=PLAIN).unseal(b64u_encode(head + tail), principal=principal, context=CONTEXT)


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
        assert secret not in joined  # that no copy of the codec can be made: tests/test_redteam.py


# --- configuration, reseal ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [({"binding_key": b"short"}, "binding_key is 5 bytes"), ({"binding_key": b"a" * 40}, "distinct byte values"),
     ({"binding_key": "text-key-" * 5}, "binding_key must be bytes"), ({"ttl": 0}, "ttl must be whole seconds from 1"),
     ({"ttl": 1.5}, "ttl must be whole seconds"), ({"future_skew": 3601}, "future_skew must be whole seconds"),
     ({"audience": ""}, "audience must be a non-empty str"), ({"clock": 1.0}, "clock must"),
     ({"codec": object()}, "codec must have seal"), ({"seal_version": 3}, "seal_version must be 2")],
)  # fmt: skip
def test_misconfiguration_fails_at_construction_saying_how_to_fix(kw: dict[str, Any], fragment: str) -> None:
    args: dict[str, Any] = {"codec": AESGCMCodec([CODEC_KEY]), "audience": "billing", "binding_key": BINDING_KEY, **kw}
    assert fragment in refused(lambda: BoundCodec(**args), BINDING_KEY, CODEC_KEY)


def test_reseal_keeps_claims_so_expiry_does_not_restart() -> None:
    new_key, clock = bytes(range(50, 82)), Clock(T0)
    during = bound(clock, codec=AESGCMCodec([new_key, CODEC_KEY]), ttl=100)
    after = bound(clock, codec=AESGCMCodec([new_key]), ttl=100)
    token = bound(clock, ttl=100).seal(b"s", principal=PRINCIPAL, context=CONTEXT)
    clock.now = T0 + 90
    moved = during.reseal(token)
    assert reason(after, token, principal=PRINCIPAL, context=CONTEXT) == "unknown_key"
    assert after.unseal(moved, principal=PRINCIPAL, context=CONTEXT) == b"s"
    clock.now = T0 + 100
    assert reason(after, moved, principal=PRINCIPAL, context=CONTEXT) == "expired"
    with pytest.raises(InvalidToken, match="audience"):
        bound(audience="shipping").reseal(token)


def test_mcp_request_context_binds_method_target_and_arguments() -> None:
    call = mcp_request_context("tools/call", {"name": "t", "arguments": {"a": 1, "b": [2]}, "requestState": "x"})
    same = mcp_request_context("tools/call", {"arguments": {"b": [2], "a": 1}, "name": "t", "inputResponses": {}})
    assert call == same == {"method": "tools/call", "target": "t", "args": '{"a":1,"b":[2]}'}
    assert call != mcp_request_context("prompts/get", {"name": "t", "arguments": {"a": 1, "b": [2]}})
    resource = {"method": "resources/read", "target": "report://2026", "args": ""}
    assert mcp_request_context("resources/read", {"uri": "report://2026", "arguments": {"a": 1}}) == resource
    empty: tuple[object, ...] = (None, {}, [], "")
    assert {mcp_request_context("tools/call", {"arguments": x})["args"] for x in empty} == {"{}"}
    assert mcp_request_context("tools/call", None) == {"method": "tools/call", "target": "", "args": "{}"}
    # The bytes the binding tag covers: ASCII-escaped, and NaN as Python's JSON writes it.
    unusual = mcp_request_context("tools/call", {"name": "t", "arguments": {"\u00e9": "\U0001f600", "n": math.nan}})
    assert unusual["args"] == '{"n":NaN,"\\u00e9":"\\ud83d\\ude00"}'
