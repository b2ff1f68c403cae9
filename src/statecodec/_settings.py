"""The one reader of ``STATECODEC_*`` settings, from the environment or a config file, and of the files they name.

Threat: a misread setting must not start a server that seals under the wrong key or cap. Every reader goes
through here; every problem is a `ConfigurationError` naming the setting, never its value; a file is read up to
a cap, its content kept out of any exception.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH
from statecodec._types import HoldsSecrets
from statecodec.errors import ConfigurationError

PREFIX = "STATECODEC_"


def names(*names: str) -> frozenset[str]:
    return frozenset(f"{PREFIX}{name}" for name in names)


KEYS_VAR, KEYS_FILE_VAR, CODEC_VAR = "STATECODEC_KEYS", "STATECODEC_KEYS_FILE", "STATECODEC_CODEC"
MAX_TOKEN_LENGTH_VAR = "STATECODEC_MAX_TOKEN_LENGTH"  # noqa: S105 - a variable name, not a secret
TTL_VAR, SKEW_VAR, RELOAD_VAR = "STATECODEC_TTL", "STATECODEC_FUTURE_SKEW", "STATECODEC_RELOAD_INTERVAL"
INSTANCE_VAR, STORE_URL_VAR, STORE_KEY_VAR = "STATECODEC_INSTANCE", "STATECODEC_STORE_URL", "STATECODEC_STORE_KEY"
TIMEOUT_VAR, NAMESPACE_VAR = "STATECODEC_STORE_TIMEOUT", "STATECODEC_STORE_NAMESPACE"
ON_ERROR_VAR, ON_REPLAY_VAR = "STATECODEC_STORE_ON_ERROR", "STATECODEC_ON_REPLAY"
RETRY_SAFE_VAR, RESULT_MAX_VAR = "STATECODEC_RETRY_SAFE", "STATECODEC_RETRY_RESULT_MAX"
ACCEPT_FOR_VAR, ACCEPT_MAX_VAR = "STATECODEC_STORE_ACCEPT_FOR", "STATECODEC_STORE_ACCEPT_MAX"
REPLICAS_VAR, STEP_TIMEOUT_VAR = "STATECODEC_STORE_REPLICAS", "STATECODEC_STEP_TIMEOUT"

# Each default and ceiling, written once.
DEFAULT_TTL, MAX_TTL = 600, 30 * 24 * 3600  # a state token lives for a conversation, not for months
DEFAULT_FUTURE_SKEW, MAX_FUTURE_SKEW = 60, 3600  # how far ahead another instance's clock may be when it mints
DEFAULT_STORE_TIMEOUT = 0.25  # a network store's bound on connecting and on each answer
DEFAULT_RESULT_MAX, MAX_RESULT_MAX = 65_536, 1 << 20  # a kept answer's bytes: a 1 MiB keep holds Redis 7 ms (docs)
DEFAULT_STEP_TIMEOUT = 300  # the most a retry-safe step runs; past it (and the store's deadlines) its retry is lost
MAX_RETRY_INPUT = 1 << 17  # the params a retry digest is made of: at most 30-70 ms of pure Python, under the deadline
DEFAULT_ACCEPT_FOR, MAX_ACCEPT_FOR, DEFAULT_ACCEPT_MAX, MAX_ACCEPT_MAX = 30, 600, 1000, 100_000  # per outage
HEARTBEAT = 5.0  # a running instance re-checks the store: docs/single-use.md weighs its cost against the window
INSTANCE_NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")  # an instance's name in the fleet registry

# What the MCP ttl, single use and live rotation read from the environment, never from a codec's config file (the
# kinds' own table: `statecodec.config.KINDS`); a reloading codec reports to the STORE, no SINGLE_USE_ONLY setting.
STORE = names("STORE_URL", "STORE_URL_FILE", "STORE_TIMEOUT", "STORE_NAMESPACE", "STORE_REPLICAS")
SINGLE_USE_ONLY = names("STORE_KEY", "STORE_KEY_FILE", "STORE_ON_ERROR", "STORE_ACCEPT_FOR", "STORE_ACCEPT_MAX",
                        "RETRY_SAFE", "RETRY_RESULT_MAX", "STEP_TIMEOUT", "ON_REPLAY")
ENVIRONMENT_ONLY = STORE | SINGLE_USE_ONLY | names("TTL", "RELOAD_INTERVAL", "FUTURE_SKEW", "INSTANCE")


@contextlib.contextmanager
def named_errors(where: str) -> Iterator[None]:
    """A `ConfigurationError` raised in the block, prefixed with `where` (the setting or file it came from)."""
    try:
        yield
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


def load_settings_file(path: Path, limit: int, what: str, hint: str, *, as_json: bool = False) -> Any:
    """The UTF-8 text, or the JSON document, of at most `limit` bytes of a file (one byte past the cap is read:
    the size is not trusted); else `ConfigurationError` naming `what`, with `hint` when the file is too large."""
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
        pass  # raised below, outside the handler: a parser's error keeps its input (`UnicodeDecodeError.object`,
        # `JSONDecodeError.doc`), reachable as `__context__` even after ``from None``, and may quote it
    raise ConfigurationError(f"{what} is not {'valid JSON' if as_json else 'UTF-8 text'}")


def seconds(name: str, value: object, *, low: float, high: float, integer: bool = False,
            low_open: bool = False) -> float:
    """The one check of a number of seconds from code or a setting (an int or float; a str is refused) within
    `low`..`high` (`low` excluded when `low_open`). Written positively, so a NaN fails too."""
    ok = type(value) is int or (type(value) is float and not integer)
    if ok and isinstance(value, (int, float)) and (low < value if low_open else low <= value) and value <= high:
        return value
    kind = "whole seconds" if integer else "a number of seconds"
    low_text, high_text = (str(int(bound)) if bound == int(bound) else str(bound) for bound in (low, high))
    bound = f"more than {low_text} and at most {high_text}" if low_open else f"from {low_text} to {high_text}"
    raise ConfigurationError(f"{name} must be {kind} {bound}")


def seconds_setting(settings: Mapping[str, str], name: str, *, default: float, low: float, high: float,
                    integer: bool = False, low_open: bool = False) -> float:
    """The setting `name` read by `seconds`, or `default` when unset or blank."""
    text = setting(settings, name, required=False)
    if text is None:
        return default
    number: object = None
    with contextlib.suppress(ValueError):
        number = decimal(text) if integer else float(text)
    return seconds(name, number, low=low, high=high, integer=integer, low_open=low_open)


def decimal(text: str) -> int | None:
    """`text` as a whole number in ASCII digits, else None (``isdecimal`` first: `int` also takes ``+5``, ``1_000``
    and non-ASCII digits)."""
    return int(text) if text.isascii() and text.isdecimal() else None


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
    number = decimal(setting(settings, MAX_TOKEN_LENGTH_VAR, required=False) or str(DEFAULT_MAX_TOKEN_LENGTH))
    if not number:  # None or 0
        raise ConfigurationError(f"{MAX_TOKEN_LENGTH_VAR} must be a positive decimal integer (characters), e.g. "
                                 f"{DEFAULT_MAX_TOKEN_LENGTH}")
    return number


class Settings(HoldsSecrets, Mapping[str, str]):
    """Settings that may hold keys, so never pickled; given `reads`, a view where looking up any other
    ``STATECODEC_*`` name raises `ConfigurationError` naming `reader`: a reader's table is enforced where it reads."""

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


