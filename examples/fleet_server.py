"""A multi-instance MCP server whose ``requestState`` survives the hop between instances.

Threat addressed: behind a load balancer, the retry of a multi-round tool can
land on an instance other than the one that minted its ``requestState``. With
the SDK's default, each process seals under a key generated at start-up, so
that retry is refused with -32602 "Invalid or expired requestState". Every
instance here reads the same key ring from the environment
(`statecodec.mcp.security_from_env`), so any instance verifies what any other
minted, and nothing else.

The ``provision`` tool takes two rounds: round 1 asks for a region by
returning an ``InputRequiredResult`` whose ``request_state`` names the
instance that asked; the retry answers it. The result names both instances,
so a client can see that the flow crossed between them.

Run (the ring is shared through ``STATECODEC_KEYS``; any codec kind of
`statecodec.config` works, for example ``STATECODEC_CODEC=aws-kms``)::

    export STATECODEC_KEYS="$(statecodec keygen)"
    python examples/fleet_server.py --port 8001 &
    python examples/fleet_server.py --port 8002 &
    python examples/fleet_client.py http://127.0.0.1:8001/mcp --retry-url http://127.0.0.1:8002/mcp --wait 30

Several workers behind one port need an import string, which `create_app`
serves as a factory::

    python examples/fleet_server.py --port 8001 --workers 2
    FLEET_PORT=8001 uvicorn --factory --app-dir examples fleet_server:create_app --port 8001 --workers 2

Single use and revocation (docs/single-use.md): when ``STATECODEC_STORE_URL``
names the fleet's shared store, each ``requestState`` is accepted at most once
on any instance, and ``statecodec revoke --principal P`` ends P's flows in
flight. Every instance needs the same two settings; `statecodec.mcp.from_env`
builds every part, and its lifespan starts and stops what runs beside the server::

    export STATECODEC_STORE_URL=redis://127.0.0.1:6379/0 STATECODEC_STORE_KEY="$(statecodec keygen)"
    protection = from_env()
    MCPServer("fleet", request_state_security=protection.security, middleware=protection.middleware,
              lifespan=protection.lifespan)

A revocation names a principal: an authenticated subject at its issuer.
``--demo-auth`` (``FLEET_DEMO_AUTH=1``) turns on a demonstration bearer scheme
in which the token ``demo-<subject>`` authenticates as ``<subject>`` at the
demonstration issuer, and ``demo-<subject>@<issuer>`` at ``<issuer>``; anyone
can forge it, so it exists only to let a client on this machine act as
different users.

``--server fastmcp`` (``FLEET_SERVER=fastmcp``, the ``fastmcp`` extra) serves the same tools from a `FastMCP`
server, protected the FastMCP way: its lifespan appends single use after the SDK's boundary itself::

    FastMCP("fleet", request_state_security=protection.security, lifespan=protection.lifespan)

``FLEET_METRICS=1`` counts each ``requestState`` answered (statecodec.otel, in memory) and serves the counts as JSON
at ``/metrics``; a real server exports them instead (docs/observability.md).

``--mode sdk-default`` (or ``FLEET_MODE=sdk-default``) leaves the SDK's
per-process key in place, to show the failure the shared ring prevents.
Settings come from the command line or the environment (``FLEET_HOST``,
``FLEET_PORT``, ``FLEET_WORKERS``, ``FLEET_MODE``, ``FLEET_SERVER``, ``FLEET_DEMO_AUTH``,
``FLEET_LOG_LEVEL``: at ``info``, uvicorn logs each worker's start, death and
replacement; ``FLEET_RUNS_FILE``: a file each completed ``provision`` appends its
name to, to count the steps that ran; ``FLEET_STEP_SECONDS``: how long the completing step of ``provision`` takes,
0 by default); the server binds a loopback address only.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from pydantic import AnyHttpUrl, BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from uvicorn.config import STARTUP_FAILURE

from statecodec import StatecodecError
from statecodec.mcp import Protection, from_env

SERVER_NAME = "fleet"
TOOL = "provision"
MODES = ("shared", "sdk-default")
SERVERS = ("mcpserver", "fastmcp")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8001
MCP_PATH = "/mcp"
HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"
LOG_LEVELS = ("debug", "info", "warning", "error")
DEMO_TOKEN_PREFIX = "demo-"  # noqa: S105 (a prefix, not a secret)
# The demonstration issuer: AuthSettings needs one; no token is ever fetched from it.
DEMO_ISSUER = AnyHttpUrl("http://127.0.0.1/demo-issuer")
# uvicorn spawns each worker, and a spawned worker re-runs this file (importing the MCP SDK, 1.5 to 3 s
# on an idle machine) before it can answer the supervisor's first health check. uvicorn's default of
# 5 s kills a worker that is merely slow to import on a loaded machine; a hung worker is still replaced.
WORKER_HEALTHCHECK_S = 60

ASK_REGION = ElicitRequest(
    params=ElicitRequestFormParams(
        message="Which region should the database live in?",
        requested_schema={
            "type": "object",
            "properties": {"region": {"type": "string"}},
            "required": ["region"],
        },
    )
)


class Provisioned(BaseModel):
    """The tool's result: what was provisioned, and which instances took part."""

    name: str
    region: str
    asked_by: str
    completed_by: str


