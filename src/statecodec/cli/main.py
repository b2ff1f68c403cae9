"""The `statecodec` command: exit 0 on success, 1 when a token is refused or a check fails, 2 on bad usage.

One convention for every command: the result goes to stdout (``--json``: as JSON), or into a new file with
``--output FILE``; status and progress go to stderr. Errors are one line on stderr and, with ``--json``, also a
JSON error object on stdout: a refused token shows only its reason code, any other `StatecodecError` its
message; neither ever holds a key, a payload or token text.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence

from statecodec import __version__
from statecodec.cli._output import emit
from statecodec.errors import ConfigurationError, InvalidToken, ProviderError, SealError, StatecodecError, StoreError
from statecodec.keys import format_keys, generate_key
from statecodec.mcp import MCP_EXTRA_HINT

# Each module's register(sub) sets func(args) -> exit code.
_COMMANDS = ("tokens", "rotate", "kms", "vectors", "bench", "store", "check")


def settings_from_flags(flags: Mapping[str, str | None]) -> dict[str, str]:
    """The environment with the ``STATECODEC_*`` setting of each flag given over it, for `statecodec.config`; a flag
    is the one source of its setting: it clears the setting's other form (``X`` or ``X_FILE``)."""
    settings = dict(os.environ)
    for name, value in flags.items():
        if value is not None:
            settings.pop(name.removesuffix("_FILE") if name.endswith("_FILE") else f"{name}_FILE", None)
            settings[name] = value
    return settings


@contextlib.contextmanager
def flags_named(flags: Mapping[str, str | None]) -> Iterator[None]:
    """A `ConfigurationError` in the block names the flag the user wrote (``--codec``) beside the setting it stands
    for (``STATECODEC_CODEC``); `flags` maps each setting to its flag, None when the flag was not given."""
    try:
        yield
    except ConfigurationError as exc:
        message = str(exc)
        for name, flag in flags.items():
            if flag is not None and flag not in message:
                # Whole names only: STATECODEC_KEYS is not the start of STATECODEC_KEYS_FILE.
                message = re.sub(rf"(?<![A-Z_]){name}(?![A-Z_])", f"{flag} ({name})", message)
        raise ConfigurationError(message) from None


def _keygen(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise ConfigurationError("--count must be at least 1")
    emit(format_keys(generate_key() for _ in range(args.count)), args.output)
    if args.output is not None:
        print(f"statecodec keygen: wrote {args.count} key(s) to {args.output} (mode 0600)", file=sys.stderr)
    return 0


def _demo(args: argparse.Namespace) -> int:
    try:
        from statecodec.cli.demo import run_demo  # the only command that imports the MCP SDK
    except ImportError:
        raise ConfigurationError(f"the demo needs the MCP SDK; {MCP_EXTRA_HINT}") from None
    return run_demo(from_env=args.from_env)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="statecodec",
        description="Seal, unseal and inspect opaque state tokens; manage keys, rotation and benchmarks.",
    )
    parser.add_argument("--version", action="version", version=f"statecodec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    keygen = sub.add_parser("keygen", help="print a new random key in the STATECODEC_KEYS format")
    keygen.add_argument("-n", "--count", type=int, default=1, help="how many keys (comma-separated)")
    keygen.add_argument("-o", "--output", metavar="FILE", help="write a new file, mode 0600 (never overwrites)")
    keygen.set_defaults(func=_keygen)
    demo = sub.add_parser("demo", help="run an MCP server and client in memory: two rounds, then a tampered token")
    demo.add_argument("--from-env", action="store_true", help="use the STATECODEC_* codec, not a fresh key")
    demo.set_defaults(func=_demo)
    for name in _COMMANDS:
        importlib.import_module(f"statecodec.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code: int = args.func(args)
    except InvalidToken as exc:
        return _error(args, exc, f"invalid token: {exc}", 1)
    except StoreError as exc:  # a store that cannot answer is a failed check, as a provider is in `check`
        return _error(args, exc, str(exc), 1)
    except StatecodecError as exc:
        return _error(args, exc, str(exc), 2)
    except KeyboardInterrupt:
        return 130
    return code


_ERROR_KINDS = (
    (InvalidToken, "invalid_token"),
    (ConfigurationError, "configuration"),
    (ProviderError, "provider"),
    (StoreError, "store"),
    (SealError, "seal"),
)


def _error(args: argparse.Namespace, exc: StatecodecError, message: str, code: int) -> int:
    """Report `exc` (one line on stderr; with --json also an error object on stdout) and return `code`."""
    print(f"statecodec {args.command}: {message}", file=sys.stderr)
    if getattr(args, "json", False):
        kind = next((name for cls, name in _ERROR_KINDS if isinstance(exc, cls)), "error")
        reason = exc.reason.value if isinstance(exc, InvalidToken) else None
        doc = {"error": kind, "reason": reason, "message": message, "command": args.command, "exit_status": code}
        print(json.dumps(doc))
    return code
