"""A retry that lands on another instance: completes with a shared ring, refused under the SDK default.

Real processes of `examples/fleet_server.py` on loopback ports, driven by
`examples/fleet_client.py` (round 1 to one URL, the retry to another), over
streamable HTTP. The shared ring comes from ``STATECODEC_KEYS`` (that a
provider's wrapped ring builds one codec from the same settings anywhere:
tests/integration/test_provider_contract.py). The refusal is the SDK's frozen
-32602 answer; the reason goes to the refusing server's log only.

Each class starts its own servers and stops them when its last test ends, so
only one group of processes runs at a time. The same hop under the SDK default
is refused: tests/test_examples.py runs docs/deployment.md's block that shows it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from examples.fleet_client import provision
from mcp import MCPError
from tests.integration.fleet_harness import FleetServer, fleet, ready
from tests.mcp_flows import INVALID_PARAMS, REJECTION_MESSAGE

from statecodec import format_keys, generate_key

pytestmark = pytest.mark.integration

SDK_REJECTION_LOG = "requestState rejected on tools/call"
# Bounded by count: the kernel spreads connections over the workers, not in a fixed order.
MAX_WORKER_FLOWS = 60


def run_flow(first: FleetServer, retry: FleetServer, *, region: str = "eu-west-1") -> dict[str, Any]:
    """Round 1 on `first`, every retry on `retry`; the tool's structured result."""

    async def flow() -> dict[str, Any]:
        return await provision(first.url, retry_url=retry.url, name="orders", region=region)

    try:
        return anyio.run(flow)
    except Exception:
        # A flow that breaks says what the servers logged up to then (worker deaths included);
        # pytest shows this captured output with the failure.
        for server in {first.port: first, retry.port: retry}.values():
            print(f"last lines of the log of the server on port {server.port}:\n{server.log_tail()}", file=sys.stderr)
        raise


def shared(keys: str) -> dict[str, str]:
    return {"FLEET_MODE": "shared", "STATECODEC_CODEC": "aesgcm", "STATECODEC_KEYS": keys}


def new_ring() -> str:
    return format_keys([generate_key()])


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fleet-logs")


@pytest.fixture(scope="class")
def ring_fleet(log_dir: Path) -> Iterator[dict[str, FleetServer]]:
    """Two instances sharing a ring from STATECODEC_KEYS, and one on another ring."""
    ring = new_ring()
    with fleet(log_dir, [shared(ring), shared(ring), shared(new_ring())]) as started:
        yield dict(zip(("a", "b", "foreign"), started, strict=True))


class TestSharedRing:
    def test_retry_on_another_instance_completes_with_the_shared_ring(self, ring_fleet: dict[str, FleetServer]) -> None:
        a, b = ring_fleet["a"], ring_fleet["b"]
        there = run_flow(a, b, region="eu-west-1")
        back = run_flow(b, a, region="us-east-2")
        assert a.health() != b.health()
        assert there == {"name": "orders", "region": "eu-west-1", "asked_by": a.health(), "completed_by": b.health()}
        assert (back["asked_by"], back["completed_by"], back["region"]) == (b.health(), a.health(), "us-east-2")
        assert SDK_REJECTION_LOG not in a.log_text() + b.log_text()

    def test_instance_on_another_ring_refuses_with_our_reason_code(self, ring_fleet: dict[str, FleetServer]) -> None:
        a, foreign = ring_fleet["a"], ring_fleet["foreign"]
        assert run_flow(foreign, foreign)["completed_by"] == foreign.health()
        with pytest.raises(MCPError) as refused:
            run_flow(a, foreign)
        assert (refused.value.error.code, refused.value.error.message) == (INVALID_PARAMS, REJECTION_MESSAGE)
        assert f"{SDK_REJECTION_LOG}: unknown_key" in foreign.log_text()


# --- uvicorn workers (last, so their slow start overlaps every test above) -----------------------


# Runs in every process Python starts with this directory on its path; it delays only the workers
# uvicorn spawns, as a slow import on a loaded machine does, before they can answer a health check.
# uvicorn's supervisor pings the first worker about 0.5 s after spawning it and kills it if no answer
# comes within its default 5 s: 8 s (plus the worker's own imports) is beyond that window.
SLOW_WORKER_SITECUSTOMIZE = """
import sys, time
if any("spawn_main" in arg for arg in sys.orig_argv):
    time.sleep(8)
"""
# What uvicorn logs at info when its supervisor kills a worker and starts a replacement.
WORKER_REPLACED = re.compile(r"Child process \[\d+\] died")


@pytest.fixture(scope="module", autouse=True)
def slow_workers(log_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetServer]:
    """One uvicorn server, two worker processes behind one port sharing a ring, each slow to start.

    Started with the module and not waited for, so their start overlaps the tests above; the
    processes sleep through most of it.
    """
    site = tmp_path_factory.mktemp("slow-site")
    (site / "sitecustomize.py").write_text(SLOW_WORKER_SITECUSTOMIZE, encoding="utf-8")
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    with fleet(log_dir, [{**shared(new_ring()), "PYTHONPATH": path}], workers=2, wait=False) as started:
        yield started[0]


@pytest.fixture(scope="class")
def workers(slow_workers: FleetServer) -> FleetServer:
    return ready(slow_workers)


class TestUvicornWorkers:
    def test_retries_across_uvicorn_workers_complete_with_the_shared_ring(self, workers: FleetServer) -> None:
        # The fixture returned, so both workers answered, slower to start than uvicorn's default 5 s health
        # check, under which each would be killed and replaced by another equally slow worker.
        assert len(workers.instances) == 2
        pairs: list[tuple[str, str]] = []
        for _ in range(MAX_WORKER_FLOWS):
            outcome = run_flow(workers, workers)
            assert (outcome["name"], outcome["region"]) == ("orders", "eu-west-1")
            pairs.append((outcome["asked_by"], outcome["completed_by"]))
            if len({done for _, done in pairs}) == 2 and any(asked != done for asked, done in pairs):
                break
        # Both workers that started completed retries (none was replaced meanwhile), and at least one
        # retry completed on the worker that did not seal its state.
        assert {done for _, done in pairs} == workers.instances, workers.log_tail()
        assert any(asked != done for asked, done in pairs), workers.log_tail()
        assert f"pid-{workers.process.pid}" not in workers.instances
        assert SDK_REJECTION_LOG not in workers.log_text()
        assert not WORKER_REPLACED.search(workers.log_text()), workers.log_tail()
