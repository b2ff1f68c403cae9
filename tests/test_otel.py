"""Every ``requestState`` an MCP server answers is counted where the wire is answered, and the documented alerts fire.

Threat: counted at the codec, a replayed, revoked or expired token (refused after the codec accepted it) looks
accepted, and alerts never fire. Read back through the OpenTelemetry SDK's in-memory reader from each server kind.
"""

from __future__ import annotations

import logging
import logging.config
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver import RequestStateSecurity
from mcp.types import ErrorData
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from statecodec import AESGCMCodec, format_keys, generate_key
from statecodec.errors import StoreDown
from statecodec.mcp import from_env
from statecodec.middleware import SingleUseMiddleware, sdk_server
from statecodec.otel import REQUEST_STATE, instrument
from statecodec.single_use import SingleUse
from statecodec.store import MemoryStore, Verdict
from tests.codecs import flip
from tests.mcp_flows import KINDS, STORE_KEY, build_server, guarded, mint, present, round_one, single_use
from tests.mcp_flows import client as client_of
from tests.test_retry_safe import Gone

OBSERVABILITY = Path(__file__).resolve().parents[1] / "docs" / "observability.md"
TTL = 600.0  # single use's too
Counts = Counter[tuple[str, str]]


def refused(counts: Counts, *reasons: str) -> int:
    return sum(n for (outcome, why), n in counts.items() if outcome == "refused" and why in (reasons or (why,)))


# The alerts of docs/observability.md, each as its PromQL there and as the same condition on one window's counts.
FORGED = ("seal", "malformed", "format", "oversized", "alg", "header")
ALERTS: dict[str, tuple[str, Callable[[Counts], bool]]] = {
    "RequestStateReplayed": ('reason="replayed"}[5m])) > 0', lambda c: refused(c, "replayed") > 0),
    "RequestStateRevoked": ('reason="revoked"}[5m])) > 0', lambda c: refused(c, "revoked") > 0),
    "RequestStateForged": (f'reason=~"{"|".join(FORGED)}"}}[5m])) > 0', lambda c: refused(c, *FORGED) > 0),
    "RequestStateExpiring": ('reason="expired"}[5m])) / all > 0.05', lambda c: refused(c, "expired") > c.total() / 20),
    "RequestStateRefusals": ('outcome="refused"}[5m])) / all > 0.2', lambda c: refused(c) > c.total() / 5),
}


def counts(reader: InMemoryMetricReader) -> Counts:
    data, found = reader.get_metrics_data(), Counts()
    metrics = [m for r in (data.resource_metrics if data else ()) for s in r.scope_metrics for m in s.metrics]
    for point in (p for metric in metrics if metric.name == REQUEST_STATE for p in metric.data.data_points):
        assert isinstance(point, NumberDataPoint)
        attributes = dict(point.attributes or {})
        found[(str(attributes["outcome"]), str(attributes.get("reason", "")))] += int(point.value)
    return found


# Ordinary logging set-ups, each applied before the server runs: `disable_existing_loggers` (True by default) disables
# the SDK's and statecodec's loggers, which exist by then; the second silences them by level instead.
TYPICAL = {"version": 1, "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
           "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
           "root": {"level": "INFO", "handlers": ["console"]}}
QUIET = {"version": 1, "disable_existing_loggers": False,
         "loggers": {"mcp": {"level": "ERROR"}, "statecodec": {"level": "CRITICAL"}}}


@pytest.fixture(params=[None, TYPICAL, QUIET], ids=["no-logging-config", "dictConfig", "dictConfig-quiet"])
def logging_config(request: pytest.FixtureRequest) -> Iterator[dict[str, Any] | None]:
    """`dictConfig(param)` applied for the test, every logger as it was afterwards."""
    def loggers() -> list[logging.Logger]:
        return [logging.getLogger(), *(x for x in logging.Logger.manager.loggerDict.values()
                                       if isinstance(x, logging.Logger))]  # fmt: skip

    saved = {x: (x.disabled, x.level, x.propagate, list(x.handlers)) for x in loggers()}
    if request.param is not None:
        logging.config.dictConfig(request.param)
    try:
        yield request.param
    finally:
        for x in loggers():  # one the set-up made is put back as new
            x.disabled, level, x.propagate, x.handlers = saved.get(x, (False, logging.NOTSET, True, []))
            x.setLevel(level)


