"""One interleaved run: every operation timed round-robin in this process, ratios taken per round.

Each operation (a case's seal or unseal of one payload, or one MCP round) is
calibrated, which warms it up, to a loop count whose batch lasts about
``batch_ms``: half a millisecond is long against the timer and short against
the scheduler, so on a shared machine most batches run between two
preemptions and a preempted one is an outlier. Every round runs one batch of
each operation in a freshly shuffled order, each after one untimed call, with
the garbage collector off as in `timeit`, timed with `time.perf_counter_ns`
(wall time, so a remote case's network wait counts). A cost is the median of
the batch means; a ratio is the median over rounds of this round's case over
this round's floor, so a slow round slows both sides and cancels.

Not pyperf: it times one benchmark at a time in worker processes it spawns
and calibrates, which suits absolute timings but cannot put two cases in one
round, and a ratio between runs minutes apart on a shared machine measures
the machine. A plain loop is the honest small choice.
"""

from __future__ import annotations

import functools
import gc
import importlib.metadata
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from statecodec import ConfigurationError
from statecodec.bench.cases import INSTALL, PAYLOADS, Case, binding_rounds

__all__ = ["SCHEMA", "paired", "run"]

SCHEMA = "statecodec-bench/2"
_PACKAGES = ("statecodec", "cryptography", "mcp", "itsdangerous", "pyjwt", "jwcrypto", "joserfc", "pyseto", "tink")
Op = Callable[[], object]
Key = tuple[str, str, str]  # (case, payload, operation)


def _batch(op: Op, n: int) -> float:
    """Nanoseconds per call over `n` back-to-back calls of `op`, after one untimed call, the collector off."""
    loop = range(n)
    op()  # the other operations ran since this one last did: time it warm, not its first call's misses
    gc.disable()
    try:
        start = time.perf_counter_ns()
        for _ in loop:
            op()
        return (time.perf_counter_ns() - start) / n
    finally:
        gc.enable()


def _calibrate(op: Op, batch_ns: float) -> int:
    """Calls per batch of about `batch_ns`, from a batch at least half that long (the smaller ones warm it up)."""
    n = 1
    while (per_call := _batch(op, n)) * n < batch_ns / 2 and n < 1 << 24:
        n *= 2
    return max(1, round(batch_ns / per_call))


def interleave(
    ops: Mapping[Key, Op], rounds: int, batch_ms: float, progress: Callable[[int, int], None]
) -> dict[Key, list[float]]:
    """Nanoseconds per call of every operation, one sample per round."""
    counts = {key: _calibrate(op, batch_ms * 1e6) for key, op in ops.items()}
    samples: dict[Key, list[float]] = {key: [] for key in ops}
    order, shuffle = list(ops), random.Random(0).shuffle
    for done in range(1, rounds + 1):
        shuffle(order)
        gc.collect()
        for key in order:
            samples[key].append(_batch(ops[key], counts[key]))
        progress(done, rounds)
    return samples


def paired(a: Sequence[float], b: Sequence[float]) -> float:
    """Median over rounds of a[r] / b[r]."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def _environment() -> dict[str, Any]:
    found = {d.metadata["Name"].lower(): d.version for d in importlib.metadata.distributions()}
    packages = {name: found.get(name) for name in _PACKAGES}
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "packages": packages,
    }


def _prepare(case: Case, payloads: Mapping[str, bytes]) -> dict[Key, Op]:
    seal, unseal = case.build()
    ops: dict[Key, Op] = {}
    for name, data in payloads.items():
        token = seal(data)
        if not isinstance(token, str) or unseal(token) != data:
            raise ValueError("unseal(seal(payload)) is not the payload")
        ops[case.name, name, "seal"] = functools.partial(seal, data)
        ops[case.name, name, "unseal"] = functools.partial(unseal, token)
    return ops


def _binding() -> dict[Key, Op]:
    ops = binding_rounds(PAYLOADS["state"])
    for op in ops.values():
        op()  # a round the SDK or BoundCodec rejects raises here, before anything is timed
    return {("binding", "state", name): op for name, op in ops.items()}


def _attempt(name: str, prepare: Callable[[], dict[Key, Op]], skipped: list[dict[str, str]]) -> dict[Key, Op]:
    """The operations of one case, or none and a line in `skipped` saying why (never a payload or key)."""
    try:
        return prepare()
    except ConfigurationError:
        raise
    except ImportError as exc:
        reason = f"{(exc.name or 'a package').split('.')[0]} is not installed ({INSTALL})"
    except Exception as exc:  # a case that cannot round-trip is reported, never timed
        reason = f"broken: {type(exc).__name__}"
    skipped.append({"case": name, "reason": reason})
    return {}


def run(
    cases: Sequence[Case],
    payloads: Mapping[str, bytes],
    *,
    binding: bool,
    rounds: int,
    batch_ms: float,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> dict[str, Any]:
    """Build, check and time `cases` (the floor first) on `payloads`, and the MCP round when `binding`."""
    started = time.perf_counter()
    skipped: list[dict[str, str]] = []
    ops: dict[Key, Op] = {}
    for case in cases:
        ops.update(_attempt(case.name, functools.partial(_prepare, case, payloads), skipped))
    if binding:
        ops.update(_attempt("binding", _binding, skipped))
    samples = interleave(ops, rounds, batch_ms, progress)
    results = []
    for case in cases:
        for name, data in payloads.items():
            if (case.name, name, "seal") not in ops:
                continue
            row: dict[str, Any] = {"case": case.name, "group": case.group, "payload": name, "bytes": len(data)}
            for kind in ("seal", "unseal"):
                row[f"{kind}_us"] = statistics.median(samples[case.name, name, kind]) / 1e3
                row[f"{kind}_vs_floor"] = paired(samples[case.name, name, kind], samples["floor", name, kind])
            # Characters over base64url of the payload; no case's token length depends on its nonce.
            row["token_overhead"] = len(str(ops[case.name, name, "seal"]())) - (4 * len(data) + 2) // 3
            results.append(row)
    figure = None
    if binding and ("binding", "state", "bare") in ops:
        bare, bound, handler, sdk = (
            samples["binding", "state", k] for k in ("bare", "BoundCodec", "handler", "RequestStateBoundary")
        )
        bound_added = [b - c for b, c in zip(bound, bare, strict=True)]
        sdk_added = [s - h - c for s, h, c in zip(sdk, handler, bare, strict=True)]
        figure = {
            "bare_round_us": statistics.median(bare) / 1e3,
            "bound_added_us": statistics.median(bound_added) / 1e3,
            "sdk_added_us": statistics.median(sdk_added) / 1e3,
            "bound_vs_sdk_added": paired(bound_added, sdk_added),
        }
    return {
        "schema": SCHEMA,
        "environment": _environment(),
        "settings": {"rounds": rounds, "batch_ms": batch_ms, "payloads": {k: len(v) for k, v in payloads.items()}},
        "results": results,
        "binding": figure,
        "skipped": skipped,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
