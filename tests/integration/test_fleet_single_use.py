"""Single use and revocation across a fleet: four `examples/fleet_server.py` processes over raw HTTP sharing one real
redis-server in the default mode (at most once), four more retry-safe (the same retry answered again, run once).

Each test is a threat (its name says which); refusals are the SDK's -32602, reasons in the logs only.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import pytest
from tests.integration.fleet_harness import KEEPALIVE_EXPIRY_S, FleetServer, fleet, present, retry, round_one
from tests.plugins.redis import RedisServer

from statecodec import format_keys, generate_key

pytestmark = pytest.mark.integration

FLEET_SIZE = 4
CONCURRENT_PRESENTATIONS = 100
HTTP_TIMEOUT_S = 60.0  # a generous bound on one answer, never a performance check
REJECTED = "requestState rejected on tools/call: "
STATECODEC_CLI = Path(sys.executable).with_name("statecodec")
DEMO_ISSUER = "http://127.0.0.1/demo-issuer"  # examples/fleet_server.py's default issuer

T = TypeVar("T")


@dataclass
class Fleet:
    """The running fleet: its servers, and what a client of the store they share needs."""

    servers: list[FleetServer]
    store_env: dict[str, str] = field(repr=False)
    runs: Path  # one line per completed step, its flow's name

    def rejections(self, reason: str) -> int:
        """How many refusals with `reason` the servers logged so far."""
        return "".join(server.log_text() for server in self.servers).count(f"{REJECTED}{reason}\n")


@pytest.fixture(scope="module")
def fleets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Fleet, Fleet]]:
    """Four instances in the default mode and four retry-safe, all started at once: one key ring, single use over
    this module's own redis-server, the demonstration bearer."""
    with RedisServer() as redis:
        store_env = {
            "STATECODEC_STORE_URL": redis.url,
            "STATECODEC_STORE_KEY": format_keys([generate_key()]),
            # Generous: these tests are about who is accepted, not how fast; a burst on a loaded machine must not
            # turn a replay into store_unavailable (benchmarks/brownout.py measures the timeout's effect).
            "STATECODEC_STORE_TIMEOUT": "5",
        }
        logs = tmp_path_factory.mktemp("fleet-single-use-logs")
        settings = {"FLEET_MODE": "shared", "STATECODEC_CODEC": "aesgcm", "FLEET_DEMO_AUTH": "1", **store_env}
        settings |= {"STATECODEC_KEYS": format_keys([generate_key()]), "FLEET_RUNS_FILE": str(logs / "runs")}
        modes = [settings] * FLEET_SIZE + [settings | {"STATECODEC_RETRY_SAFE": "on"}] * FLEET_SIZE
        with fleet(logs, modes) as servers:
            default, retry_safe = servers[:FLEET_SIZE], servers[FLEET_SIZE:]
            yield Fleet(default, store_env, logs / "runs"), Fleet(retry_safe, store_env, logs / "runs")


@pytest.fixture(scope="module")
def shared(fleets: tuple[Fleet, Fleet]) -> Fleet:
    """The default mode: single use's own guarantee, at most once."""
    return fleets[0]


@pytest.fixture(scope="module")
def safe(fleets: tuple[Fleet, Fleet]) -> Fleet:
    """STATECODEC_RETRY_SAFE=on: the same retry answered again, the step run once."""
    return fleets[1]


def run(body: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
    """`body` with an HTTP client that can hold every request of a test open at once."""

    async def main() -> T:
        limits = httpx.Limits(max_connections=CONCURRENT_PRESENTATIONS + 10, keepalive_expiry=KEEPALIVE_EXPIRY_S)
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S, limits=limits) as client:
            return await body(client)

    return anyio.run(main)


def subject(role: str) -> str:
    return f"{role}-{uuid.uuid4().hex[:8]}"


