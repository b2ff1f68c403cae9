"""Files that settings name: read up to a cap, decoded without keeping their content in an error.

Threat: a device or a runaway file must not make start-up read without bound,
and a file of keys must not end up in an exception: parsers keep their input
(`UnicodeDecodeError.object`, `json.JSONDecodeError.doc`), reachable as
`__context__` even after ``from None``, so each failure is raised after its
handler has ended.
"""

from __future__ import annotations

import json
from pathlib import Path

from statecodec.errors import ConfigurationError


def read_settings_file(path: Path, limit: int, what: str, hint: str) -> bytes:
    """At most `limit` bytes of a file a setting names; `ConfigurationError` naming `what` otherwise.

    Reads one byte past the cap instead of trusting the file size, so a device
    or a growing file cannot make start-up read without bound. `hint` ends the
    too-large message (what the file should have been).
    """
    try:
        with path.open("rb") as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        # An OSError holds the path and the cause, never what the file contains.
        raise ConfigurationError(f"cannot read {what}: {exc.strerror}") from None
    if len(raw) > limit:
        raise ConfigurationError(f"{what} is over {limit} bytes; {hint}")
    return raw


def decode_settings_text(raw: bytes, what: str) -> str:
    """The UTF-8 text in `raw`; on failure a message naming `what`, with no exception chain."""
    try:
        text = raw.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False  # raised below, outside the handler: the error's `object` is all of `raw`
    if not valid:
        raise ConfigurationError(f"{what} is not UTF-8 text")
    return text


def load_json_setting(raw: bytes, what: str) -> object:
    """The JSON document in `raw`; on failure a message naming `what`, with no exception chain."""
    try:
        doc: object = json.loads(raw)
        valid = True
    except (ValueError, RecursionError):
        # Raised below, outside the handler: the error keeps the document (`doc`, or `object`
        # for bytes that are not UTF-8), and the message may quote it. Say where, not what.
        valid = False
    if not valid:
        raise ConfigurationError(f"{what} is not valid JSON")
    return doc
