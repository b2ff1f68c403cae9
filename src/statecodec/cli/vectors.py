"""`statecodec vectors verify`: byte compatibility with another implementation, checked from files.

Each file's entries are checked by `statecodec.vectors.verify_vectors`;
this prints one line per file and one per entry that does not hold (its name
and what differs, never a key or a token).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from statecodec.errors import ConfigurationError
from statecodec.vectors import CODECS, SCHEMA, verify_vectors

_EPILOG = f"""\
Each PATH is a JSON vectors file in the {SCHEMA} schema; its "codec" member
({", ".join(CODECS)}) names the codec its entries open.
Exit status: 0 every entry holds, 1 some entry does not (each is named with
what differs), 2 a file is unreadable or not in the schema.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "vectors",
        help="check test-vector files against this library",
        description="Prove byte compatibility with another implementation through vectors files.",
    )
    vsub = p.add_subparsers(dest="vectors_command", metavar="ACTION")
    p.set_defaults(func=lambda _args: _usage(p))
    verify = vsub.add_parser(
        "verify",
        help="check vectors files against this library",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument("paths", nargs="+", metavar="PATH", help="vectors file(s)")
    verify.set_defaults(func=_verify)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _verify(args: argparse.Namespace) -> int:
    status = 0
    for path in args.paths:
        try:
            report = verify_vectors(_read(path))
        except ConfigurationError as exc:
            print(f"statecodec: {path}: {exc}", file=sys.stderr)
            status = 2
            continue
        n, ok = len(report.failures), report.valid + report.invalid > 0 and not report.failures
        verdict = "all hold" if ok else f"{n} failure{'' if n == 1 else 's'}" if n else "no vectors"
        print(f"{path}: {report.codec}: {report.valid} valid, {report.invalid} invalid: {verdict}")
        for failure in report.failures:
            print(f"  - {failure}")
        status = max(status, 0 if ok else 1)
    return status


def _read(path: str) -> object:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read it: {exc.strerror}") from None
    except ValueError:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        raise ConfigurationError("it is not UTF-8 JSON") from None
