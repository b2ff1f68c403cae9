"""One benchmark run end to end: discover, select, measure, scale, and the JSON document."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from statecodec.bench.cases import Case, discover, select
from statecodec.bench.environment import environment
from statecodec.bench.measure import FULL, QUICK, CaseResult, Progress, Settings, close_all, measure
from statecodec.bench.payloads import payloads as pick_payloads
from statecodec.bench.report import document
from statecodec.bench.scale import LoopSettings, event_loop_section, threads_section

__all__ = ["FULL_PLAN", "QUICK_PLAN", "Plan", "run"]


@dataclass(frozen=True)
class Plan:
    """How long each part of a run lasts."""

    settings: Settings
    thread_seconds: float
    thread_rounds: int
    loop: LoopSettings


QUICK_PLAN = Plan(QUICK, thread_seconds=0.05, thread_rounds=2, loop=LoopSettings(rounds=3, slice_seconds=0.15))
FULL_PLAN = Plan(FULL, thread_seconds=0.2, thread_rounds=5, loop=LoopSettings(rounds=11, slice_seconds=0.5))


def _scale(
    results: list[CaseResult],
    cases: Sequence[Case],
    payload_names: Sequence[str],
    plan: Plan,
    progress: Progress | None,
) -> dict[str, Any]:
    from statecodec.bench.payloads import PAYLOADS

    loop_names = {c.name for c in cases if c.loop}
    local = [r for r in results if r.name in loop_names and r.group != "remote" and r.kind == "codec"]
    thread_payloads = [(n, PAYLOADS[n].data) for n in ("state", "64k") if n in payload_names]
    if progress:
        progress("threads", 0, 1)
    section: dict[str, Any] = {
        "threads": threads_section(
            local, thread_payloads, seconds=plan.thread_seconds, rounds=plan.thread_rounds
        ),
    }
    if importlib.util.find_spec("mcp") is None:
        section["event_loop"] = {"skipped": "needs mcp (pip install 'statecodec[bench]')"}
        return section
    if progress:
        progress("event loop", 0, 1)
    in_loop = [r for r in results if r.name in loop_names]
    section["event_loop"] = event_loop_section(in_loop, PAYLOADS["state"].data, plan.loop)
    return section


def run(
    *,
    quick: bool = False,
    only: Sequence[str] = (),
    payload_names: Sequence[str] = (),
    scale: bool = True,
    plan: Plan | None = None,
    progress: Progress | None = None,
    extra_modules: Sequence[str] = (),
    cases: Sequence[Case] | None = None,
    command: str = "",
) -> dict[str, Any]:
    """Measure the selected cases and return the run's JSON document (see `statecodec.bench.report`)."""
    started = time.perf_counter()
    plan = plan or (QUICK_PLAN if quick else FULL_PLAN)
    problems: list[str] = []
    if cases is None:
        found, problems = discover(extra_modules)
        cases = select(found, only, quick=quick)
    chosen = pick_payloads(tuple(payload_names))
    env = environment()
    results = measure(cases, chosen, plan.settings, progress)
    try:
        section = _scale(results, cases, [p.name for p in chosen], plan, progress) if scale else None
    finally:
        close_all(results)
    return document(
        results,
        chosen,
        plan.settings,
        env,
        command=command,
        elapsed=time.perf_counter() - started,
        problems=problems,
        scale=section,
    )
