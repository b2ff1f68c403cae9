"""Where a command's result goes: stdout, or a file that may hold secrets, created 0600 and never overwritten.

Threat: a key written with the default umask is readable by others, and one written over an existing file may
destroy the only copy of a live key. ``O_CREAT | O_EXCL`` at mode 0600 in one call: never readable by another
user, never over an existing path (a symlink included).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

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
