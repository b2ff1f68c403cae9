"""BoundCodec: every claim refuses the attack it is there for, and nothing else escapes."""

from __future__ import annotations

import hashlib
import hmac
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
from statecodec.binding import MAX_TTL, BindingContext, _Mac, encode_context, mcp_request_context
from statecodec.keys import derive_key, generate_key

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


def bound(
    clock: Clock | None = None, *, codec: Any = None, binding_key: bytes | KeyRing = BINDING_KEY, **kw: Any
) -> BoundCodec:
    return BoundCodec(
        codec if codec is not None else AESGCMCodec([CODEC_KEY]),
        audience=kw.pop("audience", "billing"),
        binding_key=binding_key,
        clock=clock or Clock(),
        **kw,
    )


def reason_of(codec: BoundCodec, token: str, **kw: Any) -> str:
    with pytest.raises(InvalidToken) as info:
        codec.unseal(token, **kw)
    return info.value.reason.value


# --- the codec contract -----------------------------------------------------------------------


def test_plain_round_trip_and_claims_overhead() -> None:
    seen: list[bytes] = []

    class Spy(Plain):
        def seal(self, payload: bytes) -> str:
            seen.append(payload)
            return super().seal(payload)

    codec = bound(codec=Spy())
    assert codec.unseal(codec.seal(b"state")) == b"state"
    codec.seal(b"state", principal=PRINCIPAL, context=CONTEXT)
    assert [len(p) - len(b"state") for p in seen] == [32, 48]


def test_bound_round_trip_with_principal_and_context() -> None:
    codec = bound()
    token = codec.seal(b"s", principal=PRINCIPAL, context=CONTEXT)
    assert codec.unseal(token, principal=PRINCIPAL, context=dict(reversed(list(CONTEXT.items())))) == b"s"


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
    token = bound(clock, ttl=600).seal(b"s")
    lowered = bound(clock, ttl=60)
    clock.now = T0 + 59
    assert lowered.unseal(token) == b"s"
    clock.now = T0 + 60
    assert reason_of(lowered, token) == "expired"
    with pytest.raises(InvalidToken):
        lowered.reseal(token)
    assert bound(clock, ttl=600).unseal(token) == b"s"  # the token itself still says 600 s
    short = bound(Clock(), ttl=100).seal(b"s")
    clock.now = T0 + 100
    assert reason_of(bound(clock, ttl=6000), short) == "expired"  # a raised ttl never lengthens a token


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, MAX_TTL),
    st.integers(1, MAX_TTL),
    st.integers(-60, MAX_TTL + 1) | st.floats(-60, MAX_TTL + 1) | st.just(math.nan),
)
def test_a_token_lives_until_iat_plus_the_lesser_of_its_lifetime_and_the_ttl(
    lifetime: int, ttl: int, elapsed: float
) -> None:
    clock = Clock()
    token = bound(clock, ttl=lifetime).seal(b"s")
    clock.now = T0 + elapsed
    codec = bound(clock, ttl=ttl)
    if -60 <= elapsed < min(lifetime, ttl):
        assert codec.unseal(token) == b"s"
    else:
        assert reason_of(codec, token) in ("expired", "not_yet_valid")
        assert (reason_of(codec, token) == "expired") is (elapsed >= min(lifetime, ttl))


def test_clock_ahead_of_the_verifier_within_skew_is_accepted_beyond_is_not() -> None:
    minting, verifying = Clock(T0 + 60), Clock(T0)
    token = bound(minting, future_skew=60).seal(b"s")
    assert bound(verifying, future_skew=60).unseal(token) == b"s"
    assert reason_of(bound(verifying, future_skew=59), token) == "not_yet_valid"


def test_nan_clock_rejects_on_unseal_and_refuses_to_seal() -> None:
    token = bound().seal(b"s")
    assert reason_of(bound(Clock(math.nan)), token) == "not_yet_valid"
    for bad in (math.nan, math.inf, -1.0, float(1 << 41)):
        with pytest.raises(SealError):
            bound(Clock(bad)).seal(b"s")


# --- audience, purpose -------------------------------------------------------------------------


