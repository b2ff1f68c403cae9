"""A replay of a consumed token is a security event: counted, logged with the minter's keyed digest, and with
``STATECODEC_ON_REPLAY=revoke`` the minter's other flows end on every instance. A benign duplicate never is one.

Threat: a consumed token presented again is stolen (or a client breaks the spec's MUST NOT); left a refusal alone, the
thief keeps every other flow of the owner it copied. And the policy must not be a lever on anyone else's flows.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from examples import fleet_server
from mcp import Client
from mcp.server.request_state import RequestStateSecurity
from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from statecodec import AESGCMCodec, ConfigurationError, format_keys, generate_key
from statecodec.errors import StoreUnreachable
from statecodec.mcp import SingleUseMiddleware, single_use_from_env
from statecodec.otel import REPLAY, instrument
from statecodec.store import MemoryStore
from tests.integration.fleet_harness import present, round_one
from tests.mcp_flows import HTTP, KEY, STORE_KEY, build_server, mint, rejections, single_use
from tests.mcp_flows import present as present_in_process
from tests.test_otel import OBSERVABILITY, counts
from tests.test_retry_safe import FROZEN

SECURITY_EVENT = "security event: a consumed requestState presented again"


@contextlib.asynccontextmanager
async def served(middleware: SingleUseMiddleware, meter: Meter, **policy: Any) -> AsyncIterator[httpx.AsyncClient]:
    """examples/fleet_server.py's server (the demonstration bearer ``demo-<subject>``) with `middleware`, counted by
    `meter`, served in this process: a client of it at `HTTP`."""
    security = RequestStateSecurity(codec=AESGCMCodec([KEY]), **policy)
    server = fleet_server.build_server(security, middleware=[middleware], lifespan=middleware.lifespan,
                                       demo_auth=True)  # fmt: skip
    instrument(server, meter)
    app = fleet_server.app_for(server, "127.0.0.1")
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url=HTTP.url) as client:
        yield client


def replays(reader: InMemoryMetricReader) -> Counter[str]:
    """`statecodec.replay` by action."""
    data, found = reader.get_metrics_data(), Counter[str]()
    metrics = [m for r in (data.resource_metrics if data else ()) for s in r.scope_metrics for m in s.metrics]
    for point in (p for metric in metrics if metric.name == REPLAY for p in metric.data.data_points):
        assert isinstance(point, NumberDataPoint)
        found[str((point.attributes or {})["action"])] += int(point.value)
    return found


def events(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(SECURITY_EVENT)]


def completed(answer: dict[str, Any]) -> bool:
    return bool(answer.get("result", {}).get("resultType") == "complete")


def test_a_replay_on_one_instance_revokes_its_minters_other_flows_on_another_and_an_identical_retry_is_no_replay(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    env = {"STATECODEC_STORE_URL": redis_url, "STATECODEC_STORE_KEY": format_keys([generate_key()]),
           "STATECODEC_STORE_TIMEOUT": "5", "STATECODEC_RETRY_SAFE": "on", "STATECODEC_ON_REPLAY": "revoke"}
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    fleet = [single_use_from_env(env | {"STATECODEC_INSTANCE": name}) for name in ("a", "b", "c")]

    async def body() -> list[Any]:
        async with served(fleet[0], meter) as a, served(fleet[1], meter) as b, served(fleet[2], meter) as c:
            stolen = await round_one(a, HTTP, subject="alice")
            other, bobs = await round_one(c, HTTP, subject="alice"), await round_one(c, HTTP, subject="bob")
            first = await present(a, HTTP, stolen, subject="alice", region="eu")
            again = await present(b, HTTP, stolen, subject="alice", region="eu")  # the same retry: its lost answer
            counted_before = replays(reader).total()
            replayed = await present(b, HTTP, stolen, subject="alice", region="us")  # a consumed token, reused
            return [first, again, counted_before, replayed, await present(c, HTTP, other, subject="alice"),
                    await present(c, HTTP, bobs, subject="bob")]

    first, again, counted_before, replayed, others, bobs = anyio.run(body)
    assert completed(first)
    assert again == first  # answered again by the retry-safe mode, and not a replay:
    assert counted_before == 0
    assert replayed["error"] == others["error"] == FROZEN.model_dump(exclude_none=True)
    assert completed(bobs)  # another principal's flow is untouched
    assert rejections(caplog.records) == ["replayed", "revoked"]
    assert replays(reader) == Counter({"revoked": 1})
    documented = OBSERVABILITY.read_text(encoding="utf-8")  # its alert, as documented, fires
    assert "`RequestStateReused`: `sum(increase(statecodec_replay_total[5m])) > 0`" in documented
    assert counts(reader)[("answered_again", "")] == 1
    [event] = events(caplog)
    assert " on tools/call at instance b " in event
    assert event.endswith("; revoke: revoked")
    principal = event.split("minting principal ")[1].split(";")[0]
    assert len(bytes.fromhex(principal)) == 16  # the keyed digest `statecodec store check` names: never the subject
    assert "alice" not in caplog.text
    assert first["result"]["structuredContent"]["region"] == "eu"


class RevokeFails(MemoryStore):
    """The store went away between the claim that found the replay and the revocation."""

    async def revoke(self, scope: bytes, *, fingerprint: bytes, skew_ms: int) -> int:
        raise StoreUnreachable("the store at memory did not answer within 0.25 s")


def test_the_policy_is_no_lever_on_another_principal_and_what_it_could_not_do_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    open_, failing = single_use(on_replay="revoke", instance="x"), single_use(RevokeFails(), on_replay="revoke")
    capped = single_use(retry_safe=True, max_result=1, on_replay="revoke")  # no answer kept: its retry is refused

    async def body() -> list[bool]:
        async with served(open_, meter, bind_principal=None) as client:  # the SDK lets anyone present a token
            token, other = [await round_one(client, HTTP, subject="alice") for _ in range(2)]
            done = [completed(await present(client, HTTP, token, subject="alice"))]
            done.append(completed(await present(client, HTTP, token, subject="mallory")))  # not alice's minter
            done.append(completed(await present(client, HTTP, other, subject="alice")))  # so alice's flow lives on
        async with served(failing, meter) as client:
            token = await round_one(client, HTTP, subject="carol")
            done += [completed(await present(client, HTTP, token, subject="carol")) for _ in range(2)]
        server = build_server(RequestStateSecurity(codec=AESGCMCodec([KEY])), middleware=[capped],
                              lifespan=capped.lifespan)  # fmt: skip
        instrument(server, meter)
        async with Client(server) as client:  # unauthenticated: the token names no principal
            token = await mint(client)
            done += [not hasattr(await present_in_process(client, token), "code") for _ in range(2)]
        return done

    assert anyio.run(body) == [True, False, True, True, False, True, False]
    assert rejections(caplog.records) == ["replayed", "replayed", "replayed"]
    unidentified, failed = events(caplog)  # the capped retry is the same retry: refused, and no security event
    assert unidentified.endswith("minting principal not identified; revoke: unidentified")
    assert " at instance x " in unidentified
    assert "revoke: failed (the store at memory did not answer within 0.25 s)" in failed
    assert replays(reader) == Counter({"unidentified": 1, "failed": 1})


def test_the_policy_is_a_setting_of_single_use_checked_at_start() -> None:
    env = {"STATECODEC_STORE_URL": "memory", "STATECODEC_STORE_KEY": format_keys([STORE_KEY])}
    assert single_use_from_env(env).on_replay == "log"  # off by default
    assert single_use_from_env(env | {"STATECODEC_ON_REPLAY": "revoke"}).on_replay == "revoke"
    for bad in ("on", "Revoke", "true"):
        with pytest.raises(ConfigurationError, match=r"^STATECODEC_ON_REPLAY must be log \(the default\) or revoke"):
            single_use_from_env(env | {"STATECODEC_ON_REPLAY": bad})
    with pytest.raises(ConfigurationError, match="STATECODEC_ON_REPLAY"):
        single_use(on_replay="delete")
