"""Service fixtures for the test suite, one module per service, and what they share: `free_ports` picks their
ports, `stop_process` is the one way they end a server, `Clock` is the clock a test moves by hand."""

from __future__ import annotations

import contextlib
import copy
import functools
import pickle
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """End `process` (SIGTERM, then SIGKILL after 10 s); idempotent, and it ends a paused (SIGSTOPped) one too."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGCONT)  # a stopped process would not act on SIGTERM
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def free_ports(count: int) -> list[int]:
    """Loopback ports nothing listens on now, held together while chosen so that no two are the same."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]


def wait_until(process: subprocess.Popen[bytes], up: Callable[[], bool], timeout: float = 30.0) -> bool:
    """True once `up()` is (an OSError counts as not yet); False when `process` exits or `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if up():
                return True
        time.sleep(0.05)
    return False


def eventually(check: Callable[[], Any]) -> Any:
    """The first truthy result of `check`, polled every 0.02 s; fails after 30 s (a bound on a hang, not a speed)."""
    deadline = time.monotonic() + 30
    while not (result := check()):
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.02)
    return result


def listening(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


def free_port() -> int:
    return free_ports(1)[0]


def free_port_with(offset: int) -> int:
    """A free loopback port p with p + `offset` free too (a Redis Cluster bus port, OpenBao dev mode's second)."""
    while True:
        port = free_port()
        with socket.socket() as other:
            try:
                other.bind(("127.0.0.1", port + offset))
            except (OSError, OverflowError):  # taken, or past 65535
                continue
        return port


class Clock:
    """A clock the test moves by hand (``clock.now += 1``)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def assert_not_copyable(holder: object) -> None:
    """`holder` (it holds a key or a Vault token) refuses every pickle protocol, `copy` and `deepcopy`."""
    dumps: list[Callable[[object], object]] = [copy.copy, copy.deepcopy]
    dumps += [functools.partial(pickle.dumps, protocol=p) for p in range(pickle.HIGHEST_PROTOCOL + 1)]
    for dump in dumps:
        with pytest.raises(TypeError, match="not picklable"):
            dump(holder)
