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
import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from statecodec.reload import Snapshot
from statecodec.rotation import Fleet, Member

__all__ = ["NAME", "Registry", "Reporter", "read_fleet"]

NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")  # an instance's name in the registry


@runtime_checkable
class Registry(Protocol):
    """What a store keeps of the fleet (`MemoryStore`, `RedisStore`): per instance ``"loaded_ms ring doc"``."""

    async def announce(self, name: str, ring: str, doc: str, lifetime_ms: int,
                       live: Sequence[tuple[str, int]] = ()) -> int: ...
    async def fleet(self) -> tuple[int, list[tuple[str, int, str]], dict[str, int]]: ...
    async def leave(self, name: str) -> None: ...
    async def aclose(self) -> None: ...




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
    named = NAME.fullmatch(name) is not None
    if not (ok and named and ring.isprintable()):
        return Member(name if named else ascii(name), (), "its registry entry is malformed", 0, expires_ms)
    return Member(name, tuple(ring.split(",")), error, int(loaded), expires_ms)
