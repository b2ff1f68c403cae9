"""Live key rings: a codec rebuilt from its settings when a key file changes, or on demand, and swapped whole.

Threat: a reload that half-applies (a token checked against a mix of two rings); a garbled, truncated or half-written
file; a new ring that drops the key sealing today's tokens while they live. The inner codec is immutable and replaced
in one assignment, and `seal` and `unseal` read it once. A codec that does not build, or a ring `early_drop` refuses,
leaves the current codec in force; why (never a key) is logged and kept in `error` for the fleet registry. Files are
watched off the request path, by a daemon thread comparing (device, inode, mtime, size) with symlinks followed, so the
swap of a Kubernetes Secret's ``..data`` link is a change.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from statecodec._types import Codec, HoldsSecrets, WrapsCodec, check_codec
from statecodec.errors import ConfigurationError, StatecodecError
from statecodec.rotation import early_drop

__all__ = ["ReloadingCodec", "Snapshot"]

logger = logging.getLogger("statecodec.reload")


class Snapshot(NamedTuple):
    """What an instance reports of its ring: never a key."""

    accepts: tuple[str, ...]  # key ids, primary first
    error: str | None  # why the last reload was refused, until one succeeds
    wait: float  # ttl + future_skew: how long a key verifies after it stopped being primary
    demoted: tuple[tuple[str, float], ...] = ()  # (key id, seconds since it stopped sealing here), by this clock


Report = Callable[[Snapshot | None], Awaitable[None]]  # None: this instance stops
_WATCHING: weakref.WeakSet[ReloadingCodec] = weakref.WeakSet()  # codecs whose watcher runs in this process


class ReloadingCodec(WrapsCodec, HoldsSecrets):
    """A codec whose ring follows its settings' files (module docstring): `build` makes the whole codec (the one
    builder, `statecodec.config`), `files` are polled every `interval` seconds (None: only `reload()` and, once asked,
    SIGHUP), and `report`, when given, receives a `Snapshot` on every poll from the watcher thread's own event loop."""

    def __init__(self, build: Callable[[], Codec], *, ttl: float, future_skew: float = 60,
                 files: Iterable[str | os.PathLike[str]] = (), interval: float | None = None,
                 report: Report | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._build, self._clock, self._report, self.wait = build, clock, report, ttl + future_skew
        self._files = tuple(Path(f) for f in files)
        self._lock, self._building = threading.Lock(), threading.Lock()
        self._stop, self._asked = threading.Event(), threading.Event()
        self._seen = self._stats()  # before the build: a change while it reads is seen at the next poll
        self.codec: Codec = check_codec(build(), "the configured codec")  # start-up fails as without reloading
        if not self.key_ids:  # `early_drop` guards a ring by its key ids: with none, any reload would pass
            raise ConfigurationError("a reloading codec needs a codec that reports its key ids (key_ids)")
        self.error: str | None = None
        self._retry_at = float("inf")  # a ring refused only for its timing is tried again then
        # From start-up on, as far as this instance knows, every other key was primary until now.
        self._demoted = dict.fromkeys(self.key_ids[1:], clock())
        self._thread: threading.Thread | None = None
        if interval is not None:
            self._thread = threading.Thread(target=_watch, args=(weakref.ref(self), interval),
                                            name="statecodec-reload", daemon=True)
            self._thread.start()
            _WATCHING.add(self)

    def seal(self, payload: bytes) -> str:
        return self.codec.seal(payload)  # one read of the current codec: one ring per token

    def unseal(self, token: str) -> bytes:
        return self.codec.unseal(token)

    def __repr__(self) -> str:
        return f"ReloadingCodec({self.codec!r})"

    def snapshot(self) -> Snapshot:
        with self._lock:
            now = self._clock()
            demoted = tuple((kid, now - at) for kid, at in self._demoted.items())
            return Snapshot(self.key_ids, self.error, self.wait, demoted)

    def reload(self) -> bool:
        """Rebuild from the settings now: True when the new codec is in force, False when it was refused and the
        current one kept (the reason in `error` and the log). One rebuild at a time; `snapshot` does not wait for
        one (a heartbeat goes on while a key provider is slow)."""
        with self._building:
            self._seen, self._retry_at = self._stats(), float("inf")
            try:
                codec = check_codec(self._build(), "the reloaded codec")
            except StatecodecError as exc:  # its message names a setting or a key's position, never a key
                return self._refuse(str(exc))
            except Exception as exc:  # a reload never stops the watcher; its text may quote the input
                return self._refuse(f"the codec did not build ({type(exc).__name__})")
            with self._lock:
                old, new, now = self.key_ids, tuple(getattr(codec, "key_ids", ())), self._clock()
                early = early_drop(old, new, self._demoted, now, self.wait)
                if early is not None:
                    kid, left = early
                    why = "it is the primary" if kid == old[0] else f"its tokens may live {left:.1f} s more"
                    self._retry_at = now + left
                    return self._refuse(f"the new ring drops key {kid} too early: {why} (ttl + future skew)")
                if new[:1] != old[:1]:
                    self._demoted.update(dict.fromkeys(old[:1], now))
                self._demoted = {kid: at for kid, at in self._demoted.items() if kid in new[1:]}
                self.codec, self.error = codec, None
        logger.info("statecodec: key ring reloaded; key ids %s", ", ".join(new))
        return True

    def _refuse(self, why: str) -> bool:
        self.error = why
        logger.error("statecodec: key ring reload refused, keeping key ids %s: %s", ", ".join(self.key_ids), why)
        return False

    def reload_on_sighup(self) -> None:
        """Reload at the next poll on SIGHUP (call from the main thread; the handler does no I/O itself)."""
        if self._thread is None:
            raise ConfigurationError("SIGHUP is answered at the watcher's next poll: give the codec an interval")
        signal.signal(signal.SIGHUP, lambda signum, frame: self._asked.set())

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
        asked = self._asked.is_set()
        self._asked.clear()
        return asked or self._clock() >= self._retry_at or self._stats() != self._seen

    def close(self) -> None:
        """Stop watching, and say so to the registry; the codec keeps serving its current ring."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()


def _watch(ref: weakref.ref[ReloadingCodec], interval: float) -> None:
    """The watcher: poll, reload (in a thread), report on its own event loop (the store's client lives there); it ends
    at once with `close()`, or with the codec (it holds no reference between polls, a rebuild only while it runs). A
    failed report is retried at the next poll."""
    report: Report | None = None
    rebuilding = threading.Thread()
    loop = asyncio.new_event_loop()
    try:
        while (codec := ref()) is not None:
            if not rebuilding.is_alive() and codec._due():
                # In a thread of its own: a key provider that hangs does not stop the heartbeat, which goes on
                # reporting the ring in force, so the instance stays in the registry and a step waits for it.
                rebuilding = threading.Thread(target=codec.reload, name="statecodec-rebuild", daemon=True)
                rebuilding.start()
            report, snapshot, stop = codec._report, codec.snapshot(), codec._stop
            del codec
            if report is not None:
                loop.run_until_complete(_reported(report, snapshot))
            if stop.wait(interval):
                break
        if report is not None:
            loop.run_until_complete(_reported(report, None))
    finally:
        loop.close()


async def _reported(report: Report, snapshot: Snapshot | None) -> None:
    """`report(snapshot)`; a failure is logged (a store error names host:port only; any other, its type) and the
    watcher goes on: the entry expires if the store stays out of reach, and a later poll reports again."""
    try:
        await report(snapshot)
    except Exception as exc:  # the watcher outlives any store failure
        why = str(exc) if isinstance(exc, StatecodecError) else type(exc).__name__
        logger.warning("statecodec: could not report to the fleet registry: %s", why)


def _forked() -> None:
    """A thread does not survive a fork: a child of a process with a watcher neither reloads nor reports, so it says
    so at once rather than serve a stale ring in silence."""
    if any(not codec._stop.is_set() for codec in _WATCHING):
        logger.error("statecodec: a reloading codec was forked, and the child neither reloads nor reports; build the "
                     "codec in each worker process (after the fork), as uvicorn --workers does")


os.register_at_fork(after_in_child=_forked)
