"""statecodec on the MCP SDK: any codec as the SDK's request-state codec, and single use, on real servers.

Threats: a refusal logged as "codec error" with a traceback; single use where it sees sealed tokens; a revocation
dodged by presenting another user's token; a stalled store holding requests or a sync tool's threads; a store that
refuses the first token after start, or is unreachable without a word."""

from __future__ import annotations

import logging
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest
from examples import fleet_server
from mcp.server.mcpserver import RequestStateSecurity
from mcp.server.request_state import authenticated_principal

from statecodec import AESGCMCodec, ConfigurationError, XAESGCMCodec, format_keys, generate_key
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.mcp import SingleUseMiddleware, from_env, security_from_env, store_from_env
from statecodec.store import Store
from tests.codecs import flip
from tests.integration.fleet_harness import call_tool, free_port, retry
from tests.integration.fleet_harness import round_one as http_round_one
from tests.mcp_flows import (
    HTTP,
    KEY,
    KINDS,
    REJECTION_MESSAGE,
    Rejection,
    accept_token,
    assert_mcp_rejects,
    build_server,
    guarded,
    mint_token,
    refused,
    rejections,
    round_one,
    round_two,
    run_mcp_flows,
    serving,
    single_use,
)
from tests.plugins.redis import RedisServer

OTHER_KEY = generate_key()


@pytest.mark.parametrize("kind", KINDS)
def test_flows_complete_through_the_codec(kind: str) -> None:  # AES-256-GCM: with single use, below
    report = run_mcp_flows(XAESGCMCodec([KEY]), kind=kind)
    assert len(report.questions) == 6
    assert {b64u_decode(token)[0] for token in report.sealed} == {XAESGCMCodec.VERSION}


@pytest.mark.parametrize(
    ("codec_cls", "tamper", "reason"),
    [
        (XAESGCMCodec, flip, "seal"),
        (AESGCMCodec, flip, "seal"),
        (AESGCMCodec, lambda t: flip(t, at=20), "seal"),
        (AESGCMCodec, lambda t: t[:10], "malformed"),
        (AESGCMCodec, lambda t: t[:-1], ("malformed", "seal")),  # one char short may still be canonical
        (AESGCMCodec, lambda t: t + "=", "malformed"),
        (AESGCMCodec, lambda t: t[:5] + "+" + t[6:], "malformed"),
        (AESGCMCodec, lambda t: t + "A" * 200_000, "oversized"),
        (AESGCMCodec, lambda t: b64u_encode(bytes([0x7F]) + b64u_decode(t)[1:]), "format"),
    ],
    ids=["xaes-tag", "tag", "body", "truncated", "one-char-short", "padded", "std-alphabet", "oversized", "version"],
)
def test_the_plain_sdk_line_logs_the_reason_without_a_traceback(
    codec_cls: type[AESGCMCodec], tamper: Any, reason: str | tuple[str]
) -> None:
    # RequestStateSecurity(codec=...) with the codec as it is, on a real MCPServer: a tampered token gets the SDK's
    # frozen answer, and our reason is logged without a traceback (assert_mcp_rejects checks the log).
    assert assert_mcp_rejects(codec_cls([KEY]), tamper, reason=reason) in reason


def test_security_from_env_is_the_sdks_policy_around_the_configured_codec_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {"STATECODEC_KEYS": format_keys([KEY, OTHER_KEY]), "STATECODEC_CODEC": "xaesgcm", "STATECODEC_TTL": "5"}
    policy = security_from_env(environ=env, audience="billing")
    assert isinstance(policy.codec, XAESGCMCodec)
    assert policy.codec.key_ids == XAESGCMCodec([KEY, OTHER_KEY]).key_ids
    assert (policy.ttl, policy.audience, policy.bind_principal) == (5, "billing", authenticated_principal)
    assert security_from_env(environ=env, bind_principal=None, ttl=30).bind_principal is None
    with pytest.raises(ConfigurationError, match="no codec configured"):
        security_from_env(environ={})
    monkeypatch.setitem(sys.modules, "mcp.server.request_state", None)  # without the SDK: an ImportError
    with pytest.raises(ImportError, match=r"pip install 'statecodec\[mcp\]'"):  # naming the extra
        security_from_env(environ=env)


