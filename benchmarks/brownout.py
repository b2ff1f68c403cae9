"""Brown-out: many retries against a stalled single-use store, and a sync tool meanwhile (not a test).

Against a real redis-server paused with SIGSTOP (connections open or queued, nothing answered), two layers:

1. (default) `SingleUseMiddleware`'s consume path on one event loop, as a server runs it: ``--retries`` fresh
   tokens presented at once, while a sync function is handed to a worker thread (``anyio.to_thread``, as the SDK
   runs a sync tool) every 20 ms. Reports how every retry was refused (all must be ``store_unavailable``), the
   slowest against twice the store timeout (the middleware's deadline), and the sync function's longest wait for a
   thread (from asking for one to running) against the store timeout.
2. ``--http``: the same through a whole server process (`examples/fleet_server.py`'s app under uvicorn) over HTTP,
   with a timing middleware just before single use and a sync tool; the client-side latency then includes the SDK's
   own handling of every request.

Run: ``python benchmarks/brownout.py [--retries 1000] [--store-timeout 0.25] [--http]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.fleet_harness import (
    KEEPALIVE_EXPIRY_S,
    FleetServer,
    call_tool,
    free_port,
    ready,
    retry,
    round_one,
    server_env,
)
from tests.plugins.redis import RedisServer

from statecodec import format_keys, generate_key

TICK_S = 0.02
REJECTED = "requestState rejected on tools/call: "
_asked: ContextVar[float] = ContextVar("asked")
_run_sync = anyio.to_thread.run_sync


async def _timed_run_sync(func: Any, *args: Any, **kwargs: Any) -> Any:
    """The SDK's way into a worker thread, noting when it asked for one (the context reaches the thread)."""
    _asked.set(time.perf_counter())
    return await _run_sync(func, *args, **kwargs)


def serve(port: int) -> None:
    """The server process: the fleet example with single use, a timing middleware and a sync tool."""
    import uvicorn
    from examples import fleet_server
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    from statecodec.mcp import security_from_env, single_use_from_env

    waits: list[float] = []

    async def timer(ctx: Any, call_next: Any) -> Any:
        start = time.perf_counter()
        try:
            return await call_next(ctx)
        finally:
            if (ctx.params or {}).get("requestState") is not None:
                waits.append(time.perf_counter() - start)

    anyio.to_thread.run_sync = _timed_run_sync  # type: ignore[assignment]  # timed, same behaviour
    single_use = single_use_from_env()
    server = fleet_server.build_server(security_from_env(), middleware=[single_use], lifespan=single_use.lifespan,
                                       demo_auth=True)
    server.middleware.insert(server.middleware.index(single_use), timer)

    @server.tool(name="thread_wait")
    def thread_wait() -> float:
        """A sync tool: how long it waited for a worker thread."""
        return time.perf_counter() - _asked.get()

    async def stats(request: Request) -> Response:
        return JSONResponse({"waits": waits})

    server.custom_route("/stats", methods=["GET"])(stats)
    logging.getLogger("statecodec.single_use").setLevel(logging.ERROR)  # one line per refusal there: not needed
    uvicorn.run(fleet_server.app_for(server, "127.0.0.1"), host="127.0.0.1", port=port, log_level="warning")


async def sync_tool(client: httpx.AsyncClient, server: FleetServer, until: anyio.Event, into: list[float]) -> None:
    while not until.is_set():
        answer = await call_tool(client, server, "thread_wait", {}, subject="operator")
        into.append(float(answer["result"]["structuredContent"]["result"]))
        await anyio.sleep(TICK_S)


def measure(
    server: FleetServer, redis: RedisServer, retries: int
) -> tuple[list[tuple[bool, float]], list[float], bool]:
    async def body() -> tuple[list[tuple[bool, float]], list[float], bool]:
        limits = httpx.Limits(max_connections=retries + 20, keepalive_expiry=KEEPALIVE_EXPIRY_S)
        async with httpx.AsyncClient(timeout=600, limits=limits) as client:
            users = [f"user-{i % 10}" for i in range(retries)]
            states = [await round_one(client, server, subject=user) for user in users]
            answers: list[tuple[bool, float]] = []
            waits: list[float] = []
            redis.pause()
            try:

                async def present(state: str, user: str) -> None:
                    start = time.perf_counter()
                    answers.append((await retry(client, server, state, subject=user), time.perf_counter() - start))

                stalled = anyio.Event()
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(sync_tool, client, server, stalled, waits)
                    async with anyio.create_task_group() as presented:
                        for state, user in zip(states, users, strict=True):
                            presented.start_soon(present, state, user)
                    stalled.set()
            finally:
                redis.resume()
            recovered = await retry(client, server, await round_one(client, server, subject="x"), subject="x")
            return answers, waits, recovered

    return anyio.run(body)


