"""The demo's server, client and narration; imports the MCP SDK, so it is loaded only by `demo`."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
from mcp import Client, MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    InputResponses,
    TextContent,
)

from statecodec.aead import AESGCMCodec
from statecodec.config import Codec, codec_from_env
from statecodec.errors import InvalidToken
from statecodec.inspect import describe_token
from statecodec.mcp import security

SERVER_NAME = "statecodec-demo"
TOOL = "provision"
ARGUMENTS: dict[str, Any] = {"name": "orders"}
ANSWER = {"region": "eu-west-1"}
_SDK_LOGGER = "mcp.server.request_state"

_ASK_REGION = ElicitRequest(
    params=ElicitRequestFormParams(
        message="Which region should the database live in?",
        requested_schema={"type": "object", "properties": {"region": {"type": "string"}}, "required": ["region"]},
    )
)


def build_server(codec: Codec) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(SERVER_NAME, request_state_security=security(codec))

    @server.tool(name=TOOL)
    async def provision(name: str, ctx: Context[Any, Any]) -> str | InputRequiredResult:
        """Provision a database; asks which region first."""
        answer = (ctx.input_responses or {}).get("region")
        if not isinstance(answer, ElicitResult) or not answer.content:
            # Plain text state: the server seals it on the way out and verifies it on the way back.
            return InputRequiredResult(
                input_requests={"region": _ASK_REGION}, request_state=json.dumps({"step": "ask-region"})
            )
        return f"Provisioned {name!r} in {answer.content['region']} (state was {ctx.request_state})."

    return server


class _Reasons(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def _server_log() -> Iterator[_Reasons]:
    logger = logging.getLogger(_SDK_LOGGER)
    handler = _Reasons()
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    # MCPServer installs a stderr handler on the root logger; the demo prints the line itself.
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def _token_summary(token: str) -> str:
    try:
        info = describe_token(token)
    except InvalidToken:
        return f"{len(token)} characters"
    return f"{info.format}, key id {info.key_id}, {info.token_length} characters"


def _tamper(token: str) -> str:
    """The same token with one character in the middle replaced by another base64url character."""
    i = len(token) // 2
    replacement = "A" if token[i] != "A" else "B"
    return token[:i] + replacement + token[i + 1 :]


def _text(result: CallToolResult) -> str:
    block = result.content[0] if result.content else None
    return block.text if isinstance(block, TextContent) else repr(result.content)


def say(line: str) -> None:
    print(line, flush=True)


async def _run(codec: Codec) -> int:
    server = build_server(codec)
    answers: InputResponses = {"region": ElicitResult(action="accept", content=dict(ANSWER))}
    async with Client(server) as client:
        say(f"round 1  tools/call {TOOL} {json.dumps(ARGUMENTS)}")
        first = await client.session.call_tool(TOOL, ARGUMENTS, allow_input_required=True)
        if not isinstance(first, InputRequiredResult) or first.request_state is None:
            say("         unexpected answer from the server")
            return 1
        for key, request in (first.input_requests or {}).items():
            message = request.params.message if isinstance(request, ElicitRequest) else request.method
            say(f"         server asks [{key}]: {message}")
        token = first.request_state
        say(f"         sealed requestState ({_token_summary(token)}):")
        say(f"         {token}")
        say(f"round 2  tools/call {TOOL} with answer {json.dumps(ANSWER)} and the requestState echoed")
        second = await client.session.call_tool(
            TOOL, ARGUMENTS, input_responses=answers, request_state=token, allow_input_required=True
        )
        if not isinstance(second, CallToolResult):
            say("         unexpected answer from the server")
            return 1
        say(f"         result: {_text(second)}")
        say("")
        bad = _tamper(token)
        say("tampered round 2: the same call with one character of the requestState changed:")
        say(f"         {bad}")
        with _server_log() as log:
            try:
                await client.session.call_tool(
                    TOOL, ARGUMENTS, input_responses=answers, request_state=bad, allow_input_required=True
                )
            except MCPError as exc:
                say(f"         client got error {exc.error.code}: {exc.error.message!r}")
            else:
                say("         the server accepted a tampered token")
                return 1
        for message in log.messages:
            say(f"         server log: {message}")
    return 0


def run_demo(*, from_env: bool = False) -> int:
    codec: Codec = codec_from_env() if from_env else AESGCMCodec.ephemeral()
    say("statecodec demo: an MCPServer and a Client in one process, connected in memory")
    say(f"codec: {codec!r}" + ("" if from_env else " (fresh key held only by this process)"))
    say("")
    return anyio.run(_run, codec)