def test_a_ttl_in_code_longer_than_a_reloading_codec_waits_out_stops_the_start(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    ring.write_text(format_keys([KEY]), encoding="utf-8")
    env = {"STATECODEC_KEYS_FILE": str(ring), "STATECODEC_RELOAD_INTERVAL": "5"}  # STATECODEC_TTL: 600 s
    with pytest.raises(ConfigurationError, match="STATECODEC_TTL=3600"):
        from_env(environ=env, ttl=3600)  # its tokens would outlive the wait before their key is retired


def test_principal_binding_and_expiry_are_enforced_by_the_sdk_around_our_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    codec, clock = AESGCMCodec([KEY]), SimpleNamespace(now=1_000_000.0)
    monkeypatch.setattr("mcp.server.request_state.time", SimpleNamespace(time=lambda: clock.now))
    token = mint_token(RequestStateSecurity(codec=codec, bind_principal=lambda ctx: "alice", ttl=60.0))
    accept_token(RequestStateSecurity(codec=codec, bind_principal=lambda ctx: "alice"), token)
    assert_mcp_rejects(RequestStateSecurity(codec=codec, bind_principal=lambda ctx: "bob"), token, reason="principal")
    assert_mcp_rejects(RequestStateSecurity(codec=codec, bind_principal=None), token, reason="principal drift")
    policy = RequestStateSecurity(codec=codec, ttl=60.0)
    token = mint_token(policy)
    clock.now += 59.0
    accept_token(policy, token)
    clock.now += 1.0
    assert_mcp_rejects(policy, token, reason="expired")


# --- single use on the SDK's paths ------------------------------------------------------------------------------

DEMO_ISSUER = str(fleet_server.DEMO_ISSUER)


def single_use_server(middleware: SingleUseMiddleware, kind: str = "MCPServer", **policy: Any) -> Any:
    security = RequestStateSecurity(codec=AESGCMCodec([KEY]), **policy)
    return build_server(security, kind=kind, **guarded(middleware, kind))


@pytest.mark.parametrize("kind", KINDS)
def test_every_flow_of_the_sdk_completes_once_and_a_replay_is_refused(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    middleware = single_use()
    server = single_use_server(middleware, kind)
    token = anyio.run(round_one, server)
    assert refused(server, token, {"name": "payroll"}) == "request binding"  # other arguments: the token is not used
    assert not isinstance(round_two(server, token), Rejection)
    replay = round_two(server, token)
    assert isinstance(replay, Rejection)
    assert (replay.code, replay.message) == (-32602, REJECTION_MESSAGE)
    assert replay.data == {"reason": "invalid_request_state"}  # the SDK's frozen answer
    assert rejections(caplog.records) == ["request binding", "replayed"]  # the boundary's, then single use's
    # Tool, resolver tool (the SDK's own state), prompt and resource: every round completes, each token once.
    run_mcp_flows(AESGCMCodec([KEY]), kind=kind, **guarded(middleware, kind))


def test_single_use_before_the_boundary_is_refused_at_start_up_on_every_server() -> None:
    # Before the boundary, the middleware would see sealed tokens: a stamp could be lifted onto another state.
    middleware = single_use()
    server, lowlevel = single_use_server(middleware), single_use_server(middleware, "Server")
    for chain in (server.middleware, lowlevel.middleware):  # the lowlevel Server takes it there silently
        chain.remove(middleware)
        chain.insert(0, middleware)
    absent = single_use_server(single_use())
    absent.middleware.pop()  # started by the lifespan, but not in the chain at all
    fastmcp = build_server(RequestStateSecurity(codec=AESGCMCodec([KEY])), kind="FastMCP",
                           middleware=[middleware], lifespan=middleware.lifespan)  # FastMCP's chain: before it
    for wrong in (server, lowlevel, absent, fastmcp):
        with pytest.raises(ConfigurationError, match="must come after the SDK's RequestStateBoundary"):
            anyio.run(round_one, wrong)  # the lifespan refuses before the first request


# --- over HTTP, as the fleet example serves it: principals, a stalled store, an unreachable store -----------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_stamp_records_the_minting_principal_whatever_bind_principal_is(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    # With bind_principal=None the SDK lets anyone present a token: a revoked user's token stays revoked. Operator
    # scopes are recorded at mint too (here the tool's argument), never taken from the presenter.
    middleware = single_use(scopes=lambda ctx: {"tenant": str((ctx.params or {})["arguments"]["name"])})

    async def body() -> list[bool]:
        async with serving(middleware, kind, bind_principal=None) as client:
            alice, carol = [await http_round_one(client, HTTP, subject=who) for who in ("alice", "carol")]
            billing = await http_round_one(client, HTTP, subject="carol", name="billing")
            await middleware.guard.revoke(principal="alice", issuer=DEMO_ISSUER)
            await middleware.guard.revoke(scope=("tenant", "billing"))
            return [
                await retry(client, HTTP, alice, subject="bob"),  # presented by someone else: still alice's
                await retry(client, HTTP, carol, subject="alice"),  # carol's token, whoever presents it
                await retry(client, HTTP, billing, subject="carol", name="billing"),
            ]

    assert anyio.run(body) == [False, True, False]
    assert rejections(caplog.records) == ["revoked", "revoked"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_stalled_store_is_one_deadline_on_the_loop_and_a_sync_tool_is_not_starved(
    kind: str, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # One worker thread in all: a claim waiting in a thread (as before) would hold it, and the sync tool would wait.
    # A long store timeout: the sync tool must finish first with room to spare on a loaded machine.
    middleware = single_use(store_for(redis_server.url, timeout="2"))
    finished: list[str] = []

    async def present(client: httpx.AsyncClient, state: str) -> None:
        assert not await retry(client, HTTP, state, subject="alice")
        finished.append("refused")

    async def sync_tool(client: httpx.AsyncClient) -> None:
        await anyio.sleep(0.05)  # the retries are waiting on the store by now
        assert "pid-" in str(answer := await call_tool(client, HTTP, "instance", {}, subject="alice")), answer
        finished.append("sync tool")

    async def body() -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = 1
        async with serving(middleware, kind) as client:
            states = [await http_round_one(client, HTTP, subject="alice") for _ in range(20)]
            redis_server.pause()
            try:
                async with anyio.create_task_group() as tasks:
                    for state in states:
                        tasks.start_soon(present, client, state)
                    tasks.start_soon(sync_tool, client)
            finally:
                redis_server.resume()

    anyio.run(body)
    assert finished == ["sync tool"] + ["refused"] * 20
    assert rejections(caplog.records) == ["store_unavailable"] * 20


@pytest.mark.parametrize("kind", KINDS)
def test_on_a_brand_new_store_the_first_token_is_accepted_and_the_store_closes_at_shutdown(kind: str) -> None:
    with RedisServer() as redis:
        middleware = single_use(store_for(redis.url))

        async def body() -> bool:
            async with serving(middleware, kind) as client:
                return await retry(client, HTTP, await http_round_one(client, HTTP, subject="alice"), subject="alice")

        assert anyio.run(body)
        assert redis.cli("CLIENT", "LIST").count("\n") <= 1  # the CLI's own connection alone


@pytest.mark.parametrize("kind", KINDS)
def test_an_unreachable_store_is_one_warning_at_start_naming_it_and_the_server_still_serves(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    middleware = single_use(store_for(f"redis://:pa55word@127.0.0.1:{port}/0"))
    caplog.set_level(logging.WARNING)

    async def body() -> list[dict[str, Any]]:
        async with serving(middleware, kind) as client:
            # No token is minted that the store cannot date; a tool without state is served as ever.
            attempts = [await call_tool(client, HTTP, "provision", {"name": "x"}, subject="alice") for _ in range(3)]
            return [*attempts, await call_tool(client, HTTP, "instance", {}, subject="alice")]

    *attempts, served = anyio.run(body)
    assert [answer["error"]["message"] for answer in attempts] == ["Internal error"] * 3
    assert "pid-" in str(served["result"])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and str(port) in r.getMessage()]
    assert len(warnings) == 1, warnings  # at start; the attempts after it are within the rate limit
    assert "unreachable" in warnings[0]
    assert "pa55word" not in caplog.text


def store_for(url: str, timeout: str = "0.5") -> Store:
    """A store of its own on `url` (a namespace of its own: the session's Redis belongs to other tests' keys too)."""
    namespace = f"mcp-{uuid.uuid4().hex[:12]}"
    settings = {"STATECODEC_STORE_TIMEOUT": timeout, "STATECODEC_STORE_NAMESPACE": namespace}
    return store_from_env({"STATECODEC_STORE_URL": url, **settings})