# Typed values, each checked where it is read: a rule module takes these, never a mapping of settings.
def ttl(settings: Mapping[str, str]) -> int:
    """``STATECODEC_TTL``: the one lifetime of the MCP policy, the single-use guard and a reloading codec."""
    return int(seconds_setting(settings, TTL_VAR, default=DEFAULT_TTL, low=1, high=MAX_TTL, integer=True))


def future_skew(settings: Mapping[str, str]) -> float:
    return seconds_setting(settings, SKEW_VAR, default=DEFAULT_FUTURE_SKEW, low=0, high=MAX_FUTURE_SKEW)


def store_timeout(settings: Mapping[str, str]) -> float:
    return seconds_setting(settings, TIMEOUT_VAR, default=DEFAULT_STORE_TIMEOUT, low=0, high=60, low_open=True)


def reload_interval(settings: Mapping[str, str]) -> float | None:
    """``STATECODEC_RELOAD_INTERVAL``, or None when the codec does not reload."""
    if setting(settings, RELOAD_VAR, required=False) is None:
        return None
    return seconds_setting(settings, RELOAD_VAR, default=5, low=0.05, high=3600)


def instance_name(settings: Mapping[str, str]) -> str:
    """``STATECODEC_INSTANCE``, else ``host-pid``: this instance's name in the fleet registry."""
    import socket

    name = setting(settings, INSTANCE_VAR, required=False) or f"{socket.gethostname()}-{os.getpid()}"
    if not INSTANCE_NAME.fullmatch(name):
        raise ConfigurationError(f"{INSTANCE_VAR} must be 1-128 letters, digits or _ . : @ -")
    return name


