"""Per-token transit when Vault is sealed, stopped or silent: fail closed, fast, and keep serving.

Each test gets its own OpenBao server (`vault_server_fresh`) because it seals, pauses or stops it.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import ElicitResult, InputRequiredResult, InputResponses, TextContent
from tests.mcp_flows import INVALID_PARAMS, REJECTION_MESSAGE, TOOL, TOOL_ARGS, build_server
from tests.plugins.vault import BaoServer, CallLog, client_for
from tests.secrecy import assert_unreachable

from statecodec import InvalidToken, ProviderError, Reason
from statecodec.mcp import security
from statecodec.providers import RetryPolicy
from statecodec.providers.vault import VaultKeyWrapper, VaultTransitCodec, vault_client

pytestmark = pytest.mark.integration


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def live(vault_server_fresh: BaoServer) -> Iterator[tuple[BaoServer, Any, str]]:
    with client_for(vault_server_fresh, timeout=(0.5, 0.5)) as c:
        yield vault_server_fresh, c, vault_server_fresh.new_key()


def _fault(name: str, server: BaoServer, client: Any) -> contextlib.AbstractContextManager[object]:
    """Seal or stop the server; or, `silent`, stop it and take its port with a socket that never answers."""
    if name == "sealed":
        server.seal()
        return contextlib.nullcontext()
    host, port = server.addr.removeprefix("http://").split(":")
    server.stop()
    if name == "stopped":
        return contextlib.nullcontext()
    client.adapter.session.close()  # drop pooled connections to the stopped server
    silent = socket.socket()
    silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    silent.bind((host, int(port)))
    silent.listen(16)  # never accepted: the kernel completes the handshake, nobody answers
    return silent


@pytest.mark.parametrize(
    ("fault", "phrase"),
    [("sealed", "sealed"), ("stopped", "cannot connect"), ("silent", "did not answer within the read timeout")],
)
def test_a_vault_that_cannot_answer_fails_closed(live: tuple[BaoServer, Any, str], fault: str, phrase: str) -> None:
    server, client, key = live
    codec = VaultTransitCodec(client, key, outage_backoff=0)
    plain = VaultTransitCodec(client, server.new_key(derived=False), outage_backoff=0)
    token, plain_token = codec.seal(b"p"), plain.seal(b"p")
    with _fault(fault, server, client):
        with pytest.raises(InvalidToken) as info:
            codec.unseal(token)
        assert info.value.reason is Reason.PROVIDER
        assert info.value.__context__ is None
        for call in (partial(codec.seal, b"p"), partial(codec.reseal, token), partial(plain.reseal, plain_token)):
            with pytest.raises(ProviderError, match=phrase) as err:
                call()
            assert server.root_token not in str(err.value)
        with pytest.raises(InvalidToken) as info:
            codec.reseal(token[:20])  # a token that fails the local checks is still refused for what it is
        assert info.value.reason is Reason.MALFORMED
        with pytest.raises(ProviderError, match=phrase):
            VaultTransitCodec(client, key)
    if fault == "sealed":  # unsealed again, the same codec carries on: nothing to restart
        server.unseal()
        assert codec.unseal(token) == b"p"
        assert codec.unseal(codec.seal(b"q")) == b"q"


def test_the_codec_keeps_to_its_outage_window(live: tuple[BaoServer, Any, str]) -> None:
    server, client, key = live
    clock = FakeClock()
    codec = VaultTransitCodec(client, key, outage_backoff=1.0, clock=clock)
    token = codec.seal(b"p")
    server.seal()
    calls = CallLog(client)
    tried = []
    for _ in range(8):  # one call per simulated second
        before = calls.count()
        with pytest.raises(InvalidToken):
            codec.unseal(token)
        tried.append(calls.count() > before)
        clock.now += 1.0
    assert tried == [True, True, False, True, False, False, False, True]  # windows of 1, 2 and 4 s
    with pytest.raises(ProviderError, match=r"sealed.*\(backing off\)"):
        codec.seal(b"p")  # inside the 8 s window: refused without a call
    assert calls.count() == 4
    server.unseal()
    clock.now += 8.0
    assert codec.unseal(token) == b"p"
    server.seal()  # the answer reset the window to `outage_backoff`: 1 s, then 2 s
    for _ in range(3):
        with pytest.raises(InvalidToken):
            codec.unseal(token)
        clock.now += 1.0
    assert calls.count() == 7


def test_concurrent_callers_in_a_stall_open_one_window(vault_server_fresh: BaoServer) -> None:
    """Eight calls in flight when Vault freezes count as one failure: it serves again one window later.

    The real OpenBao process is paused (SIGSTOP) while eight threads unseal at
    once; each call waits out the read timeout. Counted once per call, the
    window would double eight times (to the 30 s cap); counted once, it is
    `outage_backoff`, so after SIGCONT the codec serves again within one base
    window. The deadline below is generous (ten seconds over that bound) and
    still far short of the cap.
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
            try:
                codec.unseal(token)
            except InvalidToken as exc:
                reasons.append(exc.reason)

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


