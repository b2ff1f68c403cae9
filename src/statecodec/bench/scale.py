"""Scale: does sealing serialize on the GIL, and what does a round cost a busy server?

Threads. For each codec, seal+unseal pairs run back to back in one thread,
then in two threads at once, in alternating slices; the section reports
pairs per second for each and their ratio. A ratio near 2 means the work
runs in parallel (the GIL is released during the crypto); near 1, it is
serialized. On a machine whose cores are busy with other work the
throughput ratio is bounded by the cores actually free, so the section
also reports the parallelism the process achieved: its CPU time over wall
time with two threads, divided by the same with one. Waiting for the GIL
costs no CPU time, so that figure stays near 1 when the GIL serializes the
work whatever the machine's load, and approaches 2 only when both threads
really compute at once.

Event loop. Each codec protects an in-memory `MCPServer` (the SDK's own
boundary with `RequestStateSecurity(codec=...)`) driven by a real `Client`.
A fixed number of concurrent flows run back to back: each flow is two
``tools/call`` rounds, the first answered with `InputRequiredResult` and a
sealed state, the second echoing the state (one seal and one unseal per
flow). A probe task meanwhile calls a stateless tool every few milliseconds,
measuring how long another request waits. Codecs take turns in short slices,
in a shuffled order per round, and rounds per second is the median slice's.
The reference row uses a codec that only base64-encodes (no protection at
all), so the difference from it is the codec's own cost; the framework's
claims, JSON and dispatch are in every row.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from statecodec.bench.cases import Built
from statecodec.bench.measure import CaseResult, percentile

__all__ = ["REFERENCE", "LoopSettings", "event_loop_section", "threads_section"]

REFERENCE = "reference (base64 only, no protection)"


@dataclass(frozen=True)
class LoopSettings:
    concurrency: int = 8
    rounds: int = 4
    slice_seconds: float = 0.5
    probe_interval: float = 0.002
    seed: int = 0


def _pairs_per_second(fn: Callable[[], object], threads: int, seconds: float) -> tuple[float, float]:
    """(pairs per wall-clock second, process CPU seconds per wall-clock second)."""
    counts = [0] * threads
    barrier = threading.Barrier(threads + 1)
    stop = threading.Event()

    def work(i: int) -> None:
        barrier.wait()
        n = 0
        while not stop.is_set():
            fn()
            n += 1
        counts[i] = n

    pool = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    t0, c0 = time.perf_counter(), time.process_time()
    time.sleep(seconds)
    stop.set()
    for t in pool:
        t.join()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return sum(counts) / wall, cpu / wall


def threads_section(
    results: Sequence[CaseResult], payloads: Sequence[tuple[str, bytes]], *, seconds: float, rounds: int
) -> list[dict[str, Any]]:
    """Seal+unseal pairs per second on 1 and 2 threads, per codec and payload."""
    rows: list[dict[str, Any]] = []
    for res in results:
        built = res.built
        if built is None or res.status != "ok":
            continue
        for pname, data in payloads:
            cell = res.cells.get(pname)
            if cell is None or cell.status != "ok":
                continue

            def pair(b: Built = built, d: bytes = data) -> object:
                return b.unseal(b.seal(d))

            one: list[tuple[float, float]] = []
            two: list[tuple[float, float]] = []
            for _ in range(rounds):
                one.append(_pairs_per_second(pair, 1, seconds))
                two.append(_pairs_per_second(pair, 2, seconds))
            p1, p2 = statistics.median(x for x, _ in one), statistics.median(x for x, _ in two)
            u1, u2 = statistics.median(u for _, u in one), statistics.median(u for _, u in two)
            rows.append(
                {
                    "case": res.name,
                    "payload": pname,
                    "pairs_per_s_1_thread": p1,
                    "pairs_per_s_2_threads": p2,
                    "scaling": p2 / p1 if p1 else 0.0,
                    "cpu_per_wall_1_thread": u1,
                    "cpu_per_wall_2_threads": u2,
                    "parallelism": u2 / u1 if u1 else 0.0,
                }
            )
    return rows


class _ReferenceCodec:
    """No protection: base64url only. Used to isolate a codec's share of a round."""

    def seal(self, payload: bytes) -> str:
        return base64.urlsafe_b64encode(payload).decode()

    def unseal(self, token: str) -> bytes:
        try:
            return base64.urlsafe_b64decode(token)
        except ValueError:
            from mcp.server.request_state import InvalidRequestState

            raise InvalidRequestState("malformed") from None


