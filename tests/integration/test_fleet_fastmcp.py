"""FastMCP 4 as a fleet: `examples/fleet_server.py --server fastmcp` processes over streamable HTTP, one redis-server,
one key file; statecodec reaches each FastMCP server through its lifespan alone.

Threats, each on FastMCP as on MCPServer: a flow that fails across instances; an exact replay accepted; a revoked
principal's retry accepted on another instance; a lost answer that costs the client its step (the retry-safe mode);
an instance the fleet registry does not see; a refusal the metrics do not count by reason.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from tests.integration.fleet_harness import KEEPALIVE_EXPIRY_S, FleetServer, fleet, flow, present, retry, round_one
from tests.integration.test_fleet_single_use import DEMO_ISSUER, STATECODEC_CLI

from statecodec import format_keys, generate_key
from statecodec.cli.main import main

pytestmark = pytest.mark.integration

NAMES = ["fastmcp-0", "fastmcp-1", "fastmcp-safe-0", "fastmcp-safe-1"]


def metrics(servers: list[FleetServer]) -> Counter[tuple[str, str]]:
    """Each instance's ``statecodec.request_state`` counts (fleet_server.py's ``/metrics``), summed by outcome and
    reason."""
    found: Counter[tuple[str, str]] = Counter()
    for server in servers:
        for point in httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5).raise_for_status().json():
            found[(point["outcome"], point.get("reason", ""))] += point["value"]
    return found


def test_fastmcp_instances_share_flows_single_use_revocation_the_retry_safe_mode_the_registry_and_the_metrics(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ring, runs = tmp_path / "ring", tmp_path / "runs"
    ring.write_text(format_keys([generate_key()]), encoding="utf-8")
    store = {"STATECODEC_STORE_URL": redis_url, "STATECODEC_STORE_TIMEOUT": "5",
             "STATECODEC_STORE_KEY": format_keys([generate_key()])}
    server = store | {"FLEET_SERVER": "fastmcp", "FLEET_DEMO_AUTH": "1", "FLEET_METRICS": "1", "FLEET_RUNS_FILE":
                      str(runs), "STATECODEC_KEYS_FILE": str(ring), "STATECODEC_RELOAD_INTERVAL": "0.5"}
    settings = [server | {"STATECODEC_INSTANCE": name} for name in NAMES]
    for settings_of in settings[2:]:
        settings_of["STATECODEC_RETRY_SAFE"] = "on"
    with fleet(tmp_path, settings) as servers:
        default, safe = servers[:2], servers[2:]

        async def body() -> dict[str, Any]:
            limits = httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S)
            async with httpx.AsyncClient(timeout=60, limits=limits) as client:
                crossed = [await flow(client, a, b, "alice") for a, b in ((default[0], default[1]),
                                                                          (default[1], default[0]), (safe[0], safe[1]))]
                token = await round_one(client, default[0], subject="alice")
                once = [await retry(client, default[1], token, subject="alice"),
                        await retry(client, default[0], token, subject="alice")]  # the exact replay
                leaver = await round_one(client, default[0], subject="leaver")
                revoke = [str(STATECODEC_CLI), "revoke", "--principal", "leaver", "--issuer", DEMO_ISSUER]
                env = {k: v for k, v in os.environ.items() if not k.startswith("STATECODEC_")} | store
                done = await anyio.to_thread.run_sync(lambda: subprocess.run(revoke, env=env, capture_output=True,
                                                                              timeout=120))
                assert done.returncode == 0, done.stderr
                revoked = await retry(client, default[1], leaver, subject="leaver")
                lost = await round_one(client, safe[0], subject="bob", name="lost")
                first = await present(client, safe[0], lost, subject="bob", name="lost")  # its answer never arrives
                again = await present(client, safe[1], lost, subject="bob", name="lost")
                return {"crossed": crossed, "once": once, "revoked": revoked, "first": first, "again": again}

        outcome = anyio.run(body)
        assert outcome["crossed"] == [True] * 3, [s.log_tail() for s in servers]
        assert outcome["once"] == [True, False]
        assert outcome["revoked"] is False
        assert "result" in outcome["first"]
        assert outcome["again"] == outcome["first"]  # answered again, on the other instance
        assert runs.read_text(encoding="utf-8").splitlines().count("lost") == 1  # and the step ran once
        for name, value in {"STATECODEC_STORE_URL": redis_url, "STATECODEC_KEYS_FILE": str(ring)}.items():
            monkeypatch.setenv(name, value)  # the operator's
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["rotate", "status", "--json"]) == 0
        assert sorted(instance["name"] for instance in json.loads(out.getvalue())["instances"]) == NAMES
        counted = metrics(servers)
        assert counted[("refused", "replayed")] == 1
        assert counted[("refused", "revoked")] == 1
        assert counted[("answered_again", "")] == 1
        assert counted[("accepted", "")] == 3 + 1 + 1  # the crossed flows, the token's first use, the lost answer's
        assert set(counted) == {("accepted", ""), ("refused", "replayed"), ("refused", "revoked"),
                                ("answered_again", "")}
