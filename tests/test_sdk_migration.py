"""Moving from ``RequestStateSecurity(keys=[...])`` to a statecodec codec drops no flow in flight, and the SDK's
keys stop opening anything once the migration window closes."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.server.mcpserver import RequestStateSecurity
from mcp.types import CallToolResult, ElicitResult, InputRequiredResult

from statecodec import AESGCMCodec, InvalidToken, Reason, generate_key
from statecodec.sdk_migration import SDK_FORMAT_PREFIX, SDKKeysMigration
from statecodec.testing import assert_conformant
from tests.mcp_flows import TOOL, accept_token, assert_mcp_rejects, build_server, mint_token
from tests.plugins import Clock

SDK_KEY, OTHER_SDK_KEY = generate_key(), generate_key()
NEW = AESGCMCodec([generate_key()])
FAST: dict[str, Any] = {"max_examples": 10, "max_payload": 4096, "max_mutations": 2000, "oversized_length": 1 << 20}
ANSWERS: dict[str, Any] = {
    "region": {"region": ElicitResult(action="accept", content={"region": "eu"})},
    "size": {"size": ElicitResult(action="accept", content={"size": "xl"})},
}
OLD = RequestStateSecurity(keys=[SDK_KEY])  # the SDK's own keys, before the migration


def phase_two(clock: Clock | None = None) -> RequestStateSecurity:
    clock = clock or Clock(time.time())
    return RequestStateSecurity(codec=SDKKeysMigration(NEW, [SDK_KEY], sdk_tokens_until=clock.now + 600, clock=clock))


def step(policy: RequestStateSecurity, flow: str, state: str | None = None) -> InputRequiredResult | CallToolResult:
    """One round of `flow` (the `TOOL` call for name `flow`) on a fresh server under `policy`, answering the
    question the round of `state` asked; a refused round raises `MCPError`."""
    server = build_server(policy)
    kwargs: dict[str, Any] = {"allow_input_required": True}
    if state is not None:
        kwargs["request_state"] = state
        kwargs["input_responses"] = ANSWERS["region" if _ROUND[state] == 1 else "size"]

    async def go() -> Any:
        async with Client(server) as client:
            return await client.session.call_tool(TOOL, {"name": flow}, **kwargs)

    result: InputRequiredResult | CallToolResult = anyio.run(go)
    if isinstance(result, InputRequiredResult) and result.request_state is not None:
        _ROUND[result.request_state] = 1 if state is None else _ROUND[state] + 1
    return result


_ROUND: dict[str, int] = {}  # token -> the round that minted it, so `step` answers the question that round asked


def advance(policy: RequestStateSecurity, flow: str, state: str | None = None) -> str:
    """The next round's token of `flow` from a server under `policy`."""
    result = step(policy, flow, state)
    assert isinstance(result, InputRequiredResult), result
    assert result.request_state is not None
    return result.request_state


def finish(policy: RequestStateSecurity, flow: str, state: str) -> str:
    """Run `flow` to completion from `state` on servers under `policy`; its final text."""
    while isinstance(result := step(policy, flow, state), InputRequiredResult):
        assert result.request_state is not None
        state = result.request_state
    assert not result.is_error, result
    return str(getattr(result.content[0], "text", ""))


def test_flows_in_flight_on_the_sdk_keys_complete_on_the_migration_codec() -> None:
    in_flight = {f"flow-{i}": advance(OLD, f"flow-{i}") for i in range(3)}  # asked for the region
    for i in range(3, 6):  # answered the region on the old server too: asked for the size
        in_flight[f"flow-{i}"] = advance(OLD, f"flow-{i}", advance(OLD, f"flow-{i}"))
    assert all(token.startswith(SDK_FORMAT_PREFIX) for token in in_flight.values())

    new = phase_two()
    completed, dropped = {}, []
    for flow, token in in_flight.items():
        try:
            completed[flow] = finish(new, flow, token)
        except MCPError:
            dropped.append(flow)
    assert dropped == []
    assert completed == {flow: f"provisioned {flow} in eu at size xl" for flow in in_flight}
    # New rounds are the new codec's tokens.
    fresh = advance(new, "flow-new")
    assert not fresh.startswith(SDK_FORMAT_PREFIX)
    assert NEW.unseal(fresh)


def test_each_phase_opens_the_tokens_of_the_phases_beside_it_during_a_rollout() -> None:
    two = phase_two()
    one = RequestStateSecurity(codec=SDKKeysMigration(NEW, [SDK_KEY], seal_with_sdk=True))  # phase one
    # Rolling out phase one: old and phase-one instances share flows both ways.
    token = advance(one, "a", advance(OLD, "a"))
    assert token.startswith(SDK_FORMAT_PREFIX)  # phase one still mints SDK tokens, which old instances open
    assert finish(OLD, "a", token) == "provisioned a in eu at size xl"
    # Rolling out phase two: phase-one and phase-two instances share flows both ways.
    token = advance(two, "b", advance(one, "b"))
    assert not token.startswith(SDK_FORMAT_PREFIX)
    assert finish(one, "b", token) == "provisioned b in eu at size xl"


def test_after_the_window_the_sdk_keys_open_nothing() -> None:
    clock = Clock(time.time())
    policy = phase_two(clock)
    sdk_token, new_token = mint_token(OLD), mint_token(policy)
    clock.now += 599
    accept_token(policy, sdk_token)
    clock.now += 1
    # Refused by the migration codec itself (the SDK's own expiry, on its real clock, has not come yet).
    assert_mcp_rejects(policy, sdk_token, reason="unknown_key")
    accept_token(policy, new_token)


@pytest.mark.parametrize("seal_with_sdk", [True, False], ids=["phase-one", "phase-two"])
def test_both_phases_are_conformant(seal_with_sdk: bool) -> None:
    until = None if seal_with_sdk else time.time() + 3600
    codec = SDKKeysMigration(NEW, [SDK_KEY], seal_with_sdk=seal_with_sdk, sdk_tokens_until=until)
    foreign = SDKKeysMigration(NEW, [OTHER_SDK_KEY], seal_with_sdk=True) if seal_with_sdk else AESGCMCodec.ephemeral()
    assert_conformant(codec, foreign=foreign, **FAST)


def test_sdk_refusals_keep_their_reason_and_no_chain() -> None:
    codec = SDKKeysMigration(NEW, [SDK_KEY], sdk_tokens_until=time.time() + 600)
    sdk_token = OLD.codec.seal(b"payload")
    assert codec.unseal(sdk_token) == b"payload"
    tampered = sdk_token[:-3] + ("A" if sdk_token[-3] != "A" else "B") + sdk_token[-2:]
    foreign = RequestStateSecurity(keys=[OTHER_SDK_KEY]).codec.seal(b"payload")
    cases = {tampered: Reason.SEAL, foreign: Reason.UNKNOWN_KEY, "v1.@@": Reason.MALFORMED}
    cases |= {"v1.\u00e9": Reason.MALFORMED, "v1." + "A" * (1 << 20): Reason.OVERSIZED}
    for token, reason in cases.items():
        with pytest.raises(InvalidToken) as info:
            codec.unseal(token)
        assert (info.value.reason, info.value.__cause__, info.value.__context__) == (reason, None, None)


def test_repr_names_the_codec_and_the_phase() -> None:  # misconfigurations: tests/test_redteam.py
    codec = SDKKeysMigration(NEW, [SDK_KEY], seal_with_sdk=True)
    assert repr(codec) == f"SDKKeysMigration({NEW!r}, seal_with_sdk=True)"
