"""Drive a multi-round tool by hand, sending round 1 to one server and the retry to another.

This is what a load balancer does to a client without telling it: the
``requestState`` minted by one instance comes back to a different one. The
loop is the SDK's manual form (``allow_input_required=True``): answer each
``input_requests`` entry, then call the same tool with the same arguments,
the answers and the echoed ``request_state``.

Run against two instances of ``examples/fleet_server.py`` (``--wait`` gives
servers started a moment ago up to 30 s to listen)::

    python examples/fleet_client.py http://127.0.0.1:8001/mcp --retry-url http://127.0.0.1:8002/mcp --wait 30

Against servers started with ``--demo-auth``, ``--token demo-alice`` sends that demonstration bearer token
(``Authorization: Bearer demo-alice``), so each run can act as another user.

It prints the tool's structured result as JSON and exits 0; when the retry is
refused it prints the error code and message and exits 2, as it does when a
server wants a bearer token (HTTP 401 or 403, which the SDK reports as -32603);
when a server does not listen (within ``--wait``) it says which and exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, ElicitRequest, ElicitResult, InputRequest, InputRequiredResult, InputResponse

TOOL = "provision"
EXIT_UNREACHABLE = 1
EXIT_REJECTED = 2


def fulfil(request: InputRequest, region: str) -> InputResponse:
    """The user's answer to one input request; this client only answers the region question."""
    if not isinstance(request, ElicitRequest):
        raise NotImplementedError(f"this client cannot answer a {request.method!r} request")
    return ElicitResult(action="accept", content={"region": region})


class Unauthorized(Exception):
    """A server answered HTTP 401 or 403: it wants a bearer token (``--token``) or refused the one sent. The SDK
    reports any such status as -32603 'Server returned an error response', which names neither."""


@contextlib.asynccontextmanager
async def _client(url: str, token: str | None, denied: list[httpx2.Response]) -> AsyncIterator[Client]:
    """A client of `url`, sending `token` as a bearer token when one is given; `denied` collects 401 and 403."""

    async def note(response: httpx2.Response) -> None:
        if response.status_code in (401, 403):
            denied.append(response)

    # The SDK's transport timeouts: a server may hold a response stream open.
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300), event_hooks={"response": [note]})
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


def _refusal(exc: BaseException) -> MCPError | None:
    """The server's refusal behind `exc`, which a transport's task group may have wrapped in exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, MCPError) else None


async def provision(
    first_url: str,
    *,
    retry_url: str | None = None,
    name: str = "orders",
    region: str = "eu-west-1",
    token: str | None = None,
) -> dict[str, Any]:
    """Call ``provision`` on `first_url` and send every retry to `retry_url`; the structured result.

    Raises `MCPError` when a server refuses a round (for example -32602 when
    the retry's instance cannot verify the ``requestState``), `Unauthorized` when it refuses the caller.
    """
    arguments = {"name": name}
    refused: MCPError | None = None
    denied: list[httpx2.Response] = []
    try:
        async with _client(first_url, token, denied) as first, _client(retry_url or first_url, token, denied) as again:
            try:
                result = await first.session.call_tool(TOOL, arguments, allow_input_required=True)
                while isinstance(result, InputRequiredResult):
                    requests = (result.input_requests or {}).items()
                    responses = {key: fulfil(request, region) for key, request in requests}
                    result = await again.session.call_tool(
                        TOOL,
                        arguments,
                        input_responses=responses,
                        request_state=result.request_state,
                        allow_input_required=True,
                    )
                outcome = structured(result)
            except MCPError as exc:
                # Raised outside the clients' task groups, so callers catch it as itself.
                refused = exc
    except (MCPError, BaseExceptionGroup):  # the connection itself (initialize) refused
        if not denied:
            raise
    if denied:
        status, url = denied[0].status_code, denied[0].request.url
        fix = "pass --token demo-<user>" if token is None else "this token is refused; pass another with --token"
        raise Unauthorized(f"{url} answered HTTP {status}: the server wants a bearer token ({fix})")
    if refused is not None:
        raise refused
    return outcome


def structured(result: CallToolResult) -> dict[str, Any]:
    """The tool's structured content; a tool error becomes a RuntimeError with its text."""
    if result.is_error or result.structured_content is None:
        text = " ".join(getattr(block, "text", "") for block in result.content)
        raise RuntimeError(f"{TOOL} failed: {text}")
    return dict(result.structured_content)


def first_silent(urls: Sequence[str], wait_s: float) -> str | None:
    """The first of `urls` whose server accepts no TCP connection within `wait_s` seconds, or None when all do.

    A server that was just started in the background is not listening yet; without this the first request fails
    with a connection error. uvicorn listens only once the application has started, so a connection means ready.
    """
    deadline = time.monotonic() + wait_s
    for url in urls:
        parts = urlsplit(url)
        address = (parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80))
        while True:
            try:
                socket.create_connection(address, timeout=1).close()
                break
            except OSError:
                if time.monotonic() >= deadline:
                    return url
                time.sleep(0.1)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the fleet example's two-round tool across two servers.")
    parser.add_argument("url", help="the server that gets round 1, e.g. http://127.0.0.1:8001/mcp")
    parser.add_argument("--retry-url", help="the server that gets the retry (default: the same server)")
    parser.add_argument("--name", default="orders")
    parser.add_argument("--region", default="eu-west-1")
    parser.add_argument("--wait", type=float, default=0, metavar="SECONDS", help="wait for the servers to listen")
    parser.add_argument("--token", help="a bearer token to send, e.g. demo-alice for servers run with --demo-auth")
    args = parser.parse_args(argv)
    silent = first_silent([args.url, args.retry_url or args.url], args.wait)
    if silent is not None:
        print(f"cannot reach {silent}: nothing listens there (start it first, or pass --wait SECONDS)", file=sys.stderr)
        return EXIT_UNREACHABLE
    try:
        outcome = anyio.run(
            lambda: provision(args.url, retry_url=args.retry_url, name=args.name, region=args.region, token=args.token)
        )
    except Unauthorized as exc:
        print(f"rejected: {exc}", file=sys.stderr)
        return EXIT_REJECTED
    except (MCPError, BaseExceptionGroup) as exc:
        refused = _refusal(exc)
        if refused is None:
            raise
        print(f"rejected: {refused.error.code} {refused.error.message}", file=sys.stderr)
        return EXIT_REJECTED
    print(json.dumps(outcome, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
