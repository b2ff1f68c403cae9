"""A retry that lands on another instance: completes with a shared ring, refused under the SDK default.

Real processes of `examples/fleet_server.py` on loopback ports, driven by
`examples/fleet_client.py` (round 1 to one URL, the retry to another), over
streamable HTTP. The shared ring comes from the environment: AES-GCM keys in
``STATECODEC_KEYS``, or data keys wrapped by AWS KMS (moto over HTTP) that
each instance unwraps at start-up. The refusal is the SDK's frozen -32602
answer; the reason goes to the refusing server's log only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from examples.fleet_client import provision
from mcp import MCPError
from tests.integration.fleet_harness import FleetServer, fleet
from tests.plugins.aws import REGION, MotoServer

from statecodec import format_keys, generate_key
from statecodec.envelope import format_wrapped_keys, new_wrapped_key
from statecodec.providers.aws_kms import AwsKmsWrapper

pytestmark = pytest.mark.integration

INVALID_PARAMS = -32602
REJECTION_MESSAGE = "Invalid or expired requestState"
SDK_REJECTION_LOG = "requestState rejected on tools/call"


def run_flow(first: FleetServer, retry: FleetServer, *, region: str = "eu-west-1") -> dict[str, Any]:
    async def flow() -> dict[str, Any]:
        return await provision(first.url, retry_url=retry.url, name="orders", region=region)

    return anyio.run(flow)


def refusal(first: FleetServer, retry: FleetServer) -> MCPError:
    with pytest.raises(MCPError) as caught:
        run_flow(first, retry)
    return caught.value


def shared(keys: str) -> dict[str, str]:
    return {"FLEET_MODE": "shared", "STATECODEC_CODEC": "aesgcm", "STATECODEC_KEYS": keys}


SDK_DEFAULT = {"FLEET_MODE": "sdk-default"}


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fleet-logs")


@pytest.fixture(scope="module")
def servers(log_dir: Path) -> Iterator[dict[str, FleetServer]]:
    """Two instances sharing a ring, one on another ring, two on the SDK's per-process default."""
    ring = format_keys([generate_key()])
    other_ring = format_keys([generate_key()])
    names = ("a", "b", "foreign", "default-a", "default-b")
    settings = [shared(ring), shared(ring), shared(other_ring), SDK_DEFAULT, SDK_DEFAULT]
    with fleet(log_dir, settings) as started:
        yield dict(zip(names, started, strict=True))


def test_retry_on_another_instance_completes_with_the_shared_ring(servers: dict[str, FleetServer]) -> None:
    a, b = servers["a"], servers["b"]
    there = run_flow(a, b, region="eu-west-1")
    back = run_flow(b, a, region="us-east-2")
    assert there == {
        "name": "orders",
        "region": "eu-west-1",
        "asked_by": a.health(),
        "completed_by": b.health(),
    }
    assert (back["asked_by"], back["completed_by"], back["region"]) == (b.health(), a.health(), "us-east-2")
    assert a.health() != b.health()
    assert SDK_REJECTION_LOG not in a.log_text() + b.log_text()


def test_retry_on_another_instance_is_refused_under_the_sdk_default(servers: dict[str, FleetServer]) -> None:
    a, b = servers["default-a"], servers["default-b"]
    # Each instance on its own completes: the refusal below is the hop, not a broken server.
    assert run_flow(a, a)["completed_by"] == a.health()
    assert run_flow(b, b)["completed_by"] == b.health()

    error = refusal(a, b)

    assert (error.error.code, error.error.message) == (INVALID_PARAMS, REJECTION_MESSAGE)
    # The SDK's own codec names the cause in the log only: b never had a's process-local key.
    assert f"{SDK_REJECTION_LOG}: unknown key" in b.log_text()
    assert "unknown key" not in str(error.error.data)


def test_instance_on_another_ring_refuses_with_our_reason_code(servers: dict[str, FleetServer]) -> None:
    a, foreign = servers["a"], servers["foreign"]

    error = refusal(a, foreign)

    assert (error.error.code, error.error.message) == (INVALID_PARAMS, REJECTION_MESSAGE)
    assert f"{SDK_REJECTION_LOG}: unknown_key" in foreign.log_text()


