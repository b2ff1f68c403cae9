"""Live key rings: a codec rebuilt from its settings when a key file changes, or on demand, and swapped whole.

Threat: a reload that half-applies (a token checked against two rings); a garbled or half-written file; a new ring that
drops a key while its tokens live; a leaked key honoured after its pull. The inner codec is replaced whole in one
assignment; one that does not build, or a ring `early_drop` refuses, leaves the current one in force, why (never a key)
kept in `error`, unless it holds a pulled key: then no token is sealed or opened until one loads (docs/rotation.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from statecodec._settings import DEFAULT_FUTURE_SKEW
from statecodec._types import Codec, HoldsSecrets, WrapsCodec, require_codec
from statecodec.errors import ConfigurationError, InvalidToken, Reason, SealError, StatecodecError
from statecodec.keys import read_key_file
from statecodec.rotation import early_drop, pulled_ids
from statecodec.sync import LoopThread

__all__ = ["ReloadingCodec", "Snapshot"]

logger = logging.getLogger("statecodec.reload")


class Snapshot(NamedTuple):
    """What an instance reports of its ring: never a key."""

    accepts: tuple[str, ...]  # key ids, primary first
    error: str | None  # why the last reload was refused, until one succeeds
    wait: float  # ttl + future_skew: how long a key verifies after it stopped being primary
    demoted: tuple[tuple[str, float], ...] = ()  # (key id, seconds since it stopped sealing here), by this clock
    pulled: tuple[str, ...] = ()  # key ids dropped for `statecodec rotate pull`


Report = Callable[[Snapshot | None], Awaitable[Iterable[str] | None]]  # None: stops; returns the fleet's pulled ids


class _Fenced(NamedTuple):
    """A ring in force that holds a pulled key: it seals and opens nothing, so a forged token is never honoured."""

    key_ids: tuple[str, ...]

    def seal(self, payload: bytes) -> str:
        raise SealError("this instance's key ring holds a pulled key: update its key file (docs/key-management.md)")

    def unseal(self, token: str) -> bytes:
        raise InvalidToken(Reason.UNKNOWN_KEY)


class ReloadingCodec(WrapsCodec, HoldsSecrets):
    """A codec whose ring follows its settings' files: `build` makes the whole codec, `files` are polled every
    `interval` seconds by `watch` (None: only `reload()`). The constructor only builds the first codec: no thread."""

    def __init__(self, build: Callable[[], Codec], *, ttl: float, future_skew: float = DEFAULT_FUTURE_SKEW,
                 files: Iterable[str | os.PathLike[str]] = (), interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._build, self._clock, self.interval, self.wait = build, clock, interval, ttl + future_skew
        self._files = tuple(Path(f) for f in files)
        self._lock, self._building = threading.Lock(), threading.Lock()
        self._asked = self._closed = False
        self._pulled: frozenset[str] = frozenset()  # never dropped early, never loaded again (`rotate pull`)
        self._wake: Callable[[], object] | None = None  # ends the watcher's wait at once, from any thread
        self._sync: tuple[LoopThread, Future[None]] | None = None  # `start`'s loop and its watcher
        self._watched = interval is None  # a watcher ran, or none is needed: a flag, not a check per token
        self._seen = self._stats()  # before the build: a change while it reads is seen at the next poll
        self.codec: Codec = require_codec(build(), "the configured codec")  # start-up fails as without reloading
        if not self.key_ids:  # `early_drop` guards a ring by its key ids: with none, any reload would pass
            raise ConfigurationError("a reloading codec needs a codec that reports its key ids (key_ids)")
        self.error: str | None = None
        self._retry_at = float("inf")  # a ring refused only for its timing is tried again then
        # From start-up on, as far as this instance knows, every other key was primary until now.
        self._demoted = dict.fromkeys(self.key_ids[1:], clock())

    def seal(self, payload: bytes) -> str:
        if not self._watched:
            self._unwatched()
        return self.codec.seal(payload)  # one read of the current codec: one ring per token

    def unseal(self, token: str) -> bytes:
        if not self._watched:
            self._unwatched()
        return self.codec.unseal(token)

    def _unwatched(self) -> None:
        """Say once that its files are not followed: a codec handed to the SDK with no lifespan and no `start`."""
        self._watched = True
        logger.error("statecodec: a reloading codec is never watched, so its key files are not followed: build the "
                     "server with statecodec.mcp.from_env and pass its lifespan (each forked worker runs its own), "
                     "or call codec.start() in the process that serves")

    def __repr__(self) -> str:
        return f"ReloadingCodec({self.codec!r})"

    def snapshot(self) -> Snapshot:
        with self._lock:
            now = self._clock()
            demoted = tuple((kid, now - at) for kid, at in self._demoted.items())
            return Snapshot(self.key_ids, self.error, self.wait, demoted, tuple(sorted(self._pulled - {*self.key_ids})))

    def reload(self) -> bool:
        """Rebuild from the settings now: True when the new codec is in force, False when it was refused and the
        current one kept (the reason in `error`). `snapshot` does not wait for a rebuild."""
        with self._building:
            self._seen, self._retry_at = self._stats(), float("inf")
            marked: set[str] = set()  # before the build: a pull line newer than its ring is read again next poll
            for path in self._files:
                with contextlib.suppress(ConfigurationError):  # the build says why a file cannot be read
                    marked |= pulled_ids(read_key_file(path))
            try:
                codec = require_codec(self._build(), "the reloaded codec")
            except StatecodecError as exc:  # its message names a setting or a key's position, never a key
                return self._refuse(str(exc))
            except Exception as exc:  # a reload never stops the watcher; its text may quote the input
                return self._refuse(f"the codec did not build ({type(exc).__name__})")
            with self._lock:
                old, new, now = self.key_ids, tuple(getattr(codec, "key_ids", ())), self._clock()
                pulled = self._pulled | marked
                if held := [kid for kid in new if kid in pulled]:
                    return self._refuse(f"the new ring holds key {held[0]}, which was pulled (statecodec rotate pull)")
                early = early_drop(old, (*new, *pulled), self._demoted, now, self.wait)  # a pull drops at once
                if early is not None:
                    kid, left = early
                    why = "it is the primary" if kid == old[0] else f"its tokens may live {left:.1f} s more"
                    self._retry_at = now + left
                    return self._refuse(f"the new ring drops key {kid} too early: {why} (ttl + future skew)")
                if new[:1] != old[:1]:
                    self._demoted.update(dict.fromkeys(old[:1], now))
                self._demoted = {kid: at for kid, at in self._demoted.items() if kid in new[1:]}
                self.codec, self.error, self._pulled = codec, None, frozenset(pulled)
        for kid in (kid for kid in old if kid in pulled and kid not in new):  # an incident: every instance says it
            logger.critical("statecodec: key %s pulled (statecodec rotate pull): tokens under it are refused", kid)
        logger.info("statecodec: key ring reloaded; key ids %s", ", ".join(new))
        return True

    def _refuse(self, why: str) -> bool:
        self.error = why
        logger.error("statecodec: key ring reload refused, keeping key ids %s: %s", ", ".join(self.key_ids), why)
        if (held := [kid for kid in self.key_ids if kid in self._pulled]) and not isinstance(self.codec, _Fenced):
            self.codec = _Fenced(self.key_ids)
            logger.critical("statecodec: the key ring in force holds key %s, which was pulled (statecodec rotate "
                            "pull): no token is sealed or opened here until the key file drops it", held[0])
        return False

    def reload_on_sighup(self) -> None:
        """Reload at the next poll on SIGHUP (call from the main thread; the handler does no I/O itself)."""
        if self.interval is None:
            raise ConfigurationError("SIGHUP is answered at the watcher's next poll: give the codec an interval")
        signal.signal(signal.SIGHUP, lambda signum, frame: setattr(self, "_asked", True))

    def _stats(self) -> tuple[tuple[int, ...] | None, ...]:
        out: list[tuple[int, ...] | None] = []
        for path in self._files:
            try:
                st = path.stat()  # follows symlinks: an atomic swap of the link is a new inode
            except OSError:
                out.append(None)
            else:
                out.append((st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(out)

    def _due(self) -> bool:
        """Whether a file changed since the last build, or a reload was asked for."""
        asked, self._asked = self._asked, False
        return asked or self._clock() >= self._retry_at or self._stats() != self._seen

    async def watch(self, report: Report | None = None, stop: asyncio.Event | None = None) -> None:
        """Poll every `interval` until `stop` is set or `close()`, rebuilding off the loop; `report` each `Snapshot`,
        then None."""
        if self.interval is None:
            raise ConfigurationError("a watcher polls every interval: give the codec one (STATECODEC_RELOAD_INTERVAL)")
        loop, woken = asyncio.get_running_loop(), stop or asyncio.Event()
        self._wake, self._watched = (lambda: loop.call_soon_threadsafe(woken.set)), True
        pool, rebuild = ThreadPoolExecutor(1, thread_name_prefix="statecodec-rebuild"), None
        try:
            while not (self._closed or woken.is_set()):
                if (rebuild is None or rebuild.done()) and self._due():
                    rebuild = loop.run_in_executor(pool, self.reload)
                told = await _reported(report, self.snapshot()) if report is not None else frozenset()
                if not told <= self._pulled:  # the fleet pulled a key (`rotate pull`): reload at the next poll
                    self._pulled, self._asked = self._pulled | told, True  # a new set: the rebuild thread reads it
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), self.interval)
        finally:
            self._wake = None
            pool.shutdown(wait=False, cancel_futures=True)  # a rebuild hanging on its provider is left to end
            if report is not None:
                await _reported(report, None)

    def start(self, report: Report | None = None) -> None:
        """`watch` in a synchronous program, on a loop thread of this codec's own (`statecodec.sync`)."""
        if self._sync is None:
            loop, self._watched = LoopThread("statecodec-reload"), True
            self._sync = (loop, loop.submit(self.watch(report)))

    def close(self) -> None:
        """Stop watching, and say so to the registry; the codec keeps serving its current ring. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._wake is not None:
            self._wake()
        if self._sync is not None:
            loop, watching = self._sync
            with contextlib.suppress(Exception):  # a failed watcher logged why; the loop still stops
                watching.result()
            loop.close()


async def _reported(report: Report, snapshot: Snapshot | None) -> frozenset[str]:
    """`report(snapshot)`; a failure is logged and the watcher goes on (a later poll reports again)."""
    try:
        return frozenset(await report(snapshot) or ())
    except Exception as exc:  # the watcher outlives any store failure
        why = str(exc) if isinstance(exc, StatecodecError) else type(exc).__name__
        logger.warning("statecodec: could not report to the fleet registry: %s", why)
        return frozenset()