def test_a_stolen_token_presented_by_another_user_consumes_nothing(shared: Fleet) -> None:
    # Runs first: the first token after start on a brand-new store is accepted (its memory began at start).
    alice, mallory = subject("alice"), subject("mallory")

    async def body(client: httpx.AsyncClient) -> list[bool]:
        state = await round_one(client, shared.servers[0], subject=alice)
        return [
            await retry(client, shared.servers[1], state, subject=mallory),  # refused by the SDK's boundary first
            await retry(client, shared.servers[2], state, subject=alice),
        ]

    assert run(body) == [False, True]


def test_one_token_presented_100_times_at_once_across_four_instances_is_accepted_exactly_once(shared: Fleet) -> None:
    user = subject("alice")
    replayed_before = shared.rejections("replayed")

    async def body(client: httpx.AsyncClient) -> list[bool]:
        state = await round_one(client, shared.servers[0], subject=user)
        servers = [shared.servers[index % FLEET_SIZE] for index in range(CONCURRENT_PRESENTATIONS)]
        return list(await asyncio.gather(*(retry(client, server, state, subject=user) for server in servers)))

    outcomes = run(body)
    assert (outcomes.count(True), outcomes.count(False)) == (1, CONCURRENT_PRESENTATIONS - 1)
    assert shared.rejections("replayed") - replayed_before == CONCURRENT_PRESENTATIONS - 1


def test_revoke_principal_then_at_once_its_retry_on_another_instance_is_refused_and_no_one_else_is(
    shared: Fleet,
) -> None:
    servers = shared.servers
    leaver, stayer = subject("leaver"), subject("stayer")
    namesake = f"{leaver}@https://login.other.example"  # the same subject name, at another issuer: another principal
    users = (leaver, stayer, namesake)

    async def mint(client: httpx.AsyncClient) -> dict[str, list[str]]:
        return {user: [await round_one(client, servers[0], subject=user) for _ in servers[1:]] for user in users}

    states = run(mint)
    revoked_before = shared.rejections("revoked")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATECODEC_")} | shared.store_env  # an operator's
    revoke = [str(STATECODEC_CLI), "revoke", "--principal", leaver, "--issuer", DEMO_ISSUER]
    assert subprocess.run(revoke, env=env, capture_output=True, timeout=120).returncode == 0

    async def retries(client: httpx.AsyncClient) -> dict[str, list[bool]]:
        pairs = {user: zip(servers[1:], states[user], strict=True) for user in users}
        return {user: [await retry(client, srv, state, subject=user) for srv, state in pairs[user]] for user in users}

    outcomes = run(retries)
    assert outcomes == {leaver: [False] * 3, stayer: [True] * 3, namesake: [True] * 3}
    assert shared.rejections("revoked") - revoked_before == 3


def test_one_retry_presented_100_times_at_once_across_four_retry_safe_instances_runs_the_step_once(safe: Fleet) -> None:
    user, in_progress_before = subject("alice"), safe.rejections("in_progress")
    name = f"burst-{user}"

    async def body(client: httpx.AsyncClient) -> list[bool]:
        state = await round_one(client, safe.servers[0], subject=user, name=name)
        servers = [safe.servers[index % FLEET_SIZE] for index in range(CONCURRENT_PRESENTATIONS)]
        return list(await asyncio.gather(*(retry(client, srv, state, subject=user, name=name) for srv in servers)))

    outcomes = run(body)  # each answered with the one run's result, or else refused in_progress while it ran
    assert safe.rejections("in_progress") - in_progress_before == outcomes.count(False) < CONCURRENT_PRESENTATIONS
    assert safe.runs.read_text().splitlines().count(name) == 1


@dataclass
class Cut:
    """A proxy to one server that passes a request on, reads the whole answer, and closes the client's connection
    without it: the step ran, and the client never read the answer (kept in `lost`, by request body)."""

    server: FleetServer
    url: str = ""
    lost: dict[bytes, bytes] = field(default_factory=dict)

    async def pass_on(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line[15:]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:"))
        body = await reader.readexactly(length)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.server.port)
        up_writer.write(head[:-2] + b"Connection: close\r\n\r\n" + body)  # the server closes once it answered
        self.lost[body] = await up_reader.read()
        up_writer.close()
        writer.close()