def test_state_from_another_audience_or_purpose_is_refused() -> None:
    token = bound(audience="billing", purpose="mcp").seal(b"s")
    assert reason_of(bound(audience="shipping", purpose="mcp"), token) == "audience"
    assert reason_of(bound(audience="billing", purpose="oauth-state"), token) == "purpose"


# --- principal ---------------------------------------------------------------------------------


def test_principal_mismatch_and_drift_both_ways() -> None:
    codec = bound()
    mine = codec.seal(b"s", principal=PRINCIPAL)
    anonymous = codec.seal(b"s")
    assert reason_of(codec, mine, principal="mallory@example.com") == "principal"
    assert reason_of(codec, mine) == "principal"  # minted with, presented without
    assert reason_of(codec, anonymous, principal=PRINCIPAL) == "principal"  # minted without, presented with
    assert codec.unseal(mine, principal=PRINCIPAL) == b"s"


def test_principal_tag_is_keyed_and_reveals_nothing_under_a_readable_codec() -> None:
    readable = bound(codec=Plain())
    payload = b64u_decode(readable.seal(b"", principal=PRINCIPAL))
    assert PRINCIPAL.encode() not in payload
    for digest in (hashlib.sha256, hashlib.sha1, hashlib.md5):
        assert digest(PRINCIPAL.encode()).digest()[:16] not in payload
    # Without the binding key the tag cannot be recomputed: another key gives another tag.
    other = b64u_decode(bound(codec=Plain(), binding_key=OTHER_BINDING_KEY).seal(b"", principal=PRINCIPAL))
    assert payload[32:48] != other[32:48]
    assert reason_of(bound(codec=Plain(), binding_key=OTHER_BINDING_KEY), b64u_encode(payload),
                     principal=PRINCIPAL) == "principal"


# --- request binding ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "presented",
    [
        None,
        {**CONTEXT, "args": "00000000"},
        {**CONTEXT, "extra": ""},
        {k: v for k, v in CONTEXT.items() if k != "args"},
        {"method": "tools/call", "target": "provisionargs", "args": ""},
    ],
    ids=["absent", "other-args", "extra-key", "missing-key", "shifted-boundary"],
)
def test_any_other_context_is_refused(presented: dict[str, str] | None) -> None:
    codec = bound()
    token = codec.seal(b"s", principal=PRINCIPAL, context=CONTEXT)
    assert reason_of(codec, token, principal=PRINCIPAL, context=presented) == "binding"
    assert reason_of(codec, codec.seal(b"s", context=presented), context=CONTEXT) == "binding"


def test_context_values_are_keyed_too() -> None:
    token = bound(codec=Plain()).seal(b"s", context=CONTEXT)
    assert reason_of(bound(codec=Plain(), binding_key=OTHER_BINDING_KEY), token, context=CONTEXT) == "binding"


_texts = st.text(max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_texts, _texts, max_size=4), st.dictionaries(_texts, _texts, max_size=4))
def test_context_encoding_is_injective(a: dict[str, str], b: dict[str, str]) -> None:
    assert (encode_context(a) == encode_context(b)) == (a == b)


def test_context_must_map_str_to_str() -> None:
    with pytest.raises(TypeError):
        bound().seal(b"s", context={"n": 1})  # type: ignore[dict-item]


def test_binding_key_ring_rotates_without_dropping_bound_tokens() -> None:
    old_ring = bound(binding_key=BINDING_KEY)
    new_ring = bound(binding_key=KeyRing([OTHER_BINDING_KEY, BINDING_KEY]))
    token = old_ring.seal(b"s", principal=PRINCIPAL, context=CONTEXT)
    assert new_ring.unseal(token, principal=PRINCIPAL, context=CONTEXT) == b"s"
    assert reason_of(new_ring, token, principal=PRINCIPAL, context={}) == "binding"
    fresh = new_ring.seal(b"s", principal=PRINCIPAL, context=CONTEXT)
    assert reason_of(old_ring, fresh, principal=PRINCIPAL, context=CONTEXT) == "principal"


# --- bounded parsing ---------------------------------------------------------------------------


