"""The in-memory MCP server of the event-loop section (imported only when mcp is installed).

No ``from __future__ import annotations`` here: the SDK reads the tool
signatures at registration, so the annotations must be real objects.
"""

from typing import Any

from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    InputRequiredResult,
)

__all__ = ["answer", "server"]

_ASK = ElicitRequest(
    params=ElicitRequestFormParams(
        message="Which region?",
        requested_schema={"type": "object", "properties": {"region": {"type": "string"}}, "required": ["region"]},
    )
)


def server(codec: Any, state: str) -> MCPServer:
    """A server whose `provision` tool takes two rounds: ask, then finish with the echoed state."""
    mcp = MCPServer("statecodec-bench", request_state_security=RequestStateSecurity(codec=codec))

    @mcp.tool()
    async def provision(name: str, ctx: Context) -> CallToolResult | InputRequiredResult:
        reply = (ctx.input_responses or {}).get("region")
        if not isinstance(reply, ElicitResult) or reply.content is None:
            return InputRequiredResult(input_requests={"region": _ASK}, request_state=state)
        if ctx.request_state != state:
            raise RuntimeError("the echoed state did not round-trip")
        return CallToolResult(content=[])

    @mcp.tool()
    async def ping() -> str:
        return "pong"

    return mcp


async def answer(context: Any, params: ElicitRequestParams) -> ElicitResult:
    """The client's elicitation callback: always the same answer."""
    return ElicitResult(action="accept", content={"region": "eu-west-1"})
