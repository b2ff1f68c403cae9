"""`statecodec inspect`, `seal` and `unseal`: look at and debug tokens from the command line.

`inspect TOKEN` describes a token without keys (format, key id, sizes) and,
when keys are given, verifies it and prints ``valid`` or the reason code; it
prints the payload only with ``--show-payload``. `seal` reads bytes on stdin
and prints a token; `unseal` reads a token and writes the exact payload bytes
to stdout. Keys come from ``--keys-env VAR``, ``--keys-file PATH``,
``--config FILE`` (JSON, see `statecodec.config`) or the ``STATECODEC_*``
environment. Exit status: 0 success, 1 the token was refused (the reason
code is printed on stderr), 2 bad usage or configuration. No key, payload or
token text is ever part of an error message.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH
from statecodec.aead import AESGCMCodec, XAESGCMCodec
from statecodec.config import (
    CODEC_VAR,
    KEYS_FILE_VAR,
    KEYS_VAR,
    MAX_TOKEN_LENGTH_VAR,
    Codec,
    codec_from_env,
    codec_from_file,
    keys_configured,
    max_token_length_setting,
    ring_from_settings,
)
from statecodec.errors import ConfigurationError, InvalidToken, Reason
from statecodec.inspect import TokenInfo, describe_token
from statecodec.jose import JWECodec, JWSCodec
from statecodec.keys import KeyRing


def _ring_codec(kind: str, ring: KeyRing, max_length: int, info: TokenInfo | None) -> Codec | None:
    """The codec of kind `kind` over a plain key ring, or None when the kind takes no ring.

    JOSE tokens name their algorithm in the header; the header only chooses
    which ring codec to build here, never what that codec accepts.
    """
    if kind == "aesgcm":
        return AESGCMCodec(ring, max_token_length=max_length)
    if kind == "xaesgcm":
        return XAESGCMCodec(ring, max_token_length=max_length)
    if kind == "jwe":
        alg = info.algorithm if info is not None and info.format == "jwe" else "dir"
        return JWECodec(ring, alg="A256KW" if alg == "A256KW" else "dir", max_token_length=max_length)
    if kind == "jws":
        return JWSCodec(ring, max_token_length=max_length)
    return None


_RING_KINDS = ("aesgcm", "jwe", "jws", "xaesgcm")

_KEYS_EPILOG = f"""\
Keys: --keys-env VAR or --keys-file PATH give a key ring (the format
`statecodec keygen` prints); --config FILE gives a JSON configuration; with
none of these the {CODEC_VAR}, {KEYS_VAR}, {KEYS_FILE_VAR} and
{MAX_TOKEN_LENGTH_VAR} environment variables are used. Exit status: 0 success,
1 token refused (reason code on stderr), 2 bad usage or configuration.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "inspect",
        help="describe a token (format, key id, sizes); verify it when keys are given",
        description="Describe a token without keys; with keys, also verify it. The payload is "
        "printed only with --show-payload.",
        epilog=_KEYS_EPILOG,
        formatter_class=fmt,
    )
    p.add_argument("token", metavar="TOKEN", help="the token, or - to read it from stdin")
    _add_key_options(p)
    p.add_argument("--show-payload", action="store_true", help="after verifying, print the payload")
    p.add_argument("--json", action="store_true", help="print the description as JSON")
    p.set_defaults(func=_inspect)

    s = sub.add_parser(
        "seal",
        help="seal stdin into a token on stdout (debugging)",
        description="Read payload bytes from stdin, print a token sealed under the primary key.",
        epilog=_KEYS_EPILOG,
        formatter_class=fmt,
    )
    _add_key_options(s)
    s.set_defaults(func=_seal)

    u = sub.add_parser(
        "unseal",
        help="unseal a token to the exact payload bytes on stdout (debugging)",
        description="Verify a token and write its payload bytes, unchanged, to stdout.",
        epilog=_KEYS_EPILOG,
        formatter_class=fmt,
    )
    u.add_argument("token", metavar="TOKEN", nargs="?", default="-", help="the token (default: read stdin)")
    _add_key_options(u)
    u.set_defaults(func=_unseal)