def key_files(settings: Mapping[str, str]) -> list[str]:
    """The files a codec's settings name (``STATECODEC_*_FILE``): what a reloading codec follows."""
    return [value.strip() for name, value in settings.items() if name.startswith(PREFIX) and name.endswith("_FILE")
            and name not in ENVIRONMENT_ONLY and value.strip()]  # fmt: skip


def store_url(settings: Mapping[str, str]) -> tuple[str | None, str]:
    """(``STATECODEC_STORE_URL`` or the text of its file, where it came from): secret, never shown."""
    url, source = text_or_file(settings, STORE_URL_VAR, 4096, "it holds one store URL")
    return (None if url is None else url.strip()), source


def store_replicas(settings: Mapping[str, str]) -> int:
    """``STATECODEC_STORE_REPLICAS``: replicas that must acknowledge a claim (0: a failover detected, not survived)."""
    number = decimal(setting(settings, REPLICAS_VAR, required=False) or "0")
    if number is None or number > 16:
        raise ConfigurationError(f"{REPLICAS_VAR} must be a whole number of replicas from 0 (the default) to 16")
    return number


def namespace(settings: Mapping[str, str]) -> str:
    return setting(settings, NAMESPACE_VAR, required=False) or "statecodec"


def on_store_error(settings: Mapping[str, str]) -> dict[str, Any]:  # `SingleUse`'s keywords: it checks them
    return {"on_store_error": setting(settings, ON_ERROR_VAR, required=False) or "refuse",
            "accept_for": seconds_setting(settings, ACCEPT_FOR_VAR, default=DEFAULT_ACCEPT_FOR, low=0,
                                          high=MAX_ACCEPT_FOR, low_open=True),
            "accept_max": decimal(setting(settings, ACCEPT_MAX_VAR, required=False) or str(DEFAULT_ACCEPT_MAX))}


def single_use_wanted(settings: Mapping[str, str]) -> bool:
    """Whether the settings ask for single use: one of its own settings is given, or a store that no reloading
    codec reports to (single use then refuses to start without a key)."""
    given = {name for name in ENVIRONMENT_ONLY if setting(settings, name, required=False)}
    return bool(given & SINGLE_USE_ONLY) or (bool(given & STORE) and RELOAD_VAR not in given)


def middleware(settings: Mapping[str, str]) -> dict[str, Any]:
    """`SingleUseMiddleware`'s keywords (it checks them): the retry-safe mode, its bounds, the replay policy."""
    mode = setting(settings, RETRY_SAFE_VAR, required=False) or "off"
    if mode not in ("on", "off"):
        raise ConfigurationError(f"{RETRY_SAFE_VAR} must be on or off (the default)")
    cap = setting(settings, RESULT_MAX_VAR, required=False)
    return {"retry_safe": mode == "on", "max_result": DEFAULT_RESULT_MAX if cap is None else decimal(cap),
            "step_timeout": seconds_setting(settings, STEP_TIMEOUT_VAR, default=DEFAULT_STEP_TIMEOUT, low=1,
                                            high=MAX_TTL),
            "on_replay": setting(settings, ON_REPLAY_VAR, required=False) or "log", "instance": instance_name(settings)}
