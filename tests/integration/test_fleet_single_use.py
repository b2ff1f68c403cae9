"""Single use and revocation across a fleet: four server processes over HTTP sharing one real redis-server.

Threats, against real processes of `examples/fleet_server.py` (the demonstration bearer naming subject and issuer)
over raw HTTP: one continuation presented to all instances at once; a stolen token presented by another user; an
offboarded user's flows retried on another instance the moment the revocation returns; a revocation that reaches
too far (other users, the same subject at another issuer). Refusals are the SDK's -32602; reasons in the logs only.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import anyio
import httpx
import pytest
from tests.integration.fleet_harness import KEEPALIVE_EXPIRY_S, FleetServer, fleet, retry, round_one
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

    def rejections(self, reason: str) -> int:
        """How many refusals with `reason` the servers logged so far."""
        return "".join(server.log_text() for server in self.servers).count(f"{REJECTED}{reason}\n")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Four instances, one key ring, single use over this module's own redis-server, the demonstration bearer."""
    with RedisServer() as redis:
        store_env = {
            "STATECODEC_STORE_URL": redis.url,
            "STATECODEC_STORE_KEY": format_keys([generate_key()]),
            # Generous: these tests are about who is accepted, not how fast; a burst on a loaded machine must not
            # turn a replay into store_unavailable (benchmarks/brownout.py measures the timeout's effect).
            "STATECODEC_STORE_TIMEOUT": "5",
        }
        settings = {"FLEET_MODE": "shared", "STATECODEC_CODEC": "aesgcm", "FLEET_DEMO_AUTH": "1", **store_env}
        settings["STATECODEC_KEYS"] = format_keys([generate_key()])
        with fleet(tmp_path_factory.mktemp("fleet-single-use-logs"), [settings] * FLEET_SIZE) as servers:
            yield Fleet(servers, store_env)


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
