"""Running instances watch the store, on a real `redis-server`: a memory policy switched to evicting while servers run,
a flush, a clock beyond the allowance are each seen within one heartbeat, and the clock check holds on a slow store.

Each test is what an operator or an attacker does to a running fleet. The heartbeat is driven by calling it
(`SingleUse.check`) or, through the server's lifespan, with a short interval: no test waits on a wall-clock threshold.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterator

import pytest
from mcp.server.request_state import RequestStateSecurity
from tests.mcp_flows import build_server
from tests.plugins import Clock
from tests.plugins.redis import KEY, RedisServer, guard_on, guarded

from statecodec import AESGCMCodec, ConfigurationError, InvalidToken, StoreError
from statecodec.middleware import SingleUseMiddleware
from statecodec.single_use import SingleUse, SingleUseCodec

pytestmark = [pytest.mark.integration, pytest.mark.anyio]
AHEAD = 1.35  # the instance: 1.35 s ahead of the store, 1 s (the default clock_skew) allowed
PAUSE = 0.4  # how long a slow store stays silent (SIGSTOP) at a time
BEATS = 400  # at most this many heartbeats for what must happen within one: a bound on a loaded machine, not a measure


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def noeviction(redis_server: RedisServer) -> Iterator[None]:
    """The session server's memory policy put back after the test, whatever it did."""
    yield
    redis_server.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")


async def reason(guard: SingleUse, stamped: bytes) -> str:
    with pytest.raises(InvalidToken) as info:
        await guard.consume(stamped)
    return info.value.reason.value


def evict_every_claim(server: RedisServer) -> int:
    """What an evicting policy does once memory is full: the claims (the least recently used keys) are dropped."""
    claims = server.cli("--scan", "--pattern", "{statecodec}:c:*").split()
    return int(server.cli("DEL", *claims)) if claims else 0


async def silent_by_turns(server: RedisServer) -> None:
    """A slow store: silent (SIGSTOP) for `PAUSE` s, then answering for a moment, again and again; cancel to end."""
    while True:
        server.pause()
        await asyncio.sleep(PAUSE)
        server.resume()
        await asyncio.sleep(PAUSE / 50)


async def eventually(done: Callable[[], bool | Awaitable[bool]], beat: float) -> int:
    """How many heartbeats passed until `done()` (awaited when it is a coroutine); fails past `BEATS`."""
    for beats in range(BEATS):
        if (await result) if inspect.isawaitable(result := done()) else result:
            return beats
        await asyncio.sleep(beat)
    raise AssertionError(f"not within {BEATS} heartbeats")


async def test_an_evicting_policy_switched_on_while_running_is_refused_within_one_heartbeat(
    redis_url: str, redis_server: RedisServer, noeviction: None, caplog: pytest.LogCaptureFixture
) -> None:
    async with guarded(redis_url) as guard:
        consumed = [guard.stamp(b"spent") for _ in range(50)]
        assert [await guard.consume(token) for token in consumed] == [b"spent"] * 50
        unused = guard.stamp(b"unused")
        redis_server.cli("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")  # an operator, or a managed default
        with caplog.at_level(logging.ERROR, "statecodec"):
            await guard.check()  # one heartbeat
        [logged] = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert f"127.0.0.1:{redis_server.port}" in logged.getMessage()  # the node, and its policy
        assert "maxmemory-policy allkeys-lru" in logged.getMessage()
        assert evict_every_claim(redis_server) == 50  # memory fills: the claims go first
        assert [await reason(guard, token) for token in consumed] == ["store_unavailable"] * 50  # 0 replays
        with pytest.raises(StoreError, match=r"cannot mint .*maxmemory-policy allkeys-lru"):
            guard.stamp(b"new")  # nor a token minted while the policy could lose its claim
        redis_server.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
        assert await guard.consume(unused) == b"unused"  # refused, never spent: accepted once the policy is fixed
        assert guard.stamp(b"new")


async def test_a_token_minted_one_heartbeat_after_a_flush_is_accepted_by_another_instance(
    redis_url: str, redis_server: RedisServer
) -> None:
    async with guarded(redis_url) as minter, guarded(redis_url) as other:
        older = minter.stamp(b"older")
        redis_server.flush()  # or a restart without persistence, or a failover to an empty replica
        within = minter.stamp(b"within")  # the window: minted before this instance learnt of the flush
        await minter.check()  # one heartbeat: this instance made no claim since the flush
        assert await other.consume(minter.stamp(b"after")) == b"after"
        assert await reason(other, older) == "store_unavailable"  # what the flush forgot cannot be proven unused
        assert await reason(other, within) == "store_unavailable"  # at most one heartbeat's tokens