def instance_id() -> str:
    """This process's identity in results and health checks (a worker is a process)."""
    return f"pid-{os.getpid()}"


class MetricsReader:
    """``FLEET_METRICS=1``: statecodec's counter, read back in this process by the OpenTelemetry SDK."""

    def __init__(self) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        self.reader = InMemoryMetricReader()
        self.meter = MeterProvider(metric_readers=[self.reader]).get_meter("fleet")

    def counts(self) -> list[dict[str, Any]]:
        """Each data point of ``statecodec.request_state``: its attributes and its value."""
        data = self.reader.get_metrics_data()
        metrics = [m for r in (data.resource_metrics if data else ()) for s in r.scope_metrics for m in s.metrics]
        return [{**dict(point.attributes or {}), "value": getattr(point, "value", 0)}
                for metric in metrics if metric.name == "statecodec.request_state" for point in metric.data.data_points]


METRICS = MetricsReader() if os.environ.get("FLEET_METRICS") == "1" else None


def protection_for(mode: str) -> Protection | None:
    """The request-state policy for `mode` (None leaves the SDK's per-process default), with single use and
    revocation when the environment names a store and its key, and live rotation when it sets a reload interval.

    Raises ConfigurationError (what to set, e.g. ``STATECODEC_STORE_KEY``) before the server starts."""
    if mode == "shared":
        return from_env(metrics=METRICS is not None, meter=METRICS and METRICS.meter)
    if mode == "sdk-default":
        return None
    raise SystemExit(f"unknown mode {mode!r}; choose one of: {', '.join(MODES)}")


