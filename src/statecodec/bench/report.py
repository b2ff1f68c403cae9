"""The benchmark document (JSON) and its readable table.

Everything the command prints or plots is rendered from one JSON document,
so a saved run can be re-read, compared and plotted later. `SCHEMA` names
the layout; `validate` lists every way a document departs from it.

Layout::

    {"schema": "statecodec-bench/1", "command": str, "elapsed_s": float,
     "environment": {machine, cpu, cpus, python, openssl, packages, ...},
     "settings": {rounds, batch_seconds, warmup_seconds, tail_per_round, gc, ...},
     "payloads": {NAME: {"bytes": int, "description": str}},
     "cases": [{"name", "group", "description", "status": "ok"|"skipped"|"error",
                "reason", "kind", "note",
                "results": {PAYLOAD: {"status", "reason", "payload_bytes", "token_chars",
                                      "overhead_chars", "remote_calls": {"seal", "unseal"},
                                      "seal": OPSTATS, "unseal": OPSTATS}}}],
     "scale": {"threads": [...], "event_loop": {...}} (optional),
     "problems": [str]}

    OPSTATS = {"median_s", "min_s", "p99_s", "ops_per_s", "noise", "loops", "samples_s", "tail_count"}
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from statecodec.bench.cases import GROUPS
from statecodec.bench.measure import OPS, CaseResult, Settings
from statecodec.bench.payloads import Payload

__all__ = [
    "FLOOR",
    "SCHEMA",
    "document",
    "format_scale",
    "format_table",
    "paired_ratio",
    "ratio",
    "ratio_to_floor",
    "validate",
]

SCHEMA = "statecodec-bench/1"
FLOOR = "floor"
_OPSTAT_KEYS = ("median_s", "min_s", "p99_s", "ops_per_s", "noise", "loops", "samples_s", "tail_count")


def document(
    results: Sequence[CaseResult],
    payloads: Sequence[Payload],
    settings: Settings,
    environment: Mapping[str, Any],
    *,
    command: str,
    elapsed: float,
    problems: Sequence[str] = (),
    scale: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON-ready document of one run."""
    order = {g: i for i, g in enumerate(GROUPS)}
    cases = sorted(results, key=lambda r: order.get(r.group, len(order)))
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "command": command,
        "elapsed_s": round(elapsed, 3),
        "environment": dict(environment),
        "settings": settings.describe(),
        "payloads": {p.name: {"bytes": len(p.data), "description": p.description} for p in payloads},
        "cases": [_case_json(r) for r in cases],
        "problems": list(problems),
    }
    if scale is not None:
        doc["scale"] = dict(scale)
    return doc


def _case_json(r: CaseResult) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, cell in r.cells.items():
        entry: dict[str, Any] = {
            "status": cell.status,
            "reason": cell.reason,
            "payload_bytes": cell.payload_bytes,
            "token_chars": cell.token_chars,
            "overhead_chars": cell.overhead_chars,
            "remote_calls": dict(cell.remote_calls),
        }
        for op, stats in cell.ops.items():
            entry[op] = stats.to_json()
        results[name] = entry
    return {
        "name": r.name,
        "group": r.group,
        "description": r.description,
        "status": r.status,
        "reason": r.reason,
        "kind": r.kind,
        "note": r.note,
        "results": results,
    }


def _need(problems: list[str], where: str, obj: Mapping[str, Any], key: str, types: tuple[type, ...]) -> Any:
    if key not in obj:
        problems.append(f"{where}: missing {key!r}")
        return None
    value = obj[key]
    if isinstance(value, bool) and bool not in types:
        problems.append(f"{where}.{key}: expected {'/'.join(t.__name__ for t in types)}, got bool")
        return None
    if not isinstance(value, types):
        problems.append(f"{where}.{key}: expected {'/'.join(t.__name__ for t in types)}, got {type(value).__name__}")
        return None
    return value