@pytest.mark.parametrize("kind", KINDS)
def test_the_alerts_fire_and_refusals_are_never_counted_as_accepted(
    kind: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, logging_config: dict[str, Any] | None
) -> None:
    clock = SimpleNamespace(now=time.time())  # the SDK's expiry clock, for one expired token
    monkeypatch.setattr("mcp.server.request_state.time", SimpleNamespace(time=lambda: clock.now))
    reader, security = InMemoryMetricReader(), RequestStateSecurity(codec=AESGCMCodec([generate_key()]), ttl=TTL)
    middleware, never_started = single_use(), single_use()
    server, failing = build_server(security, kind=kind, **guarded(middleware, kind)), build_server(security, kind=kind)
    sdk_server(failing).middleware.append(never_started)  # after the boundary, no lifespan: it fails loudly, an error
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    metrics, _ = instrument(server, meter), instrument(failing, meter)
    assert sdk_server(server).middleware[0] is metrics  # outside the SDK's boundary: it sees every answer

    async def body() -> list[bool]:
        async with client_of(server) as client:

            async def accepted(token: str) -> bool:
                return not isinstance(await present(client, token), ErrorData)

            token, tampered, stale, unrevoked = [await mint(client) for _ in range(4)]
            outcomes = [await accepted(token), await accepted(token), await accepted(flip(tampered))]
            clock.now += TTL + 1
            outcomes.append(await accepted(stale))
            clock.now -= TTL + 1
            await middleware.guard.revoke(everything=True)
            outcomes.append(await accepted(unrevoked))
        async with client_of(failing) as client:
            assert (await present(client, await round_one(build_server(security)))).message == "Internal error"
        return outcomes

    assert anyio.run(body) == [True, False, False, False, False]
    if logging_config is None:  # else the set-up silenced it: the metric below is the same
        assert "was never started: pass lifespan=single_use.lifespan" in caplog.text  # loudly, naming the fix
        # the SDK's lines, noted on their way, still name the SDK's function as where they were logged
        assert {r.funcName for r in caplog.records if r.name == "mcp.server.request_state"} == {"_reject"}
    seen = counts(reader)  # the five mints carried no state: not counted
    refusals = [("refused", r) for r in ("replayed", "seal", "expired", "revoked")]
    assert seen == Counter([("accepted", ""), ("error", ""), *refusals])  # an error is never an acceptance
    documented = OBSERVABILITY.read_text(encoding="utf-8")
    for name, (promql, fires) in ALERTS.items():
        assert re.search(rf"`{name}`.*{re.escape(promql)}", documented), f"{name} is not documented as tested"
        assert fires(seen), name


@pytest.mark.parametrize("kind", KINDS)
def test_the_metrics_the_composition_root_builds_count_the_sdk_boundarys_refusals_too(kind: str) -> None:
    reader = InMemoryMetricReader()
    env = {"STATECODEC_KEYS": format_keys([generate_key()]), "STATECODEC_STORE_URL": "memory",
           "STATECODEC_STORE_KEY": format_keys([generate_key()])}
    protection = from_env(env, metrics=True, meter=MeterProvider(metric_readers=[reader]).get_meter("test"))
    middleware: dict[str, Any] = {} if kind == "FastMCP" else {"middleware": protection.middleware}  # FastMCP: none
    server = build_server(protection.security, kind=kind, lifespan=protection.lifespan, **middleware)

    async def body() -> None:
        async with client_of(server) as client_:
            token, tampered = await mint(client_), await mint(client_)
            for presented in (token, token, flip(tampered)):
                await present(client_, presented)

    anyio.run(body)
    assert counts(reader) == Counter([("accepted", ""), ("refused", "replayed"), ("refused", "seal")])


@pytest.mark.parametrize("kind", KINDS)
def test_a_retry_answered_with_its_kept_answer_is_counted_as_such_and_in_progress_as_a_refusal(
    kind: str, logging_config: dict[str, Any] | None,
) -> None:
    reader, security = InMemoryMetricReader(), RequestStateSecurity(codec=AESGCMCodec([generate_key()]), ttl=TTL)
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    servers = []
    for store in (MemoryStore(), Gone()):  # Gone keeps no answer: the same retry is in progress until it expires
        middleware = single_use(store, retry_safe=True)
        servers.append(server := build_server(security, kind=kind, **guarded(middleware, kind)))
        instrument(server, meter)

    async def body() -> None:
        for server in servers:
            async with client_of(server) as client:
                token = await mint(client)
                for _ in range(2):
                    await present(client, token)

    anyio.run(body)
    assert counts(reader) == Counter({("accepted", ""): 2, ("answered_again", ""): 1, ("refused", "in_progress"): 1})


class Down(MemoryStore):
    """The in-process store behind a cut connection: each claim `StoreDown` while `down`."""

    down = False

    async def claim(self, **kw: Any) -> Verdict:
        if self.down:
            raise StoreDown("the store at memory is unreachable: connection refused")
        return await super().claim(**kw)


def test_a_token_accepted_unchecked_is_counted_as_such_never_as_accepted() -> None:
    reader, security = InMemoryMetricReader(), RequestStateSecurity(codec=AESGCMCodec([generate_key()]), ttl=TTL)
    store = Down()
    middleware = SingleUseMiddleware(SingleUse(store, key=STORE_KEY, ttl=TTL, on_store_error="accept"))
    server = build_server(security, middleware=[middleware], lifespan=middleware.lifespan)
    instrument(server, MeterProvider(metric_readers=[reader]).get_meter("test"))

    async def body() -> None:
        async with client_of(server) as client:
            token = await mint(client)
            store.down = True
            for _ in range(2):
                await present(client, token)

    anyio.run(body)
    assert counts(reader) == Counter([("accepted_unchecked", ""), ("refused", "replayed")])
