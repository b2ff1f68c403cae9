"""`statecodec bench`: what each codec costs a server, measured side by side in one run.

Prints a table per payload (µs per seal and unseal, p99, operations per
second, ratio to the floor, token size and overhead, remote calls), then
the thread and event-loop sections. ``--json`` saves the run, ``--plot``
draws it, ``--compare OLD NEW`` diffs two saved runs and exits 1 when a
change exceeds the measured noise. Needs ``pip install 'statecodec[bench]'``
for the peers and the plot; a missing peer is listed as skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from statecodec.bench.payloads import PAYLOADS

    p = sub.add_parser(
        "bench",
        help="benchmark every codec against the floor, the MCP SDK and peer libraries",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="short run (under 30 s on two cores), fewer cases")
    p.add_argument("--json", metavar="PATH", help="write the run as JSON to PATH")
    p.add_argument("--plot", metavar="PATH.png", help="draw µs per op and token overhead to PATH.png")
    p.add_argument(
        "--compare",
        nargs=2,
        metavar=("OLD.json", "NEW.json"),
        help="compare two saved runs instead of measuring; exit 1 on a regression beyond noise",
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="PATTERN",
        help="only cases whose name, group or tag contains PATTERN (repeatable, comma-separated); "
        "the floor always runs",
    )
    p.add_argument(
        "--payload",
        action="append",
        default=[],
        choices=list(PAYLOADS),
        help="payload sizes to run (repeatable; default: all)",
    )
    p.add_argument("--no-scale", action="store_true", help="skip the thread and event-loop sections")
    p.add_argument("--list", action="store_true", help="list the declared cases and exit")
    p.set_defaults(func=_bench)


def _progress(label: str, done: int, total: int) -> None:
    if sys.stderr.isatty():
        print(f"\r  {label} ({done}/{total})".ljust(40), end="", file=sys.stderr, flush=True)
    elif label.startswith(("round", "threads", "event")) or done == total:
        print(f"  {label}", file=sys.stderr, flush=True)


def _load(path: str) -> dict[str, Any]:
    from statecodec.bench.report import validate
    from statecodec.errors import ConfigurationError

    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read benchmark run {path}: {exc}") from None
    problems = validate(doc)
    if problems:
        raise ConfigurationError(f"{path} is not a statecodec bench run: {problems[0]}")
    loaded: dict[str, Any] = doc
    return loaded


def _list() -> int:
    from statecodec.bench.cases import discover

    cases, problems = discover()
    for c in cases:
        state = c.missing() or "available"
        print(f"{c.name:28} {c.group:10} {'quick' if c.quick else 'full ':5}  {c.description}  [{state}]")
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    return 0


def _bench(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except BrokenPipeError:
        # The reader went away (`| head`): not an error. Point stdout at devnull so
        # the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _run(args: argparse.Namespace) -> int:
    from statecodec.bench.compare import compare, format_compare
    from statecodec.bench.report import format_scale, format_table
    from statecodec.bench.runner import run

    if args.list:
        return _list()
    if args.compare:
        changes = compare(_load(args.compare[0]), _load(args.compare[1]))
        print(format_compare(changes))
        return 1 if any(c.verdict == "regression" for c in changes) else 0
    only = [p.strip() for item in args.only for p in item.split(",") if p.strip()]
    command = _command(args, only)
    print(f"statecodec bench: measuring{' (quick)' if args.quick else ''}...", file=sys.stderr)
    doc = run(
        quick=args.quick,
        only=only,
        payload_names=args.payload,
        scale=not args.no_scale,
        progress=_progress,
        command=command,
    )
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(format_table(doc))
    if "scale" in doc:
        print()
        print(format_scale(doc))
    print(f"\ntotal {doc['elapsed_s']:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json}", file=sys.stderr)
    if args.plot:
        from statecodec.bench.plot import plot

        plot(doc, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    broken = [
        name
        for c in doc["cases"]
        for name, cell in c.get("results", {}).items()
        if str(cell.get("reason", "")).startswith("broken")
    ]
    return 1 if broken else 0


def _command(args: argparse.Namespace, only: list[str]) -> str:
    parts = ["statecodec", "bench"]
    if args.quick:
        parts.append("--quick")
    parts += [x for o in only for x in ("--only", o)]
    parts += [x for p in args.payload for x in ("--payload", p)]
    if args.no_scale:
        parts.append("--no-scale")
    if args.json:
        parts += ["--json", args.json]
    if args.plot:
        parts += ["--plot", args.plot]
    return " ".join(shlex.quote(p) for p in parts)
