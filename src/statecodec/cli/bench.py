"""`statecodec bench`: what each codec costs, as ratios to the floor, measured side by side in one run.

Prints, per payload, each case's seal and unseal cost over the floor's (bare
AES-GCM and base64url in Python) and its token overhead, then what
BoundCodec adds per MCP round against what the SDK's RequestStateBoundary
adds. A peer whose package is missing is listed as skipped. Needs
``pip install 'statecodec[bench]'`` for the peers, the SDK and the plot.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["register"]

QUICK, FULL = 15, 101  # rounds
BATCH_MS = 0.5


def _rounds(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text}")
    return int(text)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark every codec against the floor, the MCP SDK and peer libraries",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help=f"{QUICK} rounds instead of {FULL}")
    p.add_argument("--rounds", type=_rounds, help="this many rounds instead (more rounds, steadier ratios)")
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="cases whose name or group contains NAME (repeatable, comma-separated; 'binding' is the MCP round); "
        "the floor always runs",
    )
    p.add_argument(
        "--payload",
        action="append",
        default=[],
        choices=["state", "4k", "64k"],
        help="payload sizes (repeatable; default: all)",
    )
    p.add_argument("--vault-addr", metavar="URL", help="add VaultTransitCodec (STATECODEC_VAULT_* settings)")
    p.add_argument("--json", metavar="PATH", help="write the run as JSON to PATH")
    p.add_argument("--plot", metavar="PATH.png", help="draw the ratios to PATH.png (needs matplotlib)")
    p.set_defaults(func=_bench)


def _progress(done: int, total: int) -> None:
    if sys.stderr.isatty():
        print(f"\r  round {done}/{total}", end="\n" if done == total else "", file=sys.stderr, flush=True)


def _bench(args: argparse.Namespace) -> int:
    from statecodec import ConfigurationError
    from statecodec.bench.cases import PAYLOADS, cases
    from statecodec.bench.measure import run
    from statecodec.bench.report import format_table, plot, require_matplotlib

    if args.plot:
        require_matplotlib()
    names = [n.strip().lower() for item in args.only for n in item.split(",") if n.strip()]
    # The floor always runs: every ratio is taken against it.
    chosen = [
        c
        for c in cases(args.vault_addr)
        if c.group == "floor" or not names or any(n in f"{c.name} {c.group}".lower() for n in names)
    ]
    binding = not names or any(n in "binding boundcodec requeststateboundary" for n in names)
    if not binding and all(c.group == "floor" for c in chosen):
        raise ConfigurationError(f"--only {','.join(names)} matches no case; see the names `statecodec bench` prints")
    payloads = {k: v for k, v in PAYLOADS.items() if not args.payload or k in args.payload}
    print(f"statecodec bench: {len(chosen)} cases, {len(payloads)} payloads", file=sys.stderr)
    doc = run(
        chosen,
        payloads,
        binding=binding,
        rounds=args.rounds or (QUICK if args.quick else FULL),
        batch_ms=BATCH_MS,
        progress=_progress,
    )
    print(format_table(doc))
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    if args.plot:
        plot(doc, args.plot)
    return 0
