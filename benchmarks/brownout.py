"""Brown-out: many retries against a stalled single-use store, and a sync tool meanwhile (not a test).

Starts a real redis-server and one `examples/fleet_server.py` process with single use over it, mints
``--retries`` tokens, then pauses Redis (SIGSTOP: connections open or queued, nothing answered) and presents every
retry at once, raw 2026-07-28 HTTP exchanges. Meanwhile it calls the server's sync tool (``instance``, run in the
SDK's worker threads) every 50 ms. Reports: how every retry was answered (all must be refused, and the server log
must name ``store_unavailable`` for each), the slowest refusal against twice the store timeout (the middleware's
deadline), and the sync tool's delay: its latency during the brown-out minus its latency when idle, against the
store timeout. Then resumes Redis and checks a fresh flow completes without a restart.

Run: ``python benchmarks/brownout.py [--retries 1000] [--store-timeout 0.25]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.fleet_harness import KEEPALIVE_EXPIRY_S, Served, call_tool, fleet, retry, round_one
from tests.plugins.redis import RedisServer

from statecodec import format_keys, generate_key

REJECTED = "requestState rejected on tools/call: "
TICK_S = 0.05


async def sync_tool_latency(client: httpx.AsyncClient, server: Served, until: anyio.Event, into: list[float]) -> None:
    while not until.is_set():
        start = time.perf_counter()
        answer = await call_tool(client, server, "instance", {}, subject="operator")
        assert "result" in answer, answer
        into.append(time.perf_counter() - start)
        await anyio.sleep(TICK_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retries", type=int, default=1000)
    parser.add_argument("--store-timeout", type=float, default=0.25)
    args = parser.parse_args(argv)
    with RedisServer() as redis, tempfile.TemporaryDirectory() as logs:
        settings = {
            "FLEET_MODE": "shared",
            "STATECODEC_CODEC": "aesgcm",
            "STATECODEC_KEYS": format_keys([generate_key()]),
            "FLEET_DEMO_AUTH": "1",
            "STATECODEC_STORE_URL": redis.url,
            "STATECODEC_STORE_KEY": format_keys([generate_key()]),
            "STATECODEC_STORE_TIMEOUT": str(args.store_timeout),
        }
        with fleet(Path(logs), [settings]) as (server,):

            async def body() -> tuple[list[tuple[bool, float]], list[float], list[float], bool]:
                limits = httpx.Limits(max_connections=args.retries + 20, keepalive_expiry=KEEPALIVE_EXPIRY_S)
                async with httpx.AsyncClient(timeout=120.0, limits=limits) as client:
                    idle: list[float] = []
                    done = anyio.Event()
                    async with anyio.create_task_group() as tasks:
                        tasks.start_soon(sync_tool_latency, client, server, done, idle)
                        await anyio.sleep(40 * TICK_S)
                        done.set()
                    states = [await round_one(client, server, subject=f"user-{i % 10}") for i in range(args.retries)]
                    answers: list[tuple[bool, float]] = []
                    busy: list[float] = []
                    redis.pause()
                    try:

                        async def present(index: int, state: str) -> None:
                            start = time.perf_counter()
                            completed = await retry(client, server, state, subject=f"user-{index % 10}")
                            answers.append((completed, time.perf_counter() - start))

                        stalled = anyio.Event()
                        async with anyio.create_task_group() as tasks:
                            tasks.start_soon(sync_tool_latency, client, server, stalled, busy)
                            async with anyio.create_task_group() as retries:
                                for index, state in enumerate(states):
                                    retries.start_soon(present, index, state)
                            stalled.set()
                    finally:
                        redis.resume()
                    await anyio.sleep(2 * args.store_timeout)
                    user = "after"
                    recovered = await retry(client, server, await round_one(client, server, subject=user), subject=user)
                    return answers, idle, busy, recovered

            answers, idle, busy, recovered = anyio.run(body)
            log = server.log_text()
    took = sorted(t for _, t in answers)
    deadline = 2 * args.store_timeout
    print(f"retries presented at once against a paused Redis: {len(answers)}")
    unavailable = log.count(REJECTED + "store_unavailable")
    print(f"accepted: {sum(ok for ok, _ in answers)}; logged store_unavailable: {unavailable}")
    print(
        f"refusal latency (client side, HTTP included): median {statistics.median(took):.3f} s, "
        f"p99 {took[int(0.99 * (len(took) - 1))]:.3f} s, max {took[-1]:.3f} s; "
        f"max / (2 x store timeout {args.store_timeout:g} s) = {took[-1] / deadline:.2f}"
    )
    base = statistics.median(idle)
    print(
        f"sync tool: idle median {base * 1000:.1f} ms; during the brown-out ({len(busy)} calls) median "
        f"{statistics.median(busy) * 1000:.1f} ms, max {max(busy) * 1000:.1f} ms; max delay "
        f"{(max(busy) - base) * 1000:.1f} ms = {(max(busy) - base) / args.store_timeout:.2f} x the store timeout"
    )
    print(f"a fresh flow after Redis resumed: {'completed' if recovered else 'REFUSED'}")
    ok = not any(ok for ok, _ in answers) and log.count(REJECTED + "store_unavailable") == len(answers) and recovered
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