def _claims(version: int = 1, flags: int = 0, iat: int = T0, lifetime: int = 600) -> bytes:
    codec = bound(codec=Plain())
    genuine = b64u_decode(codec.seal(b""))
    head = ((version << 72) | (flags << 64) | (iat << 24) | lifetime).to_bytes(10, "big")
    return head + genuine[10:32]


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x01",
        _claims()[:31],
        _claims(version=2),
        _claims(version=0),
        _claims(flags=2),
        _claims(flags=0x81),
        _claims(flags=1),  # flagged principal-bound, but the 16-byte tag is missing
        _claims(flags=1) + b"\x00" * 15,
    ],
    ids=["empty", "one-byte", "short", "v2", "v0", "flag2", "high-flag", "no-tag", "short-tag"],
)
def test_malformed_claims_are_malformed(payload: bytes) -> None:
    assert reason_of(bound(codec=Plain()), b64u_encode(payload)) == "malformed"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.none() | st.just(PRINCIPAL), st.none() | st.just(CONTEXT))
def test_arbitrary_inner_payloads_raise_only_invalid_token(
    payload: bytes, principal: str | None, context: dict[str, str] | None
) -> None:
    codec = bound(codec=Plain())
    try:
        codec.unseal(b64u_encode(payload), principal=principal, context=context)
    except InvalidToken:
        return
    raise AssertionError("a payload without genuine tags was accepted")


def test_zero_lifetime_claims_are_already_expired() -> None:
    assert reason_of(bound(codec=Plain()), b64u_encode(_claims(lifetime=0))) == "expired"


def test_foreign_inner_codec_errors_fail_closed() -> None:
    class Broken(Plain):
        def unseal(self, token: str) -> bytes:
            raise ValueError("kaboom")

    assert reason_of(bound(codec=Broken()), "AAAA") == "seal"


def test_inner_codec_reasons_pass_through() -> None:
    token = bound().seal(b"s")
    assert reason_of(bound(codec=AESGCMCodec([bytes(range(50, 82))])), token) == "unknown_key"
    assert reason_of(bound(), token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]) in ("seal", "malformed")
    assert reason_of(bound(), 42) == "malformed"  # type: ignore[arg-type]


# --- nothing leaks -----------------------------------------------------------------------------


def test_no_principal_or_context_in_messages_reprs_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    codec = bound()
    token = codec.seal(b"s", principal=PRINCIPAL, context=CONTEXT)
    texts: list[str] = [repr(codec), str(codec)]
    for kw in ({"principal": "mallory"}, {"principal": PRINCIPAL, "context": {"method": "secret-value"}}, {}):
        with pytest.raises(InvalidToken) as info:
            codec.unseal(token, **kw)
        texts += [str(info.value), repr(info.value), repr(info.value.args)]
    texts += [r.getMessage() for r in caplog.records]
    joined = "\n".join(texts)
    for secret in (PRINCIPAL, "mallory", "secret-value", *CONTEXT.values(), token):
        assert secret not in joined
    assert BINDING_KEY.hex() not in joined


def test_bound_codec_is_not_picklable() -> None:
    with pytest.raises(TypeError):
        pickle.dumps(bound())


# --- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"binding_key": b"short"}, "at least 32 bytes"),
        ({"binding_key": b"a" * 40}, "distinct byte values"),
        ({"binding_key": "text-key-" * 5}, "binding_key must be bytes"),
        ({"ttl": 0}, "ttl=0"),
        ({"ttl": MAX_TTL + 1}, "ttl="),
        ({"ttl": True}, "ttl must be an int"),
        ({"ttl": 1.5}, "ttl must be an int"),
        ({"future_skew": -1}, "future_skew=-1"),
        ({"audience": ""}, "audience must be a non-empty str"),
        ({"purpose": None}, "purpose must be a non-empty str"),
    ],
)
def test_misconfiguration_fails_at_construction_saying_how_to_fix(kw: dict[str, Any], fragment: str) -> None:
    args: dict[str, Any] = {"audience": "billing", "binding_key": BINDING_KEY, **kw}
    with pytest.raises(ConfigurationError, match=fragment):
        BoundCodec(AESGCMCodec([CODEC_KEY]), **args)