def test_an_answer_lost_in_transit_is_answered_again_on_another_instance_and_the_step_ran_once(safe: Fleet) -> None:
    flows, user, thief = int(os.environ.get("RETRY_SAFE_FLOWS", "50")), subject("alice"), subject("mallory")
    region, store = "eu-west-clear", safe.store_env

    async def flow(client: httpx.AsyncClient, index: int, cuts: list[Cut]) -> tuple[str, str, dict[str, Any]]:
        name, cut = f"flow-{user}-{index}", cuts[index % FLEET_SIZE]
        state = await round_one(client, safe.servers[index % FLEET_SIZE], subject=user, name=name)
        with pytest.raises(httpx.TransportError):  # the connection is cut before the client reads the answer
            await present(client, cut, state, subject=user, name=name, region=region)
        again = await present(client, safe.servers[(index + 1) % FLEET_SIZE], state, subject=user, name=name,
                              region=region)  # another instance
        lost = next(answer for body, answer in cut.lost.items() if name.encode() in body)
        assert json.loads(lost[lost.index(b"{") : lost.rindex(b"}") + 1])["result"] == again["result"], lost
        return name, state, again

    async def body(client: httpx.AsyncClient) -> list[tuple[str, str, dict[str, Any]]]:
        cuts, listeners, limit = [Cut(server) for server in safe.servers], [], asyncio.Semaphore(8)
        for cut in cuts:
            listeners.append(await asyncio.start_server(cut.pass_on, "127.0.0.1", 0))
            cut.url = f"http://127.0.0.1:{listeners[-1].sockets[0].getsockname()[1]}/mcp"

        async def bounded(index: int) -> tuple[str, str, dict[str, Any]]:
            async with limit:
                return await flow(client, index, cuts)

        try:
            return list(await asyncio.gather(*(bounded(index) for index in range(flows))))
        finally:
            for listener in listeners:
                listener.close()

    outcomes = run(body)
    runs = [line for line in safe.runs.read_text().splitlines() if line.startswith(f"flow-{user}-")]
    assert (len(outcomes), len(runs), len(set(runs))) == (flows, flows, flows)  # 0 double runs, 0 lost results
    name, state, again = outcomes[0]

    async def attacks(client: httpx.AsyncClient) -> tuple[bool, bool, dict[str, Any]]:
        stolen = await retry(client, safe.servers[2], state, subject=thief, name=name)  # refused by the binding
        other = await retry(client, safe.servers[3], state, subject=user, name=name, region="us")
        return stolen, other, await present(client, safe.servers[3], state, subject=user, name=name, region=region)

    principal_before, replayed_before = safe.rejections("principal"), safe.rejections("replayed")
    assert run(attacks) == (False, False, again)
    # The thief is refused `principal` by the SDK's binding, before single use: it never reached the store (the
    # store's script count cannot show it: every instance's heartbeat runs one every 5 s); the other retry `replayed`.
    refused = safe.rejections("principal") - principal_before, safe.rejections("replayed") - replayed_before
    assert refused == (1, 1)
    scanned = _store_view(store["STATECODEC_STORE_URL"])
    for clear in (user, thief, "flow-", "eu-west", "structuredContent", "pid-", "asked_by", "region", "demo"):
        assert clear.encode() not in scanned, clear  # ciphertext, digests and times only


def _store_view(url: str) -> bytes:
    """Every key and value the store holds."""
    from redis import Redis

    with Redis.from_url(url) as client:
        readers: Any = {b"string": client.get, b"hash": client.hgetall, b"zset": lambda key: client.zrange(key, 0, -1)}
        seen = [key + repr(readers[client.type(key)](key)).encode() for key in client.scan_iter(count=1000)]
        return b"\n".join(seen)