def validate(doc: object) -> list[str]:
    """Every departure of `doc` from the `SCHEMA` layout; empty when it conforms."""
    problems: list[str] = []
    if not isinstance(doc, Mapping):
        return ["document: expected a JSON object"]
    if doc.get("schema") != SCHEMA:
        problems.append(f"document: schema is {doc.get('schema')!r}, expected {SCHEMA!r}")
    _need(problems, "document", doc, "command", (str,))
    _need(problems, "document", doc, "elapsed_s", (int, float))
    env = _need(problems, "document", doc, "environment", (dict,))
    if env is not None:
        for key in ("machine", "cpu", "python", "openssl"):
            _need(problems, "environment", env, key, (str,))
        _need(problems, "environment", env, "packages", (dict,))
    _need(problems, "document", doc, "settings", (dict,))
    payloads = _need(problems, "document", doc, "payloads", (dict,)) or {}
    for name, p in payloads.items():
        if isinstance(p, Mapping):
            _need(problems, f"payloads.{name}", p, "bytes", (int,))
        else:
            problems.append(f"payloads.{name}: expected an object")
    cases = _need(problems, "document", doc, "cases", (list,)) or []
    for i, case in enumerate(cases):
        where = f"cases[{i}]"
        if not isinstance(case, Mapping):
            problems.append(f"{where}: expected an object")
            continue
        for key in ("name", "group", "status", "reason", "kind"):
            _need(problems, where, case, key, (str,))
        if case.get("status") not in ("ok", "skipped", "error"):
            problems.append(f"{where}.status: {case.get('status')!r} is not ok/skipped/error")
        results = _need(problems, where, case, "results", (dict,)) or {}
        for pname, cell in results.items():
            cw = f"{where}.results.{pname}"
            if not isinstance(cell, Mapping):
                problems.append(f"{cw}: expected an object")
                continue
            _need(problems, cw, cell, "status", (str,))
            for key in ("payload_bytes", "token_chars", "overhead_chars"):
                _need(problems, cw, cell, key, (int,))
            _need(problems, cw, cell, "remote_calls", (dict,))
            if cell.get("status") == "ok":
                for op in OPS:
                    stats = _need(problems, cw, cell, op, (dict,))
                    if stats is None:
                        continue
                    for key in _OPSTAT_KEYS:
                        _need(problems, f"{cw}.{op}", stats, key, (list,) if key == "samples_s" else (int, float))
    _need(problems, "document", doc, "problems", (list,))
    if "scale" in doc and not isinstance(doc["scale"], Mapping):
        problems.append("document.scale: expected an object")
    return problems


def _stat(doc_case: Mapping[str, Any], payload: str, op: str) -> Mapping[str, Any] | None:
    cell = doc_case.get("results", {}).get(payload)
    if not isinstance(cell, Mapping) or cell.get("status") != "ok":
        return None
    stats = cell.get(op)
    return stats if isinstance(stats, Mapping) else None


