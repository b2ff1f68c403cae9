"""The one reader of ``STATECODEC_*`` settings, from the environment or a config file, and of the files they name.

Threat: a misread setting must not start a server that seals under the wrong key or cap. Every reader goes
through here; every problem is a `ConfigurationError` naming the setting, never its value; a file is read up to
a cap, its content kept out of any exception.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH
from statecodec._types import HoldsSecrets
from statecodec.errors import ConfigurationError

KEYS_VAR = "STATECODEC_KEYS"
KEYS_FILE_VAR = "STATECODEC_KEYS_FILE"
MAX_TOKEN_LENGTH_VAR = "STATECODEC_MAX_TOKEN_LENGTH"  # noqa: S105 - a variable name, not a secret
PREFIX = "STATECODEC_"


@contextlib.contextmanager
def named_errors(where: str) -> Iterator[None]:
    """A `ConfigurationError` raised in the block, prefixed with `where` (the setting or file it came from)."""
    try:
        yield
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


def load_settings_file(path: Path, limit: int, what: str, hint: str, *, as_json: bool = False) -> Any:
    """The UTF-8 text, or the JSON document, of at most `limit` bytes of a file (one byte past the cap is read:
    the size is not trusted); else `ConfigurationError` naming `what`, with `hint` when the file is too large.

    Raised after the handler: a parser's error keeps its input (`UnicodeDecodeError.object`,
    `JSONDecodeError.doc`), reachable as `__context__` even after ``from None``, and its message may quote it.
    """
    try:
        with path.open("rb") as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        # An OSError holds the path and the cause, never what the file contains.
        raise ConfigurationError(f"cannot read {what}: {exc.strerror}") from None
    if len(raw) > limit:
        raise ConfigurationError(f"{what} is over {limit} bytes; {hint}")
    try:
        return json.loads(raw) if as_json else raw.decode("utf-8")
    except (ValueError, RecursionError):
        pass
    raise ConfigurationError(f"{what} is not {'valid JSON' if as_json else 'UTF-8 text'}")


def seconds(
    name: str, value: object, *, low: float, high: float, integer: bool = False, low_open: bool = False
) -> float:
    """The one check of a number of seconds, from code or a setting: `value` an int or float (a str from code is
    refused; `seconds_setting` parses a setting's text) within `low`..`high` (`low` excluded when `low_open`), else
    a `ConfigurationError` naming `name` and the range. Written positively, so a NaN fails too."""
    ok = type(value) is int or (type(value) is float and not integer)
    if ok and isinstance(value, (int, float)) and (low < value if low_open else low <= value) and value <= high:
        return value
    kind = "whole seconds" if integer else "a number of seconds"
    low_text, high_text = (str(int(bound)) if bound == int(bound) else str(bound) for bound in (low, high))
    bound = f"more than {low_text} and at most {high_text}" if low_open else f"from {low_text} to {high_text}"
    raise ConfigurationError(f"{name} must be {kind} {bound}")


def seconds_setting(
    settings: Mapping[str, str], name: str, *, default: float, low: float, high: float, integer: bool = False,
    low_open: bool = False,
) -> float:
    """The setting `name` read by `seconds` (``isdecimal`` first when `integer`: `int` also takes ``+5``, ``1_000``
    and non-ASCII digits), or `default` when unset or blank."""
    text = setting(settings, name, required=False)
    if text is None:
        return default
    number: object = None
    with contextlib.suppress(ValueError):
        number = int(text) if integer and text.isascii() and text.isdecimal() else float(text)
    return seconds(name, number, low=low, high=high, integer=integer, low_open=low_open)


def setting(settings: Mapping[str, str], name: str, *, required: bool = True) -> str | None:
    """The stripped value of `name`; None when unset or blank and optional, else `ConfigurationError`."""
    value = settings.get(name)
    if value is None or not value.strip():
        if required:
            raise ConfigurationError(f"{name} is not set; it is required for this codec kind")
        return None
    return value.strip()


def check_one_form(settings: Mapping[str, str], name: str) -> None:
    """Refuse `name` given both as itself and as ``<name>_FILE``: one of the two would be ignored."""
    if setting(settings, name, required=False) is not None and setting(settings, f"{name}_FILE", required=False):
        raise ConfigurationError(f"both {name} and {name}_FILE are set; set exactly one")


def text_or_file(settings: Mapping[str, str], name: str, limit: int, hint: str) -> tuple[str | None, str]:
    """(the value of `name` or the text of the file ``<name>_FILE`` names, where it came from); not both set."""
    check_one_form(settings, name)
    path = setting(settings, f"{name}_FILE", required=False)
    if path is None:
        return setting(settings, name, required=False), name
    source = f"{name}_FILE {path}"
    return load_settings_file(Path(path), limit, source, hint), source


def max_token_length_setting(settings: Mapping[str, str]) -> int:
    """``STATECODEC_MAX_TOKEN_LENGTH`` as a positive int, or the library default when unset."""
    text = setting(settings, MAX_TOKEN_LENGTH_VAR, required=False)
    if text is None:
        return DEFAULT_MAX_TOKEN_LENGTH
    # isdecimal() first: int() also accepts '+5', '1_000' and non-ASCII digits.
    if not (text.isascii() and text.isdecimal()) or int(text) < 1:
        raise ConfigurationError(f"{MAX_TOKEN_LENGTH_VAR} must be a positive decimal integer (characters), e.g. "
                                 f"{DEFAULT_MAX_TOKEN_LENGTH}")
    return int(text)


class Settings(HoldsSecrets, Mapping[str, str]):
    """Settings that may hold keys, so never pickled; given `reads`, a view where looking up any other
    ``STATECODEC_*`` name raises `ConfigurationError` naming `reader`: a table of what a reader reads is then
    enforced where it reads (a provider's own variables, such as ``VAULT_ADDR``, are not in the table)."""

    def __init__(self, settings: Mapping[str, str], reads: frozenset[str] | None = None, reader: str = "") -> None:
        self._settings, self._reads, self._reader = dict(settings), reads, reader

    def __getitem__(self, name: str) -> str:
        if self._reads is not None and name.startswith(PREFIX) and name not in self._reads:
            raise ConfigurationError(f"{self._reader} reads {name}, which its entry in the table of reads omits")
        return self._settings[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._settings)

    def __len__(self) -> int:
        return len(self._settings)


def settings_from_file(path: Path) -> Settings:
    """The settings of a JSON config file: an object of ``STATECODEC_*`` members, strings (an integer for a
    number, a list of strings for ``STATECODEC_KEYS``); a relative ``*_FILE`` path is the file's neighbour."""
    doc = load_settings_file(path, 1024 * 1024, "the file", "is it the right file?", as_json=True)
    if not isinstance(doc, dict):
        raise ConfigurationError(f"the file must hold a JSON object of {PREFIX}* settings")
    settings: dict[str, str] = {}
    for name, value in doc.items():
        if not name.startswith(PREFIX):
            raise ConfigurationError(f"member {name!r} is not a setting; every member starts with {PREFIX}")
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        elif name == KEYS_VAR and isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = ",".join(value)
        if not isinstance(value, str):
            raise ConfigurationError(f"{name} must be a JSON string, got {type(value).__name__}")
        if name.endswith("_FILE") and value.strip() and not Path(value.strip()).is_absolute():
            value = str(path.parent / value.strip())
        settings[name] = value
    return Settings(settings)
