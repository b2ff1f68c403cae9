"""The `statecodec` command. One convention for every command (docs/cli.md): the result on stdout (``--json``: as
JSON) or in a new file (``--output``), status on stderr; exit 0 success, 1 token refused or check failed, 2 bad
usage, 130 interrupted, 141 stdout closed. No error ever holds a key, a payload or token text.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from statecodec import __version__
from statecodec.cli._output import emit
from statecodec.config import missing_package
from statecodec.errors import ConfigurationError, InvalidToken, ProviderError, SealError, StatecodecError, StoreError
from statecodec.keys import format_keys, generate_key

__all__ = ["main"]

Command = Callable[[argparse.Namespace], int]


def settings_from_flags(flags: Mapping[str, str | None]) -> dict[str, str]:
    """The environment with the ``STATECODEC_*`` setting of each flag given over it, for `statecodec.config`; a flag
    is the one source of its setting: it clears the setting's other form (``X`` or ``X_FILE``)."""
    settings = dict(os.environ)
    for name, value in flags.items():
        if value is not None:
            settings.pop(name.removesuffix("_FILE") if name.endswith("_FILE") else f"{name}_FILE", None)
            settings[name] = value
    return settings


def flag_values(args: argparse.Namespace) -> dict[str, str | None]:
    """{setting: the value of its flag, None when not given} for the command's ``flags`` (flag -> the setting it
    stands for, set by its parser)."""
    return {name: getattr(args, flag[2:].replace("-", "_"), None) for flag, name in args.flags.items()}


def _keygen(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise ConfigurationError("--count must be at least 1")
    keys = format_keys(generate_key() for _ in range(args.count))
    emit(json.dumps({"STATECODEC_KEYS": keys}) if args.json else keys, args.output,
         f"statecodec keygen: wrote {args.count} key(s)")
    return 0


class _Parser(argparse.ArgumentParser):
    """A parser whose every (sub)command's --help opens with the line its parent's list shows for it, and whose
    ``add_parser(..., func=, flags=)`` names the `Command` that runs it and its flags that stand for a setting."""

    def add_subparsers(self, **kwargs: Any) -> Any:
        commands = super().add_subparsers(**kwargs)
        add = commands.add_parser

        def add_parser(name: str, func: Command | None = None, flags: Mapping[str, str] | None = None,
                       **options: Any) -> Any:
            parser = add(name, **{"description": options.get("help"), **options})  # an explicit description wins
            parser.set_defaults(func=func, flags=flags or {}, command_parser=parser)  # the innermost wins
            return parser

        setattr(commands, "add_parser", add_parser)  # noqa: B010 - an instance's method, replaced
        return commands


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="statecodec", description="Seal and unseal opaque state tokens; "
                     "manage keys, rotation and benchmarks.")
    parser.add_argument("--version", action="version", version=f"statecodec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    keygen = sub.add_parser("keygen", func=_keygen, help="print a new random key in the STATECODEC_KEYS format")
    keygen.add_argument("-n", "--count", type=int, default=1, help="how many keys (comma-separated)")
    keygen.add_argument("-o", "--output", metavar="FILE", help="write a new file, mode 0600 (never overwrites)")
    keygen.add_argument("--json", action="store_true", help="print the keys as a JSON object")
    for name in ("tokens", "rotate", "kms", "bench", "store", "check"):
        importlib.import_module(f"statecodec.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # reported by the command's own parser, with its usage, not the top level's
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # here, so that a reader gone away is caught below
    except StatecodecError as exc:
        return _error(args, exc)
    except ImportError as exc:  # an optional extra this command needs is not installed
        return _error(args, ConfigurationError(missing_package(exc)))
    except BrokenPipeError:
        # The reader of stdout went away (`| head`): stop quietly, as `yes | head` does; stdout is pointed at
        # /dev/null so that the interpreter's last flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return 130
    return code


_ERROR_KINDS = {InvalidToken: "invalid_token", ConfigurationError: "configuration", ProviderError: "provider",
                StoreError: "store", SealError: "seal"}  # fmt: skip


def _error(args: argparse.Namespace, exc: StatecodecError) -> int:
    """Report `exc` (one line on stderr; with --json also an error object on stdout) and return its exit status:
    1 for a refused token or a store that cannot answer (a failed check, as a provider is in `check`), else 2."""
    code = 1 if isinstance(exc, (InvalidToken, StoreError)) else 2
    message = f"invalid token: {exc}" if isinstance(exc, InvalidToken) else str(exc)
    for flag, name in args.flags.items():  # a flag the user gave, named beside its setting
        if isinstance(exc, ConfigurationError) and flag_values(args)[name] is not None and flag not in message:
            # Whole names only: STATECODEC_KEYS is not the start of STATECODEC_KEYS_FILE.
            message = re.sub(rf"(?<![A-Z_]){name}(?![A-Z_])", f"{flag} ({name})", message)
    print(f"statecodec {args.command}: {message}", file=sys.stderr)
    if getattr(args, "json", False):
        kind = next((name for cls, name in _ERROR_KINDS.items() if isinstance(exc, cls)), "error")
        reason = exc.reason.value if isinstance(exc, InvalidToken) else None
        doc = {"error": kind, "reason": reason, "message": message, "command": args.command, "exit_status": code}
        print(json.dumps(doc))
    return code


if __name__ == "__main__":  # python -m statecodec.cli.main
    sys.exit(main())
