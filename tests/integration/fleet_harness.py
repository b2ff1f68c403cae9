"""Start `examples/fleet_server.py` instances as real processes on free loopback ports, and speak to them.

Each process runs in its own process group, logs to a file (never a pipe that could fill up and stall it), and is
always stopped: SIGTERM, then SIGKILL to the whole group so no worker outlives the test. `call_tool`, `round_one` and
`retry` speak as a 2026-07-28 client does: one HTTP exchange a request, the demonstration bearer of a chosen subject.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import anyio
import httpx
from tests.plugins import free_port as free_port  # tests/test_mcp.py imports it from here
from tests.plugins import free_ports

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FLEET_SERVER = EXAMPLES / "fleet_server.py"
LOOPBACK = "127.0.0.1"
# A generous bound on start-up (imports, codec construction, a KMS call); not a performance check.
START_DEADLINE_S = 120.0
STOP_GRACE_S = 10.0
LOG_TAIL_LINES = 40
_INHERITED_PREFIXES = ("STATECODEC_", "FLEET_", "AWS_")


@dataclass(frozen=True)
class FleetServer:
    """One running server: its port, its process, and the file its output goes to."""

    port: int
    process: subprocess.Popen[bytes]
    log: Path
    workers: int = 1
    instances: frozenset[str] = frozenset()
    """The instance ids (worker processes) that answered the health route at start-up."""

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/mcp"

    def health(self) -> str:
        """The instance id of whichever process answers the health route."""
        instance = httpx.get(f"http://{LOOPBACK}:{self.port}/healthz", timeout=5).raise_for_status().json()["instance"]
        assert isinstance(instance, str)
        return instance

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def log_tail(self) -> str:
        """The last lines of the server's output, to quote in a failure message."""
        return "\n".join(self.log_text().splitlines()[-LOG_TAIL_LINES:])


class Served(Protocol):
    """Anything with the URL of an MCP endpoint: a `FleetServer`, or an app served in this process."""

    @property
    def url(self) -> str: ...


