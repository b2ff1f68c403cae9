"""SingleUse: accepted at most once, revocable, fail closed; only a presentation that passed every check consumes.

The store-level duties (atomic claim, expiry, revocation view) are the contract suite in tests/test_store_contract.py,
run against the in-process store and a real Redis; the fleet is tests/integration/test_fleet_single_use.py.
"""

from __future__ import annotations

import copy
import hmac
import logging
import pickle
import threading
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecodec import AESGCMCodec, BoundCodec, ConfigurationError, InvalidToken, KeyRing, format_keys
from statecodec._encoding import b64u_decode
from statecodec.errors import StoreError
from statecodec.keys import derive_key
from statecodec.single_use import STAMP_LENGTH, Claim, MemoryStore, SingleUse, SingleUseCodec, Store
from tests import mcp_flows

STORE_KEY = bytes(range(50, 82))
T0 = 1_767_225_600.0
ALICE, BOB = "alice@example.com", "bob@example.com"
CONTEXT = {"method": "tools/call", "target": "provision", "args": "{}"}


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def guarded(
    clock: Clock | None = None, store: Store | None = None, **kw: Any
) -> tuple[SingleUseCodec, SingleUse, Clock]:
    clock = clock or Clock()
    guard = SingleUse(store or MemoryStore(clock=clock), key=STORE_KEY, ttl=600, clock=clock, **kw)
    inner = BoundCodec(AESGCMCodec(KeyRing.generate()), audience="billing", binding_key=KeyRing.generate(), clock=clock)
    return SingleUseCodec(inner, guard), guard, clock


def reason_of(codec: SingleUseCodec, token: str, **kw: Any) -> str:
    with pytest.raises(InvalidToken) as info:
        codec.unseal(token, **kw)
    return info.value.reason.value


def test_accepted_once_then_refused_as_replayed() -> None:
    codec, _, _ = guarded()
    token = codec.seal(b"step-1", principal=ALICE, context=CONTEXT)
    assert codec.unseal(token, principal=ALICE, context=CONTEXT) == b"step-1"
    assert reason_of(codec, token, principal=ALICE, context=CONTEXT) == "replayed"


def test_two_seals_of_the_same_state_are_two_tokens_each_accepted_once() -> None:
    codec, _, _ = guarded()
    first, second = (codec.seal(b"same", principal=ALICE) for _ in range(2))
    assert codec.unseal(first, principal=ALICE) == codec.unseal(second, principal=ALICE) == b"same"


@pytest.mark.parametrize(
    ("who", "context", "reason"),
    [(BOB, CONTEXT, "principal"), (None, CONTEXT, "principal"), (ALICE, {**CONTEXT, "args": "{\"x\":1}"}, "binding")],
    ids=["other-principal", "no-principal", "other-request"],
)
def test_a_presentation_refused_by_any_other_check_does_not_consume(
    who: str | None, context: dict[str, str], reason: str
) -> None:
    codec, _, _ = guarded()
    token = codec.seal(b"state", principal=ALICE, context=CONTEXT)
    assert reason_of(codec, token, principal=who, context=context) == reason
    assert codec.unseal(token, principal=ALICE, context=CONTEXT) == b"state"  # the rightful retry still succeeds


def test_a_tampered_token_consumes_nothing() -> None:
    store = Recording(MemoryStore())
    codec, _, _ = guarded(store=store)
    token = codec.seal(b"state")
    assert reason_of(codec, token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]) in {"seal", "malformed"}
    assert store.claims == 0


def test_revoking_a_principal_refuses_its_older_tokens_only() -> None:
    codec, guard, clock = guarded()
    alice, bob = codec.seal(b"a", principal=ALICE), codec.seal(b"b", principal=BOB)
    clock.now += 5
    guard.revoke("principal", ALICE)
    assert reason_of(codec, alice, principal=ALICE) == "revoked"
    assert codec.unseal(bob, principal=BOB) == b"b"
    clock.now += guard.clock_skew + 0.01  # a token minted after the revocation (and its skew) is accepted
    assert codec.unseal(codec.seal(b"new", principal=ALICE), principal=ALICE) == b"new"


def test_revoking_an_operator_scope_and_everything() -> None:
    codec, guard, _clock = guarded()
    acme, other = codec.seal(b"1"), codec.seal(b"2")
    guard.revoke("tenant", "acme")
    assert reason_of(codec, acme, scopes={"tenant": "acme"}) == "revoked"
    assert codec.unseal(other, scopes={"tenant": "globex"}) == b"2"
    late = codec.seal(b"3", principal=BOB)
    guard.revoke()
    assert reason_of(codec, late, principal=BOB) == "revoked"


