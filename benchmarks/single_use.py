"""Single use across a fleet: false refusals, and what the shared store costs a flow (not a test).

Starts a real redis-server and two fleets of `examples/fleet_server.py` processes (4 each by default) on
loopback ports, identical but for single use: one has ``STATECODEC_STORE_URL`` pointed at the Redis, the other
runs without it. Both use the demonstration bearer scheme. Then:

1. runs ``--flows`` two-round flows on each fleet (round 1 on one instance, the retry on the next), as raw
   2026-07-28 HTTP exchanges, ``--in-flight`` at a time, in batches that alternate between the fleets so that
   both see the same machine load; reports the refusals (each one is false: every retry is its flow's first),
   the wall time of each fleet, and the median over batch pairs of the with/without ratio;
2. with ``--retry-safe``, both fleets have single use and the first also its retry-safe mode: the same flows
   measure what the mode adds per accepted retry (each flow's retry is accepted once), and the store round trips
   (``EVALSHA`` calls) per flow of each, and of an identical retry presented again;
3. with ``--outage``, presents fresh retries while Redis is paused (SIGSTOP: connections open, nothing answers,
   so each store call waits for its timeout) and while it is stopped (connection refused), and reports how long
   the refusals took; then checks that the fleet recovers without a restart.

Run: ``python benchmarks/single_use.py --flows 10000 [--in-flight 16] [--servers 4] [--retry-safe] [--outage]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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

REJECTED = "requestState rejected on tools/call: "
WARM_UP_S = 120.0
HTTP_TIMEOUT_S = 60.0


async def run_batch(client: httpx.AsyncClient, servers: Sequence[FleetServer], flows: int, in_flight: int) -> int:
    """`flows` two-round flows across `servers`, `in_flight` at a time; how many retries were refused."""
    refused = 0
    slots = anyio.Semaphore(in_flight)

    async def one(index: int) -> None:
        nonlocal refused
        async with slots:
            first, then = servers[index % len(servers)], servers[(index + 1) % len(servers)]
            refused += not await flow(client, first, then, f"user-{index % 10}")

    async with anyio.create_task_group() as tasks:
        for index in range(flows):
            tasks.start_soon(one, index)
    return refused


def reasons(servers: Sequence[FleetServer]) -> Counter[str]:
    """The refusal reasons the servers logged."""
    lines = "".join(server.log_text() for server in servers).splitlines()
    return Counter(line.removeprefix(REJECTED) for line in lines if line.startswith(REJECTED))


async def refusal_times(client: httpx.AsyncClient, servers: Sequence[FleetServer], states: list[str]) -> list[float]:
    """Seconds each presentation of `states` took to be answered (all at once, one per instance in turn); raises if
    any was accepted."""
    took: list[float] = []

    async def present(index: int, state: str) -> None:
        started = time.perf_counter()
        accepted = await retry(client, servers[index % len(servers)], state, subject="outage")
        took.append(time.perf_counter() - started)
        if accepted:
            raise RuntimeError("a retry was accepted while the store was down")

    async with anyio.create_task_group() as tasks:
        for index, state in enumerate(states):
            tasks.start_soon(present, index, state)
    return took


async def outage(client: httpx.AsyncClient, servers: Sequence[FleetServer], redis: RedisServer, count: int) -> None:
    for label, down, up in (("paused", redis.pause, redis.resume), ("stopped", redis.stop, redis.start)):
        states = [await round_one(client, servers[i % len(servers)], subject="outage") for i in range(count)]
        down()
        try:
            took = await refusal_times(client, servers, states)
        finally:
            up()
        print(
            f"  Redis {label}: {len(took)} retries refused, answered in median {statistics.median(took) * 1000:.0f} ms,"
            f" max {max(took) * 1000:.0f} ms"
        )
        started = time.perf_counter()
        await until_flows_complete(client, servers, WARM_UP_S)
        print(f"    flows complete again {time.perf_counter() - started:.1f} s after Redis came back (no restart)")


def evalsha_calls(redis: RedisServer) -> int:
    """How many scripts the store ran so far: each is one round trip of an instance to it."""
    line = next(line for line in redis.cli("INFO", "commandstats").splitlines() if line.startswith("cmdstat_evalsha:"))
    return int(line.split("calls=")[1].split(",")[0])


async def measure(
    args: argparse.Namespace, redis: RedisServer, with_store: list[FleetServer], without: list[FleetServer]
) -> None:
    limits = httpx.Limits(max_connections=args.in_flight * 2 + 8, keepalive_expiry=KEEPALIVE_EXPIRY_S)
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S, limits=limits) as client:
        await until_flows_complete(client, with_store, WARM_UP_S)
        await until_flows_complete(client, without, WARM_UP_S)
        before = reasons(with_store)
        batches = max(1, args.flows // args.batch)
        elapsed: dict[str, list[float]] = {"with": [], "without": []}
        refused, trips = {"with": 0, "without": 0}, {"with": 0, "without": 0}
        for number in range(batches):
            size = args.flows // batches + (number < args.flows % batches)
            order = [("with", with_store), ("without", without)]
            for label, servers in order if number % 2 == 0 else order[::-1]:
                started, calls = time.perf_counter(), evalsha_calls(redis)
                refused[label] += await run_batch(client, servers, size, args.in_flight)
                elapsed[label].append(time.perf_counter() - started)
                trips[label] += evalsha_calls(redis) - calls
        logged = reasons(with_store) - before
        what = "the retry-safe mode" if args.retry_safe else "single use"
        print(f"{args.flows:,} two-round flows per fleet ({args.servers} servers, {args.in_flight} in flight):")
        for label in ("with", "without"):
            total = sum(elapsed[label])
            print(f"  {label:7} {what}: {refused[label]} refused, {total:.1f} s, {args.flows / total:,.0f} flows/s, "
                  f"{trips[label] / args.flows:.2f} store round trips per flow")
        ratios = [a / b for a, b in zip(elapsed["with"], elapsed["without"], strict=True)]
        added = (sum(elapsed["with"]) - sum(elapsed["without"])) / args.flows * 1000  # each flow: one accepted retry
        print(f"  time with / without {what}: median {statistics.median(ratios):.3f} over {batches} batch pairs; "
              f"{added:+.3f} ms of wall time per flow")
        if args.retry_safe:
            state, calls = await round_one(client, with_store[0], subject="again"), 0
            for server in with_store[1:3]:  # the first retry runs the step; the second is answered again
                calls = evalsha_calls(redis)
                assert await retry(client, server, state, subject="again")
            print(f"  an identical retry answered again: {evalsha_calls(redis) - calls} store round trip")
        print(f"  refusal reasons logged by the single-use fleet: {dict(logged) or 'none'}")
        if args.outage:
            print("store outage, one retry per pending flow:")
            await outage(client, with_store, redis, args.outage_retries)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Single use across a fleet: false refusals and cost per flow.")
    parser.add_argument("--flows", type=int, default=10_000, help="two-round flows per fleet (default 10,000)")
    parser.add_argument("--in-flight", type=int, default=16, help="flows in flight at once (default 16)")
    parser.add_argument("--servers", type=int, default=4, help="server processes per fleet (default 4)")
    parser.add_argument("--batch", type=int, default=1000, help="flows per alternating batch (default 1,000)")
    parser.add_argument("--retry-safe", action="store_true", help="compare the retry-safe mode with single use alone")
    parser.add_argument("--outage", action="store_true", help="also measure refusals while Redis is down")
    parser.add_argument("--outage-retries", type=int, default=40, help="retries presented per outage (default 40)")
    args = parser.parse_args(argv)
    if min(args.flows, args.in_flight, args.servers, args.batch, args.outage_retries) < 1:
        parser.error("every count must be at least 1")
    base = {"FLEET_MODE": "shared", "STATECODEC_CODEC": "aesgcm", "FLEET_DEMO_AUTH": "1"}
    base["STATECODEC_KEYS"] = format_keys([generate_key()])
    with RedisServer() as redis, tempfile.TemporaryDirectory(prefix="statecodec-fleet-bench-") as logs:
        store = {"STATECODEC_STORE_URL": redis.url, "STATECODEC_STORE_KEY": format_keys([generate_key()])}
        mode = {"STATECODEC_RETRY_SAFE": "on"} if args.retry_safe else {}
        settings = [base | store | mode] * args.servers + [base | (store if args.retry_safe else {})] * args.servers
        with fleet(Path(logs), settings) as servers:
            try:
                anyio.run(measure, args, redis, servers[: args.servers], servers[args.servers :])
            except BaseException:
                for server in servers:  # the logs go with the temporary directory: say what they said
                    print(f"last lines of the server on port {server.port}:\n{server.log_tail()}", file=sys.stderr)
                raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