def on_the_loop(redis: RedisServer, retries: int, timeout: float) -> tuple[Counter[str], list[float], list[float]]:
    """Layer 1: the reasons, each retry's wait, and the sync function's waits for a thread."""
    from statecodec.mcp import SingleUseMiddleware, store_from_env
    from statecodec.single_use import SingleUse

    store = store_from_env({"STATECODEC_STORE_URL": redis.url, "STATECODEC_STORE_TIMEOUT": str(timeout)})
    middleware = SingleUseMiddleware(SingleUse(store, key=generate_key(), ttl=600))
    reasons: Counter[str] = Counter()
    waits: list[float] = []
    thread_waits: list[float] = []
    held: list[int] = []

    def sync_function(asked: float) -> float:
        return time.perf_counter() - asked

    async def body() -> None:
        await middleware.guard.start()
        states = [middleware.guard.stamp(b"state").decode() for _ in range(retries)]
        redis.pause()
        try:

            async def present(state: str) -> None:
                start = time.perf_counter()
                try:
                    await middleware.guard.consume(state.encode())
                except Exception as exc:  # a refusal (its reason is in the log)
                    reasons[type(exc).__name__] += 1
                waits.append(time.perf_counter() - start)

            async def sync_tool(until: anyio.Event) -> None:
                limiter = anyio.to_thread.current_default_thread_limiter()
                while not until.is_set():
                    held.append(int(limiter.borrowed_tokens))  # worker threads busy just before asking for one
                    thread_waits.append(await anyio.to_thread.run_sync(sync_function, time.perf_counter()))
                    await anyio.sleep(TICK_S)

            stalled = anyio.Event()
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(sync_tool, stalled)
                async with anyio.create_task_group() as presented:
                    for state in states:
                        presented.start_soon(present, state)
                stalled.set()
        finally:
            redis.resume()
            await middleware.guard.aclose()

    middleware._running = True
    logged = Counter[str]()

    class Reasons(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if REJECTED in record.getMessage():
                logged[record.getMessage().partition(REJECTED)[2]] += 1

    mcp_logger = logging.getLogger("statecodec.mcp")
    mcp_logger.addHandler(Reasons())
    mcp_logger.propagate = False
    logging.getLogger("statecodec.single_use").setLevel(logging.ERROR)
    anyio.run(body)
    if set(reasons) != {"MCPError"}:  # only the SDK's frozen refusal may come out of the middleware
        raise RuntimeError(f"unexpected outcomes: {reasons}")
    print(f"worker threads held when the sync function asked for one: at most {max(held)} of 40")
    return logged, sorted(waits), thread_waits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--retries", type=int, default=1000)
    parser.add_argument("--store-timeout", type=float, default=0.25)
    parser.add_argument("--http", action="store_true", help="through a whole server process over HTTP")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the server process's own mode
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0
    deadline = 2 * args.store_timeout
    if not args.http:
        with RedisServer() as redis:
            logged, waits, thread_waits = on_the_loop(redis, args.retries, args.store_timeout)
        print(f"{args.retries} retries at once against a paused Redis, on one loop: refused by reason {dict(logged)}")
        print(
            f"wait per retry: median {statistics.median(waits):.3f} s, max {waits[-1]:.3f} s = "
            f"{waits[-1] / deadline:.2f} x (2 x store timeout {args.store_timeout:g} s)"
        )
        print(
            f"sync function, {len(thread_waits)} calls meanwhile: wait for a worker thread median "
            f"{statistics.median(thread_waits) * 1000:.2f} ms, max {max(thread_waits) * 1000:.2f} ms = "
            f"{max(thread_waits) / args.store_timeout:.3f} x the store timeout"
        )
        ok = logged == Counter({"store_unavailable": args.retries}) and waits[-1] <= deadline
        return 0 if ok and max(thread_waits) < args.store_timeout else 1
    with RedisServer() as redis, tempfile.TemporaryDirectory() as logs:
        settings = {
            "STATECODEC_KEYS": format_keys([generate_key()]),
            "STATECODEC_STORE_URL": redis.url,
            "STATECODEC_STORE_KEY": format_keys([generate_key()]),
            "STATECODEC_STORE_TIMEOUT": str(args.store_timeout),
            "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]),
        }
        port, log = free_port(), Path(logs) / "server.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, __file__, "--serve", str(port)],
                env=server_env(settings),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            server = ready(FleetServer(port, process, log))
            answers, thread_waits, recovered = measure(server, redis, args.retries)
            single_use_waits = sorted(httpx.get(f"http://127.0.0.1:{port}/stats").json()["waits"][: len(answers)])
            reasons = Counter(line.partition(REJECTED)[2] for line in log.read_text().splitlines() if REJECTED in line)
        finally:
            process.terminate()
            process.wait(30)
    took = sorted(t for _, t in answers)
    print(f"retries presented at once against a paused Redis: {len(answers)}; accepted: {sum(ok for ok, _ in answers)}")
    print(f"refusals logged by reason: {dict(reasons)}")
    print(
        f"single-use wait per retry: median {statistics.median(single_use_waits):.3f} s, max "
        f"{single_use_waits[-1]:.3f} s = {single_use_waits[-1] / deadline:.2f} x (2 x store timeout "
        f"{args.store_timeout:g} s)"
    )
    print(
        f"sync tool, {len(thread_waits)} calls during the brown-out: wait for a worker thread median "
        f"{statistics.median(thread_waits) * 1000:.2f} ms, max {max(thread_waits) * 1000:.2f} ms = "
        f"{max(thread_waits) / args.store_timeout:.3f} x the store timeout"
    )
    print(
        f"client-side answer (the server's handling of {len(answers)} HTTP requests included): median "
        f"{statistics.median(took):.2f} s, max {took[-1]:.2f} s"
    )
    print(f"a fresh flow after Redis resumed: {'completed' if recovered else 'REFUSED'}")
    ok = reasons == Counter({"store_unavailable": len(answers)}) and recovered and not any(ok for ok, _ in answers)
    return 0 if ok and single_use_waits[-1] <= deadline and max(thread_waits) < args.store_timeout else 1


if __name__ == "__main__":
    sys.exit(main())
