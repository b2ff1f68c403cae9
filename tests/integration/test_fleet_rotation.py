"""Live rotation across a fleet: three server processes, one Redis, one key file, no restart.

A load generator runs two-round flows without pause, round 1 on one instance and the retry on the next, while an
operator runs `statecodec rotate begin`, then `advance` until it is allowed, twice: no flow may be refused, and at
the end no instance holds the old key. Then an instance is killed: the registry forgets it by the store's clock.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest
from tests.integration.fleet_harness import KEEPALIVE_EXPIRY_S, FleetServer, fleet, flow
from tests.plugins.redis import RedisServer

from statecodec import format_keys, generate_key
from statecodec.cli.main import main

pytestmark = pytest.mark.integration

FLOWS_AT_ONCE = int(os.environ.get("ROTATION_FLOWS", "4"))  # more: a heavier load, outside CI
TTL = 2  # short, so that the old key may be retired a few seconds after the fleet stopped sealing under it


async def rotate(*argv: str) -> tuple[int, dict[str, Any]]:
    """`statecodec rotate ... --json` with the servers' store and key file, in a thread (it runs its own loop)."""
    out = io.StringIO()

    def run() -> int:
        with contextlib.redirect_stdout(out):
            return main(["rotate", *argv, "--json"])

    return await anyio.to_thread.run_sync(run), json.loads(out.getvalue())


async def advance() -> dict[str, Any]:
    """`rotate advance` until it is allowed, sleeping the wait it names (while instances are behind: a poll)."""
    while (result := await rotate("advance"))[0] != 0:
        assert result[0] == 1, result
        await anyio.sleep(max(result[1]["wait_seconds"] or 0, 0.1))
    return result[1]


async def status_until(done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    while not done(status := (await rotate("status"))[1]):
        await anyio.sleep(0.1)
    return status


def test_begin_advance_advance_under_load_drops_no_flow_and_retires_the_old_key_everywhere(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    ring = tmp_path_factory.mktemp("keys") / "ring"
    ring.write_text(format_keys([generate_key()]), encoding="utf-8")
    with RedisServer() as redis:
        shared = {"STATECODEC_STORE_URL": redis.url, "STATECODEC_STORE_TIMEOUT": "5", "STATECODEC_KEYS_FILE": str(ring)}
        for name, value in shared.items():  # the operator's
            monkeypatch.setenv(name, value)
        server = shared | {"STATECODEC_RELOAD_INTERVAL": "0.1", "STATECODEC_TTL": str(TTL), "FLEET_DEMO_AUTH": "1",
                           "STATECODEC_FUTURE_SKEW": "0", "STATECODEC_STORE_KEY": format_keys([generate_key()])}
        settings = [server | {"STATECODEC_INSTANCE": f"web-{i}"} for i in range(3)]
        with fleet(tmp_path_factory.mktemp("rotation-logs"), settings) as servers:
            outcomes, steps, final = anyio.run(lambda: rotation_under_load(servers))
            assert outcomes["dropped"] == 0, [server.log_tail() for server in servers]
            assert outcomes["completed"] >= FLOWS_AT_ONCE
            assert [step["phase"] for step in steps] == [0, 1, 2, 3]
            old, new = steps[0]["key_ids"][0], steps[-1]["key_ids"]
            assert [instance["key_ids"] for instance in final["instances"]] == [new] * 3
            assert old not in new
            os.killpg(servers[2].process.pid, signal.SIGKILL)  # no clean stop: its entry must expire on its own
            final = anyio.run(lambda: status_until(lambda s: len(s["instances"]) < 3))
            assert [instance["name"] for instance in final["instances"]] == ["web-0", "web-1"]


Status = dict[str, Any]


async def rotation_under_load(servers: list[FleetServer]) -> tuple[dict[str, int], list[Status], Status]:
    """(flows completed and dropped, the status and each step's result, the status once every instance retired the
    old key) of two-round flows run without pause while the operator rotates."""
    outcomes = {"completed": 0, "dropped": 0}
    limits = httpx.Limits(max_connections=FLOWS_AT_ONCE * 2, keepalive_expiry=KEEPALIVE_EXPIRY_S)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client, anyio.create_task_group() as group:
        running = True

        async def flows(n: int) -> None:
            while running:
                completed = await flow(client, servers[n % 3], servers[(n + 1) % 3], f"user-{n}")
                outcomes["completed" if completed else "dropped"] += 1
                n += 1

        for n in range(FLOWS_AT_ONCE):
            group.start_soon(flows, n)
        steps = [await status_until(lambda s: len(s["instances"]) == 3)]
        steps.append((await rotate("begin"))[1])
        steps += [await advance(), await advance()]
        final = await status_until(lambda s: all(i["key_ids"] == s["key_ids"] for i in s["instances"]))
        running = False
    return outcomes, steps, final
