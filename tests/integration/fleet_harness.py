"""Start `examples/fleet_server.py` instances as real processes on free loopback ports.

Every process is started in its own process group, its output goes to a log
file (never a pipe that could fill up and stall it), and it is always
stopped on exit: SIGTERM first so uvicorn shuts down cleanly, then SIGKILL to
the whole group so no worker outlives the test.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import httpx

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FLEET_SERVER = EXAMPLES / "fleet_server.py"
LOOPBACK = "127.0.0.1"
# A generous bound on start-up (imports, codec construction, a KMS call); not a performance check.
START_DEADLINE_S = 120.0
STOP_GRACE_S = 10.0
_INHERITED_PREFIXES = ("STATECODEC_", "FLEET_", "AWS_")


@dataclass(frozen=True)
class FleetServer:
    """One running server: its port, its process, and the file its output goes to."""

    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/mcp"

    def health(self) -> str:
        """The instance id of whichever process answers the health route."""
        response = httpx.get(f"http://{LOOPBACK}:{self.port}/healthz", timeout=5.0)
        response.raise_for_status()
        instance = response.json()["instance"]
        assert isinstance(instance, str)
        return instance

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def free_port() -> int:
    """A port that was free on the loopback interface a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def server_env(settings: Mapping[str, str]) -> dict[str, str]:
    """The test process's environment without codec, fleet or AWS settings, plus `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED_PREFIXES)}
    env.update(settings)
    return env


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_GRACE_S)
    # uvicorn's workers are in the group too: nothing of it may survive the test.
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _wait_ready(server: FleetServer, deadline: float) -> None:
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"fleet server on port {server.port} exited at start-up:\n{server.log_text()}")
        try:
            server.health()
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"fleet server on port {server.port} did not start:\n{server.log_text()}") from None
            time.sleep(0.05)
        else:
            return


@contextmanager
def fleet(
    log_dir: Path,
    settings: Sequence[Mapping[str, str]],
    *,
    args: Sequence[str] = (),
) -> Iterator[list[FleetServer]]:
    """Start one server per entry of `settings` (its environment), all at once; wait until each answers."""
    with ExitStack() as stack:
        servers: list[FleetServer] = []
        for index, env in enumerate(settings):
            port = free_port()
            log = log_dir / f"fleet-{index}-{port}.log"
            out = stack.enter_context(log.open("wb"))
            cmd = [sys.executable, str(FLEET_SERVER), "--port", str(port), *args]
            process = subprocess.Popen(
                cmd,
                env=server_env(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            stack.callback(_stop, process)
            servers.append(FleetServer(port, process, log))
        deadline = time.monotonic() + START_DEADLINE_S
        for server in servers:
            _wait_ready(server, deadline)
        yield servers