@pytest.fixture(scope="module")
def workers(log_dir: Path) -> Iterator[FleetServer]:
    """One uvicorn server with two worker processes behind one port, sharing a ring."""
    with fleet(log_dir, [shared(format_keys([generate_key()]))], args=["--workers", "2"]) as started:
        yield started[0]


# Bounded by count: the kernel spreads connections over the workers, not in a fixed order.
MAX_WORKER_FLOWS = 60


def test_retries_across_uvicorn_workers_complete_with_the_shared_ring(workers: FleetServer) -> None:
    pairs: list[tuple[str, str]] = []
    for _ in range(MAX_WORKER_FLOWS):
        outcome = run_flow(workers, workers)
        assert (outcome["name"], outcome["region"]) == ("orders", "eu-west-1")
        pairs.append((outcome["asked_by"], outcome["completed_by"]))
        completers = {done for _, done in pairs}
        crossed = [pair for pair in pairs if pair[0] != pair[1]]
        if len(completers) == 2 and crossed:
            break
    # Both workers completed retries, and at least one retry completed on the worker that did not mint it.
    assert len({done for _, done in pairs}) == 2
    assert any(asked != done for asked, done in pairs)
    assert workers.process.pid not in {int(done.removeprefix("pid-")) for _, done in pairs}
    assert SDK_REJECTION_LOG not in workers.log_text()


# --- the same fleet on an AWS KMS envelope ring -------------------------------------------------


def wrapped_ring(moto: MotoServer, key_arn: str, count: int) -> str:
    client = moto.client()
    try:
        wrapper = AwsKmsWrapper(key_arn, client=client)
        return format_wrapped_keys([new_wrapped_key(wrapper) for _ in range(count)])
    finally:
        client.close()


def aws_settings(moto: MotoServer, key_arn: str, wrapped: str) -> dict[str, str]:
    return {
        "FLEET_MODE": "shared",
        "STATECODEC_CODEC": "aws-kms",
        "STATECODEC_AWS_KMS_KEY_ID": key_arn,
        "STATECODEC_AWS_REGION": REGION,
        "STATECODEC_AWS_KMS_ENDPOINT": moto.endpoint,
        "STATECODEC_WRAPPED_KEYS": wrapped,
        # moto accepts any credentials; never let a developer's real profile be picked up.
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    }


@pytest.fixture(scope="module")
def kms_fleet(log_dir: Path, moto_server: MotoServer) -> Iterator[dict[str, FleetServer]]:
    """Two instances on one wrapped ring, one on another ring wrapped by the same KMS key."""
    key_arn, _ = moto_server.create_key()
    ring = wrapped_ring(moto_server, key_arn, 2)
    other = wrapped_ring(moto_server, key_arn, 1)
    settings = [aws_settings(moto_server, key_arn, w) for w in (ring, ring, other)]
    with fleet(log_dir, settings) as started:
        yield dict(zip(("a", "b", "foreign"), started, strict=True))


def test_retry_on_another_instance_completes_with_the_kms_envelope_ring(kms_fleet: dict[str, FleetServer]) -> None:
    a, b = kms_fleet["a"], kms_fleet["b"]
    there = run_flow(a, b)
    back = run_flow(b, a)
    assert (there["asked_by"], there["completed_by"]) == (a.health(), b.health())
    assert (back["asked_by"], back["completed_by"]) == (b.health(), a.health())
    assert SDK_REJECTION_LOG not in a.log_text() + b.log_text()


def test_instance_on_another_wrapped_ring_refuses(kms_fleet: dict[str, FleetServer]) -> None:
    a, foreign = kms_fleet["a"], kms_fleet["foreign"]
    assert run_flow(foreign, foreign)["completed_by"] == foreign.health()

    error = refusal(a, foreign)

    assert (error.error.code, error.error.message) == (INVALID_PARAMS, REJECTION_MESSAGE)
    assert f"{SDK_REJECTION_LOG}: unknown_key" in foreign.log_text()
