"""A store outage in availability-first mode, through real processes (not a test).

Two `examples/fleet_server.py` instances with ``STATECODEC_STORE_ON_ERROR=accept`` over one redis-server (append-only
file, fsync always: what it acknowledged survives its restart). Flows run two rounds, round 1 on one instance and the
retry on the other, ``--flows`` at a time; a replay attacker presents every retry that completed to the other
instance again. After ``--before`` seconds redis-server is killed by PID (SIGKILL: connections refused), and started
again on its port ``--outage`` seconds later; flows go on for ``--after`` seconds, then every token accepted during
the outage is presented once more to each instance.

Reports: retries accepted during the outage (at most ``--accept-max`` per instance), replays accepted after the
store answered again, and steps that ran twice (the fleet's runs file: one line per completed step).

Run: ``python benchmarks/outage.py [--outage 5] [--accept-max 1000] [--flows 20]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.fleet_harness import (
    KEEPALIVE_EXPIRY_S,
    FleetServer,
    fleet,
    retry,
    round_one,
    until_flows_complete,
)
from tests.plugins.redis import RedisServer

from statecodec import format_keys, generate_key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outage", type=float, default=5.0)
    parser.add_argument("--before", type=float, default=1.0)
    parser.add_argument("--after", type=float, default=3.0)
    parser.add_argument("--flows", type=int, default=20, help="flows running at once")
    parser.add_argument("--accept-max", type=int, default=None, help="STATECODEC_STORE_ACCEPT_MAX (unset: default)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as logs, RedisServer(extra=["--appendonly", "yes", "--appendfsync",
                                                                    "always"]) as redis:
        runs = Path(logs) / "runs"
        settings = {"FLEET_MODE": "shared", "STATECODEC_CODEC": "aesgcm", "FLEET_DEMO_AUTH": "1",
                    "STATECODEC_KEYS": format_keys([generate_key()]), "FLEET_RUNS_FILE": str(runs),
                    "STATECODEC_STORE_URL": redis.url, "STATECODEC_STORE_KEY": format_keys([generate_key()]),
                    "STATECODEC_STORE_ON_ERROR": "accept", "STATECODEC_STORE_TIMEOUT": "0.25"}
        if args.accept_max is not None:
            settings["STATECODEC_STORE_ACCEPT_MAX"] = str(args.accept_max)
        with fleet(Path(logs), [settings, settings]) as servers:
            report, names = anyio.run(scenario, args, redis, servers)
            twice = {name for name, n in Counter(runs.read_text().split()).items() if n > 1}
            for phase, started in names.items():
                report[f"steps run twice, flows begun {phase}"] = len(twice & started)
            logged = "".join(server.log_text() for server in servers)
            report["log lines: accepted unchecked"] = logged.count("tokens accepted UNCHECKED")
            report["log lines: recorded"] = logged.count("tokens accepted unchecked recorded")
    for name, value in report.items():
        print(f"{name:<48} {value}")


async def scenario(args: argparse.Namespace, redis: RedisServer, servers: list[FleetServer]
                   ) -> tuple[dict[str, int], dict[str, set[str]]]:
    phase = ["before"]
    names: dict[str, set[str]] = {"before": set(), "outage": set(), "after": set()}
    accepted: dict[str, list[tuple[str, str, str]]] = {"before": [], "outage": [], "after": []}
    replays_accepted = Counter[str]()
    stop = anyio.Event()

    async def flows(client: httpx.AsyncClient, index: int) -> None:
        first, then = servers[index % 2], servers[(index + 1) % 2]
        while not stop.is_set():
            who, name = f"user-{index}", f"flow-{uuid.uuid4().hex[:12]}"
            try:
                state = await round_one(client, first, subject=who, name=name)
                at = phase[0]
                names[at].add(name)
                if await retry(client, then, state, subject=who, name=name):
                    accepted[at].append((state, who, name))
                    # the attacker: the same retry again, on the other instance
                    if await retry(client, first, state, subject=who, name=name):
                        replays_accepted[at] += 1
            except (httpx.HTTPError, AssertionError, KeyError):
                await anyio.sleep(0.01)

    limits = httpx.Limits(max_connections=4 * args.flows + 10, keepalive_expiry=KEEPALIVE_EXPIRY_S)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        await until_flows_complete(client, servers, 60)
        async with anyio.create_task_group() as group:
            for index in range(args.flows):
                group.start_soon(flows, client, index)
            await anyio.sleep(args.before)
            assert redis._proc is not None
            os.kill(redis._proc.pid, signal.SIGKILL)  # by PID: its port now refuses connections
            redis._proc.wait()
            phase[0] = "outage"
            await anyio.sleep(args.outage)
            phase[0] = "after"
            await anyio.to_thread.run_sync(redis.start)  # the same port and directory: the append-only file
            started = time.monotonic()
            await anyio.sleep(args.after)
            stop.set()
        late = 0
        for state, who, name in accepted["outage"]:
            for server in servers:
                late += await retry(client, server, state, subject=who, name=name)
    report = {"flows begun before the outage": len(names["before"]),
              "retries accepted, flows begun before": len(accepted["before"]),
              "retries accepted, flows begun during": len(accepted["outage"]),
              "retries accepted, flows begun after": len(accepted["after"])}
    report |= {f"replays accepted, flows begun {at}": replays_accepted[at] for at in ("before", "outage", "after")}
    report["outage tokens accepted again at the end (of 2 each)"] = late
    report["seconds from restart to the end of flows"] = round(time.monotonic() - started)
    return report, names


if __name__ == "__main__":
    main()