def server_env(settings: Mapping[str, str]) -> dict[str, str]:
    """The test process's environment without codec, fleet or AWS settings, plus `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED_PREFIXES)}
    env.update(settings)
    return env


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to all at once (they shut down in parallel), then SIGKILL to each whole group."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        # uvicorn's workers are in the group too: nothing of it may survive the test.
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def ready(server: FleetServer, deadline: float | None = None) -> FleetServer:
    """`server` once as many instances as its workers have answered the health route; fail by `deadline`."""
    deadline = deadline or time.monotonic() + START_DEADLINE_S
    seen: set[str] = set()
    while len(seen) < server.workers:
        exited = server.process.poll() is not None
        if exited or time.monotonic() > deadline:
            why = f"exited at start-up (code {server.process.returncode})" if exited else (
                f"had {len(seen)} of {server.workers} workers answering within {START_DEADLINE_S:.0f} s")
            raise RuntimeError(f"fleet server on port {server.port} {why}; last lines of its log:\n{server.log_tail()}")
        try:
            # A new connection each time, so the kernel can hand it to any worker.
            seen.add(server.health())
        except httpx.HTTPError:
            time.sleep(0.05)
    # Each worker says on stdout that it serves before it answers: a reader starting one knows when to connect.
    announced = server.log_text().count(f"serving http://127.0.0.1:{server.port}/mcp\n")
    assert announced >= server.workers, server.log_tail()
    return replace(server, instances=frozenset(seen))


@contextmanager
def fleet(log_dir: Path, settings: Sequence[Mapping[str, str]], *, workers: int = 1) -> Iterator[list[FleetServer]]:
    """Start one server per entry of `settings` (its environment), all at once; wait until every worker answers."""
    with ExitStack() as stack:
        servers: list[FleetServer] = []
        processes: list[subprocess.Popen[bytes]] = []
        stack.callback(_stop, processes)
        # Chosen together: one at a time, a port could be chosen again before the first server bound it.
        for index, (env, port) in enumerate(zip(settings, free_ports(len(settings)), strict=True)):
            log = log_dir / f"fleet-{index}-{port}.log"
            out = stack.enter_context(log.open("wb"))
            cmd = [sys.executable, str(FLEET_SERVER), "--port", str(port), "--workers", str(workers)]
            cmd += ["--log-level", "info"]
            process = subprocess.Popen(cmd, env=server_env(env), stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
            processes.append(process)
            servers.append(FleetServer(port, process, log, workers))
        deadline = time.monotonic() + START_DEADLINE_S
        started = [ready(server, deadline) for server in servers]
        seen = [instance for server in started for instance in server.instances]
        if len(seen) != len(set(seen)):  # a server that lost its port to another: that one answered for both
            logs = "\n".join(server.log_tail() for server in started)
            raise RuntimeError(f"two fleet servers answered as one process; their logs:\n{logs}")
        yield started


# --- raw 2026-07-28 requests ------------------------------------------------------------------------------------

PROTOCOL_VERSION = "2026-07-28"
# uvicorn closes a connection idle for 5 s (its keep-alive timeout) and httpx keeps one 5 s by default: a request
# sent on a pooled connection just as the server closes it fails with a ReadError. Clients here let go first.
KEEPALIVE_EXPIRY_S = 1.0
TOOL = "provision"
INVALID_PARAMS = -32602
# What a client declares in each request's envelope: it can answer a form elicitation.
_ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
}


def _message(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer in `response`, sent as JSON or as the last event of an SSE stream."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        answers = [json.loads(event) for event in events if event]
        message = next(m for m in reversed(answers) if "result" in m or "error" in m)
    else:
        message = response.json()
    assert isinstance(message, dict), response.text
    return message


async def call_tool(
    client: httpx.AsyncClient, server: Served, tool: str, arguments: Mapping[str, Any], *, subject: str | None = None,
    request_state: str | None = None, input_responses: Mapping[str, Any] | None = None, timeout: float | None = None,
) -> dict[str, Any]:
    """One ``tools/call`` of `tool` as a single 2026-07-28 HTTP exchange (no initialize, no session), as `subject`
    (the demonstration bearer token ``demo-<subject>``), the client's own `timeout` unless given; the JSON-RPC answer,
    result or error."""
    params: dict[str, Any] = {"name": tool, "arguments": dict(arguments), "_meta": _ENVELOPE}
    if request_state is not None:
        params["requestState"] = request_state
    if input_responses is not None:
        params["inputResponses"] = dict(input_responses)
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": PROTOCOL_VERSION}
    headers |= {"Mcp-Method": "tools/call", "Mcp-Name": tool}
    if subject is not None:
        headers["Authorization"] = f"Bearer demo-{subject}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    wait: Any = httpx.USE_CLIENT_DEFAULT if timeout is None else timeout
    return _message(await client.post(server.url, json=body, headers=headers, timeout=wait))


async def round_one(client: httpx.AsyncClient, server: Served, *, subject: str, name: str = "orders") -> str:
    """Round 1 on `server`: the ``requestState`` of its ``InputRequiredResult``."""
    answer = await call_tool(client, server, TOOL, {"name": name}, subject=subject)
    result = answer.get("result") or {}
    assert result.get("resultType") == "input_required", answer
    state = result["requestState"]
    assert isinstance(state, str)
    return state


async def present(
    client: httpx.AsyncClient, server: Served, state: str, *, subject: str, name: str = "orders",
    region: str = "eu-west-1", timeout: float | None = None,
) -> dict[str, Any]:
    """The retry that answers round 1 (the user accepted the form with `region`), on `server`: the JSON-RPC answer."""
    answers = {"region": {"action": "accept", "content": {"region": region}}}
    return await call_tool(client, server, TOOL, {"name": name}, subject=subject, request_state=state,
                           input_responses=answers, timeout=timeout)  # fmt: skip


async def retry(
    client: httpx.AsyncClient, server: Served, state: str, *, subject: str, name: str = "orders",
    region: str = "eu-west-1",
) -> bool:
    """`present`: True when the retry completed, False when it was refused with the SDK's -32602; anything else
    fails the caller."""
    answer = await present(client, server, state, subject=subject, name=name, region=region)
    if "error" in answer:
        assert answer["error"]["code"] == INVALID_PARAMS, answer
        return False
    result = answer["result"]
    assert (result.get("resultType"), result["structuredContent"]["region"]) == ("complete", region), answer
    return True


async def flow(client: httpx.AsyncClient, first: FleetServer, then: FleetServer, subject: str) -> bool:
    """A two-round flow, round 1 on `first` and the retry on `then`: True when the retry completed."""
    return await retry(client, then, await round_one(client, first, subject=subject), subject=subject)


async def until_flows_complete(client: httpx.AsyncClient, servers: Sequence[FleetServer], deadline_s: float) -> None:
    """Poll with fresh flows until one completes from each server to the next (every instance serving), or raise
    after `deadline_s`."""
    deadline = time.monotonic() + deadline_s
    for first, then in zip(servers, [*servers[1:], *servers[:1]], strict=True):
        while not await flow(client, first, then, "warm-up"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no flow from port {first.port} to port {then.port} completed in {deadline_s} s")
            await anyio.sleep(0.1)
