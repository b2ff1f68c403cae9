"""Where a command's result goes: stdout, or a file that may hold secrets, at mode 0600.

Threat: a key written with the default umask is readable by others, one written over an existing file may destroy
the only copy of a live key, and a key file half-written when a command crashes stops every server that reads it.
`emit` creates a new file (``O_CREAT | O_EXCL`` at mode 0600 in one call: never readable by another user, never
over an existing path, a symlink included); `replace` swaps a key file the servers read whole or not at all.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statecodec.errors import ConfigurationError


def emit(text: str, output: str | None, wrote: str) -> None:
    """`text` on stdout, or into the new file `output` (mode 0600, owner only), then ``<wrote> to <output>`` on
    stderr; `ConfigurationError` if it exists or cannot be made."""
    if output is None:
        print(text)
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(output, flags, 0o600)
    except FileExistsError:
        raise ConfigurationError(f"--output {output} exists; it is never overwritten (it may hold the only copy of a "
                                 f"key): choose a new path, or move the old file away first") from None
    except OSError as exc:
        raise ConfigurationError(f"cannot create --output {output}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    except OSError as exc:
        Path(output).unlink(missing_ok=True)  # no half-written key file left behind
        raise ConfigurationError(f"cannot write --output {output}: {exc.strerror}") from None
    print(f"{wrote} to {output} (mode 0600)", file=sys.stderr)


def show(args: argparse.Namespace, doc: Mapping[str, Any], text: str, code: int = 0, indent: int | None = None) -> int:
    """`doc` as JSON on stdout with ``--json``, else `text`; returns the exit status `code`."""
    print(json.dumps(doc, indent=indent) if args.json else text)
    return code


def replace(path: Path, text: str) -> None:
    """Write `text` into `path` whole or not at all: a 0600 temporary file in its directory, synced, renamed over it
    (a reader sees the old file or the new; a crash leaves the old one)."""
    import tempfile  # here: every command's start-up imports this module

    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temporary, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a crash
        finally:
            os.close(directory)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise ConfigurationError(f"cannot write key file {path}: {exc.strerror}") from None


def store_time(ms: int) -> str:
    """A time on the store's clock (milliseconds since the epoch), as ISO 8601 UTC."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="milliseconds")
