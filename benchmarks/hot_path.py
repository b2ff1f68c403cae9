"""The sealing hot path, side by side in one run: statecodec against the floor and the MCP SDK.

Measures seal and unseal of the ~300-byte MCP-style state for the floor
(AES-256-GCM + ``os.urandom(12)`` + base64url in plain Python),
`AESGCMCodec` and the SDK's built-in `AESGCMRequestStateCodec`, and, when
present, the cases the other targets compare: `BoundCodec(AESGCMCodec)`
against the SDK boundary's own seal/unseal path, `EnvelopeCodec`, and
`JWECodec` against joserfc and jwcrypto. Prints medians, then each target
twice: from the per-round medians taken pairwise, and from the fastest
batch of each side (the cost with the least interference from the machine).
Ratio targets are judged on the paired figure (a slow round slows both
sides, so it cancels); targets in microseconds on the fastest one (a slow
phase inflates a difference instead of cancelling it; see `added_at_most`).

Run: ``python benchmarks/hot_path.py`` (about 30 s; ``--rounds`` for more,
``--core`` for the first three cases only, ``--json PATH`` to keep the run).
A benchmark, not a test: it always exits 0 unless ``--strict`` is given.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from statecodec.bench import PAYLOADS, Settings, discover, measure
from statecodec.bench.environment import environment
from statecodec.bench.measure import CaseResult
from statecodec.bench.report import paired_ratio

CORE = ("floor", "AESGCMCodec", "sdk.AESGCMRequestStateCodec")
EXTRA = (
    "BoundCodec(AESGCMCodec)",
    "sdk.RequestStateBoundary",
    "EnvelopeCodec",
    "JWECodec(dir)",
    "joserfc",
    "jwcrypto",
    "VaultEnvelope",
)


@dataclass(frozen=True)
class Target:
    label: str
    case: str
    ref: str
    check: Check
    unit: str


def _stats(results: dict[str, CaseResult], name: str, op: str) -> dict[str, Any] | None:
    res = results.get(name)
    if res is None or res.status != "ok":
        return None
    cell = res.cells.get("state")
    if cell is None or cell.status != "ok" or op not in cell.ops:
        return None
    return cell.ops[op].to_json()


def _raw_bytes(results: dict[str, CaseResult], name: str) -> int | None:
    res = results.get(name)
    cell = res.cells.get("state") if res else None
    if cell is None or cell.status != "ok":
        return None
    return cell.token_chars * 3 // 4


Check = Callable[[dict[str, CaseResult], str, str], tuple[float, float, bool] | None]
"""(value from paired round medians, the same from the fastest batches, target holds)."""


def ratio_at_most(op: str, limit: float) -> Check:
    def check(r: dict[str, CaseResult], case: str, ref: str) -> tuple[float, float, bool] | None:
        a, b = _stats(r, case, op), _stats(r, ref, op)
        value = paired_ratio(a, b) if a and b else None
        if value is None or a is None or b is None:
            return None
        return value, a["min_s"] / b["min_s"], value <= limit

    return check


def faster_by(op: str, factor: float) -> Check:
    def check(r: dict[str, CaseResult], case: str, ref: str) -> tuple[float, float, bool] | None:
        a, b = _stats(r, case, op), _stats(r, ref, op)
        value = paired_ratio(b, a) if a and b else None
        if value is None or a is None or b is None:
            return None
        return value, b["min_s"] / a["min_s"], value >= factor

    return check


def added_at_most(op: str, limit_us: float) -> Check:
    """An absolute cost in microseconds, judged on the fastest batches.

    A ratio cancels a slow phase of the machine (both sides slow alike), so
    ratio targets are judged on paired round medians. A difference in
    microseconds does not: when a shared machine runs 1.5 times slower, every
    added cost is 1.5 times larger. The fastest batches are the machine at its
    nominal speed, which is where an absolute figure means something; the
    paired figure is printed beside it.
    """

    def check(r: dict[str, CaseResult], case: str, ref: str) -> tuple[float, float, bool] | None:
        a, b = _stats(r, case, op), _stats(r, ref, op)
        if a is None or b is None:
            return None
        pairs = zip(a["samples_s"], b["samples_s"], strict=False)
        added = statistics.median(x - y for x, y in pairs) * 1e6
        fastest = (a["min_s"] - b["min_s"]) * 1e6
        return added, fastest, fastest <= limit_us

    return check


def overhead_at_most(limit: int) -> Check:
    def check(r: dict[str, CaseResult], case: str, ref: str) -> tuple[float, float, bool] | None:
        res = r.get(case)
        cell = res.cells.get("state") if res else None
        if cell is None or cell.status != "ok":
            return None
        return float(cell.overhead_chars), float(cell.overhead_chars), cell.overhead_chars <= limit

    return check


def claims_at_most(limit: int) -> Check:
    def check(r: dict[str, CaseResult], case: str, ref: str) -> tuple[float, float, bool] | None:
        a, b = _raw_bytes(r, case), _raw_bytes(r, ref)
        return None if a is None or b is None else (float(a - b), float(a - b), a - b <= limit)

    return check


def info(op: str) -> Check:
    return ratio_at_most(op, float("inf"))


TARGETS: tuple[Target, ...] = (
    Target("AESGCMCodec seal <= 1.10x floor", "AESGCMCodec", "floor", ratio_at_most("seal", 1.10), "x"),
    Target("AESGCMCodec unseal <= 1.15x floor", "AESGCMCodec", "floor", ratio_at_most("unseal", 1.15), "x"),
    Target("AESGCMCodec token overhead <= 45 chars", "AESGCMCodec", "floor", overhead_at_most(45), "chars"),
    Target("(SDK codec seal vs floor)", "sdk.AESGCMRequestStateCodec", "floor", info("seal"), "x"),
    Target("(SDK codec unseal vs floor)", "sdk.AESGCMRequestStateCodec", "floor", info("unseal"), "x"),
    Target("AESGCMCodec seal vs SDK codec", "AESGCMCodec", "sdk.AESGCMRequestStateCodec", info("seal"), "x"),
    Target("AESGCMCodec unseal vs SDK codec", "AESGCMCodec", "sdk.AESGCMRequestStateCodec", info("unseal"), "x"),
    Target("BoundCodec seal adds <= 2 us", "BoundCodec(AESGCMCodec)", "AESGCMCodec", added_at_most("seal", 2.0), "us"),
    Target(
        "BoundCodec unseal adds <= 2 us", "BoundCodec(AESGCMCodec)", "AESGCMCodec", added_at_most("unseal", 2.0), "us"
    ),
    Target(
        "(SDK boundary seal adds)",
        "sdk.RequestStateBoundary",
        "sdk.AESGCMRequestStateCodec",
        added_at_most("seal", float("inf")),
        "us",
    ),
    Target(
        "(SDK boundary unseal adds)",
        "sdk.RequestStateBoundary",
        "sdk.AESGCMRequestStateCodec",
        added_at_most("unseal", float("inf")),
        "us",
    ),
    Target("BoundCodec claims <= 48 bytes", "BoundCodec(AESGCMCodec)", "AESGCMCodec", claims_at_most(48), "bytes"),
    Target(
        "(SDK boundary claims)",
        "sdk.RequestStateBoundary",
        "sdk.AESGCMRequestStateCodec",
        claims_at_most(10**9),
        "bytes",
    ),
    Target("EnvelopeCodec seal <= 1.05x AESGCMCodec", "EnvelopeCodec", "AESGCMCodec", ratio_at_most("seal", 1.05), "x"),
    Target(
        "EnvelopeCodec unseal <= 1.05x AESGCMCodec", "EnvelopeCodec", "AESGCMCodec", ratio_at_most("unseal", 1.05), "x"
    ),
    Target(
        "VaultEnvelope seal <= 1.05x AESGCMCodec", "VaultEnvelope", "AESGCMCodec", ratio_at_most("seal", 1.05), "x"
    ),
    Target(
        "VaultEnvelope unseal <= 1.05x AESGCMCodec", "VaultEnvelope", "AESGCMCodec", ratio_at_most("unseal", 1.05), "x"
    ),
    Target("JWECodec(dir) seal >= 3x faster than joserfc", "JWECodec(dir)", "joserfc", faster_by("seal", 3), "x"),
    Target("JWECodec(dir) unseal >= 3x faster than joserfc", "JWECodec(dir)", "joserfc", faster_by("unseal", 3), "x"),
    Target("JWECodec(dir) seal >= 10x faster than jwcrypto", "JWECodec(dir)", "jwcrypto", faster_by("seal", 10), "x"),
    Target(
        "JWECodec(dir) unseal >= 10x faster than jwcrypto", "JWECodec(dir)", "jwcrypto", faster_by("unseal", 10), "x"
    ),
    Target("JWECodec(dir) seal <= 2x AESGCMCodec", "JWECodec(dir)", "AESGCMCodec", ratio_at_most("seal", 2), "x"),
    Target(
        "JWECodec(dir) unseal <= 2x AESGCMCodec", "JWECodec(dir)", "AESGCMCodec", ratio_at_most("unseal", 2), "x"
    ),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=41, help="interleaved rounds (default 41)")
    parser.add_argument("--batches", type=int, default=15, help="batches per case and round (default 15)")
    parser.add_argument("--batch-ms", type=float, default=0.5, help="calibrated batch length (default 0.5 ms)")
    parser.add_argument("--core", action="store_true", help="only the floor, AESGCMCodec and the SDK codec")
    parser.add_argument("--json", metavar="PATH", help="write medians and target results as JSON")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a stated target is missed")
    args = parser.parse_args(argv)

    wanted = CORE if args.core else CORE + EXTRA
    found, problems = discover()
    cases = [c for c in found if c.name in wanted]
    settings = Settings(
        rounds=args.rounds,
        batch_seconds=args.batch_ms / 1e3,
        warmup_seconds=0.1,
        tail_per_round=20,
        batches=args.batches,
    )
    env = environment()
    print(
        f"{env['cpu']} ({env['cpus']} CPUs), Python {env['python']}, {env['openssl']}, "
        f"cryptography {env['packages']['cryptography']}, mcp {env['packages']['mcp']}",
        file=sys.stderr,
    )
    print(
        f"{settings.rounds} interleaved rounds of {settings.batches} batches of ~{args.batch_ms:g} ms, "
        "payload state (300 B)",
        file=sys.stderr,
    )
    results = {r.name: r for r in measure(cases, [PAYLOADS["state"]], settings)}

    print(f"\n{'case':30} {'seal µs':>9} {'unseal µs':>10} {'noise s/u':>11} {'token':>6} {'+chars':>7}")
    for name in wanted:
        res = results.get(name)
        if res is None:
            continue
        cell = res.cells.get("state")
        if res.status != "ok" or cell is None or cell.status != "ok":
            reason = res.reason or (cell.reason if cell else "")
            print(f"{name:30} {res.status}: {reason}")
            continue
        s, u = cell.ops["seal"], cell.ops["unseal"]
        print(
            f"{name:30} {s.median * 1e6:9.3f} {u.median * 1e6:10.3f} "
            f"{s.noise * 100:5.1f}%/{u.noise * 100:4.1f}% {cell.token_chars:6d} {cell.overhead_chars:+7d}"
        )

    print(f"\n{'target':52} {'paired':>10} {'fastest':>8}  unit   verdict")
    report: list[dict[str, Any]] = []
    missed = 0
    for t in TARGETS:
        got = t.check(results, t.case, t.ref)
        if got is None:
            print(f"{t.label:52} {'n/a':>12}  (not measured here)")
            continue
        value, fastest, ok = got
        informational = t.label.startswith("(")
        verdict = "info" if informational else ("holds" if ok else "MISSED")
        missed += 0 if informational or ok else 1
        print(f"{t.label:52} {value:10.2f} {fastest:8.2f}  {t.unit:<6} {verdict}")
        report.append({"target": t.label, "value": value, "fastest": fastest, "unit": t.unit, "verdict": verdict})
    for p in problems:
        print(f"problem: {p}", file=sys.stderr)
    if args.json:
        medians = {
            name: {op: st.median for op, st in res.cells["state"].ops.items()}
            for name, res in results.items()
            if res.status == "ok" and "state" in res.cells and res.cells["state"].status == "ok"
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"environment": env, "medians_s": medians, "targets": report}, fh, indent=1)
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