class _Adapter:
    def __init__(self, built: Built) -> None:
        self.seal = built.seal
        self.unseal = built.unseal


@dataclass
class _Lane:
    name: str
    codec: Any
    client: Any = None
    flows: int = 0
    seconds: float = 0.0
    slice_rates: list[float] = field(default_factory=list)
    probes: list[float] = field(default_factory=list)
    error: str = ""


async def _slice(lane: _Lane, settings: LoopSettings) -> None:
    client = lane.client
    deadline = time.perf_counter() + settings.slice_seconds
    flows = 0

    async def worker() -> None:
        nonlocal flows
        while time.perf_counter() < deadline:
            await client.call_tool("provision", {"name": "orders"})
            flows += 1

    async def probe() -> None:
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            await client.call_tool("ping", {})
            lane.probes.append(time.perf_counter() - t0)
            await asyncio.sleep(settings.probe_interval)

    t0 = time.perf_counter()
    await asyncio.gather(probe(), *(worker() for _ in range(settings.concurrency)))
    elapsed = time.perf_counter() - t0
    lane.seconds += elapsed
    lane.flows += flows
    lane.slice_rates.append(flows / elapsed)


async def _run_loop(lanes: list[_Lane], state: str, settings: LoopSettings) -> None:
    from mcp import Client

    from statecodec.bench._loop_server import answer, server

    rng = random.Random(settings.seed)
    async with contextlib.AsyncExitStack() as stack:
        for lane in lanes:
            lane.client = await stack.enter_async_context(
                Client(server(lane.codec, state), elicitation_callback=answer)
            )
            await lane.client.call_tool("provision", {"name": "orders"})  # warm-up and a round-trip check
        for _ in range(settings.rounds):
            order = list(lanes)
            rng.shuffle(order)
            for lane in order:
                if lane.error:
                    continue
                try:
                    await _slice(lane, settings)
                except Exception as exc:
                    lane.error = f"{type(exc).__name__}: {exc}"[:160]


def event_loop_section(
    results: Sequence[CaseResult], state: bytes, settings: LoopSettings
) -> dict[str, Any]:
    """Rounds per second at fixed concurrency, and probe latency, per codec in an `MCPServer`."""
    lanes = [_Lane(REFERENCE, _ReferenceCodec())]
    for res in results:
        if res.status == "ok" and res.built is not None and res.kind == "codec":
            lanes.append(_Lane(res.name, res.built.codec or _Adapter(res.built)))
    asyncio.run(_run_loop(lanes, state.decode("ascii"), settings))
    rows: list[dict[str, Any]] = []
    for lane in lanes:
        row: dict[str, Any] = {"case": lane.name, "error": lane.error}
        if lane.seconds > 0 and lane.flows:
            # The median slice: a burst of load elsewhere spoils a slice, not the figure.
            flows = statistics.median(lane.slice_rates)
            row.update(
                flows_per_s=flows,
                rounds_per_s=2 * flows,
                probe_median_ms=statistics.median(lane.probes) * 1e3 if lane.probes else None,
                probe_p99_ms=percentile(lane.probes, 99) * 1e3 if lane.probes else None,
                probes=len(lane.probes),
            )
        rows.append(row)
    return {
        "concurrency": settings.concurrency,
        "rounds": settings.rounds,
        "slice_seconds": settings.slice_seconds,
        "probe_interval_s": settings.probe_interval,
        "state_bytes": len(state),
        "rows": rows,
    }
