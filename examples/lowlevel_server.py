"""Protect a lowlevel MCP `Server`'s ``requestState`` with a statecodec codec, and watch replays fail.

Threat: the lowlevel `Server` seals nothing by itself, so ``requestState``
crosses the wire exactly as the handler wrote it, and a client can edit it,
replay it against other arguments, or hand it to another user. The SDK's own
`RequestStateBoundary`, appended to ``server.middleware`` with
``RequestStateSecurity(codec=codec)``, seals every outgoing state in the SDK's
envelope (request, principal, audience, expiry) with the codec and verifies
every echo before the handler runs. Refusals get the SDK's frozen -32602
answer; our reason code goes to the log only.

Run::

    python examples/lowlevel_server.py

It reads the ring from ``STATECODEC_KEYS`` when set (otherwise a key for this
run only) and prints each outcome; the server's log lines show the reasons.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import anyio
from mcp import Client, MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    InputResponse,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)

from statecodec import AESGCMCodec, Codec

SERVICE = "provisioner"

# Who is signed in; a real server takes this from its authentication layer.
current_user = "alice"


ASK_REGION = ElicitRequest(
    params=ElicitRequestFormParams(
        message="Which region?",
        requested_schema={"type": "object", "properties": {"region": {"type": "string"}}, "required": ["region"]},
    )
)


async def list_tools(ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None) -> ListToolsResult:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    return ListToolsResult(tools=[Tool(name="provision", description="Provision a database.", input_schema=schema)])


async def call_tool(
    ctx: ServerRequestContext[Any], params: CallToolRequestParams
) -> CallToolResult | InputRequiredResult:
    answer = (params.input_responses or {}).get("region")
    if params.request_state != "asked-region" or not isinstance(answer, ElicitResult) or not answer.content:
        return InputRequiredResult(input_requests={"region": ASK_REGION}, request_state="asked-region")
    name = (params.arguments or {}).get("name")
    text = f"provisioned {name} in {answer.content['region']} for {current_user}"
    return CallToolResult(content=[TextContent(type="text", text=text)])


def build_server(codec: Codec | None = None, audience: str = SERVICE) -> Server[Any]:
    """The server, sealing with `codec` (default: the ring in STATECODEC_KEYS, or a key for this run)."""
    if codec is None:
        codec = AESGCMCodec.from_env() if os.environ.get("STATECODEC_KEYS") else AESGCMCodec.ephemeral()
    policy = RequestStateSecurity(codec=codec, ttl=300, bind_principal=lambda ctx: current_user)
    server: Server[Any] = Server(audience, on_list_tools=list_tools, on_call_tool=call_tool)
    server.middleware.append(RequestStateBoundary(policy, default_audience=audience))
    return server


REGION: dict[str, InputResponse] = {"region": ElicitResult(action="accept", content={"region": "eu-west-1"})}


async def retry(server: Server[Any], token: str | None, arguments: dict[str, Any]) -> str:
    """Send a retry with `token`; the tool's text, or the refusal's code and message."""
    async with Client(server) as client:
        try:
            result = await client.session.call_tool(
                "provision", arguments, input_responses=REGION, request_state=token, allow_input_required=True
            )
        except MCPError as exc:
            return f"refused: {exc.error.code} {exc.error.message}"
    if isinstance(result, InputRequiredResult):
        return "asked again"
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))


async def main() -> None:
    global current_user
    logging.basicConfig(level=logging.WARNING, format="server log: %(message)s")
    server = build_server()
    orders = {"name": "orders"}
    async with Client(server) as client:
        first = await client.session.call_tool("provision", orders, allow_input_required=True)
    if not isinstance(first, InputRequiredResult) or first.request_state is None:
        raise SystemExit("round 1 did not ask for input")
    token = first.request_state
    print("round 1 sealed state:", token)

    show("retry as minted", await retry(server, token, orders), "provisioned orders in eu-west-1 for alice")
    show("other arguments", await retry(server, token, {"name": "payroll"}), REFUSED)
    edited = token[:-2] + ("AA" if token[-2:] != "AA" else "BA")  # never the token itself
    show("edited token", await retry(server, edited, orders), REFUSED)
    current_user = "mallory"
    show("another user", await retry(server, token, orders), REFUSED)


REFUSED = "refused: -32602 Invalid or expired requestState"


def show(label: str, outcome: str, expected: str) -> None:
    print(f"{label + ':':<17} {outcome}")
    if outcome != expected:
        raise SystemExit(f"{label}: expected {expected!r}")


if __name__ == "__main__":
    anyio.run(main)
