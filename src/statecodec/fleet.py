"""The fleet registry: every instance reports through the store the key ids it accepts; `rotate` reads them.

Threat: a rotation step taken while some instance cannot verify what another mints, judged from reports that are
stale, dated by another clock, or gone. A live-reloading instance announces on every poll its name, its key ids
(never keys, primary first) and its last refused reload; the store dates the entry, drops it `lifetime` after the
last report, and keeps per key id until when tokens under it may live, from durations the instance gives (its own
ttl + future skew after its entry's expiry while the key is primary, or after it stopped sealing under it), all by
the store's clock: an instance that left, whatever its ttl, still counts for the wait before its key is retired.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from statecodec._settings import PREFIX, Settings, seconds_setting, setting
from statecodec.config import ENVIRONMENT_ONLY, RELOAD_VAR, configured_codec, ttl_setting
from statecodec.errors import ConfigurationError
from statecodec.reload import ReloadingCodec, Snapshot

__all__ = ["Fleet", "Member", "Registry", "Reporter", "live_codec_from_env", "read_fleet"]

SKEW_VAR, INSTANCE_VAR = "STATECODEC_FUTURE_SKEW", "STATECODEC_INSTANCE"
_NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")


@runtime_checkable
class Registry(Protocol):
    """What a store keeps of the fleet (`MemoryStore`, `RedisStore`): per instance ``"loaded_ms ring doc"``."""

    async def announce(self, name: str, ring: str, doc: str, lifetime_ms: int,
                       live: Sequence[tuple[str, int]] = ()) -> int: ...
    async def fleet(self) -> tuple[int, list[tuple[str, int, str]], dict[str, int]]: ...
    async def leave(self, name: str) -> None: ...
    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class Member:
    """One live instance: key ids primary first, its last refused reload, store times."""

    name: str
    accepts: tuple[str, ...]
    error: str | None
    loaded_ms: int
    expires_ms: int


@dataclass(frozen=True)
class Fleet:
    now_ms: int  # the store's clock
    members: tuple[Member, ...]
    tokens_until_ms: Mapping[str, int]  # key id -> until when tokens under it may live


class Reporter:
    """The `report` of a `ReloadingCodec`: each snapshot announced under `name`, to expire `lifetime` s after."""

    def __init__(self, store: Registry, name: str, lifetime: float) -> None:
        self.store, self.name, self.lifetime_ms = store, name, int(lifetime * 1000)

    async def __call__(self, snapshot: Snapshot | None) -> None:
        if snapshot is None:  # stopping: leave, and release the connection
            try:
                await self.store.leave(self.name)
            finally:
                await self.store.aclose()
            return
        doc = json.dumps({"error": snapshot.error})
        # Durations from now (no clock crosses over): tokens live this instance's wait after it last sealed.
        wait_ms = int(snapshot.wait * 1000)
        live = [(snapshot.accepts[0], self.lifetime_ms + wait_ms)]
        live += [(kid, wait_ms - int(ago * 1000)) for kid, ago in snapshot.demoted]
        await self.store.announce(self.name, ",".join(snapshot.accepts), doc, self.lifetime_ms, live)


async def read_fleet(store: Registry) -> Fleet:
    now, rows, tokens_until = await store.fleet()
    return Fleet(now, tuple(_member(*row) for row in rows), tokens_until)


def _member(name: str, expires_ms: int, value: str) -> Member:
    """An entry as written by `Reporter`; anything else is a member that blocks every step (fail closed), its name
    printed escaped (no control character reaches the operator's terminal)."""
    loaded, ring, doc = ([*value.split(" ", 2), "", ""])[:3]
    try:
        error = json.loads(doc)["error"]
        ok = (error is None or (isinstance(error, str) and error.isprintable())) and loaded.isdecimal()
    except (ValueError, KeyError, TypeError):
        ok = False
    named = _NAME.fullmatch(name) is not None
    if not (ok and named and ring.isprintable()):
        return Member(name if named else ascii(name), (), "its registry entry is malformed", 0, expires_ms)
    return Member(name, tuple(ring.split(",")), error, int(loaded), expires_ms)


def live_settings(environ: Mapping[str, str]) -> tuple[Settings, float, float, list[str], str]:
    """(settings, interval, future skew, key files, instance name), checked: what stops a reloading server at
    start-up stops `statecodec check` too."""
    settings = Settings(environ)  # a copy: the codec is rebuilt from the settings it started with
    interval = seconds_setting(settings, RELOAD_VAR, default=5, low=0.05, high=3600)
    future_skew = seconds_setting(settings, SKEW_VAR, default=60, low=0, high=3600)
    files = [value.strip() for name, value in settings.items() if name.startswith(PREFIX) and name.endswith("_FILE")
             and name not in ENVIRONMENT_ONLY and value.strip()]  # fmt: skip
    name = setting(settings, INSTANCE_VAR, required=False) or f"{socket.gethostname()}-{os.getpid()}"
    if not _NAME.fullmatch(name):
        raise ConfigurationError(f"{INSTANCE_VAR} must be 1-128 letters, digits or _ . : @ -")
    if not files:
        raise ConfigurationError(f"{RELOAD_VAR} follows key files, and no STATECODEC_*_FILE setting names one: set "
                                 "STATECODEC_KEYS_FILE (or the kind's file setting) instead of the key itself")
    return settings, interval, future_skew, files, name


def live_codec_from_env(environ: Mapping[str, str]) -> ReloadingCodec:
    """What `codec_from_env` returns when ``STATECODEC_RELOAD_INTERVAL`` is set: the configured codec, rebuilt when a
    file a ``STATECODEC_*_FILE`` setting names changes, reporting to the fleet registry when a store is set."""
    settings, interval, future_skew, files, name = live_settings(environ)
    report = None
    if any(setting(settings, var, required=False) for var in ("STATECODEC_STORE_URL", "STATECODEC_STORE_URL_FILE")):
        from statecodec.single_use import store_from_settings

        store = store_from_settings(settings)
        if not isinstance(store, Registry):
            raise ConfigurationError(f"the store at {store.where} keeps no fleet registry; unset {RELOAD_VAR}")
        report = Reporter(store, name, lifetime=3 * interval + 1)  # three polls missed before it counts as gone
    return ReloadingCodec(lambda: configured_codec(settings)[1], ttl=ttl_setting(settings), future_skew=future_skew,
                          files=files, interval=interval, report=report)
