"""The way in for synchronous programs: one event loop, in a thread of its own, for what a server's loop would run.

Started on first use, never in a constructor; a forked child, which the parent's thread does not survive into, starts
its own. The one place statecodec starts a thread and a loop of its own.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from statecodec.errors import StoreError

__all__ = ["LoopThread", "finish"]

T = TypeVar("T")


class LoopThread:
    """An event loop in a daemon thread named `name`, started by the first `submit`."""

    __slots__ = ("_closed", "_lock", "_loop", "_pid", "_thread", "name")

    def __init__(self, name: str = "statecodec-sync") -> None:
        self.name, self._closed = name, False
        self._forget()

    def _forget(self) -> None:
        self._lock, self._pid = threading.Lock(), os.getpid()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Run `coroutine` on the loop; its future."""
        if self._pid != os.getpid():  # a forked child: the parent's thread (and any lock it held) stayed behind
            self._forget()
        with self._lock:
            if self._closed:  # a stopped loop would never answer: the caller would wait forever
                coroutine.close()
                raise StoreError(f"{self.name} is closed")
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name=self.name, daemon=True)
                self._thread.start()
            return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def close(self) -> None:
        """Stop the loop once its pending work is done; later calls are refused."""
        with self._lock:
            loop, thread, self._closed = self._loop, self._thread, True
        if loop is not None and thread is not None and thread is not threading.current_thread():
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()


def finish(coroutine: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that never suspends (one over the in-process store), run to its end in this thread:
    no loop, no hand-off; `RuntimeError` if it suspends after all."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("a coroutine that was to finish at once suspended: it needs an event loop")