def test_server_keeps_serving_while_vault_is_down(
    live: tuple[BaoServer, Any, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, client, key = live
    caplog.set_level(logging.WARNING, logger="mcp.server.request_state")
    mcp_server = build_server(security(VaultTransitCodec(client, key)))

    @mcp_server.tool(name="ping")
    async def ping() -> str:
        return "pong"

    answer: InputResponses = {"region": ElicitResult(action="accept", content={"region": "eu"})}

    async def scenario() -> None:
        async with Client(mcp_server) as c:
            first = await c.session.call_tool(TOOL, TOOL_ARGS, allow_input_required=True)
            assert isinstance(first, InputRequiredResult)
            assert first.request_state is not None
            server.stop()
            # Round two: the token cannot be checked, so it is refused with the frozen error.
            with pytest.raises(MCPError) as info:
                await c.session.call_tool(
                    TOOL,
                    TOOL_ARGS,
                    input_responses=answer,
                    request_state=first.request_state,
                    allow_input_required=True,
                )
            assert (info.value.error.code, info.value.error.message) == (INVALID_PARAMS, REJECTION_MESSAGE)
            with pytest.raises(MCPError):  # a new round one cannot be sealed: an error for that request only
                await c.session.call_tool(TOOL, TOOL_ARGS, allow_input_required=True)
            block = (await c.call_tool("ping", {})).content[0]  # the same session serves what needs no Vault
            assert isinstance(block, TextContent)
            assert block.text == "pong"

    anyio.run(scenario)
    rejections = [r.getMessage() for r in caplog.records if "requestState rejected" in r.getMessage()]
    assert rejections == ["requestState rejected on tools/call: provider"]


def test_failures_at_start_keep_no_credential() -> None:
    """The `requests` error keeps the request, X-Vault-Token header and all: nothing may reach it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        addr = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed once the block ends
    token, secret_id = "s.unreachable-vault-token", "an-approle-secret-id"
    client = vault_client(addr, token=token, timeout=(0.5, 0.5))
    try:
        with pytest.raises(ProviderError, match=f"cannot use vault transit key transit/k at {addr}") as info:
            VaultTransitCodec(client, "k")
        assert info.value.__context__ is None
        assert_unreachable(info.value, token.encode())
        with pytest.raises(ProviderError, match="cannot connect") as info:
            VaultKeyWrapper(client, "k", retry=RetryPolicy(attempts=1)).new_wrapped_key({"purpose": "p"})
        assert info.value.__context__ is None
    finally:
        client.adapter.close()
    with pytest.raises(ProviderError, match="AppRole login") as info:
        vault_client(addr, role_id="r", secret_id=secret_id, timeout=(0.5, 0.5))
    assert info.value.__context__ is None
    assert_unreachable(info.value, secret_id.encode())
