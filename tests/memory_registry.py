"""`MemoryRegistry`: the fleet registry (statecodec.registry) of one process, for tests: what the Redis registry's
scripts do (docs/formats.md), in memory, on a clock the test moves."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from statecodec.registry import Rows


class MemoryRegistry:
    """`Registry` of one process, on its own clock."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock, self._entries, self._tokens_until = clock, dict[str, tuple[int, str]](), dict[str, int]()
        self._pulled = dict[str, int]()
        self._lock = threading.Lock()  # a codec's loop thread and a server's loop may share one registry

    def _now(self) -> int:
        now = int(self._clock() * 1000)
        for name in [name for name, (until, _) in self._entries.items() if until <= now]:
            del self._entries[name]
        return now

    async def announce(self, name: str, ring: str, doc: str, lifetime_ms: int,
                       live: Sequence[tuple[str, int]] = ()) -> list[str]:
        with self._lock:
            now = self._now()
            old = self._entries.get(name, (0, "0 - -"))[1].split(" ", 2)  # written below: "loaded_ms ring doc"
            self._entries[name] = (now + lifetime_ms, f"{old[0] if old[1] == ring else now} {ring} {doc}")
            for kid, ms in live:
                self._tokens_until[kid] = max(self._tokens_until.get(kid, 0), now + ms)
            return list(self._pulled)

    async def pull(self, key_id: str) -> None:
        with self._lock:
            self._pulled.setdefault(key_id, self._now())

    async def fleet(self) -> Rows:
        with self._lock:
            now = self._now()
            rows = [(name, until, value) for name, (until, value) in sorted(self._entries.items())]
            return now, rows, dict(self._tokens_until), dict(self._pulled)

    async def leave(self, name: str) -> None:
        with self._lock:
            self._entries.pop(name, None)

    async def aclose(self) -> None:
        pass  # nothing to release
