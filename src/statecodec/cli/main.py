"""Entry point of the `statecodec` command: one module per command group.

Each module in `COMMANDS` exposes `register(subparsers)`, which adds its
subcommand(s) and sets `func` on the parsed namespace. `func(args)` returns
the process exit code. Errors a user can fix are reported as one line on
stderr with exit code 2; nothing secret is ever printed there.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from statecodec import __version__
from statecodec.errors import StatecodecError

COMMANDS: tuple[str, ...] = (
    "statecodec.cli.keys",
    "statecodec.cli.bench",
    "statecodec.cli.rotate",
    "statecodec.cli.tokens",
    "statecodec.cli.demo",
    "statecodec.cli.kms",
    "statecodec.cli.vectors",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="statecodec",
        description="Seal, unseal and inspect opaque state tokens; manage keys, rotation and benchmarks.",
    )
    parser.add_argument("--version", action="version", version=f"statecodec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code: int = func(args)
    except StatecodecError as exc:
        print(f"statecodec: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
