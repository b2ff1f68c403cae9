"""Every ``requestState`` an MCP server answers is counted where the wire is answered, and the documented alerts fire.

Threat: counted at the codec, a replayed, revoked or expired token (refused after the codec accepted it) looks
accepted, and alerts on refusals never fire. Read back through the OpenTelemetry SDK's in-memory reader (what an
exporter would send) from a real `MCPServer` with the SDK's boundary and single use.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import RequestStateSecurity
from mcp.types import ErrorData
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from statecodec import AESGCMCodec, generate_key
from statecodec.mcp import SingleUseMiddleware
from statecodec.otel import REQUEST_STATE, instrument
from statecodec.single_use import SingleUse
from statecodec.store import MemoryStore
from tests.mcp_flows import build_server, mint, present

OBSERVABILITY = Path(__file__).resolve().parents[1] / "docs" / "observability.md"
TTL = 600.0
Counts = Counter[tuple[str, str]]


def refused(counts: Counts, *reasons: str) -> int:
    return sum(n for (outcome, reason), n in counts.items() if outcome == "refused" and reason in reasons)


def answered(counts: Counts) -> int:
    return sum(counts.values())


# The alerts of docs/observability.md, each as its PromQL there and as the same condition on one window's counts.
ALERTS: dict[str, tuple[str, Callable[[Counts], bool]]] = {
    "RequestStateReplayed": ('reason="replayed"}[5m])) > 0', lambda c: refused(c, "replayed") > 0),
    "RequestStateRevoked": ('reason="revoked"}[5m])) > 0', lambda c: refused(c, "revoked") > 0),
    "RequestStateForged": (
        'reason=~"seal|malformed|format|oversized|alg|header"}[5m])) > 0',
        lambda c: refused(c, "seal", "malformed", "format", "oversized", "alg", "header") > 0,
    ),
    "RequestStateExpiring": (
        'reason="expired"}[5m])) / all > 0.05',
        lambda c: refused(c, "expired") > 0.05 * answered(c),
    ),
    "RequestStateRefusals": (
        'outcome="refused"}[5m])) / all > 0.2',
        lambda c: sum(n for (o, _), n in c.items() if o == "refused") > 0.2 * answered(c),
    ),
}


def counts(reader: InMemoryMetricReader) -> Counts:
    data = reader.get_metrics_data()
    found: Counts = Counter()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in (m for m in scope.metrics if m.name == REQUEST_STATE):
                for point in metric.data.data_points:
                    assert isinstance(point, NumberDataPoint)
                    attributes = dict(point.attributes or {})
                    found[(str(attributes["outcome"]), str(attributes.get("reason", "")))] += int(point.value)
    return found


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def time(self) -> float:
        return self.now


def test_the_alerts_fire_and_refusals_are_never_counted_as_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr("mcp.server.request_state.time", clock)  # the SDK's expiry clock, for one expired token
    reader = InMemoryMetricReader()
    middleware = SingleUseMiddleware(SingleUse(MemoryStore(), key=generate_key(), ttl=TTL))
    server = build_server(
        RequestStateSecurity(codec=AESGCMCodec([generate_key()]), ttl=TTL),
        middleware=[middleware],
        lifespan=middleware.lifespan,
    )
    metrics = instrument(server, MeterProvider(metric_readers=[reader]).get_meter("test"))
    assert server.middleware[0] is metrics  # outside the SDK's boundary: it sees every answer

    async def body() -> list[bool]:
        async with Client(server) as client:

            async def accepted(token: str) -> bool:
                return not isinstance(await present(client, token), ErrorData)

            token, tampered, stale, unrevoked = [await mint(client) for _ in range(4)]
            outcomes = [await accepted(token), await accepted(token), await accepted(tampered[:-2] + "AA")]
            clock.now += TTL + 1
            outcomes.append(await accepted(stale))
            clock.now -= TTL + 1
            await middleware.guard.revoke(everything=True)
            return [*outcomes, await accepted(unrevoked)]

    assert anyio.run(body) == [True, False, False, False, False]
    seen = counts(reader)
    assert seen == Counter(
        {
            ("accepted", ""): 1,
            ("refused", "replayed"): 1,
            ("refused", "seal"): 1,
            ("refused", "expired"): 1,
            ("refused", "revoked"): 1,
        }
    )
    documented = OBSERVABILITY.read_text(encoding="utf-8")
    for name, (promql, fires) in ALERTS.items():
        assert re.search(rf"`{name}`.*{re.escape(promql)}", documented), f"{name} is not documented as tested"
        assert fires(seen), name


def test_requests_without_a_state_are_not_counted_and_a_plain_sdk_server_counts_its_refusals() -> None:
    reader = InMemoryMetricReader()
    server = build_server(RequestStateSecurity(codec=AESGCMCodec([generate_key()])))
    instrument(server, MeterProvider(metric_readers=[reader]).get_meter("test"))

    async def body() -> Any:
        async with Client(server) as client:
            await client.session.call_tool("provision", {"name": "orders"}, allow_input_required=True)
            return await present(client, "v1.AAAA")

    assert isinstance(anyio.run(body), ErrorData)
    assert counts(reader) == Counter({("refused", "malformed"): 1})


def test_a_state_the_server_failed_on_is_an_error_never_an_acceptance() -> None:
    reader, codec = InMemoryMetricReader(), AESGCMCodec([generate_key()])
    started = SingleUseMiddleware(SingleUse(MemoryStore(), key=generate_key(), ttl=TTL))
    minting = build_server(RequestStateSecurity(codec=codec), middleware=[started], lifespan=started.lifespan)
    never_started = SingleUseMiddleware(SingleUse(MemoryStore(), key=generate_key(), ttl=TTL))
    server = build_server(RequestStateSecurity(codec=codec), middleware=[never_started])  # no lifespan: fails loudly
    instrument(server, MeterProvider(metric_readers=[reader]).get_meter("test"))

    async def body() -> Any:
        async with Client(minting) as client:
            token = await mint(client)
        async with Client(server) as client:
            return await present(client, token)

    assert isinstance(anyio.run(body), ErrorData)
    assert counts(reader) == Counter({("error", ""): 1})
