"""Per-token transit when Vault is sealed, stopped or silent: fail closed, fast, and keep serving.

Each test gets its own OpenBao server (`vault_server_fresh`) because it seals,
pauses or stops it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import ElicitResult, InputRequiredResult, InputResponses, TextContent
from tests.mcp_flows import INVALID_PARAMS, REJECTION_MESSAGE, TOOL, TOOL_ARGS, build_server
from tests.plugins.vault import BaoServer, CallLog, assert_secret_unreachable, client_for

from statecodec import InvalidToken, ProviderError, Reason
from statecodec.mcp import security
from statecodec.providers import RetryPolicy
from statecodec.providers.vault import MAX_OUTAGE_BACKOFF, VaultKeyWrapper, VaultTransitCodec, vault_client

pytestmark = pytest.mark.integration


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def live(vault_server_fresh: BaoServer) -> Iterator[tuple[BaoServer, Any, str]]:
    server = vault_server_fresh
    key = server.new_key()
    with client_for(server, timeout=(0.5, 0.5)) as c:
        yield server, c, key


def test_sealed_vault(live: tuple[BaoServer, Any, str]) -> None:
    server, client, key = live
    codec = VaultTransitCodec(client, key, outage_backoff=0)
    token = codec.seal(b"p")
    server.seal()
    with pytest.raises(InvalidToken) as info:
        codec.unseal(token)
    assert info.value.reason is Reason.PROVIDER
    assert info.value.__context__ is None
    with pytest.raises(ProviderError, match="sealed") as err:
        codec.seal(b"p")
    assert server.root_token not in str(err.value)
    with pytest.raises(ProviderError, match="sealed"):
        VaultTransitCodec(client, key)
    with pytest.raises(ProviderError, match="sealed"):
        codec.reseal(token)
    # Unsealed again, the same codec carries on: nothing to restart.
    server.unseal()
    assert codec.unseal(token) == b"p"
    assert codec.unseal(codec.seal(b"q")) == b"q"


def test_reseal_on_a_non_derived_key_when_vault_is_down(vault_server_fresh: BaoServer) -> None:
    key = vault_server_fresh.new_key(derived=False)
    with client_for(vault_server_fresh) as c:
        codec = VaultTransitCodec(c, key, outage_backoff=0)
        token = codec.seal(b"p")
        vault_server_fresh.seal()
        with pytest.raises(ProviderError, match="could not decrypt"):
            codec.reseal(token)
        # A token that fails the local checks is still refused for what it is.
        with pytest.raises(InvalidToken) as info:
            codec.reseal(token[:20])
        assert info.value.reason is Reason.MALFORMED


def test_outage_windows_double_and_reset(live: tuple[BaoServer, Any, str]) -> None:
    server, client, key = live
    clock = FakeClock()
    calls = CallLog(client)
    codec = VaultTransitCodec(client, key, outage_backoff=1.0, clock=clock)
    token = codec.seal(b"p")
    server.seal()
    calls.reset()
    tried_at = []
    for _ in range(16):  # one call per simulated second
        before = calls.count()
        with pytest.raises(InvalidToken):
            codec.unseal(token)
        if calls.count() > before:
            tried_at.append(clock.now - 1000.0)
        clock.now += 1.0
    # Windows of 1, 2, 4 and 8 seconds between the calls that reached Vault.
    assert tried_at == [0.0, 1.0, 3.0, 7.0, 15.0]
    server.unseal()
    clock.now += 16.0
    assert codec.unseal(token) == b"p"
    # A success resets the window to `outage_backoff`.
    server.seal()
    calls.reset()
    with pytest.raises(InvalidToken):
        codec.unseal(token)
    clock.now += 1.0
    with pytest.raises(InvalidToken):
        codec.unseal(token)
    assert calls.count() == 2


def test_a_long_outage_keeps_the_window_at_the_cap(live: tuple[BaoServer, Any, str]) -> None:
    """Days of outage (thousands of expired windows) neither overflow nor outgrow the cap."""
    server, client, key = live
    clock = FakeClock()
    calls = CallLog(client)
    codec = VaultTransitCodec(client, key, outage_backoff=1.0, clock=clock)
    token = codec.seal(b"p")
    server.seal()
    calls.reset()
    for _ in range(1100):  # each call finds the previous window expired, so each one doubles it
        with pytest.raises(InvalidToken) as info:
            codec.unseal(token)
        assert info.value.reason is Reason.PROVIDER
        clock.now += MAX_OUTAGE_BACKOFF
    assert calls.count() == 1100
    # The window is at the cap: refused without Vault just before it ends, tried again at its end.
    with pytest.raises(InvalidToken):
        codec.unseal(token)
    clock.now += MAX_OUTAGE_BACKOFF - 0.5
    with pytest.raises(InvalidToken):
        codec.unseal(token)
    assert calls.count() == 1101
    server.unseal()
    clock.now += 0.5
    assert codec.unseal(token) == b"p"


def test_concurrent_callers_in_a_stall_open_one_window(vault_server_fresh: BaoServer) -> None:
    """Eight calls in flight when Vault freezes count as one failure: it serves again one window later.

    The real OpenBao process is paused (SIGSTOP) while eight threads unseal at
    once; each call waits out the read timeout. Counted once per call, the
    window would double eight times (to `MAX_OUTAGE_BACKOFF`); counted once, it
    is `outage_backoff`, so after SIGCONT the codec serves again within one
    base window. The deadline below is generous (ten seconds over that bound)
    and still far short of the cap.
    """
    server = vault_server_fresh
    key = server.new_key()
    base = 1.0
    callers = 8
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
        deadline = resumed + base + 10.0
        served = False
        refusals: set[Reason] = set()
        while not served and time.monotonic() < deadline:
            try:
                served = codec.unseal(token) == b"p"
            except InvalidToken as exc:
                refusals.add(exc.reason)
                time.sleep(0.05)
        assert served, "still refusing after one base window (plus ten seconds) of a healthy Vault"
        assert refusals <= {Reason.PROVIDER}


def test_stopped_vault_and_outage_backoff(live: tuple[BaoServer, Any, str]) -> None:
    server, client, key = live
    clock = FakeClock()
    calls = CallLog(client)
    codec = VaultTransitCodec(client, key, outage_backoff=5.0, clock=clock)
    token = codec.seal(b"p")
    server.stop()
    calls.reset()
    with pytest.raises(InvalidToken) as info:
        codec.unseal(token)
    assert info.value.reason is Reason.PROVIDER
    assert calls.count() == 1
    # Within the backoff window nothing waits on the network: both directions fail at once.
    with pytest.raises(InvalidToken) as info:
        codec.unseal(token)
    assert info.value.reason is Reason.PROVIDER
    with pytest.raises(ProviderError, match="cannot connect"):
        codec.seal(b"p")
    assert calls.count() == 1
    # Junk is still refused for what it is, without the network.
    with pytest.raises(InvalidToken) as info:
        codec.unseal("junk")
    assert info.value.reason is Reason.MALFORMED
    clock.now += 5.0
    with pytest.raises(ProviderError, match="cannot connect"):
        codec.seal(b"p")
    assert calls.count() == 2
    with pytest.raises(ProviderError, match="cannot connect"):
        VaultTransitCodec(client, key)


def test_silent_vault_times_out(live: tuple[BaoServer, Any, str]) -> None:
    """A Vault that accepts connections but never answers costs one bounded read timeout."""
    server, client, key = live
    codec = VaultTransitCodec(client, key, outage_backoff=0)
    token = codec.seal(b"p")
    host, port = server.addr.removeprefix("http://").split(":")
    server.stop()
    client.adapter.session.close()  # drop pooled connections to the stopped server
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        silent.bind((host, int(port)))
        silent.listen(16)  # never accepted: the kernel completes the handshake, nobody answers
        with pytest.raises(InvalidToken) as info:
            codec.unseal(token)
        assert info.value.reason is Reason.PROVIDER
        with pytest.raises(ProviderError, match="did not answer within the read timeout"):
            codec.seal(b"p")


def test_server_keeps_serving_while_vault_is_down(
    live: tuple[BaoServer, Any, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, client, key = live
    caplog.set_level(logging.WARNING, logger="mcp.server.request_state")
    codec = VaultTransitCodec(client, key)
    mcp_server = build_server(security(codec))

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
            assert info.value.error.code == INVALID_PARAMS
            assert info.value.error.message == REJECTION_MESSAGE
            # A new round one cannot be sealed: an error for that request only.
            with pytest.raises(MCPError):
                await c.session.call_tool(TOOL, TOOL_ARGS, allow_input_required=True)
            # Everything that does not need Vault keeps working on the same session.
            result = await c.call_tool("ping", {})
            block = result.content[0]
            assert isinstance(block, TextContent)
            assert block.text == "pong"
            tools = await c.list_tools()
            assert "ping" in {t.name for t in tools.tools}

    anyio.run(scenario)
    rejections = [r.getMessage() for r in caplog.records if "requestState rejected" in r.getMessage()]
    assert rejections == ["requestState rejected on tools/call: provider"]


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_unreachable_at_start_is_a_clear_error() -> None:
    port = _closed_port()
    token = "s.unreachable-vault-token"
    client = vault_client(f"http://127.0.0.1:{port}", token=token, timeout=(0.5, 0.5))
    try:
        with pytest.raises(
            ProviderError, match=f"cannot use vault transit key transit/k at http://127.0.0.1:{port}"
        ) as info:
            VaultTransitCodec(client, "k")
        # The requests error keeps the request, X-Vault-Token header and all: it must not be reachable.
        assert_secret_unreachable(info.value, token.encode())
        wrapper = VaultKeyWrapper(client, "k", retry=RetryPolicy(attempts=1))
        with pytest.raises(ProviderError, match="cannot connect") as info:
            wrapper.new_wrapped_key({"purpose": "p"})
        assert_secret_unreachable(info.value, token.encode())
    finally:
        client.adapter.close()


def test_a_failed_approle_login_keeps_no_secret_id() -> None:
    secret_id = "an-approle-secret-id"
    with pytest.raises(ProviderError, match="AppRole login") as info:
        vault_client(f"http://127.0.0.1:{_closed_port()}", role_id="r", secret_id=secret_id, timeout=(0.5, 0.5))
    assert_secret_unreachable(info.value, secret_id.encode())