def test_a_revocation_holds_under_any_store_key_and_scope_values_are_digested() -> None:
    clock = Clock()
    store = Recording(MemoryStore(clock=clock))
    _, guard, _ = guarded(clock, store=store)
    guard.revoke()
    guard.revoke("principal", ALICE)
    other_key = SingleUse(store, key=bytes(range(90, 122)))
    assert other_key.store.revoked_at([b"\x00" * 16]) > 0  # revoke-all is seen by an instance on another key
    assert all(ALICE.encode() not in scope for scope in store.scopes)


def test_expiry_is_enforced_by_the_guard_itself() -> None:
    clock = Clock()
    guard = SingleUse(MemoryStore(clock=clock), key=STORE_KEY, ttl=60, clock=clock)
    stamped = guard.stamp(b"x")
    clock.now += 60
    with pytest.raises(InvalidToken, match="expired"):
        guard.consume(stamped)


def test_a_token_issued_before_the_store_began_cannot_be_proven_unused() -> None:
    clock = Clock()
    guard = SingleUse(MemoryStore(clock=clock), key=STORE_KEY, clock=clock)
    stamped = guard.stamp(b"x")
    clock.now += 1
    restarted = SingleUse(MemoryStore(clock=clock), key=STORE_KEY, clock=clock)  # a process restart
    with pytest.raises(InvalidToken, match="store_unavailable"):
        restarted.consume(stamped)


class Recording:
    """A store that passes calls through and counts them."""

    def __init__(self, inner: Store) -> None:
        self.inner, self.claims, self.scopes = inner, 0, list[bytes]()

    def claim(self, key: bytes, issued_at: float, expires_at: float) -> Claim:
        self.claims += 1
        return self.inner.claim(key, issued_at, expires_at)

    def revoke(self, scope: bytes, at: float, expires_at: float) -> None:
        self.scopes.append(scope)
        self.inner.revoke(scope, at, expires_at)

    def revoked_at(self, scopes: Sequence[bytes]) -> float:
        return self.inner.revoked_at(scopes)

    def health(self) -> dict[str, object]:
        return self.inner.health()

    def close(self) -> None:
        self.inner.close()


class Down(Recording):
    """A store that does not answer."""

    def claim(self, key: bytes, issued_at: float, expires_at: float) -> Claim:
        raise StoreError("the store did not answer within 0.25 s")


def test_a_store_that_does_not_answer_fails_closed() -> None:
    codec, _, _ = guarded(store=Down(MemoryStore()))
    assert reason_of(codec, codec.seal(b"x")) == "store_unavailable"


def test_availability_first_accepts_unchecked_and_says_so_loudly(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="statecodec.single_use"):
        codec, _, _ = guarded(store=Down(MemoryStore()), on_store_error="accept")
        token = codec.seal(b"x")
        assert codec.unseal(token) == codec.unseal(token) == b"x"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2
    assert all("WITHOUT the single-use check" in r.getMessage() for r in errors)


def test_the_in_process_store_fails_closed_when_full_and_forgets_expired_tokens() -> None:
    clock = Clock()
    store = MemoryStore(max_entries=2, clock=clock)
    guard = SingleUse(store, key=STORE_KEY, ttl=10, clock=clock)
    stamps = [guard.stamp(b"") for _ in range(3)]
    guard.consume(stamps[0])
    guard.consume(stamps[1])
    with pytest.raises(InvalidToken, match="store_unavailable"):
        guard.consume(stamps[2])
    clock.now += 12  # the first two expired: their entries go, and the store holds live tokens only
    guard.consume(guard.stamp(b""))
    assert store.health()["live_claims"] == 1


