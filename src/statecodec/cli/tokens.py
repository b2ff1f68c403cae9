"""`statecodec seal` and `unseal`: the codec a server would build, never one a token picks.

Each flag stands for one ``STATECODEC_*`` setting and `statecodec.config` builds the codec from them.
"""

from __future__ import annotations

import argparse
import json
import sys

from statecodec._encoding import b64u_encode
from statecodec._settings import CODEC_VAR, KEYS_FILE_VAR, MAX_TOKEN_LENGTH_VAR, max_token_length_setting
from statecodec._types import Codec
from statecodec.cli._output import show
from statecodec.cli.main import flag_values, settings_from_flags
from statecodec.config import codec_from_env, codec_from_file
from statecodec.errors import ConfigurationError, InvalidToken, Reason, SealError

__all__ = ["register"]

_EPILOG = """\
The codec is the one a server builds from the STATECODEC_* environment (docs/configuration.md);
each flag overrides the setting named in its help, and --config FILE replaces the environment.
Exit status: 0 success, 1 token refused (reason code on stderr), 2 bad usage or configuration.
"""
_FLAGS = {"--keys-file": KEYS_FILE_VAR, "--codec": CODEC_VAR, "--max-token-length": MAX_TOKEN_LENGTH_VAR}  # its setting


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, func, text in (("seal", _seal, "seal stdin into a token on stdout (debugging)"),
                             ("unseal", _unseal, "unseal a token to the exact payload bytes on stdout (debugging)")):
        p = sub.add_parser(name, func=func, flags=_FLAGS, help=text, epilog=_EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        source = p.add_mutually_exclusive_group()
        source.add_argument("--keys-file", metavar="PATH", help="the key ring file (STATECODEC_KEYS_FILE)")
        source.add_argument("--config", metavar="FILE", help="a JSON file of STATECODEC_* settings")
        p.add_argument("--codec", metavar="KIND", help="the codec kind, such as xaesgcm (STATECODEC_CODEC)")
        p.add_argument("--max-token-length", metavar="N", help="the token cap (STATECODEC_MAX_TOKEN_LENGTH)")
        p.add_argument("--json", action="store_true", help="print the result as one JSON object")
        if name == "unseal":
            p.add_argument("token", metavar="TOKEN", nargs="?", help="the token, or - (the default) for stdin")


def _codec(args: argparse.Namespace) -> tuple[Codec, int]:  # and its token cap
    if args.config and (args.codec is not None or args.max_token_length is not None):
        raise ConfigurationError("--codec and --max-token-length go in the --config file, not beside it")
    settings = {} if args.config else settings_from_flags(flag_values(args))
    codec = codec_from_file(args.config) if args.config else codec_from_env(settings)
    cap = getattr(codec, "max_token_length", None)
    return codec, cap if isinstance(cap, int) else max_token_length_setting(settings)


def _seal(args: argparse.Namespace) -> int:
    codec, cap = _codec(args)
    # No payload is longer than its token: read just past the cap and let seal refuse the rest.
    payload = sys.stdin.buffer.read(cap + 1)
    try:
        token = codec.seal(payload)
    except SealError as exc:  # the real size, not the part read: count (and drop) the rest of stdin
        size = len(payload) + sum(map(len, iter(lambda: sys.stdin.buffer.read(1 << 16), b"")))
        raise SealError(str(exc).replace(f"payload of {len(payload)} bytes", f"payload of {size} bytes")) from None
    return show(args, {"token": token}, token)


def _unseal(args: argparse.Namespace) -> int:
    codec, cap = _codec(args)
    if args.token is None and sys.stdin.isatty():
        raise ConfigurationError("no TOKEN given and stdin is a terminal: pass the token, or pipe it in")
    text = args.token or "-"
    if text == "-":  # read only just past the cap
        try:
            text = sys.stdin.buffer.read(cap + 3).decode("ascii").strip()
        except UnicodeDecodeError:
            raise InvalidToken(Reason.MALFORMED) from None
    payload = codec.unseal(text)
    if args.json:  # the bytes exactly, and as text when they are UTF-8
        text = payload.decode("utf-8", errors="replace")
        doc = {"payload": text if text.encode() == payload else None, "payload_base64url": b64u_encode(payload)}
        print(json.dumps(doc))
    else:
        sys.stdout.buffer.write(payload)
    return 0
