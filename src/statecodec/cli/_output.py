"""Where a command's result goes: stdout, or a file that may hold secrets, created 0600 and never overwritten.

Threat: a key written with the default umask is readable by others, and one written over an existing file may
destroy the only copy of a live key. ``O_CREAT | O_EXCL`` at mode 0600 in one call: never readable by another
user, never over an existing path (a symlink included).
"""

from __future__ import annotations

import os
from pathlib import Path

from statecodec.errors import ConfigurationError


def write_new_file(path: str, text: str) -> None:
    """Create `path` (mode 0600, owner only) holding `text`; `ConfigurationError` if it exists or cannot be made."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise ConfigurationError(f"--output {path} exists; it is never overwritten (it may hold the only copy of a "
                                 f"key): choose a new path, or move the old file away first") from None
    except OSError as exc:
        raise ConfigurationError(f"cannot create --output {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        Path(path).unlink(missing_ok=True)  # no half-written key file left behind
        raise ConfigurationError(f"cannot write --output {path}: {exc.strerror}") from None


def emit(text: str, output: str | None) -> None:  # on stdout, or into the new file `output`
    if output is None:
        print(text)
    else:
        write_new_file(output, text + "\n")