def test_concurrent_presentations_of_one_token_are_accepted_exactly_once() -> None:
    codec, _, _ = guarded(clock=None)
    token = codec.seal(b"once", principal=ALICE)
    outcomes: list[str] = []
    barrier = threading.Barrier(20)

    def present() -> None:
        barrier.wait()
        try:
            outcomes.append(codec.unseal(token, principal=ALICE).decode())
        except InvalidToken as exc:
            outcomes.append(exc.reason.value)

    threads = [threading.Thread(target=present) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["once"] + ["replayed"] * 19


@given(st.binary(max_size=80))
def test_anything_but_a_stamp_is_malformed(data: bytes) -> None:
    guard = SingleUse(MemoryStore(), key=STORE_KEY)
    stamped = guard.stamp(b"")
    if data[:STAMP_LENGTH] == stamped:
        return
    with pytest.raises(InvalidToken) as info:
        guard.consume(data)
    assert info.value.reason.value in {"malformed", "expired", "not_yet_valid", "store_unavailable"}


def test_the_stamp_layout() -> None:
    clock = Clock(T0 + 0.123)
    stamped = SingleUse(MemoryStore(), key=STORE_KEY, clock=clock).stamp(b"state")
    assert stamped[:4] == b"su1."
    assert stamped[55:56] == b"."
    assert stamped[STAMP_LENGTH:] == b"state"
    body = b64u_decode(stamped[4:55].decode())
    assert int.from_bytes(body[16:22], "big") == int((T0 + 0.123) * 1000)
    stamp_key = derive_key(STORE_KEY, b"statecodec/v1/single-use/stamp")
    assert body[22:] == hmac.new(stamp_key, b"su1." + body[:22], "sha256").digest()[:16]


def test_a_stamp_made_without_the_store_key_is_refused_and_consumes_nothing() -> None:
    store = Recording(MemoryStore())
    guard = SingleUse(store, key=STORE_KEY)
    forged = SingleUse(MemoryStore(), key=bytes(range(90, 122))).stamp(b"x")
    edited = bytearray(guard.stamp(b"x"))
    edited[20] ^= 1
    for stamped in (forged, bytes(edited)):
        with pytest.raises(InvalidToken) as info:
            guard.consume(stamped)
        assert info.value.reason.value in {"seal", "malformed"}
    assert store.claims == 0


def test_no_secret_in_repr_and_no_pickle() -> None:
    codec, guard, _ = guarded()
    for obj in (codec, guard):
        assert STORE_KEY.hex() not in repr(obj)
        with pytest.raises(TypeError):
            pickle.dumps(obj)
        with pytest.raises(TypeError):
            copy.deepcopy(obj)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "STATECODEC_STORE_KEY is not set"),
        ({"STATECODEC_STORE_KEY": "x"}, "STATECODEC_STORE_KEY"),
        ({"STATECODEC_STORE_KEY": "@KEYS2"}, "holds 2 keys"),
        ({"STATECODEC_STORE_KEY": "@KEY"}, "STATECODEC_STORE_URL is not set"),
        ({"STATECODEC_STORE_KEY": "@KEY", "STATECODEC_STORE_URL": "http://u:hunter2@h"}, "not http:"),
        ({"STATECODEC_STORE_KEY": "@KEY", "STATECODEC_STORE_URL": "memory", "STATECODEC_TTL": "0"}, "STATECODEC_TTL"),
        (
            {"STATECODEC_STORE_KEY": "@KEY", "STATECODEC_STORE_URL": "memory", "STATECODEC_STORE_ON_ERROR": "x"},
            "STATECODEC_STORE_ON_ERROR must be refuse",
        ),
    ],
    ids=["no-key", "bad-key", "two-keys", "no-url", "other-scheme", "bad-ttl", "bad-on-error"],
)
def test_configuration_mistakes_fail_at_construction(settings: dict[str, str], message: str) -> None:
    keys = {"@KEY": format_keys([STORE_KEY]), "@KEYS2": format_keys([STORE_KEY, bytes(range(90, 122))])}
    settings = {name: keys.get(value, value) for name, value in settings.items()}
    with pytest.raises(ConfigurationError, match=message) as info:
        SingleUse.from_env(settings)
    assert "hunter2" not in str(info.value)


def test_from_env_builds_the_in_process_store() -> None:
    guard = SingleUse.from_env({"STATECODEC_STORE_KEY": format_keys([STORE_KEY]), "STATECODEC_STORE_URL": "memory"})
    assert isinstance(guard.store, MemoryStore)
    assert guard.consume(guard.stamp(b"x")) == b"x"


# --- the MCP SDK paths -------------------------------------------------------------------------------------------


def single_use_server(guard: SingleUse) -> Any:
    from statecodec.mcp import SingleUseMiddleware, security

    server = mcp_flows.build_server(security(AESGCMCodec(KeyRing.generate())))
    server.middleware.append(SingleUseMiddleware(guard))
    return server


@pytest.fixture
def sdk_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="statecodec.mcp")
    return caplog


def rejection_reasons(caplog: pytest.LogCaptureFixture) -> list[str]:
    prefix = "requestState rejected on tools/call: "
    return [r.getMessage().removeprefix(prefix) for r in caplog.records if r.getMessage().startswith(prefix)]


def test_mcpserver_replay_of_a_completed_continuation_gets_the_sdk_refusal(sdk_logs: pytest.LogCaptureFixture) -> None:
    server = single_use_server(SingleUse(MemoryStore(), key=STORE_KEY))
    token = anyio.run(mcp_flows.round_one, server)
    assert "su1." not in token
    first = mcp_flows.round_two(server, token)
    assert not isinstance(first, mcp_flows.Rejection)
    replay = mcp_flows.round_two(server, token)
    assert isinstance(replay, mcp_flows.Rejection)
    assert (replay.code, replay.message) == (mcp_flows.INVALID_PARAMS, mcp_flows.REJECTION_MESSAGE)
    assert replay.data == {"reason": "invalid_request_state"}
    assert rejection_reasons(sdk_logs) == ["replayed"]


