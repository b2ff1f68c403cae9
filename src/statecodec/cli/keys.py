"""`statecodec keygen`: print a fresh key in the STATECODEC_KEYS format."""

from __future__ import annotations

import argparse
import sys

from statecodec.keys import format_keys, generate_key


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("keygen", help="print a new random key in the STATECODEC_KEYS format")
    p.add_argument("-n", "--count", type=int, default=1, help="how many keys (comma-separated)")
    p.set_defaults(func=_keygen)


def _keygen(args: argparse.Namespace) -> int:
    count: int = args.count
    if count < 1:
        print("statecodec keygen: --count must be at least 1", file=sys.stderr)
        return 2
    print(format_keys(generate_key() for _ in range(count)))
    return 0
