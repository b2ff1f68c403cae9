"""Lifetimes shared by the service fixtures: a server running for a block, a shared one reset around a test."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol, TypeVar


class Startable(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


class Resettable(Protocol):
    def reset(self) -> None: ...


_S = TypeVar("_S", bound=Startable)
_R = TypeVar("_R", bound=Resettable)


@contextlib.contextmanager
def running(service: _S) -> Iterator[_S]:
    """`service` started for the block and stopped after it, however the block ends."""
    service.start()
    try:
        yield service
    finally:
        service.stop()


@contextlib.contextmanager
def reset_around(shared: _R) -> Iterator[_R]:
    """A session-wide `shared` service with no faults queued and counters at zero, before and after the block."""
    shared.reset()
    yield shared
    shared.reset()