def test_mcpserver_a_presentation_for_another_request_consumes_nothing() -> None:
    server = single_use_server(SingleUse(MemoryStore(), key=STORE_KEY))
    token = anyio.run(mcp_flows.round_one, server)
    other = mcp_flows.round_two(server, token, {"name": "other-database"})
    assert isinstance(other, mcp_flows.Rejection)
    assert other.reason == "request binding"
    assert not isinstance(mcp_flows.round_two(server, token), mcp_flows.Rejection)


def test_every_flow_of_the_sdk_completes_with_single_use() -> None:
    """Tool, resolver tool (the SDK's own state), prompt and resource: each round's state claimed once."""
    from mcp import Client
    from mcp.types import ElicitResult

    guard = SingleUse(MemoryStore(), key=STORE_KEY)

    async def on_elicit(context: Any, params: Any) -> ElicitResult:
        key = next(iter(params.requested_schema["properties"]))
        return ElicitResult(action="accept", content={key: f"{key}-answer"})

    async def flows() -> list[str]:
        async with Client(single_use_server(guard), elicitation_callback=on_elicit) as client:
            tool = await client.call_tool(mcp_flows.TOOL, mcp_flows.TOOL_ARGS)
            deploy = await client.call_tool("deploy", {"name": "web"})
            prompt = await client.get_prompt("briefing", {"topic": "rotation"})
            report = await client.read_resource("report://2026")
        texts = [getattr(r.content[0], "text", "") for r in (tool, deploy)]
        return [*texts, getattr(prompt.messages[0].content, "text", ""), getattr(report.contents[0], "text", "")]

    assert anyio.run(flows) == [
        "provisioned orders in region-answer at size size-answer",
        "deployed web in region-answer on tier-answer",
        f"Brief audience-answer on rotation (state {mcp_flows.STATE_MARKER}).",
        f"report 2026 as format-answer (state {mcp_flows.STATE_MARKER})",
    ]
    assert guard.store.health()["live_claims"] == 6  # the six answered rounds, each claimed once


def test_lowlevel_server_with_single_use_appended_after_the_boundary() -> None:
    from examples import lowlevel_server

    from statecodec.mcp import SingleUseMiddleware

    server = lowlevel_server.build_server(AESGCMCodec(KeyRing.generate()))
    server.middleware.append(SingleUseMiddleware(SingleUse(MemoryStore(), key=STORE_KEY)))
    token = anyio.run(mcp_flows.round_one, server)
    orders = {"name": "orders"}
    assert anyio.run(lowlevel_server.retry, server, token, {"name": "payroll"}) == lowlevel_server.REFUSED
    assert anyio.run(lowlevel_server.retry, server, token, orders).startswith("provisioned orders")
    assert anyio.run(lowlevel_server.retry, server, token, orders) == lowlevel_server.REFUSED


# --- the command line ---------------------------------------------------------------------------------------------


@pytest.fixture
def store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATECODEC_STORE_URL", "memory")
    monkeypatch.setenv("STATECODEC_STORE_KEY", format_keys([STORE_KEY]))


@pytest.mark.usefixtures("store_env")
def test_revoke_refuses_a_store_inside_one_process(capsys: pytest.CaptureFixture[str]) -> None:
    from statecodec.cli.main import main

    assert main(["revoke", "--principal", ALICE]) == 2
    assert "redis://" in capsys.readouterr().err
    assert main(["revoke", "--scope", "tenant"]) == 2
    assert "NAME=VALUE" in capsys.readouterr().err


@pytest.mark.usefixtures("store_env")
def test_store_check_prints_health_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from statecodec.cli.main import main

    assert main(["store", "check", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"ready": True, "store": "memory", "live_claims": 0, "revocations": 0}


def test_the_sdk_unseals_once_and_the_store_is_claimed_once_per_retry() -> None:
    from statecodec.mcp import SingleUseMiddleware, security

    class Counting:
        def __init__(self) -> None:
            self.inner, self.unseals = AESGCMCodec(KeyRing.generate()), 0

        def seal(self, payload: bytes) -> str:
            return self.inner.seal(payload)

        def unseal(self, token: str) -> bytes:
            self.unseals += 1
            return self.inner.unseal(token)

    codec, store = Counting(), Recording(MemoryStore())
    server = mcp_flows.build_server(security(codec))
    server.middleware.append(SingleUseMiddleware(SingleUse(store, key=STORE_KEY)))
    token = anyio.run(mcp_flows.round_one, server)
    assert not isinstance(mcp_flows.round_two(server, token), mcp_flows.Rejection)
    assert (codec.unseals, store.claims) == (1, 1)
    assert isinstance(mcp_flows.round_two(server, token), mcp_flows.Rejection)
    assert (codec.unseals, store.claims) == (2, 2)