def test_not_a_codec_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="seal"):
        BoundCodec(object(), audience="a", binding_key=BINDING_KEY)  # type: ignore[arg-type]


# --- key ids and reseal ------------------------------------------------------------------------


def test_key_ids_come_from_the_inner_codec() -> None:
    inner = AESGCMCodec([CODEC_KEY, bytes(range(50, 82))])
    codec = bound(codec=inner)
    assert codec.key_ids == inner.key_ids
    assert codec.primary_key_id == inner.primary_key_id
    assert bound(codec=Plain()).key_ids == ()


def test_reseal_keeps_claims_so_expiry_does_not_restart() -> None:
    new_key = bytes(range(50, 82))
    clock = Clock()
    before = bound(clock, codec=AESGCMCodec([CODEC_KEY]), ttl=100)
    during = bound(clock, codec=AESGCMCodec([new_key, CODEC_KEY]), ttl=100)
    after = bound(clock, codec=AESGCMCodec([new_key]), ttl=100)
    token = before.seal(b"s", principal=PRINCIPAL, context=CONTEXT)
    clock.now = T0 + 90
    moved = during.reseal(token)
    assert reason_of(after, token, principal=PRINCIPAL, context=CONTEXT) == "unknown_key"
    assert after.unseal(moved, principal=PRINCIPAL, context=CONTEXT) == b"s"
    clock.now = T0 + 100
    assert reason_of(after, moved, principal=PRINCIPAL, context=CONTEXT) == "expired"
    assert reason_of(during, token) in ("expired",)  # reseal refuses what has lapsed
    with pytest.raises(InvalidToken):
        during.reseal(token)


def test_reseal_refuses_another_audience() -> None:
    token = bound(audience="shipping").seal(b"s")
    with pytest.raises(InvalidToken) as info:
        bound(audience="billing").reseal(token)
    assert info.value.reason.value == "audience"


# --- MCP request context -----------------------------------------------------------------------


def test_mcp_request_context_binds_method_target_and_arguments() -> None:
    call = mcp_request_context("tools/call", {"name": "t", "arguments": {"a": 1, "b": [2]}, "requestState": "x"})
    same = mcp_request_context("tools/call", {"arguments": {"b": [2], "a": 1}, "name": "t", "inputResponses": {}})
    assert call == same
    assert call == {"method": "tools/call", "target": "t", "args": '{"a":1,"b":[2]}'}
    assert call != mcp_request_context("tools/call", {"name": "t", "arguments": {"a": 2, "b": [2]}})
    assert call != mcp_request_context("prompts/get", {"name": "t", "arguments": {"a": 1, "b": [2]}})
    assert mcp_request_context("resources/read", {"uri": "report://2026"})["target"] == "report://2026"
    assert mcp_request_context("tools/call", None) == mcp_request_context("tools/call", {"arguments": None})


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["tools/call", "prompts/get", "resources/read"]), st.text(max_size=8), _json)
def test_mcp_request_context_encoding_is_encode_context(method: str, name: str, arguments: object) -> None:
    context = mcp_request_context(method, {"name": name, "uri": name, "arguments": arguments})
    assert context.encoded == encode_context(dict(context))


