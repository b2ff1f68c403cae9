"""A retry that lands on another uvicorn worker completes with a shared ring, however slowly the workers start.

`examples/fleet_server.py --workers 2` as a real process, driven by `examples/fleet_client.py` over streamable HTTP.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from examples.fleet_client import provision
from tests.integration.fleet_harness import FleetServer, fleet

from statecodec import format_keys, generate_key

pytestmark = pytest.mark.integration

# Bounded by count: the kernel spreads connections over the workers, not in a fixed order.
MAX_WORKER_FLOWS = 60
# Runs in every process Python starts with this directory on its path; it delays only the workers
# uvicorn spawns, as a slow import on a loaded machine does, before they can answer a health check.
# uvicorn's supervisor pings the first worker about 0.5 s after spawning it and kills it if no answer
# comes within its default 5 s: 6.5 s (plus the worker's own imports) is beyond that window.
SLOW_WORKER_SITECUSTOMIZE = """
import sys, time
if any("spawn_main" in arg for arg in sys.orig_argv):
    time.sleep(6.5)
"""
# What uvicorn logs at info when its supervisor kills a worker and starts a replacement.
WORKER_REPLACED = re.compile(r"Child process \[\d+\] died")


def run_flow(server: FleetServer) -> dict[str, Any]:
    """Round 1 and every retry on `server`; the tool's structured result."""
    try:
        return anyio.run(lambda: provision(server.url, retry_url=server.url, name="orders", region="eu-west-1"))
    except Exception:
        # A flow that breaks says what the server logged up to then (worker deaths included);
        # pytest shows this captured output with the failure.
        print(f"last lines of the log of the server on port {server.port}:\n{server.log_tail()}", file=sys.stderr)
        raise


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetServer]:
    """One uvicorn server, two worker processes behind one port sharing a ring, each slow to start."""
    site = tmp_path_factory.mktemp("slow-site")
    (site / "sitecustomize.py").write_text(SLOW_WORKER_SITECUSTOMIZE, encoding="utf-8")
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    settings = {"FLEET_MODE": "shared", "STATECODEC_CODEC": "aesgcm", "STATECODEC_KEYS": format_keys([generate_key()])}
    with fleet(tmp_path_factory.mktemp("fleet-logs"), [{**settings, "PYTHONPATH": path}], workers=2) as started:
        yield started[0]


def test_retries_across_uvicorn_workers_complete_with_the_shared_ring(workers: FleetServer) -> None:
    # The fixture returned, so both workers answered, slower to start than uvicorn's default 5 s health
    # check, under which each would be killed and replaced by another equally slow worker.
    assert len(workers.instances) == 2
    pairs: list[tuple[str, str]] = []
    for _ in range(MAX_WORKER_FLOWS):
        outcome = run_flow(workers)
        assert (outcome["name"], outcome["region"]) == ("orders", "eu-west-1")
        pairs.append((outcome["asked_by"], outcome["completed_by"]))
        if len({done for _, done in pairs}) == 2 and any(asked != done for asked, done in pairs):
            break
    # Both workers that started completed retries (none was replaced meanwhile), and at least one
    # retry completed on the worker that did not seal its state.
    assert {done for _, done in pairs} == workers.instances, workers.log_tail()
    assert any(asked != done for asked, done in pairs), workers.log_tail()
    assert f"pid-{workers.process.pid}" not in workers.instances
    assert "requestState rejected" not in workers.log_text()
    assert not WORKER_REPLACED.search(workers.log_text()), workers.log_tail()
