"""The measuring method: round-trip guard, warm-up, calibrated loops, interleaved samples.

Method, for every (case, payload, operation) cell:

1. Guard. Seal the payload, unseal the token, and require the same bytes
   back; require that a token with one character changed is refused. A case
   that fails is reported with the reason and never timed. Remote calls
   (HTTP requests through urllib3) are counted during one seal and one
   unseal.
2. Warm-up. Each cell runs for a short while before anything is recorded.
3. Calibration. Each cell gets a loop count so that one timed batch lasts
   about `Settings.batch_seconds`: long enough that timer resolution and
   overhead vanish, short enough (half a millisecond) that most batches run
   between two scheduler preemptions on a busy machine; a preempted batch
   is then an outlier the median discards, not a bias in every sample.
4. Rounds. In every round the cells run in a freshly shuffled order, so
   drift on a shared machine (frequency, neighbours) hits every case alike.
   Each cell runs `Settings.batches` batches (each batch's per-operation
   mean is one sample), interleaved with every other cell's batches in a
   new shuffled order each time, then a few individually timed operations
   (the tail). Unseal is timed on a token sealed at the start of the round.
5. Statistics. The median is the median of all batch samples; p99 is taken
   over the individually timed operations (each includes one timer read,
   recorded in the environment); `min_s` is the fastest batch (the cost
   with the least interference); noise is the median absolute deviation of
   the per-round medians over their median, and `samples_s` holds those
   per-round medians, in round order: ratios between two cases are taken
   round by round (`statecodec.bench.report.paired_ratio`), so a slow round
   slows both sides.

The garbage collector is collected before each round and disabled while a
batch or a tail is timed, as `timeit` does; allocation cost is included,
collection pauses are not.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import random
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from statecodec._encoding import b64u_len
from statecodec.bench.cases import Built, Case, Skip
from statecodec.bench.payloads import Payload

__all__ = [
    "FULL",
    "QUICK",
    "CaseResult",
    "CellResult",
    "OpStats",
    "RoundTripError",
    "Settings",
    "check_round_trip",
    "count_remote_calls",
    "measure",
    "percentile",
]

OPS: tuple[str, ...] = ("seal", "unseal")
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Settings:
    rounds: int
    batch_seconds: float
    warmup_seconds: float
    tail_per_round: int
    batches: int = 1
    seed: int = 0

    def describe(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "batch_seconds": self.batch_seconds,
            "batches_per_round": self.batches,
            "warmup_seconds": self.warmup_seconds,
            "tail_per_round": self.tail_per_round,
            "seed": self.seed,
            "gc": "collected before each round; disabled while timing (as timeit)",
            "order": "cells shuffled afresh every round",
        }


QUICK = Settings(rounds=5, batch_seconds=0.0005, warmup_seconds=0.002, tail_per_round=8, batches=3)
FULL = Settings(rounds=21, batch_seconds=0.0005, warmup_seconds=0.02, tail_per_round=25, batches=9)


@dataclass
class OpStats:
    """Seconds per operation for one cell."""

    median: float
    minimum: float
    p99: float
    ops_per_second: float
    noise: float
    loops: int
    samples: list[float]
    tail_count: int

    def to_json(self) -> dict[str, Any]:
        return {
            "median_s": self.median,
            "min_s": self.minimum,
            "p99_s": self.p99,
            "ops_per_s": self.ops_per_second,
            "noise": self.noise,
            "loops": self.loops,
            "samples_s": self.samples,
            "tail_count": self.tail_count,
        }


@dataclass
class CellResult:
    """One case on one payload: sizes, remote calls, and the two operations."""

    payload: str
    payload_bytes: int
    status: str = "ok"
    reason: str = ""
    token_chars: int = 0
    overhead_chars: int = 0
    remote_calls: dict[str, int | None] = field(default_factory=dict)
    ops: dict[str, OpStats] = field(default_factory=dict)


@dataclass
class CaseResult:
    name: str
    group: str
    description: str
    status: str
    reason: str = ""
    kind: str = "codec"
    note: str = ""
    cells: dict[str, CellResult] = field(default_factory=dict)
    built: Built | None = None


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


class _Counter:
    def __init__(self) -> None:
        self.count = 0


@contextmanager
def count_remote_calls() -> Iterator[_Counter | None]:
    """Count HTTP requests made through urllib3 (requests, hvac, botocore) inside the block.

    Yields None when urllib3 is not installed: nothing that needs it can
    call out over HTTP then.
    """
    try:
        from urllib3 import connectionpool
    except ImportError:
        yield None
        return
    counter = _Counter()
    original = connectionpool.HTTPConnectionPool.urlopen

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        counter.count += 1
        return original(self, *args, **kwargs)

    connectionpool.HTTPConnectionPool.urlopen = counting  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        connectionpool.HTTPConnectionPool.urlopen = original  # type: ignore[method-assign]


@contextmanager
def _quiet_logs() -> Iterator[None]:
    # A boundary logs every refusal; the guard's deliberate refusal is not news.
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)


def _tamper(token: str) -> str:
    i = len(token) // 2
    c = token[i]
    return token[:i] + ("B" if c == "A" else "A") + token[i + 1 :]


class RoundTripError(Exception):
    """A case did not return what it sealed, or accepted a modified token."""


def check_round_trip(built: Built, data: bytes) -> tuple[str, dict[str, int | None]]:
    """Seal and unseal once; return the token and remote calls per operation, or raise."""
    with count_remote_calls() as counter:
        token = built.seal(data)
        sealed_calls = counter.count if counter else None
    if not isinstance(token, str):
        raise RoundTripError(f"seal returned {type(token).__name__}, not str")
    with count_remote_calls() as counter:
        back = built.unseal(token)
        unsealed_calls = counter.count if counter else None
    if back != data:
        raise RoundTripError("unseal(seal(payload)) did not return the payload")
    refused = False
    try:
        with _quiet_logs():
            built.unseal(_tamper(token))
    except Exception:  # any refusal is right here; which type is the conformance kit's concern
        refused = True
    if not refused:
        raise RoundTripError("unseal accepted a token with one character changed")
    return token, {"seal": sealed_calls, "unseal": unsealed_calls}


def _describe_error(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:160] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def build_case(case: Case) -> CaseResult:
    """Build one case, classifying a missing module or `Skip` as skipped and any other failure as error."""
    result = CaseResult(case.name, case.group, case.description, "ok")
    missing = case.missing()
    if missing:
        result.status, result.reason = "skipped", missing
        return result
    try:
        built = case.build()
    except Skip as exc:
        result.status, result.reason = "skipped", str(exc)
        return result
    except ImportError as exc:
        what = exc.name or _describe_error(exc)
        result.status, result.reason = "skipped", f"cannot import {what} ({case.install_hint})"
        return result
    except Exception as exc:
        result.status, result.reason = "error", f"build failed: {_describe_error(exc)}"
        return result
    result.built, result.kind, result.note = built, built.kind, built.note
    return result


@dataclass
class _Cell:
    case: CaseResult
    built: Built
    payload: Payload
    op: str
    loops: int = 1
    samples: list[float] = field(default_factory=list)
    round_medians: list[float] = field(default_factory=list)
    tail: list[float] = field(default_factory=list)
    failed: str = ""

    def target(self) -> tuple[Callable[[Any], Any], Any]:
        if self.op == "seal":
            return self.built.seal, self.payload.data
        return self.built.unseal, self.built.seal(self.payload.data)


@contextmanager
def _timing(cell: _Cell) -> Iterator[None]:
    """The collector off for the block; a failure in it marks the cell instead of ending the run."""
    gc.disable()
    try:
        yield
    except Exception as exc:
        cell.failed = _describe_error(exc)
    finally:
        gc.enable()


def _batch(fn: Callable[[Any], Any], arg: Any, loops: int) -> float:
    pc = time.perf_counter
    t0 = pc()
    for _ in range(loops):
        fn(arg)
    return (pc() - t0) / loops


def _tail(fn: Callable[[Any], Any], arg: Any, count: int, out: list[float]) -> None:
    pc = time.perf_counter
    for _ in range(count):
        t0 = pc()
        fn(arg)
        out.append(pc() - t0)


def _calibrate(cell: _Cell, settings: Settings) -> None:
    fn, arg = cell.target()
    deadline = time.perf_counter() + settings.warmup_seconds
    one = _batch(fn, arg, 1)
    while time.perf_counter() < deadline:
        one = min(one, _batch(fn, arg, 1))
    loops = max(1, int(settings.batch_seconds / max(one, 1e-9)))
    # One check at the chosen count guards against a cold first call skewing the estimate.
    per_op = _batch(fn, arg, loops)
    cell.loops = max(1, int(settings.batch_seconds / max(per_op, 1e-9)))


def measure(
    cases: Sequence[Case],
    payloads: Sequence[Payload],
    settings: Settings,
    progress: Progress | None = None,
) -> list[CaseResult]:
    """Build, guard and time every case on every payload; see the module docstring for the method."""
    results = [build_case(c) for c in cases]
    cells: list[_Cell] = []
    for res in results:
        if res.status != "ok" or res.built is None:
            continue
        for p in payloads:
            out = CellResult(p.name, len(p.data))
            res.cells[p.name] = out
            try:
                token, calls = check_round_trip(res.built, p.data)
            except RoundTripError as exc:
                out.status, out.reason = "error", f"broken: {exc}"
                continue
            except Exception as exc:
                out.status, out.reason = "error", f"refused: {_describe_error(exc)}"
                continue
            out.token_chars = len(token)
            out.overhead_chars = len(token) - b64u_len(len(p.data))
            out.remote_calls = calls
            cells += [_Cell(res, res.built, p, op) for op in OPS]
        if res.cells and all(c.status != "ok" for c in res.cells.values()):
            res.status, res.reason = "error", next(iter(res.cells.values())).reason

    total = len(cells) * (settings.rounds + 1)
    done = 0
    gc_was_enabled = gc.isenabled()
    rng = random.Random(settings.seed)
    try:
        for cell in cells:
            with _timing(cell):
                _calibrate(cell, settings)
            done += 1
            if progress:
                progress("calibrating", done, total)
        for r in range(settings.rounds):
            gc.collect()
            live = [c for c in cells if not c.failed]
            targets: dict[int, tuple[Callable[[Any], Any], Any]] = {}
            for cell in live:
                try:
                    targets[id(cell)] = cell.target()
                except Exception as exc:
                    cell.failed = _describe_error(exc)
            batches: dict[int, list[float]] = {id(c): [] for c in live}
            # Batches interleave across every cell within the round, so a burst
            # of load elsewhere on the machine lands on all cases alike.
            for _ in range(settings.batches):
                order = [c for c in live if not c.failed]
                rng.shuffle(order)
                for cell in order:
                    fn, arg = targets[id(cell)]
                    with _timing(cell):
                        batches[id(cell)].append(_batch(fn, arg, cell.loops))
            order = [c for c in live if not c.failed]
            rng.shuffle(order)
            for cell in order:
                fn, arg = targets[id(cell)]
                with _timing(cell):
                    _tail(fn, arg, settings.tail_per_round, cell.tail)
                batch = batches[id(cell)]
                cell.samples += batch
                cell.round_medians.append(statistics.median(batch))
            done += len(cells)
            if progress:
                progress(f"round {r + 1}/{settings.rounds}", done, total)
    finally:
        if not gc_was_enabled:
            gc.disable()

    for cell in cells:
        result = cell.case.cells[cell.payload.name]
        if cell.failed or not cell.samples:
            result.status, result.reason = "error", f"{cell.op}: {cell.failed or 'no samples'}"
            continue
        med = statistics.median(cell.samples)
        per_round = cell.round_medians
        mid = statistics.median(per_round)
        mad = statistics.median(abs(s - mid) for s in per_round)
        result.ops[cell.op] = OpStats(
            median=med,
            minimum=min(cell.samples),
            p99=percentile(cell.tail, 99) if cell.tail else med,
            ops_per_second=1.0 / med if med > 0 else float("inf"),
            noise=mad / mid if mid > 0 else 0.0,
            loops=cell.loops,
            samples=per_round,
            tail_count=len(cell.tail),
        )
    return results


def close_all(results: Sequence[CaseResult]) -> None:
    """Release what cases hold (HTTP sessions); failures here are not the benchmark's concern."""
    for res in results:
        if res.built is not None and res.built.close is not None:
            # Closing is best effort once the numbers are in.
            with contextlib.suppress(Exception):
                res.built.close()
