"""Render a saved ``statecodec bench --json`` run as Markdown tables (for docs/performance.md).

Run: ``python benchmarks/markdown.py RUN.json > tables.md``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from statecodec.bench.report import ratio_to_floor, validate


def _us(s: float) -> str:
    us = s * 1e6
    return f"{us:,.0f}" if us >= 100 else f"{us:.1f}" if us >= 10 else f"{us:.2f}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _round_cost(doc: Mapping[str, Any], name: str) -> float | None:
    for c in doc["cases"]:
        cell = c.get("results", {}).get("state") if c["name"] == name else None
        if cell and cell.get("status") == "ok":
            return float(cell["seal"]["median_s"] + cell["unseal"]["median_s"])
    return None


def tables(doc: Mapping[str, Any]) -> str:
    out: list[str] = []
    head = ["case", "seal µs", "unseal µs", "seal p99", "unseal p99", "x floor (seal / unseal)", "token", "+chars",
            "remote calls"]
    for pname, meta in doc["payloads"].items():
        out += [f"**{pname}**: {meta['description']} ({meta['bytes']:,} bytes)", "", _row(head),
                _row(["---"] + ["---:"] * (len(head) - 1))]
        for c in doc["cases"]:
            cell = c.get("results", {}).get(pname)
            if c["status"] != "ok" or not cell:
                continue
            if cell["status"] != "ok":
                out.append(_row([c["name"], cell["reason"]] + [""] * (len(head) - 2)))
                continue
            s, u = cell["seal"], cell["unseal"]
            rs, ru = (ratio_to_floor(doc, c["name"], pname, op) for op in ("seal", "unseal"))
            calls = cell["remote_calls"]
            out.append(_row([
                f"`{c['name']}`", _us(s["median_s"]), _us(u["median_s"]), _us(s["p99_s"]), _us(u["p99_s"]),
                f"{rs:.2f} / {ru:.2f}" if rs and ru else "", f"{cell['token_chars']:,}", f"+{cell['overhead_chars']}",
                f"{calls.get('seal')} / {calls.get('unseal')}",
            ]))
        out.append("")
    skipped = [c for c in doc["cases"] if c["status"] != "ok"]
    if skipped:
        out += ["Not measured in this run:", ""]
        out += [f"- `{c['name']}`: {c['status']}: {c['reason']}" for c in skipped]
        out.append("")
    scale = doc.get("scale") or {}
    if scale.get("threads"):
        out += [_row(["case", "payload", "pairs/s, 1 thread", "pairs/s, 2 threads", "2 threads / 1", "parallelism"]),
                _row(["---", "---", "---:", "---:", "---:", "---:"])]
        for t in scale["threads"]:
            out.append(_row([f"`{t['case']}`", t["payload"], f"{t['pairs_per_s_1_thread']:,.0f}",
                             f"{t['pairs_per_s_2_threads']:,.0f}", f"{t['scaling']:.2f}",
                             f"{t.get('parallelism', 0):.2f}"]))
        out.append("")
    loop = scale.get("event_loop") or {}
    if loop.get("rows"):
        ref = loop["rows"][0].get("rounds_per_s") or 0
        out += [_row(["case", "rounds/s", "vs reference", "probe median ms", "probe p99 ms",
                      "loop blocked per flow µs", "codec share of loop"]),
                _row(["---", "---:", "---:", "---:", "---:", "---:", "---:"])]
        for r in loop["rows"]:
            if "rounds_per_s" not in r:
                out.append(_row([r["case"], f"error: {r.get('error')}", "", "", "", "", ""]))
                continue
            cost = _round_cost(doc, r["case"])
            out.append(_row([f"`{r['case']}`" if not r["case"].startswith("reference") else r["case"],
                             f"{r['rounds_per_s']:,.0f}", f"{r['rounds_per_s'] / ref:.2f}" if ref else "",
                             f"{r['probe_median_ms']:.2f}", f"{r['probe_p99_ms']:.2f}",
                             "" if cost is None else _us(cost),
                             "" if cost is None else f"{cost * r['flows_per_s'] * 100:.1f} %"]))
        out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as fh:
        doc = json.load(fh)
    problems = validate(doc)
    if problems:
        print(f"{argv[0]}: {problems[0]}", file=sys.stderr)
        return 2
    print(tables(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