@pytest.mark.parametrize(("ahead", "starts"), [(AHEAD, False), (0.0, True)], ids=["1.35 s ahead", "on time"])
async def test_a_clock_beyond_the_allowance_is_refused_at_start_even_when_the_store_is_slow(
    redis_url: str, redis_server: RedisServer, ahead: float, starts: bool
) -> None:
    guard = guard_on(redis_url, clock=lambda: time.time() + ahead)  # clock_skew: 1 s, the default
    slow = asyncio.create_task(silent_by_turns(redis_server))
    try:
        if starts:  # the control: a slow store is no reason to refuse a clock within the allowance
            await guard.start()
            assert guard.started
        else:
            with pytest.raises(ConfigurationError, match="ahead of the store's"):
                await guard.start()
            with pytest.raises(StoreError, match="cannot mint"):
                guard.stamp(b"x")
    finally:
        slow.cancel()
        await asyncio.wait([slow])
        redis_server.resume()
        await guard.aclose()


async def test_a_clock_that_drifts_beyond_the_allowance_while_running_is_seen_within_one_heartbeat(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(time.time())
    async with guarded(redis_url, clock=clock) as guard:
        clock.now += AHEAD  # as a clock that drifts: no step between two stamps to notice
        with caplog.at_level(logging.ERROR, "statecodec"):
            await guard.check()
        assert "ahead of the store's" in caplog.text
        assert not guard.started
        clock.now = time.time()  # synchronised again
        await guard.check()
        assert guard.started


async def test_the_servers_lifespan_runs_the_heartbeat_and_ends_it_with_the_last_exit(
    redis_url: str, redis_server: RedisServer, noeviction: None
) -> None:
    beat = 0.02
    middleware = SingleUseMiddleware(guard_on(redis_url, heartbeat=beat))
    server = build_server(RequestStateSecurity(codec=AESGCMCodec([KEY])), middleware=[middleware],
                          lifespan=middleware.lifespan)
    guard, tasks = middleware.guard, len(asyncio.all_tasks())
    async with guarded(redis_url) as other, middleware.lifespan(server), middleware.lifespan(server):
        assert guard.started
        assert len(asyncio.all_tasks()) == tasks + 1  # one heartbeat for every entry
        redis_server.cli("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        await eventually(lambda: not guard.started, beat)
        redis_server.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
        await eventually(lambda: guard.started, beat)
        redis_server.flush()

        async def minting_under_the_new_epoch() -> bool:
            try:
                return await other.consume(guard.stamp(b"x")) == b"x"
            except InvalidToken:
                return False

        await eventually(minting_under_the_new_epoch, beat)  # today: never, until this instance claims itself
    assert len(asyncio.all_tasks()) == tasks  # the heartbeat ended with the last exit


def test_a_synchronous_codec_rechecks_the_store_on_use_once_the_heartbeat_is_due(
    redis_url: str, redis_server: RedisServer, noeviction: None
) -> None:
    codec = SingleUseCodec(AESGCMCodec([KEY]), guard_on(redis_url, heartbeat=0))  # due at every use
    try:
        kept = codec.seal(b"kept")
        redis_server.cli("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        with pytest.raises(ConfigurationError, match="maxmemory-policy allkeys-lru"):
            codec.seal(b"x")
        with pytest.raises(InvalidToken, match="store_unavailable"):
            codec.unseal(kept)
        redis_server.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
        assert codec.unseal(kept) == b"kept"  # never spent by the refusal
    finally:
        codec.close()


async def test_the_last_exit_ends_the_heartbeat_even_when_the_redis_client_swallows_its_cancellation(
    redis_url: str,
) -> None:
    # A cancellation that lands inside a Redis command can be swallowed by the client: 124 of 300 exits hung when the
    # heartbeat relied on it (a heartbeat of 0.5 ms, exits at varied instants).
    hung = 0
    for attempt in range(100):
        middleware = SingleUseMiddleware(guard_on(redis_url, heartbeat=0.0005))
        server = build_server(RequestStateSecurity(codec=AESGCMCodec([KEY])), middleware=[middleware],
                              lifespan=middleware.lifespan)
        lifespan = middleware.lifespan(server)
        await lifespan.__aenter__()
        await asyncio.sleep(0.003 + attempt % 7 * 0.0007)
        exiting = asyncio.create_task(lifespan.__aexit__(None, None, None))
        await asyncio.wait([exiting], timeout=30)  # a bound on a hang, not a measure
        hung += not exiting.done()
    assert hung == 0
