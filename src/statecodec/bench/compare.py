"""Compare two saved runs: ratios per case, payload and operation, regressions beyond noise.

A change is flagged only when it exceeds what both runs' own spread can
explain. The noise of one median is estimated from its batch samples: the
standard error of a median is about 1.2533 s/sqrt(n), and the standard
deviation s about 1.4826 times the median absolute deviation, so
``se = 1.858 * (MAD / median) / sqrt(n)``. A ratio is a regression when
``new/old - 1`` exceeds ``max(floor, k * sqrt(se_old^2 + se_new^2))``
(`DEFAULT_SIGMAS` k = 3, `DEFAULT_FLOOR` = 3 %), and an improvement in the
mirror case. Token sizes are deterministic, so any growth
is flagged.

Absolute times move between runs on a shared machine; the ``/ floor``
column divides out what moved the floor too, which helps to tell a change in
statecodec from a change in the machine or in OpenSSL.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from statecodec.bench.measure import OPS
from statecodec.bench.report import FLOOR, _grid

__all__ = ["DEFAULT_FLOOR", "DEFAULT_SIGMAS", "Change", "compare", "format_compare", "relative_error"]

DEFAULT_SIGMAS = 3.0
DEFAULT_FLOOR = 0.03


@dataclass(frozen=True)
class Change:
    case: str
    payload: str
    metric: str  # "seal", "unseal" or "token"
    old: float
    new: float
    ratio: float
    threshold: float
    verdict: str  # "regression", "improvement", "same"
    floor_ratio: float | None = None


def relative_error(stats: Mapping[str, Any]) -> float:
    """Relative standard error of one median, from its recorded noise and sample count."""
    n = max(1, len(stats.get("samples_s", ())) or 1)
    return 1.858 * float(stats.get("noise", 0.0)) / math.sqrt(n)


def _cells(doc: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    out: dict[tuple[str, str], Mapping[str, Any]] = {}
    for case in doc.get("cases", []):
        for pname, cell in case.get("results", {}).items():
            if isinstance(cell, Mapping) and cell.get("status") == "ok":
                out[(case["name"], pname)] = cell
    return out


def compare(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    *,
    sigmas: float = DEFAULT_SIGMAS,
    floor: float = DEFAULT_FLOOR,
) -> list[Change]:
    """Every (case, payload, metric) present and measured in both runs, with a verdict."""
    a, b = _cells(old), _cells(new)
    changes: list[Change] = []
    for key in [k for k in a if k in b]:
        name, payload = key
        for op in OPS:
            so, sn = a[key].get(op), b[key].get(op)
            if not isinstance(so, Mapping) or not isinstance(sn, Mapping):
                continue
            mo, mn = float(so["median_s"]), float(sn["median_s"])
            if mo <= 0:
                continue
            ratio = mn / mo
            threshold = max(floor, sigmas * math.hypot(relative_error(so), relative_error(sn)))
            verdict = "regression" if ratio > 1 + threshold else "improvement" if ratio < 1 - threshold else "same"
            fo, fn = a.get((FLOOR, payload), {}).get(op), b.get((FLOOR, payload), {}).get(op)
            floor_ratio = None
            if isinstance(fo, Mapping) and isinstance(fn, Mapping) and fo["median_s"] and fn["median_s"]:
                floor_ratio = ratio / (float(fn["median_s"]) / float(fo["median_s"]))
            changes.append(Change(name, payload, op, mo, mn, ratio, threshold, verdict, floor_ratio))
        to, tn = int(a[key]["token_chars"]), int(b[key]["token_chars"])
        if to != tn:
            verdict = "regression" if tn > to else "improvement"
            changes.append(Change(name, payload, "token", to, tn, tn / to if to else math.inf, 0.0, verdict))
    return changes


def format_compare(changes: list[Change]) -> str:
    """A table of ratios (new/old) with the noise threshold and verdict of each."""
    rows = [["case", "payload", "metric", "old", "new", "new/old", "/ floor", "noise ±", "verdict"]]
    for c in changes:
        unit = 1e6 if c.metric != "token" else 1.0
        rows.append(
            [
                c.case,
                c.payload,
                c.metric,
                f"{c.old * unit:.2f}" if c.metric != "token" else f"{c.old:.0f}",
                f"{c.new * unit:.2f}" if c.metric != "token" else f"{c.new:.0f}",
                f"{c.ratio:.3f}",
                "" if c.floor_ratio is None else f"{c.floor_ratio:.3f}",
                f"{c.threshold * 100:.1f}%" if c.metric != "token" else "exact",
                "REGRESSION" if c.verdict == "regression" else c.verdict,
            ]
        )
    lines = _grid(rows, left=3)
    reg = sum(c.verdict == "regression" for c in changes)
    imp = sum(c.verdict == "improvement" for c in changes)
    lines.append("")
    lines.append(
        f"{reg} regression(s), {imp} improvement(s), {len(changes) - reg - imp} within noise "
        "(times in µs; new/old > 1 is slower)"
    )
    return "\n".join(lines)
