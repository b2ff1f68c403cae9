"""`statecodec inspect`, `seal` and `unseal`: the codec a server would build, never one a token picks.

Each flag stands for one ``STATECODEC_*`` setting and `statecodec.config` builds the codec from them.
`inspect` prints a payload only with ``--show-payload``, after the codec has verified it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping
from typing import Any

from statecodec._encoding import b64u_encode
from statecodec._settings import max_token_length_setting
from statecodec._types import Codec
from statecodec.cli.main import flag_values, flags_named, settings_from_flags
from statecodec.config import check_names, codec_from_env, codec_from_file
from statecodec.errors import ConfigurationError, InvalidToken, Reason, SealError

_EPILOG = """\
The codec is the one a server builds from the STATECODEC_* environment (docs/configuration.md);
each flag overrides the setting named in its help, and --config FILE replaces the environment.
Exit status: 0 success, 1 token refused (reason code on stderr), 2 bad usage or configuration.
"""


# flag: the setting it stands for
_FLAGS = {
    "--keys-file": "STATECODEC_KEYS_FILE",
    "--codec": "STATECODEC_CODEC",
    "--max-token-length": "STATECODEC_MAX_TOKEN_LENGTH",
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands = (
        ("inspect", _inspect, "describe a token (format, key id, sizes); verify it when a codec is configured"),
        ("seal", _seal, "seal stdin into a token on stdout (debugging)"),
        ("unseal", _unseal, "unseal a token to the exact payload bytes on stdout (debugging)"),
    )
    for name, func, text in commands:
        p = sub.add_parser(
            name, help=text, description=text, epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        source = p.add_mutually_exclusive_group()
        source.add_argument("--keys-file", metavar="PATH", help="the key ring file (STATECODEC_KEYS_FILE)")
        source.add_argument("--config", metavar="FILE", help="a JSON file of STATECODEC_* settings")
        p.add_argument("--codec", metavar="KIND", help="the codec kind, such as xaesgcm (STATECODEC_CODEC)")
        p.add_argument("--max-token-length", metavar="N", help="the token cap (STATECODEC_MAX_TOKEN_LENGTH)")
        p.add_argument("--json", action="store_true", help="print the result as one JSON object")
        if name == "inspect":
            p.add_argument("--show-payload", action="store_true", help="after verifying, print the payload")
            p.add_argument("token", metavar="TOKEN", help="the token, or - to read it from stdin")
        elif name == "unseal":
            p.add_argument("token", metavar="TOKEN", nargs="?", help="the token, or - (the default) for stdin")
        p.set_defaults(func=flags_named(_FLAGS)(func))


def _settings(args: argparse.Namespace) -> dict[str, str]:
    """The settings the flags describe: a config file's, or the environment's with the flags over it."""
    if args.config:
        if args.codec is not None or args.max_token_length is not None:
            raise ConfigurationError("--codec and --max-token-length go in the --config file, not beside it")
        return {}
    return settings_from_flags(flag_values(args, _FLAGS))


def _codec(args: argparse.Namespace, settings: Mapping[str, str]) -> Codec:
    return codec_from_file(args.config) if args.config else codec_from_env(settings)


def _read_token(arg: str, codec: Codec | None, settings: Mapping[str, str]) -> tuple[str, int]:
    """The token (``-``: from stdin, read only just past the cap) and the cap it is held to."""
    cap = getattr(codec, "max_token_length", None)
    limit = cap if isinstance(cap, int) else max_token_length_setting(settings)
    if arg != "-":
        return arg, limit
    try:
        return sys.stdin.buffer.read(limit + 3).decode("ascii").strip(), limit
    except UnicodeDecodeError:
        raise InvalidToken(Reason.MALFORMED) from None


def _inspect(args: argparse.Namespace) -> int:
    settings = _settings(args)
    check_names(settings)  # a misspelt STATECODEC_KEYS must not pass for "no codec configured"
    names = ("STATECODEC_CODEC", "STATECODEC_KEYS", "STATECODEC_KEYS_FILE")
    configured = bool(args.config) or any(settings.get(name, "").strip() for name in names)
    if args.show_payload and not configured:
        raise ConfigurationError("--show-payload needs keys to verify the token first (see --help)")
    # The configuration is checked first, so a broken set-up is reported even for a junk token.
    codec = _codec(args, settings) if configured else None
    token, limit = _read_token(args.token, codec, settings)
    from statecodec.tokeninfo import describe_token  # here: it loads JOSE, which no other command needs

    doc: dict[str, Any] = dataclasses.asdict(describe_token(token, max_length=limit))
    doc.update(codec=None if codec is None else type(codec).__name__, verified=None, reason=None)
    refused: InvalidToken | None = None
    if codec is not None:
        try:
            payload = codec.unseal(token)
        except InvalidToken as exc:
            refused = exc
            doc.update(verified=False, reason=str(exc))
        else:
            doc["verified"] = True
            if args.show_payload:
                text = payload.decode("utf-8", errors="replace")
                doc["payload"] = text if text.encode() == payload else "(hex) " + payload.hex()
    lines = [f"{name:<15} {'-' if value is None else value}" for name, value in doc.items()]
    print(json.dumps(doc, indent=2) if args.json else "\n".join(lines))
    if refused is not None:  # the description above is the one document on stdout, its reason field included
        print(f"statecodec inspect: invalid token: {refused}", file=sys.stderr)
        return 1
    return 0


def _seal(args: argparse.Namespace) -> int:
    codec = _codec(args, _settings(args))
    # No payload is longer than its token: read just past the cap and let seal refuse the rest.
    cap = getattr(codec, "max_token_length", None)
    payload = sys.stdin.buffer.read(cap + 1 if isinstance(cap, int) else -1)
    try:
        token = codec.seal(payload)
    except SealError as exc:  # the real size, not the part read: count (and drop) the rest of stdin
        size = len(payload) + sum(map(len, iter(lambda: sys.stdin.buffer.read(1 << 16), b"")))
        raise SealError(str(exc).replace(f"payload of {len(payload)} bytes", f"payload of {size} bytes")) from None
    print(json.dumps({"token": token}) if args.json else token)
    return 0


def _unseal(args: argparse.Namespace) -> int:
    settings = _settings(args)
    codec = _codec(args, settings)
    if args.token is None and sys.stdin.isatty():
        raise ConfigurationError("no TOKEN given and stdin is a terminal: pass the token, or pipe it in")
    payload = codec.unseal(_read_token(args.token or "-", codec, settings)[0])
    if args.json:  # the bytes exactly, and as text when they are UTF-8
        text = payload.decode("utf-8", errors="replace")
        doc = {"payload": text if text.encode() == payload else None, "payload_base64url": b64u_encode(payload)}
        print(json.dumps(doc))
        return 0
    sys.stdout.buffer.write(payload)
    return 0
