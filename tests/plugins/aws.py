"""AWS KMS for integration tests: a real `moto_server` over HTTP on 127.0.0.1, for the session.

`kms_proxy` sits in front of it, counts requests per KMS operation and can answer the next ones with an error of
KMS's own JSON shape, for faults moto never produces.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tests.plugins import free_port, listening, stop_process, wait_until

REGION = "us-east-1"
CREDENTIALS = {"aws_access_key_id": "AKIASTATECODECTEST", "aws_secret_access_key": "statecodec-test-secret-access-key"}
_SESSIONS: list[Any] = []


def kms_client(endpoint: str, **config: Any) -> Any:
    """A boto3 KMS client for `endpoint`, botocore's own retries off (the wrapper retries)."""
    cfg = Config(retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=2, read_timeout=5, **config)
    if not _SESSIONS:  # one session: its loaded service models make each new client cheap
        _SESSIONS.append(boto3.session.Session(region_name=REGION, **CREDENTIALS))
    return _SESSIONS[0].client("kms", endpoint_url=endpoint, config=cfg)


class MotoServer:
    """One `moto_server` process on a free loopback port; `stop()` / `start()` at will."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exe = Path(sys.executable).with_name("moto_server")
        cmd = [str(exe), "-H", "127.0.0.1", "-p", str(self.port)]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if wait_until(self._proc, lambda: listening(self.port)):
            return  # listening: requests queue until it serves them
        self.stop()
        raise RuntimeError("moto_server did not start")

    def stop(self) -> None:
        if self._proc is not None:
            stop_process(self._proc)
            self._proc = None

    def client(self) -> Any:
        return kms_client(self.endpoint)

    def create_key(self) -> tuple[str, str]:
        """(key ARN, bare key id) of a new symmetric key."""
        with contextlib.closing(self.client()) as client:
            meta = client.create_key(Description="statecodec test key")["KeyMetadata"]
        return str(meta["Arn"]), str(meta["KeyId"])


class KmsProxy:
    """HTTP proxy to a moto server: counts KMS operations, injects KMS error responses."""

    def __init__(self, upstream_port: int) -> None:
        self.calls: Counter[str] = Counter()
        self._faults: list[tuple[int, str, str]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                fault = proxy._take(self.headers.get("X-Amz-Target", "").rpartition(".")[2])
                if fault is not None:
                    status, data = fault[0], json.dumps({"__type": fault[1], "message": fault[2]}).encode()
                else:
                    conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=10)
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                    conn.request("POST", self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    status, data = response.status, response.read()
                    conn.close()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _take(self, op: str) -> tuple[int, str, str] | None:
        with self._lock:
            self.calls[op] += 1
            return self._faults.pop(0) if self._faults else None

    def fail_next(self, n: int, code: str, *, status: int = 400, message: str = "injected") -> None:
        """Answer the next `n` requests with KMS error `code`."""
        with self._lock:
            self._faults.extend([(status, code, message)] * n)

    def reset(self) -> None:
        with self._lock:
            self._faults.clear()
            self.calls.clear()

    def client(self) -> Any:
        return kms_client(self.endpoint)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    server = MotoServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _kms_proxy_session(moto_server: MotoServer) -> Iterator[KmsProxy]:
    proxy = KmsProxy(moto_server.port)
    yield proxy
    proxy.close()


@pytest.fixture
def kms_proxy(_kms_proxy_session: KmsProxy) -> KmsProxy:
    """The counting, fault-injecting proxy, with no faults queued and counters at zero."""
    _kms_proxy_session.reset()
    return _kms_proxy_session
