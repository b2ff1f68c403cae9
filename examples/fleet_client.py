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

A flow left in flight, as by a user who answers later: ``--hold FILE`` stops after round 1 and writes its
``requestState`` and answers to FILE; ``--resume FILE`` sends that retry to the server named, each time it runs (so
a second run is a replay)::

    python examples/fleet_client.py http://127.0.0.1:8001/mcp --hold orders.flow
    python examples/fleet_client.py http://127.0.0.1:8002/mcp --resume orders.flow

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
from pathlib import Path
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
    hold: bool = False,
    held: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Call ``provision`` on `first_url` and send every retry to `retry_url`; the structured result. With `hold`, round
    1's state and answers instead, as ``{"held": ...}``; given such a round as `held`, its retry alone, to `retry_url`.

    Raises `MCPError` when a server refuses a round (for example -32602 when
    the retry's instance cannot verify the ``requestState``), `Unauthorized` when it refuses the caller.
    """
    arguments = {"name": held["name"] if held else name}
    refused: MCPError | None = None
    denied: list[httpx2.Response] = []
    try:
        async with _client(first_url, token, denied) as first, _client(retry_url or first_url, token, denied) as again:
            try:
                if held is None:
                    result = await first.session.call_tool(TOOL, arguments, allow_input_required=True)
                else:
                    answers: dict[str, InputResponse] = {}
                    answers |= {key: ElicitResult.model_validate(value) for key, value in held["answers"].items()}
                    result = await _retry(again, arguments, held["request_state"], answers)
                while isinstance(result, InputRequiredResult) and not hold:
                    result = await _retry(again, arguments, result.request_state, _answers(result, region))
                if isinstance(result, InputRequiredResult):  # held: the round, to answer later
                    kept = {k: v.model_dump(mode="json", by_alias=True) for k, v in _answers(result, region).items()}
                    outcome = {"held": {"name": name, "request_state": result.request_state, "answers": kept}}
                else:
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


def _answers(result: InputRequiredResult, region: str) -> dict[str, InputResponse]:
    return {key: fulfil(request, region) for key, request in (result.input_requests or {}).items()}


async def _retry(client: Client, arguments: dict[str, Any], state: str | None,
                 responses: dict[str, InputResponse]) -> CallToolResult | InputRequiredResult:
    return await client.session.call_tool(TOOL, arguments, input_responses=responses, request_state=state,
                                          allow_input_required=True)  # fmt: skip


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
    keep = parser.add_mutually_exclusive_group()
    keep.add_argument("--hold", type=Path, metavar="FILE", help="stop after round 1, writing its retry to FILE")
    keep.add_argument("--resume", type=Path, metavar="FILE", help="send the retry --hold wrote to FILE, and only it")
    args = parser.parse_args(argv)
    silent = first_silent([args.url, args.retry_url or args.url], args.wait)
    if silent is not None:
        print(f"cannot reach {silent}: nothing listens there (start it first, or pass --wait SECONDS)", file=sys.stderr)
        return EXIT_UNREACHABLE
    try:
        held = json.loads(args.resume.read_text(encoding="utf-8")) if args.resume else None
        outcome = anyio.run(lambda: provision(args.url, retry_url=args.retry_url, name=args.name, region=args.region,
                                              token=args.token, hold=args.hold is not None, held=held))  # fmt: skip
    except Unauthorized as exc:
        print(f"rejected: {exc}", file=sys.stderr)
        return EXIT_REJECTED
    except (MCPError, BaseExceptionGroup) as exc:
        refused = _refusal(exc)
        if refused is None:
            raise
        print(f"rejected: {refused.error.code} {refused.error.message}", file=sys.stderr)
        return EXIT_REJECTED
    if args.hold and "held" in outcome:
        args.hold.write_text(json.dumps(outcome["held"]), encoding="utf-8")
        print(f"held: round 1 of {TOOL} {outcome['held']['name']!r} answered by {args.url}; its retry is in "
              f"{args.hold} (send it with --resume {args.hold})")
        return 0
    print(json.dumps(outcome, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