_json_full = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats()
    | st.text(st.characters(codec=None), max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(_json_full)
def test_canonical_arguments_json_is_the_stdlib_encoding(arguments: object) -> None:
    """The once-built C encoder writes exactly what json.dumps writes with the same options."""
    from statecodec.binding import _canonical_json

    expected = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert _canonical_json(arguments) == expected
    assert _canonical_json(arguments) == expected  # no state carried over from the first call


def test_canonical_arguments_json_refuses_what_json_refuses() -> None:
    from statecodec.binding import _canonical_json

    with pytest.raises(TypeError):
        _canonical_json({"a": object()})
    assert _canonical_json({"a": [1]}) == '{"a":[1]}'  # a failed call leaves nothing behind


def test_empty_arguments_bind_as_an_empty_object() -> None:
    empty = mcp_request_context("tools/call", {"name": "t"})
    assert empty["args"] == "{}"
    arguments: object
    for arguments in (None, {}, [], ""):
        assert mcp_request_context("tools/call", {"name": "t", "arguments": arguments}) == empty


def test_memoised_tags_never_confuse_principals_or_contexts() -> None:
    """Memo hits are keyed by the exact principal and context: a warm table changes no decision."""
    codec = bound()
    context = mcp_request_context("tools/call", {"name": "t", "arguments": {"a": 1}})
    tokens = {
        "none": codec.seal(b"s", context=context),
        "empty": codec.seal(b"s", principal="", context=context),
        "alice": codec.seal(b"s", principal=PRINCIPAL, context=context),
    }
    for _ in range(2):  # cold, then with every tag memoised
        assert codec.unseal(tokens["none"], context=context) == b"s"
        assert codec.unseal(tokens["empty"], principal="", context=context) == b"s"
        assert codec.unseal(tokens["alice"], principal=PRINCIPAL, context=dict(context)) == b"s"
        assert reason_of(codec, tokens["none"], principal="", context=context) == "principal"
        assert reason_of(codec, tokens["empty"], context=context) == "principal"
        assert reason_of(codec, tokens["alice"], principal="", context=context) == "principal"
        assert reason_of(codec, tokens["alice"], principal=PRINCIPAL) == "binding"
        assert reason_of(codec, tokens["none"], context={**context, "args": '{"a":2}'}) == "binding"


class _Str(str):
    __slots__ = ()


def test_principal_must_be_exactly_str_even_when_an_equal_str_is_memoised() -> None:
    codec = bound()
    token = codec.seal(b"s", principal=PRINCIPAL)
    assert codec.unseal(token, principal=PRINCIPAL) == b"s"  # memoised now
    for wrong in (_Str(PRINCIPAL), PRINCIPAL.encode()):
        with pytest.raises(TypeError, match="principal must be str"):
            codec.seal(b"s", principal=wrong)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="principal must be str"):
            codec.unseal(token, principal=wrong)  # type: ignore[arg-type]


def test_seal_takes_any_bytes_like_state() -> None:
    codec = bound()
    for state in (b"state", bytearray(b"state"), memoryview(b"state")):
        assert codec.unseal(codec.seal(state)) == b"state"  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="seal takes bytes"):
        codec.seal("state")  # type: ignore[arg-type]


def test_binding_context_is_an_immutable_mapping_that_hides_values() -> None:
    context = BindingContext(CONTEXT)
    assert context == CONTEXT
    assert context.encoded == encode_context(CONTEXT)
    assert all(value not in repr(context) for value in CONTEXT.values())
    codec = bound()
    assert codec.unseal(codec.seal(b"s", context=context), context=CONTEXT) == b"s"
    assert codec.unseal(codec.seal(b"s", context=CONTEXT), context=context) == b"s"
    with pytest.raises(TypeError):
        context["method"] = "x"  # type: ignore[index]
    with pytest.raises(TypeError):
        BindingContext({"n": 1})  # type: ignore[dict-item]


# --- frozen vectors ----------------------------------------------------------------------------

VECTORS: dict[str, Any] = json.loads((Path(__file__).parent / "vectors" / "binding.json").read_text("utf-8"))
_BY_NAME: dict[str, dict[str, Any]] = {v["name"]: v for v in VECTORS["valid"]}


