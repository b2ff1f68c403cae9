"""A retry-safe step through its client going: real `examples/fleet_server.py` processes over raw 2026-07-28 HTTP,
sharing one real redis-server, each step taking `STEP_S` seconds.

Each test is a failure a client or an instance meets (its name says which); reasons are read from the servers' logs.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from tests.integration.fleet_harness import KEEPALIVE_EXPIRY_S, FleetServer, fleet, present, round_one
from tests.plugins.redis import RedisServer

from statecodec import format_keys, generate_key

pytestmark = pytest.mark.integration

STEP_S = 4.0  # the tool's completing step, as in the trial of a client timing out mid-step
STEP_TIMEOUT_S = 6  # STATECODEC_STEP_TIMEOUT: past it, twice the store's deadline and 1 s, a lost step is told so
STORE_TIMEOUT_S = 0.25  # the default; the store's deadline is twice it
CLIENT_TIMEOUT_S = 1.0  # the client's read timeout on the first presentation: it goes mid-step
REJECTED = "requestState rejected on tools/call: "


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[FleetServer], Path]]:
    """Three retry-safe instances of one fleet over this module's redis-server, and the file of the steps run."""
    with RedisServer() as redis:
        logs = tmp_path_factory.mktemp("retry-safe-steps")
        (logs / "runs").touch()  # no step run yet: each test reads it, whichever runs first
        settings = {"FLEET_MODE": "shared", "STATECODEC_CODEC": "aesgcm", "FLEET_DEMO_AUTH": "1",
                    "STATECODEC_KEYS": format_keys([generate_key()]), "FLEET_RUNS_FILE": str(logs / "runs"),
                    "STATECODEC_STORE_URL": redis.url, "STATECODEC_STORE_KEY": format_keys([generate_key()]),
                    "STATECODEC_STORE_TIMEOUT": str(STORE_TIMEOUT_S), "STATECODEC_RETRY_SAFE": "on",
                    "STATECODEC_STEP_TIMEOUT": str(STEP_TIMEOUT_S), "FLEET_STEP_SECONDS": str(STEP_S)}  # fmt: skip
        with fleet(logs, [settings] * 3) as started:
            yield started, logs / "runs"


def reasons(servers: list[FleetServer]) -> list[str]:
    """Every refusal the servers logged, by reason."""
    text = "".join(server.log_text() for server in servers)
    return [line.partition(REJECTED)[2] for line in text.splitlines() if REJECTED in line]


def gone_mid_step(first: FleetServer, other: FleetServer, user: str, name: str, within: float,
                  then: Callable[[], None] = lambda: None) -> tuple[list[Any], float]:
    """Round 1 on `first`, its retry there given up mid-step (the client drops the connection: the SDK cancels),
    `then()`, and the same retry on `other` once a second until it is not `in_progress` or `within` s passed since the
    first: (each answer's result, or its error's reason), and the seconds from the first to the last."""

    async def body() -> tuple[list[Any], float]:
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S)) as client:
            state = await round_one(client, first, subject=user, name=name)
            started, answers = time.monotonic(), list[Any]()
            with pytest.raises(httpx.ReadTimeout):
                await present(client, first, state, subject=user, name=name, timeout=CLIENT_TIMEOUT_S)
            then()
            while time.monotonic() < started + within:
                answer = await present(client, other, state, subject=user, name=name)
                answers.append(answer.get("result") or answer["error"].get("data", {}).get("reason"))
                if answers[-1] != "in_progress":
                    break
                await anyio.sleep(1)
            return answers, time.monotonic() - started

    return anyio.run(body)


def test_a_client_timing_out_mid_step_gets_the_answer_on_another_instance_and_the_step_ran_once(
    servers: tuple[list[FleetServer], Path],
) -> None:
    (first, other, _), runs = servers
    name = f"timeout-{uuid.uuid4().hex[:8]}"
    answers, took = gone_mid_step(first, other, f"alice-{uuid.uuid4().hex[:8]}", name, 12)
    assert answers[:-1] == ["in_progress"] * (len(answers) - 1)  # while the step ran, then its kept answer
    assert answers[-1]["structuredContent"]["name"] == name, answers
    assert took < STEP_S + 2.5, took  # within one step's time (and a retry's second)
    assert runs.read_text().splitlines().count(name) == 1  # the step ran once


def test_a_step_whose_instance_died_is_told_lost_within_its_bound_never_in_progress_for_the_tokens_life(
    servers: tuple[list[FleetServer], Path],
) -> None:
    (_, other, dying), runs = servers
    name, bound = f"died-{uuid.uuid4().hex[:8]}", STEP_TIMEOUT_S + 2 * 2 * STORE_TIMEOUT_S + 1
    kill = partial(os.killpg, dying.process.pid, signal.SIGKILL)  # mid-step: nothing will keep its answer
    answers, took = gone_mid_step(dying, other, f"bob-{uuid.uuid4().hex[:8]}", name, bound + 10, then=kill)
    assert answers[:-1] == ["in_progress"] * (len(answers) - 1)
    assert answers[-1] == "step_lost", answers
    assert bound < took < bound + 2.5, took  # told within the bound (and a retry's second), not the token's 600 s
    assert runs.read_text().splitlines().count(name) == 0
    assert reasons([other]).count("step_lost") == 1