def _case(doc: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    for c in doc.get("cases", []):
        if c.get("name") == name:
            found: Mapping[str, Any] = c
            return found
    return None


def paired_ratio(a: Mapping[str, Any], b: Mapping[str, Any]) -> float | None:
    """Cost of `a` over cost of `b` (two OPSTATS of one run), taken round by round.

    The median over rounds of (a's round median / b's round median): both
    were measured interleaved in the same round, so load that slowed one
    round slowed both and cancels. Falls back to the ratio of the medians
    when the rounds do not pair up.
    """
    sa, sb = a.get("samples_s") or [], b.get("samples_s") or []
    if sa and len(sa) == len(sb) and all(y > 0 for y in sb):
        return float(statistics.median(x / y for x, y in zip(sa, sb, strict=True)))
    if not b.get("median_s"):
        return None
    return float(a["median_s"]) / float(b["median_s"])


def ratio(doc: Mapping[str, Any], name: str, ref: str, payload: str, op: str) -> float | None:
    """`paired_ratio` of case `name` over case `ref`, same payload and operation, same run."""
    case, other = _case(doc, name), _case(doc, ref)
    if case is None or other is None:
        return None
    a, b = _stat(case, payload, op), _stat(other, payload, op)
    if a is None or b is None:
        return None
    return paired_ratio(a, b)


def ratio_to_floor(doc: Mapping[str, Any], name: str, payload: str, op: str) -> float | None:
    """Cost of case `name` over the floor's, same payload and operation, same run (`paired_ratio`)."""
    return ratio(doc, name, FLOOR, payload, op)


def _us(seconds: float) -> str:
    us = seconds * 1e6
    if us >= 1000:
        return f"{us:,.0f}"
    if us >= 100:
        return f"{us:.0f}"
    return f"{us:.2f}" if us < 10 else f"{us:.1f}"


def _rate(ops: float) -> str:
    if ops >= 1e6:
        return f"{ops / 1e6:.2f}M"
    if ops >= 1e3:
        return f"{ops / 1e3:.0f}k"
    return f"{ops:.0f}"


def _calls(rc: Mapping[str, Any]) -> str:
    s, u = rc.get("seal"), rc.get("unseal")
    return "n/a" if s is None or u is None else f"{s}/{u}"


_HEAD = (
    "case",
    "seal µs",
    "p99",
    "unseal µs",
    "p99",
    "seal/s",
    "unseal/s",
    "x floor",
    "token",
    "+chars",
    "calls",
)


def _grid(rows: list[list[str]], left: int = 1) -> list[str]:
    """`rows` as aligned text, the header row first and then a rule; the first `left` columns flush left."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = [
        "  ".join(
            v.ljust(w) if i < left else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    ]
    out.insert(1, "-" * len(out[0]))
    return out


def format_table(doc: Mapping[str, Any]) -> str:
    """The readable report: one table per payload, then skipped and failed cases."""
    env = doc.get("environment", {})
    settings = doc.get("settings", {})
    lines = [
        f"statecodec bench: {env.get('cpu', '?')} ({env.get('cpus', '?')} CPUs), Python {env.get('python', '?')}, "
        f"{env.get('openssl', '?')}, cryptography {env.get('packages', {}).get('cryptography', '?')}",
        f"method: {settings.get('rounds', '?')} interleaved rounds, ~{settings.get('batch_seconds', 0) * 1e3:g} ms "
        f"batches, gc {settings.get('gc', '?')}; medians of batches, p99 of single timed operations",
        "x floor: seal/unseal cost over the floor's, round by round in the same run; +chars: token length minus "
        "base64url(payload); calls: remote calls per seal/unseal",
    ]
    cases = [c for c in doc.get("cases", []) if c.get("status") == "ok"]
    for pname, meta in doc.get("payloads", {}).items():
        rows = [list(_HEAD)]
        for c in cases:
            cell = c.get("results", {}).get(pname)
            if not isinstance(cell, Mapping):
                continue
            if cell.get("status") != "ok":
                rows.append([c["name"], f"error: {cell.get('reason', '')}"] + [""] * (len(_HEAD) - 2))
                continue
            s, u = cell["seal"], cell["unseal"]
            rs, ru = (ratio_to_floor(doc, c["name"], pname, op) for op in OPS)
            ratio = "" if rs is None or ru is None else f"{rs:.2f}/{ru:.2f}"
            rows.append(
                [
                    c["name"],
                    _us(s["median_s"]),
                    _us(s["p99_s"]),
                    _us(u["median_s"]),
                    _us(u["p99_s"]),
                    _rate(s["ops_per_s"]),
                    _rate(u["ops_per_s"]),
                    ratio,
                    str(cell["token_chars"]),
                    f"{cell['overhead_chars']:+d}",
                    _calls(cell.get("remote_calls", {})),
                ]
            )
        lines += ["", f"payload {pname}: {meta.get('description', '')} ({meta.get('bytes')} bytes)"]
        lines += _grid(rows)
    notes = [c for c in cases if c.get("note")]
    if notes:
        lines += ["", "what each case measures:"]
        lines += [f"  {c['name']}: {c['note']}" for c in notes]
    skipped = [c for c in doc.get("cases", []) if c.get("status") == "skipped"]
    if skipped:
        lines += ["", "skipped:"]
        lines += [f"  {c['name']}: {c.get('reason', '')}" for c in skipped]
    failed = [c for c in doc.get("cases", []) if c.get("status") == "error"]
    if failed:
        lines += ["", "errors (not timed):"]
        lines += [f"  {c['name']}: {c.get('reason', '')}" for c in failed]
    for p in doc.get("problems", []):
        lines.append(f"problem: {p}")
    return "\n".join(lines)


def _round_cost(doc: Mapping[str, Any], name: str) -> float | None:
    case = _case(doc, name)
    if case is None:
        return None
    s, u = _stat(case, "state", "seal"), _stat(case, "state", "unseal")
    if s is None or u is None:
        return None
    return float(s["median_s"]) + float(u["median_s"])


def format_scale(doc: Mapping[str, Any]) -> str:
    """The thread and event-loop sections of a run, as text."""
    scale = doc.get("scale") or {}
    lines: list[str] = []
    threads = scale.get("threads") or []
    if threads:
        rows = [["case", "payload", "pairs/s 1 thread", "pairs/s 2 threads", "2 threads / 1", "parallelism"]]
        for t in threads:
            rows.append(
                [
                    t["case"],
                    t["payload"],
                    _rate(t["pairs_per_s_1_thread"]),
                    _rate(t["pairs_per_s_2_threads"]),
                    f"{t['scaling']:.2f}",
                    f"{t['parallelism']:.2f}" if "parallelism" in t else "",
                ]
            )
        lines.append(
            "threads: seal+unseal pairs per second; parallelism = (CPU/wall, 2 threads) / (CPU/wall, 1 thread): "
            "near 2.00 parallel, near 1.00 serialized by the GIL"
        )
        lines += _grid(rows)
    loop = scale.get("event_loop") or {}
    if "skipped" in loop:
        lines += ["", f"event loop: skipped: {loop['skipped']}"]
    elif loop.get("rows"):
        lines += [
            "",
            f"event loop: in-memory MCPServer + Client, {loop['concurrency']} concurrent two-round flows "
            f"(one seal + one unseal each, {loop['state_bytes']} B state), a probe request every "
            f"{loop['probe_interval_s'] * 1e3:g} ms; {loop['rounds']} rounds of {loop['slice_seconds']:g} s slices",
        ]
        rows = [
            [
                "case",
                "rounds/s",
                "vs reference",
                "probe median ms",
                "probe p99 ms",
                "loop blocked per flow µs",
                "codec share of loop",
            ]
        ]
        ref = loop["rows"][0].get("rounds_per_s")
        for r in loop["rows"]:
            if r.get("error") or "rounds_per_s" not in r:
                rows.append([r["case"], f"error: {r.get('error', 'no rounds')}", "", "", "", "", ""])
                continue
            cost = _round_cost(doc, r["case"])
            share = "" if cost is None else f"{cost * r['flows_per_s'] * 100:.1f}%"
            blocked = "" if cost is None else _us(cost)
            rows.append(
                [
                    r["case"],
                    f"{r['rounds_per_s']:,.0f}",
                    f"{r['rounds_per_s'] / ref:.2f}" if ref else "",
                    "" if r.get("probe_median_ms") is None else f"{r['probe_median_ms']:.2f}",
                    "" if r.get("probe_p99_ms") is None else f"{r['probe_p99_ms']:.2f}",
                    blocked,
                    share,
                ]
            )
        lines += _grid(rows)
        lines.append(
            "loop blocked per flow: seal + unseal median on the state payload, the time each flow holds the "
            "event loop inside the codec (every other request waits that long); codec share of loop: that "
            "times flows per second"
        )
    return "\n".join(lines)