def _vector_codec(v: dict[str, Any], now: float, **over: Any) -> BoundCodec:
    return BoundCodec(
        AESGCMCodec.from_env(environ={"STATECODEC_KEYS": VECTORS["codec_keys"]}),
        audience=over.get("audience", v["audience"]),
        purpose=over.get("purpose", v["purpose"]),
        ttl=v["ttl"],
        future_skew=v["future_skew"],
        binding_key=b64u_decode(VECTORS["binding_key"]),
        clock=Clock(now),
    )


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=lambda v: v["name"])
def test_vectors_rederive_exactly_and_unseal(vector: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    codec = _vector_codec(vector, vector["now"])
    state = vector["state"].encode()
    assert codec.unseal(vector["token"], principal=vector["principal"], context=vector["context"]) == state
    payload = codec.codec.unseal(vector["token"])
    assert payload == bytes.fromhex(vector["claims"]) + state
    nonce = bytes.fromhex(vector["nonce"])
    monkeypatch.setattr("statecodec.aead.os.urandom", lambda n: nonce)
    assert codec.seal(state, principal=vector["principal"], context=vector["context"]) == vector["token"]


def _lp(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=lambda v: v["name"])
def test_vector_claims_follow_the_documented_layout(vector: dict[str, Any]) -> None:
    """Rebuild the claims from docs/formats.md with hashlib and hmac alone, not the implementation."""
    key = b64u_decode(VECTORS["binding_key"])
    aud, purpose = vector["audience"].encode(), vector["purpose"].encode()
    prefix = _lp(aud) + _lp(purpose)
    items = sorted((vector["context"] or {}).items())
    context = len(items).to_bytes(4, "big") + b"".join(_lp(k.encode()) + _lp(v.encode()) for k, v in items)
    principal = vector["principal"]
    marker = b"\x00" if principal is None else b"\x01" + _lp(principal.encode())
    kb = derive_key(key, b"statecodec/v1/binding/binding")
    kp = derive_key(key, b"statecodec/v1/binding/principal")
    claims = (
        bytes([0x01, 0x00 if principal is None else 0x01])
        + int(vector["now"]).to_bytes(5, "big")
        + vector["ttl"].to_bytes(3, "big")
        + hashlib.sha256(b"statecodec/v1/binding/audience\x00" + aud).digest()[:3]
        + hashlib.sha256(b"statecodec/v1/binding/purpose\x00" + purpose).digest()[:3]
        + hmac.digest(kb, prefix + marker + context, "sha256")[:16]
    )
    if principal is not None:
        claims += hmac.digest(kp, prefix + _lp(principal.encode()), "sha256")[:16]
    assert claims.hex() == vector["claims"]


@pytest.mark.parametrize("case", VECTORS["refusals"], ids=lambda c: f"{c['vector']}-{c['reason']}")
def test_vector_refusals(case: dict[str, Any]) -> None:
    v = _BY_NAME[case["vector"]]
    over = {k: case[k] for k in ("audience", "purpose") if k in case}
    codec = _vector_codec(v, case["now"], **over)
    context = v["context"] if case["context"] == "same" else case["context"]
    if case["reason"] is None:
        assert codec.unseal(v["token"], principal=case["principal"], context=context) == v["state"].encode()
    else:
        assert reason_of(codec, v["token"], principal=case["principal"], context=context) == case["reason"]


@settings(max_examples=50, deadline=None)
@given(st.binary(min_size=32, max_size=32), st.binary(max_size=80), st.binary(max_size=200))
def test_precomputed_mac_is_exactly_hmac_sha256(key: bytes, prefix: bytes, data: bytes) -> None:
    assert _Mac(key, prefix).tag(data) == hmac.digest(key, prefix + data, "sha256")[:16]


def test_tag_memo_is_bounded_and_never_changes_a_tag() -> None:
    """The memo that lets a round's seal reuse its unseal's MAC holds bounded inputs only."""
    from statecodec import binding as b

    codec = BoundCodec(AESGCMCodec.ephemeral(), audience="svc", binding_key=generate_key())
    key = codec._keys[0]
    big = {"arguments": "x" * (2 * b._MEMO_MAX_INPUT)}
    for i in range(b._MEMO_SIZE + 10):
        codec.seal(b"s", principal=f"user-{i}", context={"n": str(i)})
    assert len(key._binding_memo) <= b._MEMO_SIZE
    assert len(key._principal_memo) <= b._MEMO_SIZE
    before = len(key._binding_memo)
    token = codec.seal(b"s", context=big)
    assert len(key._binding_memo) == before  # an oversized input is computed, not kept
    assert codec.unseal(token, context=big) == b"s"
    # A memoised tag equals a freshly computed one: unseal through a fresh codec with the same keys.
    fresh_key = b._BindingKey(key._binding, key._principal)
    assert fresh_key.binding_tag(None, {"n": "3"}) == key.binding_tag(None, {"n": "3"})