def _add_key_options(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group()
    source.add_argument("--keys-env", metavar="VAR", help="read the key ring from environment variable VAR")
    source.add_argument("--keys-file", metavar="PATH", help="read the key ring from a key file")
    source.add_argument("--config", metavar="FILE", help="JSON configuration with STATECODEC_* members")
    p.add_argument(
        "--codec",
        choices=_RING_KINDS,
        help="codec for a key ring (default: STATECODEC_CODEC, else the token's format, else aesgcm)",
    )
    p.add_argument("--max-token-length", type=_positive_int, metavar="N", help="token length cap, in characters")


def _positive_int(text: str) -> int:
    # A usage error (exit 2) here, not a cap that makes every token look oversized (exit 1).
    if not (text.isascii() and text.isdecimal()) or int(text) < 1:
        raise argparse.ArgumentTypeError("must be a positive decimal integer (characters)")
    return int(text)


def _fail(command: str, message: str, code: int) -> int:
    print(f"statecodec {command}: {message}", file=sys.stderr)
    return code


def _max_length(args: argparse.Namespace) -> int:
    value: int | None = args.max_token_length
    return DEFAULT_MAX_TOKEN_LENGTH if value is None else value


def _keys_given(args: argparse.Namespace, environ: Mapping[str, str]) -> bool:
    if args.keys_env or args.keys_file or args.config:
        return True
    return keys_configured(environ) or bool(environ.get(CODEC_VAR, "").strip())


def _codec(args: argparse.Namespace, environ: Mapping[str, str], info: TokenInfo | None = None) -> Codec:
    """The codec the options (or, failing them, the environment) describe.

    With a key ring and no codec named, the token's own format picks the ring
    codec; only that codec decides whether the token is accepted.
    """
    detected = info.format if info is not None else None
    if args.config:
        if args.codec or args.max_token_length is not None:
            raise ConfigurationError("--codec and --max-token-length go in the --config file, not beside it")
        return codec_from_file(args.config)
    named = args.codec or environ.get(CODEC_VAR, "").strip().lower()
    if args.keys_env or args.keys_file or (not named and detected in _RING_KINDS and keys_configured(environ)):
        limit = _max_length(args)
        if args.keys_env or args.keys_file:
            ring = KeyRing.from_env(args.keys_env, environ) if args.keys_env else KeyRing.from_file(args.keys_file)
        else:
            ring = ring_from_settings(environ)
            if args.max_token_length is None:  # the environment's cap, as the server it mirrors uses
                limit = max_token_length_setting(environ)
        kind = named or detected or "aesgcm"
        codec = _ring_codec(kind, ring, limit, info)
        if codec is None:
            raise ConfigurationError(
                f"a key ring works with --codec {' or '.join(_RING_KINDS)}, not {kind!r}; "
                f"configure other codecs with --config or {CODEC_VAR}"
            )
        return codec
    settings = dict(environ)
    if args.codec:
        settings[CODEC_VAR] = args.codec
    if args.max_token_length is not None:
        settings[MAX_TOKEN_LENGTH_VAR] = str(args.max_token_length)
    return codec_from_env(settings)


def _read_token(arg: str, limit: int) -> str:
    """The token argument, or stdin for ``-``; stdin is read only up to just past the cap."""
    if arg != "-":
        return arg
    raw = sys.stdin.buffer.read(limit + 3)
    try:
        return raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise InvalidToken(Reason.MALFORMED) from None


def _describe_lines(info: TokenInfo) -> list[str]:
    fmt = info.format if info.version is None else f"{info.format} (version 0x{info.version:02x})"
    lines = [f"format        {fmt}" + (f": {info.description}" if info.description else "")]
    if info.algorithm is not None:
        alg = info.algorithm + (f" / {info.encryption}" if info.encryption else "")
        lines.append(f"algorithm     {alg}")
    lines.append(f"key id        {info.key_id if info.key_id is not None else '(none)'}")
    lines.append(f"token         {info.token_length} characters, {info.decoded_length} bytes decoded")
    if info.nonce_length is not None:
        lines.append(f"nonce         {info.nonce_length} bytes")
    if info.tag_length is not None:
        lines.append(f"tag           {info.tag_length} bytes")
    lines.append(f"payload       {info.payload_length} bytes, {'encrypted' if info.encrypted else 'readable'}")
    return lines


def _payload_text(payload: bytes) -> str:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return "(hex) " + payload.hex()


def _inspect(args: argparse.Namespace) -> int:
    environ = os.environ
    verify = _keys_given(args, environ)
    if args.show_payload and not verify:
        return _fail("inspect", "--show-payload needs keys to verify the token first (see --help)", 2)
    token = ""
    info: TokenInfo | None = None
    refused: InvalidToken | None = None
    try:
        token = _read_token(args.token, _max_length(args))
        info = describe_token(token, max_length=_max_length(args))
    except InvalidToken as exc:
        refused = exc
    # Configuration comes first: a broken key setup is reported even for a junk token.
    codec = _codec(args, environ, info) if verify else None
    if info is None:
        return _fail("inspect", f"invalid token: {refused}", 1)
    reason: str | None = None
    payload: bytes | None = None
    if codec is not None:
        try:
            payload = codec.unseal(token)
        except InvalidToken as exc:
            reason = str(exc)
    if args.json:
        doc: dict[str, Any] = info.as_dict()
        doc["verified"] = None if codec is None else reason is None
        doc["reason"] = reason
        if args.show_payload and payload is not None:
            doc["payload"] = _payload_text(payload)
        print(json.dumps(doc, indent=2))
    else:
        lines = _describe_lines(info)
        if codec is None:
            lines.append("verified      not checked (no keys given)")
        elif reason is None:
            lines.append(f"verified      valid ({type(codec).__name__})")
        else:
            lines.append(f"verified      INVALID: {reason}")
        if args.show_payload and payload is not None:
            lines.append(f"payload text  {_payload_text(payload)}")
        print("\n".join(lines))
    if reason is not None:
        return _fail("inspect", f"invalid token: {reason}", 1)
    return 0


def _seal(args: argparse.Namespace) -> int:
    codec = _codec(args, os.environ)
    # No payload is longer than its token: read just past the cap and let seal refuse the rest.
    cap = getattr(codec, "max_token_length", None)
    payload = sys.stdin.buffer.read(cap + 1 if isinstance(cap, int) else -1)
    print(codec.seal(payload))
    return 0


def _unseal(args: argparse.Namespace) -> int:
    token = ""
    detected: TokenInfo | None = None
    refused: InvalidToken | None = None
    try:
        token = _read_token(args.token, _max_length(args))
    except InvalidToken as exc:
        refused = exc
    else:
        # As in inspect, the token's own format picks the ring codec when nothing else does;
        # only the codec decides whether the token is accepted.
        with suppress(InvalidToken):
            detected = describe_token(token, max_length=_max_length(args))
    codec = _codec(args, os.environ, detected)
    if refused is not None:
        return _fail("unseal", f"invalid token: {refused}", 1)
    try:
        payload = codec.unseal(token)
    except InvalidToken as exc:
        return _fail("unseal", f"invalid token: {exc}", 1)
    out = sys.stdout.buffer
    out.write(payload)
    out.flush()
    return 0