class DemoTokenVerifier:
    """Demonstration only: the bearer token ``demo-<subject>[@<issuer>]`` authenticates as ``<subject>`` at
    ``<issuer>`` (default: the demonstration issuer), so that a client on this machine can act as different users.
    Anyone can forge such a token; a real server verifies the tokens its authorization server issued (the SDK's
    `TokenVerifier`)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        subject, _, issuer = token.removeprefix(DEMO_TOKEN_PREFIX).partition("@")
        if not token.startswith(DEMO_TOKEN_PREFIX) or not subject:
            return None
        claims = {"iss": issuer or str(DEMO_ISSUER)}
        return AccessToken(token=token, client_id="fleet-demo", scopes=[], subject=subject, claims=claims)


def demo_auth_enabled(value: str) -> bool:
    """``FLEET_DEMO_AUTH``: 1 turns the demonstration bearer scheme on, 0 or empty leaves the server open."""
    if value not in ("", "0", "1"):
        raise SystemExit(f"FLEET_DEMO_AUTH must be 1 or 0, not {value!r}")
    return value == "1"


def build_server(
    security: RequestStateSecurity | None,
    *,
    middleware: Sequence[Any] = (),
    lifespan: Any = None,
    demo_auth: bool = False,
) -> MCPServer[Any]:
    """The MCP server with its two-round ``provision`` tool and a health route; `middleware` (single use) runs inside
    the SDK's request-state boundary, so a token is consumed only once the boundary verified it for this user and
    request; `lifespan` starts the store and the key-file watcher, and stops them."""
    auth: dict[str, Any] = {}
    if demo_auth:
        settings = AuthSettings(issuer_url=DEMO_ISSUER, resource_server_url=None)
        auth = {"token_verifier": DemoTokenVerifier(), "auth": settings}
    # One log line per record: the SDK installs rich's handler when rich is importable, which wraps long lines at
    # the terminal's width and so splits the refusal lines an operator greps for. The SDK keeps a handler set first.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s:%(name)s:%(message)s")
    server: MCPServer[Any] = MCPServer(
        SERVER_NAME,
        request_state_security=security,
        log_level="WARNING",
        middleware=list(middleware),
        lifespan=lifespan,
        **auth,
    )

    @server.tool(name=TOOL)
    async def provision(name: str, ctx: Context[Any, Any]) -> Provisioned | InputRequiredResult:
        """Provision a database; asks which region to put it in."""
        if ctx.input_responses and (seconds := float(os.environ.get("FLEET_STEP_SECONDS") or 0)):
            await anyio.sleep(seconds)  # a slow step: its client may time out or go meanwhile
        return provisioned(name, ctx.input_responses, ctx.request_state)

    @server.tool(name="instance")
    def instance() -> str:
        """Which instance answers: a sync tool, run in a worker thread, that single use never waits for."""
        return instance_id()

    add_routes(server)
    return server


def provisioned(name: str, responses: Any, request_state: str | None) -> Provisioned | InputRequiredResult:
    """The ``provision`` tool on either server: round 1 asks for the region, the retry that answers it completes."""
    answer = (responses or {}).get("region")
    if not isinstance(answer, ElicitResult) or answer.action != "accept" or not answer.content:
        # Plain text here: the SDK seals it on the way out and verifies it on the way back.
        state = json.dumps({"asked_by": instance_id()})
        return InputRequiredResult(input_requests={"region": ASK_REGION}, request_state=state)
    asked_by = json.loads(request_state)["asked_by"] if request_state else "nobody"
    region = str(answer.content.get("region", ""))
    if runs := os.environ.get("FLEET_RUNS_FILE"):  # one line per completed step, whichever process ran it
        with Path(runs).open("a", encoding="utf-8") as record:
            record.write(f"{name}\n")
    return Provisioned(name=name, region=region, asked_by=asked_by, completed_by=instance_id())


def add_routes(server: Any) -> None:
    """The health route, and with ``FLEET_METRICS=1`` the counts, on either server."""

    async def health(request: Request) -> Response:
        return JSONResponse({"instance": instance_id()})

    async def metrics(request: Request) -> Response:
        return JSONResponse(METRICS.counts() if METRICS else [])

    server.custom_route(HEALTH_PATH, methods=["GET"])(health)
    server.custom_route(METRICS_PATH, methods=["GET"])(metrics)


def build_fastmcp(security: RequestStateSecurity | None, *, lifespan: Any = None, demo_auth: bool = False) -> Any:
    """`build_server`'s tools and routes on a `FastMCP` server (the ``fastmcp`` extra); `lifespan` is the whole of
    statecodec's part, single use included: FastMCP's own ``middleware=`` runs before the SDK's boundary."""
    from fastmcp import FastMCP
    from fastmcp.server.auth import AccessToken as FastMCPAccessToken
    from fastmcp.server.auth import TokenVerifier
    from fastmcp.server.dependencies import get_context

    class DemoVerifier(TokenVerifier):
        async def verify_token(self, token: str) -> FastMCPAccessToken | None:
            found = await DemoTokenVerifier().verify_token(token)
            return None if found is None else FastMCPAccessToken(**found.model_dump())

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s:%(name)s:%(message)s")
    server = FastMCP(SERVER_NAME, request_state_security=security, lifespan=lifespan,
                     auth=DemoVerifier() if demo_auth else None)

    @server.tool(name=TOOL)
    async def provision(name: str) -> Provisioned | InputRequiredResult:
        """Provision a database; asks which region to put it in."""
        ctx = get_context()  # the annotation `ctx: Context` would need FastMCP imported with this module
        return provisioned(name, ctx.input_responses, ctx.request_state)

    @server.tool(name="instance")
    def instance() -> str:
        """Which instance answers: a sync tool, run in a worker thread, that single use never waits for."""
        return instance_id()

    add_routes(server)
    return server


def server_for(mode: str, demo_auth: bool, kind: str = "mcpserver") -> Any:
    """The server of `mode` and `kind`, its protection built from the environment (a bad one raises before it
    starts)."""
    if kind not in SERVERS:
        raise SystemExit(f"unknown server {kind!r}; choose one of: {', '.join(SERVERS)}")
    protection = protection_for(mode)
    security, lifespan = (None, None) if protection is None else (protection.security, protection.lifespan)
    if kind == "fastmcp":
        return build_fastmcp(security, lifespan=lifespan, demo_auth=demo_auth)
    middleware = [] if protection is None else protection.middleware
    return build_server(security, middleware=middleware, lifespan=lifespan, demo_auth=demo_auth)


def check_loopback(host: str) -> str:
    """`host` when it is a loopback address; this example never listens on a network interface."""
    if host == "localhost":
        return host
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise SystemExit(f"refusing to bind {host!r}: this example binds a loopback address only (127.0.0.1)")
    return host


