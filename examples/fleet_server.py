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
    uvicorn --factory --app-dir examples fleet_server:create_app --port 8001 --workers 2

``--mode sdk-default`` (or ``FLEET_MODE=sdk-default``) leaves the SDK's
per-process key in place, to show the failure the shared ring prevents.
Settings come from the command line or the environment (``FLEET_HOST``,
``FLEET_PORT``, ``FLEET_WORKERS``, ``FLEET_MODE``, ``FLEET_LOG_LEVEL``: at
``info``, uvicorn logs each worker's start, death and replacement); the server
binds a loopback address only.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from uvicorn.config import STARTUP_FAILURE

from statecodec import StatecodecError
from statecodec.mcp import security_from_env

SERVER_NAME = "fleet"
TOOL = "provision"
MODES = ("shared", "sdk-default")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8001
MCP_PATH = "/mcp"
HEALTH_PATH = "/healthz"
LOG_LEVELS = ("debug", "info", "warning", "error")
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


def security_for(mode: str) -> RequestStateSecurity | None:
    """The request-state policy for `mode`; None leaves the SDK's per-process default."""
    if mode == "shared":
        # Raises ConfigurationError (what to set) before the server starts when the env is incomplete.
        return security_from_env()
    if mode == "sdk-default":
        return None
    raise SystemExit(f"unknown mode {mode!r}; choose one of: {', '.join(MODES)}")


def build_server(security: RequestStateSecurity | None) -> MCPServer[Any]:
    """The MCP server with its two-round ``provision`` tool and a health route."""
    server: MCPServer[Any] = MCPServer(SERVER_NAME, request_state_security=security, log_level="WARNING")

    @server.tool(name=TOOL)
    async def provision(name: str, ctx: Context[Any, Any]) -> Provisioned | InputRequiredResult:
        """Provision a database; asks which region to put it in."""
        answer = (ctx.input_responses or {}).get("region")
        if not isinstance(answer, ElicitResult) or answer.action != "accept" or not answer.content:
            # Plain text here: the SDK seals it on the way out and verifies it on the way back.
            state = json.dumps({"asked_by": instance_id()})
            return InputRequiredResult(input_requests={"region": ASK_REGION}, request_state=state)
        asked_by = json.loads(ctx.request_state)["asked_by"] if ctx.request_state else "nobody"
        region = str(answer.content.get("region", ""))
        return Provisioned(name=name, region=region, asked_by=asked_by, completed_by=instance_id())

    async def health(request: Request) -> Response:
        return JSONResponse({"instance": instance_id()})

    server.custom_route(HEALTH_PATH, methods=["GET"])(health)
    return server


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
    try:
        mode = os.environ.get("FLEET_MODE", "shared")
        host = check_loopback(os.environ.get("FLEET_HOST", DEFAULT_HOST))
        return app_for(security_for(mode), host)
    except (StatecodecError, SystemExit) as exc:
        message = exc if isinstance(exc, StatecodecError) else exc.code
        print(f"fleet_server: cannot start: {message}", file=sys.stderr, flush=True)
        raise SystemExit(STARTUP_FAILURE) from None


def app_for(security: RequestStateSecurity | None, host: str) -> Starlette:
    return build_server(security).streamable_http_app(streamable_http_path=MCP_PATH, host=host)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    env = os.environ
    parser = argparse.ArgumentParser(description="Serve the fleet example over streamable HTTP.")
    parser.add_argument("--host", default=env.get("FLEET_HOST", DEFAULT_HOST), help="a loopback address")
    # String defaults go through `type`, so a bad FLEET_PORT is reported like a bad --port.
    parser.add_argument("--port", type=int, default=env.get("FLEET_PORT", str(DEFAULT_PORT)))
    parser.add_argument("--workers", type=int, default=env.get("FLEET_WORKERS", "1"))
    parser.add_argument("--mode", choices=MODES, default=env.get("FLEET_MODE", "shared"))
    parser.add_argument("--log-level", choices=LOG_LEVELS, default=env.get("FLEET_LOG_LEVEL", "warning"))
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    host = check_loopback(args.host)
    try:
        # Built here even when workers build their own, so a bad configuration stops before any worker starts.
        security = security_for(args.mode)
    except StatecodecError as exc:
        raise SystemExit(f"cannot start: {exc}") from None
    # Workers re-create the app from these, so the factory and this process agree.
    os.environ["FLEET_HOST"] = host
    os.environ["FLEET_MODE"] = args.mode
    if args.workers > 1:
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
        uvicorn.run(app_for(security, host), host=host, port=args.port, log_level=args.log_level, access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
