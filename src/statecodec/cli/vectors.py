"""`statecodec vectors verify` and `statecodec vectors generate`: byte compatibility, checked from files.

`verify` checks vectors files (this project's, or another implementation's
output in the same schema) against this library: every valid token opens and
re-derives exactly where its format is deterministic, every invalid one is
refused with its pinned reason. It prints counts and, for a vector that does
not hold, its name and what differs; never a key beyond what the file holds.
`generate` writes a format's standard set from fixed test keys.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from statecodec.errors import ConfigurationError
from statecodec.vectors import GENERATORS, VERIFIERS, dump_vectors, generate_vectors, verify_vectors

_VERIFY_EPILOG = f"""\
Each PATH is a JSON vectors file in the statecodec-vectors/1 schema; its
"codec" member picks the verifier ({", ".join(sorted(VERIFIERS))}).
Exit status: 0 every vector holds, 1 some vector does not (each is named with
what differs), 2 a file is unreadable or not in the schema.
"""

_GENERATE_EPILOG = f"""\
CODEC is one of:
  {", ".join(sorted(GENERATORS))}
"jwe" and "jws" hold every configuration of their format in one file; the
others one configuration each. Keys in generated files are fixed test values:
never use them. Generation is deterministic: the same CODEC gives the same file.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "vectors",
        help="verify or generate test vectors for other implementations",
        description="Prove byte compatibility with another implementation through frozen vectors files.",
    )
    vsub = p.add_subparsers(dest="vectors_command", metavar="ACTION")
    p.set_defaults(func=lambda _args: _usage(p))

    verify = vsub.add_parser(
        "verify",
        help="check vectors files against this library",
        epilog=_VERIFY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument("paths", nargs="+", metavar="PATH", help="vectors file(s)")
    verify.set_defaults(func=_verify)

    generate = vsub.add_parser(
        "generate",
        help="write a format's standard vectors file",
        epilog=_GENERATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    generate.add_argument("codec", choices=sorted(GENERATORS), metavar="CODEC", help="which vector set (below)")
    generate.add_argument("-o", "--output", metavar="PATH", help="write here instead of standard output")
    generate.set_defaults(func=_generate)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _verify(args: argparse.Namespace) -> int:
    status = 0
    for path in args.paths:
        try:
            report = verify_vectors(path)
        except ConfigurationError as exc:
            print(f"statecodec: {path}: {exc}", file=sys.stderr)
            status = 2
            continue
        counts = f"{report.valid} valid, {report.invalid} invalid"
        if report.reference:
            counts += f", {report.reference} reference"
        if report.ok:
            print(f"{path}: {report.codec}: {counts}: all hold")
            continue
        n = len(report.failures)
        problem = f"{n} failure{'' if n == 1 else 's'}" if n else "no vectors"
        print(f"{path}: {report.codec}: {counts}: {problem}")
        for failure in report.failures:
            print(f"  - {failure}")
        status = max(status, 1)
    return status


def _generate(args: argparse.Namespace) -> int:
    vectors = generate_vectors(args.codec)
    text = dump_vectors(vectors)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    out = Path(args.output)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot write {out}: {exc.strerror}") from None
    print(f"{out}: {vectors.codec} vectors ({args.codec}) written")
    return 0