def create_app() -> Starlette:
    """App factory for uvicorn (``--factory fleet_server:create_app``): settings from the environment.

    A bad configuration fails every worker the same way, and uvicorn replaces a worker that dies of an exception,
    forever. Exiting with uvicorn's start-up failure status instead (3, ``uvicorn.config.STARTUP_FAILURE``) makes
    the supervisor stop after one message on stderr, naming what to fix.
    """
    env = os.environ
    try:
        host = check_loopback(env.get("FLEET_HOST", DEFAULT_HOST))
        demo_auth = demo_auth_enabled(env.get("FLEET_DEMO_AUTH", ""))
        server = server_for(env.get("FLEET_MODE", "shared"), demo_auth, env.get("FLEET_SERVER", "mcpserver"))
    except (StatecodecError, ImportError, SystemExit) as exc:  # ImportError: an extra the settings need, e.g. redis
        message = exc.code if isinstance(exc, SystemExit) else exc
        print(f"fleet_server: cannot start: {message}", file=sys.stderr, flush=True)
        raise SystemExit(STARTUP_FAILURE) from None
    return app_for(server, host)


def app_for(server: Any, host: str) -> Starlette:
    """The server's app (an `MCPServer` or a `FastMCP`), which prints one line on stdout once it serves: the socket
    is bound before the app starts (by uvicorn's supervisor, or by `main` for one worker), so whoever started it
    knows when to connect."""
    if isinstance(server, MCPServer):
        app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    else:
        app = server.http_app(path=MCP_PATH)
    lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def announced(app: Starlette) -> AsyncIterator[Any]:
        async with lifespan(app) as state:
            port = os.environ.get("FLEET_PORT", "")
            print(f"fleet_server: process {os.getpid()} serving http://{host}:{port}{MCP_PATH}", flush=True)
            yield state

    app.router.lifespan_context = announced
    return app


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    env = os.environ
    parser = argparse.ArgumentParser(description="Serve the fleet example over streamable HTTP.")
    parser.add_argument("--host", default=env.get("FLEET_HOST", DEFAULT_HOST), help="a loopback address")
    # String defaults go through `type`, so a bad FLEET_PORT is reported like a bad --port.
    parser.add_argument("--port", type=int, default=env.get("FLEET_PORT", str(DEFAULT_PORT)))
    parser.add_argument("--workers", type=int, default=env.get("FLEET_WORKERS", "1"))
    parser.add_argument("--mode", choices=MODES, default=env.get("FLEET_MODE", "shared"))
    parser.add_argument("--server", choices=SERVERS, default=env.get("FLEET_SERVER", "mcpserver"))
    parser.add_argument(
        "--demo-auth",
        action="store_true",
        default=demo_auth_enabled(env.get("FLEET_DEMO_AUTH", "")),
        help="accept the forgeable bearer token demo-<subject> as <subject> (a demonstration of per-user revocation)",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, default=env.get("FLEET_LOG_LEVEL", "warning"))
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    host = check_loopback(args.host)
    try:
        # Built here even when workers build their own, so a bad configuration stops before any worker starts.
        mcp_server = server_for(args.mode, args.demo_auth, args.server)
    except (StatecodecError, ImportError) as exc:  # ImportError: an extra the settings need (its message names it)
        raise SystemExit(f"cannot start: {exc}") from None
    # Workers re-create the app from these, so the factory and this process agree.
    os.environ["FLEET_HOST"] = host
    os.environ["FLEET_PORT"] = str(args.port)
    os.environ["FLEET_MODE"] = args.mode
    os.environ["FLEET_SERVER"] = args.server
    os.environ["FLEET_DEMO_AUTH"] = "1" if args.demo_auth else "0"
    if args.workers > 1:  # each worker builds and starts its own
        uvicorn.run(
            "fleet_server:create_app",
            factory=True,
            host=host,
            port=args.port,
            workers=args.workers,
            app_dir=str(Path(__file__).resolve().parent),
            timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
            log_level=args.log_level,
            access_log=False,
        )
    else:
        app = app_for(mcp_server, host)
        config = uvicorn.Config(app, host=host, port=args.port, log_level=args.log_level, access_log=False)
        sock = config.bind_socket()  # before the app starts, so its line means it can be reached
        server = uvicorn.Server(config)
        server.run(sockets=[sock])
        return 0 if server.started else STARTUP_FAILURE
    return 0


if __name__ == "__main__":
    sys.exit(main())
