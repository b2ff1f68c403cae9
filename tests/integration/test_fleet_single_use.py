"""Single use and revocation across a fleet: four server processes over HTTP sharing one real redis-server.

Threats, each against real processes of `examples/fleet_server.py` (single use on, the demonstration bearer
scheme naming the principal) driven by raw 2026-07-28 HTTP exchanges: a genuine continuation replayed, to the
same instance or concurrently to all of them; a stolen token presented by another user or for another request,
to burn the rightful user's step; an offboarded user's flows in flight; a store that goes away, or forgets,
while flows run. Every refusal is the SDK's frozen -32602 answer; the reason is in the refusing server's log
only (``requestState rejected on tools/call: <reason>``, logger ``statecodec.mcp`` or the SDK's boundary).

No wall-clock threshold: the revocation bound is the store's own staleness bound, checked by when each request
was sent (a request sent after the bound must be refused, whatever the machine's load), and every wait polls
with a generous deadline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import pytest
from tests.integration.fleet_harness import (
    KEEPALIVE_EXPIRY_S,
    FleetServer,
    fleet,
    flow,
    retry,
    round_one,
    until_flows_complete,
)
from tests.plugins.redis import RedisServer

from statecodec import format_keys, generate_key

pytestmark = pytest.mark.integration

FLEET_SIZE = 4
CONCURRENT_PRESENTATIONS = 100
FLOWS = 1_000
FLOWS_IN_FLIGHT = 16
# The store's defaults (docs/single-use.md), written out so the tests say which bounds they rely on.
STORE_TIMEOUT_S = 0.25
STALENESS_S = 1.0
# Generous bounds on waiting (never a performance check): an HTTP answer, a recovery, the CLI.
HTTP_TIMEOUT_S = 60.0
RECOVERY_DEADLINE_S = 60.0
REJECTED = "requestState rejected on tools/call: "
STATECODEC_CLI = Path(sys.executable).with_name("statecodec")

T = TypeVar("T")


@dataclass
class Fleet:
    """The running fleet: its servers, the Redis they share, and what a client of the store needs."""

    servers: list[FleetServer]
    redis: RedisServer
    store_env: dict[str, str] = field(repr=False)

    def logs(self) -> str:
        return "".join(server.log_text() for server in self.servers)

    def rejections(self, reason: str) -> int:
        """How many refusals with `reason` the servers logged so far."""
        return self.logs().count(f"{REJECTED}{reason}\n")


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """This module's own redis-server: the tests stop, restart and flush it."""
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="module")
def shared(redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Four instances, one key ring, single use over `redis`, the demonstration bearer scheme."""
    store_env = {
        "STATECODEC_STORE_URL": redis.url,
        "STATECODEC_STORE_KEY": format_keys([generate_key()]),
        "STATECODEC_STORE_TIMEOUT": str(STORE_TIMEOUT_S),
    }
    settings = {
        "FLEET_MODE": "shared",
        "STATECODEC_CODEC": "aesgcm",
        "STATECODEC_KEYS": format_keys([generate_key()]),
        "FLEET_DEMO_AUTH": "1",
        **store_env,
    }
    log_dir = tmp_path_factory.mktemp("fleet-single-use-logs")
    with fleet(log_dir, [settings] * FLEET_SIZE) as servers:
        yield Fleet(servers, redis, store_env)


@pytest.fixture
def ready_fleet(shared: Fleet) -> Fleet:
    """The fleet with its Redis running, serving complete flows (`until_flows_complete`)."""
    if not shared.redis.ping():
        shared.redis.start()
    run(lambda client: until_a_flow_completes(client, shared))
    return shared


def run(body: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
    """`body` with an HTTP client that can hold every request of a test open at once."""

    async def main() -> T:
        limits = httpx.Limits(max_connections=CONCURRENT_PRESENTATIONS + 10, keepalive_expiry=KEEPALIVE_EXPIRY_S)
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S, limits=limits) as client:
            return await body(client)

    return anyio.run(main)


def subject(role: str) -> str:
    return f"{role}-{uuid.uuid4().hex[:8]}"


async def until_a_flow_completes(client: httpx.AsyncClient, shared: Fleet) -> None:
    await until_flows_complete(client, shared.servers, RECOVERY_DEADLINE_S)


# --- single use ------------------------------------------------------------------------------------------------


def test_one_token_presented_100_times_at_once_across_four_instances_is_accepted_exactly_once(
    ready_fleet: Fleet,
) -> None:
    servers = ready_fleet.servers
    user = subject("alice")
    replayed_before = ready_fleet.rejections("replayed")

    async def body(client: httpx.AsyncClient) -> list[bool]:
        state = await round_one(client, servers[0], subject=user)
        outcomes: list[bool] = []

        async def present(index: int) -> None:
            outcomes.append(await retry(client, servers[index % FLEET_SIZE], state, subject=user))

        async with anyio.create_task_group() as tasks:
            for index in range(CONCURRENT_PRESENTATIONS):
                tasks.start_soon(present, index)
        return outcomes

    outcomes = run(body)

    assert (outcomes.count(True), outcomes.count(False)) == (1, CONCURRENT_PRESENTATIONS - 1)
    assert ready_fleet.rejections("replayed") - replayed_before == CONCURRENT_PRESENTATIONS - 1


def test_a_thousand_two_round_flows_across_the_fleet_complete_without_a_refusal(ready_fleet: Fleet) -> None:
    servers = ready_fleet.servers
    refusals_before = ready_fleet.logs().count(REJECTED)

    async def body(client: httpx.AsyncClient) -> list[bool]:
        outcomes: list[bool] = []
        slots = anyio.Semaphore(FLOWS_IN_FLIGHT)

        async def one(index: int) -> None:
            async with slots:
                first, then = servers[index % FLEET_SIZE], servers[(index + 1) % FLEET_SIZE]
                outcomes.append(await flow(client, first, then, f"user-{index % 10}"))

        async with anyio.create_task_group() as tasks:
            for index in range(FLOWS):
                tasks.start_soon(one, index)
        return outcomes

    outcomes = run(body)

    assert (len(outcomes), outcomes.count(False)) == (FLOWS, 0)
    assert ready_fleet.logs().count(REJECTED) == refusals_before


def test_an_exact_replay_of_a_completed_continuation_is_refused_by_every_instance(ready_fleet: Fleet) -> None:
    servers = ready_fleet.servers
    user = subject("alice")
    replayed_before = ready_fleet.rejections("replayed")

    async def body(client: httpx.AsyncClient) -> tuple[bool, list[bool]]:
        state = await round_one(client, servers[0], subject=user)
        completed = await retry(client, servers[1], state, subject=user)
        return completed, [await retry(client, server, state, subject=user) for server in servers]

    completed, replays = run(body)

    assert completed
    assert replays == [False] * FLEET_SIZE
    assert ready_fleet.rejections("replayed") - replayed_before == FLEET_SIZE


def test_another_principal_or_another_request_consumes_nothing_and_the_rightful_retry_completes(
    ready_fleet: Fleet,
) -> None:
    servers = ready_fleet.servers
    alice, mallory = subject("alice"), subject("mallory")
    principal_before, binding_before = ready_fleet.rejections("principal"), ready_fleet.rejections("request binding")

    async def body(client: httpx.AsyncClient) -> list[bool]:
        state = await round_one(client, servers[0], subject=alice)
        return [
            await retry(client, servers[1], state, subject=mallory),  # a stolen token, presented by another user
            await retry(client, servers[2], state, subject=alice, name="billing"),  # for another request
            await retry(client, servers[3], state, subject=alice),  # the rightful retry
        ]

    assert run(body) == [False, False, True]
    # The SDK's boundary refused both before the single-use check could consume the token.
    assert ready_fleet.rejections("principal") - principal_before == 1
    assert ready_fleet.rejections("request binding") - binding_before == 1


# --- revocation ------------------------------------------------------------------------------------------------

TOKENS_PER_INSTANCE = 20
POLL_S = 0.1  # TOKENS_PER_INSTANCE * POLL_S outlasts the staleness bound, so a correct fleet never runs out


def revoke(store_env: dict[str, str], *args: str) -> dict[str, Any]:
    """`statecodec revoke ... --json` as an operator runs it, pointed at the fleet's store; its JSON answer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATECODEC_")} | store_env
    done = subprocess.run(
        [str(STATECODEC_CLI), "revoke", *args, "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.mark.skip(reason="rewritten with the MCP glue: revoke --json reports revoked_until (ISO 8601)")
def test_revoke_principal_reaches_every_instance_within_the_staleness_bound_and_spares_others(
    ready_fleet: Fleet,
) -> None:
    servers = ready_fleet.servers
    leaver, stayer = subject("leaver"), subject("stayer")

    async def mint(client: httpx.AsyncClient) -> tuple[list[list[str]], list[str]]:
        leaver_states = [
            [await round_one(client, servers[(i + 1) % FLEET_SIZE], subject=leaver) for _ in range(TOKENS_PER_INSTANCE)]
            for i in range(FLEET_SIZE)
        ]
        return leaver_states, [await round_one(client, server, subject=stayer) for server in servers]

    leaver_states, stayer_states = run(mint)
    answer = revoke(ready_fleet.store_env, "--principal", leaver)
    written = time.monotonic()  # the CLI has returned: the revocation is in the store

    async def poll(client: httpx.AsyncClient) -> list[tuple[list[float], float]]:
        """Per instance: when each accepted presentation of the leaver's older tokens was sent, and when the
        first refused one was (seconds after the revocation was written)."""
        seen = []
        for server, states in zip(servers, leaver_states, strict=True):
            accepted: list[float] = []
            for state in states:
                sent = time.monotonic() - written
                if not await retry(client, server, state, subject=leaver):
                    seen.append((accepted, sent))
                    break
                accepted.append(sent)
                await anyio.sleep(POLL_S)
            else:
                pytest.fail(f"instance on port {server.port} accepted every older token of a revoked principal")
        return seen

    seen = run(poll)
    revoked_before = ready_fleet.rejections("revoked")

    async def after(client: httpx.AsyncClient) -> tuple[list[bool], list[bool]]:
        # Once refused, every older token stays refused; another principal's flows are untouched.
        again, others = [], []
        for server, states, state in zip(servers, leaver_states, stayer_states, strict=True):
            again.append(await retry(client, server, states[-1], subject=leaver))
            others.append(await retry(client, server, state, subject=stayer))
        return again, others

    again, others = run(after)

    for accepted, _ in seen:
        # A presentation sent after the staleness bound must have met a view that holds the revocation.
        assert all(sent < STALENESS_S for sent in accepted), seen
    print(f"revocation: first refusal per instance, seconds after the CLI returned: {[s for _, s in seen]}")
    assert again == [False] * FLEET_SIZE
    assert others == [True] * FLEET_SIZE
    assert ready_fleet.rejections("revoked") - revoked_before == FLEET_SIZE
    assert answer["revoked"] == "principal"
    assert answer["value"] == leaver

    async def new_flow(client: httpx.AsyncClient) -> bool:
        # The revocation covers tokens stamped up to the fleet's clock skew after it; later flows start normally.
        while time.time() <= answer["issued_until"]:
            await anyio.sleep(POLL_S)
        return await flow(client, servers[0], servers[1], leaver)

    assert run(new_flow)


# --- the store fails ---------------------------------------------------------------------------------------------


@dataclass
class Load:
    """Flows run while the store comes and goes: each retry presented to two instances at once."""

    accepted: dict[int, int] = field(default_factory=dict)  # flow -> how many of its two presentations completed
    answers: list[tuple[float, float, bool]] = field(default_factory=list)  # (sent, seconds to the answer, completed)
    stop: anyio.Event = field(default_factory=anyio.Event)


async def load(client: httpx.AsyncClient, servers: list[FleetServer], into: Load, user: str) -> None:
    index = 0
    while not into.stop.is_set():
        first = servers[index % FLEET_SIZE]
        pair = servers[(index + 1) % FLEET_SIZE], servers[(index + 2) % FLEET_SIZE]
        state = await round_one(client, first, subject=user)  # round 1 needs no store
        into.accepted[index] = 0

        async def present(server: FleetServer, flow_index: int = index, state: str = state) -> None:
            sent = time.monotonic()
            completed = await retry(client, server, state, subject=user)
            into.accepted[flow_index] += completed
            into.answers.append((sent, time.monotonic() - sent, completed))

        async with anyio.create_task_group() as tasks:
            for server in pair:
                tasks.start_soon(present, server)
        index += 1


@pytest.mark.parametrize(
    ("outage_kind", "pending_after"),
    [
        # Stopped and started again without persistence: its memory is gone, so no earlier token can be proven
        # unused, not even one never presented.
        ("stopped", False),
        # Paused (SIGSTOP: connections open, nothing answered, each call waits for its timeout), then resumed with
        # its memory: the token never presented completes, once.
        ("paused", True),
    ],
)
def test_redis_down_mid_load_refuses_with_store_unavailable_and_recovers_without_restarting_servers(
    ready_fleet: Fleet, outage_kind: str, pending_after: bool
) -> None:
    servers, redis = ready_fleet.servers, ready_fleet.redis
    down_action, up_action = {"stopped": (redis.stop, redis.start), "paused": (redis.pause, redis.resume)}[outage_kind]
    user = subject("busy")
    unavailable_before = ready_fleet.rejections("store_unavailable")
    pids = [server.process.pid for server in servers]
    outage: list[float] = []

    async def body(client: httpx.AsyncClient) -> tuple[Load, bool, bool]:
        done = await round_one(client, servers[0], subject=user)
        pending = await round_one(client, servers[1], subject=user)
        assert await retry(client, servers[2], done, subject=user)
        flows = Load()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(load, client, servers, flows, user)
            while len(flows.accepted) < 20:  # some flows complete before the outage
                await anyio.sleep(0.05)
            await anyio.to_thread.run_sync(down_action)
            outage.append(time.monotonic())
            while sum(sent > outage[0] for sent, _, _ in flows.answers) < 20:
                await anyio.sleep(0.05)
            outage.append(time.monotonic())
            await anyio.to_thread.run_sync(up_action)
            await until_a_flow_completes(client, ready_fleet)
            flows.stop.set()
        # Tokens from before the outage: one already accepted, one never presented.
        replay = await retry(client, servers[3], done, subject=user)
        forgotten = await retry(client, servers[3], pending, subject=user)
        return flows, replay, forgotten

    flows, replay, forgotten = run(body)

    assert max(flows.accepted.values()) == 1, "a retry was accepted twice"
    # Presented after Redis stopped and answered before it started again: every one refused.
    down = [(took, completed) for sent, took, completed in flows.answers if outage[0] < sent < sent + took < outage[1]]
    assert len(down) >= 20
    assert not any(completed for _, completed in down)
    assert ready_fleet.rejections("store_unavailable") - unavailable_before >= len(down)
    assert (replay, forgotten) == (False, pending_after)
    assert [server.process.pid for server in servers] == pids
    assert all(server.process.poll() is None for server in servers)
    took = sorted(t for t, _ in down)
    print(f"Redis {outage_kind}: {len(down)} refusals, answered in median {took[len(took) // 2]:.3f} s, max", end=" ")
    print(f"{took[-1]:.3f} s")


def test_redis_flushall_mid_flow_accepts_no_replay(ready_fleet: Fleet) -> None:
    servers = ready_fleet.servers
    user = subject("flush")

    async def before(client: httpx.AsyncClient) -> tuple[str, str]:
        done = await round_one(client, servers[0], subject=user)
        assert await retry(client, servers[1], done, subject=user)
        return done, await round_one(client, servers[2], subject=user)

    done, pending = run(before)
    unavailable_before = ready_fleet.rejections("store_unavailable")
    ready_fleet.redis.flush()

    async def after(client: httpx.AsyncClient) -> tuple[list[bool], list[bool]]:
        replays = [await retry(client, server, done, subject=user) for server in servers]
        unproven = [await retry(client, server, pending, subject=user) for server in servers]
        return replays, unproven

    replays, unproven = run(after)

    assert replays == [False] * FLEET_SIZE
    assert unproven == [False] * FLEET_SIZE
    # Refused because the store's memory began after they were issued, not by chance.
    assert ready_fleet.rejections("store_unavailable") - unavailable_before == 2 * FLEET_SIZE
