"""Per-token transit when Vault is sealed, stopped or paused (silent): fail closed, fast, and keep no credential."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.server.request_state import RequestStateSecurity
from mcp.types import ElicitResult, InputRequiredResult, InputResponses, TextContent
from tests.mcp_flows import INVALID_PARAMS, REJECTION_MESSAGE, TOOL, TOOL_ARGS, build_server
from tests.plugins.vault import BaoServer, CallLog, Clock, client_for, reason
from tests.secrecy import assert_unreachable

from statecodec import InvalidToken, ProviderError, Reason
from statecodec.providers import RetryPolicy
from statecodec.providers.vault import VaultKeyWrapper, VaultTransitCodec, vault_client

pytestmark = pytest.mark.integration


@pytest.fixture
def live(vault_server_fresh: BaoServer) -> Iterator[tuple[BaoServer, Any, str]]:
    with client_for(vault_server_fresh, timeout=(0.5, 0.5)) as c:
        yield vault_server_fresh, c, vault_server_fresh.new_key()


def _fault(name: str, server: BaoServer) -> contextlib.AbstractContextManager[object]:
    if name == "paused":  # SIGSTOP: the kernel still accepts connections, nothing answers
        return server.paused()
    server.seal() if name == "sealed" else server.stop()
    return contextlib.nullcontext()


@pytest.mark.parametrize(
    ("fault", "phrase"),
    [("sealed", "sealed"), ("stopped", "cannot connect"), ("paused", "did not answer within the read timeout")],
)
def test_a_vault_that_cannot_answer_fails_closed(live: tuple[BaoServer, Any, str], fault: str, phrase: str) -> None:
    server, client, key = live
    codec = VaultTransitCodec(client, key, outage_backoff=0)
    plain = VaultTransitCodec(client, server.new_key(derived=False), outage_backoff=0)
    wrapper = VaultKeyWrapper(client, key, retry=RetryPolicy(attempts=1))
    token, plain_token = codec.seal(b"p"), plain.seal(b"p")
    with _fault(fault, server):
        with pytest.raises(InvalidToken) as info:
            codec.unseal(token)
        assert info.value.reason is Reason.PROVIDER
        assert info.value.__context__ is None
        assert reason(codec.reseal, token[:20]) is Reason.MALFORMED  # still refused for what it is, locally
        for call in (
            partial(codec.seal, b"p"),
            partial(codec.reseal, token),
            partial(plain.reseal, plain_token),
            partial(VaultTransitCodec, client, key),
            partial(wrapper.new_wrapped_key, {"purpose": "p"}),
        ):
            with pytest.raises(ProviderError, match=phrase) as err:
                call()
            # The `requests` error keeps the request, X-Vault-Token header and all: nothing may reach it.
            assert err.value.__context__ is None
            assert_unreachable(err.value, server.root_token.encode())
    if fault == "sealed":  # unsealed again, the same codec carries on: nothing to restart
        server.unseal()
        assert codec.unseal(token) == b"p"
        assert codec.unseal(codec.seal(b"q")) == b"q"


def test_the_codec_keeps_to_its_outage_window(live: tuple[BaoServer, Any, str]) -> None:
    server, client, key = live
    clock = Clock()
    codec = VaultTransitCodec(client, key, outage_backoff=1.0, clock=clock)
    token = codec.seal(b"p")
    server.seal()
    calls = CallLog(client)
    tried = []
    for _ in range(8):  # one call per simulated second
        before = calls.count()
        assert reason(codec.unseal, token) is Reason.PROVIDER
        tried.append(calls.count() > before)
        clock.now += 1.0
    assert tried == [True, True, False, True, False, False, False, True]  # windows of 1, 2 and 4 s
    with pytest.raises(ProviderError, match=r"sealed.*\(backing off\)"):
        codec.seal(b"p")  # inside the 8 s window: refused without a call
    assert calls.count() == 4
    server.unseal()
    clock.now += 8.0
    assert codec.unseal(token) == b"p"


def test_concurrent_callers_in_a_stall_open_one_window(vault_server_fresh: BaoServer) -> None:
    """Eight calls in flight when OpenBao is paused (SIGSTOP) count as one failure, not eight.

    Counted once per call, the window would double eight times (to the 30 s cap); counted once, the codec serves
    again within one base window of SIGCONT. The deadline allows ten seconds more, still far short of the cap.
    """
    server, base, callers = vault_server_fresh, 1.0, 8
    key = server.new_key()
    with client_for(server, timeout=(0.5, 0.5), pool_size=callers) as client:
        codec = VaultTransitCodec(client, key, outage_backoff=base)
        token = codec.seal(b"p")
        start = threading.Barrier(callers)
        reasons: list[Reason] = []

        def caller() -> None:
            start.wait(timeout=30)
            reasons.append(reason(codec.unseal, token))

        threads = [threading.Thread(target=caller) for _ in range(callers)]
        with server.paused():
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
        resumed = time.monotonic()
        assert not any(t.is_alive() for t in threads)
        assert reasons == [Reason.PROVIDER] * callers
        served, refusals = False, set()
        while not served and time.monotonic() < resumed + base + 10.0:
            try:
                served = codec.unseal(token) == b"p"
            except InvalidToken as exc:
                refusals.add(exc.reason)
                time.sleep(0.05)
        assert served, "still refusing after one base window (plus ten seconds) of a healthy Vault"
        assert refusals <= {Reason.PROVIDER}


def test_server_keeps_serving_while_vault_is_down(live: tuple[BaoServer, Any, str], caplog: Any) -> None:
    server, client, key = live
    caplog.set_level(logging.WARNING, logger="mcp.server.request_state")
    mcp_server = build_server(RequestStateSecurity(codec=VaultTransitCodec(client, key)))
    mcp_server.tool(name="ping")(lambda: "pong")
    answer: InputResponses = {"region": ElicitResult(action="accept", content={"region": "eu"})}

    async def scenario() -> None:
        async with Client(mcp_server) as c:
            first = await c.session.call_tool(TOOL, TOOL_ARGS, allow_input_required=True)
            assert isinstance(first, InputRequiredResult)
            server.stop()
            state = first.request_state
            with pytest.raises(MCPError) as info:  # round two cannot be checked: the frozen refusal
                await c.session.call_tool(TOOL, TOOL_ARGS, input_responses=answer, request_state=state)
            assert (info.value.error.code, info.value.error.message) == (INVALID_PARAMS, REJECTION_MESSAGE)
            with pytest.raises(MCPError):  # a new round one cannot be sealed: an error for that request only
                await c.session.call_tool(TOOL, TOOL_ARGS, allow_input_required=True)
            assert (await c.call_tool("ping", {})).content == [TextContent(type="text", text="pong")]

    anyio.run(scenario)
    rejections = [r.getMessage() for r in caplog.records if "requestState rejected" in r.getMessage()]
    assert rejections == ["requestState rejected on tools/call: provider"]


def test_unreachable_at_start_is_a_clear_error() -> None:
    secret_id = "an-approle-secret-id"
    client = vault_client("http://127.0.0.1:1", token="s.a-vault-token", timeout=(0.5, 0.5))  # nothing listens
    with pytest.raises(ProviderError, match=r"cannot use vault transit key transit/k at http://127\.0\.0\.1:1: read"):
        VaultTransitCodec(client, "k")
    client.adapter.close()
    with pytest.raises(ProviderError, match="AppRole login") as info:
        vault_client("http://127.0.0.1:1", role_id="r", secret_id=secret_id, timeout=(0.5, 0.5))
    assert info.value.__context__ is None
    assert_unreachable(info.value, secret_id.encode())
