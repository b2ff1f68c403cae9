"""A lowlevel MCP `Server` protected by the SDK's own `RequestStateBoundary` around a statecodec codec.

The lowlevel tier seals nothing by itself: `requestState` crosses the wire as
the handler wrote it. Appending the SDK's `RequestStateBoundary` with
`statecodec.mcp.security(codec)` gives it what `MCPServer` has: handlers read
and write plaintext, and every refusal is the SDK's frozen -32602 answer with
our reason code in the server log only (not "codec error" with a traceback).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from mcp import Client, MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.request_state import RequestStateBoundary
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    GetPromptRequestParams,
    GetPromptResult,
    InputRequiredResult,
    ListToolsResult,
    PaginatedRequestParams,
    PromptMessage,
    ReadResourceRequestParams,
    ReadResourceResult,
    TextContent,
    TextResourceContents,
    Tool,
)
from mcp_types import INVALID_PARAMS

from statecodec import AESGCMCodec
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.mcp import security
from tests.mcp_flows import REJECTION_MESSAGE, SDK_LOGGER, mint_token, submit_token

KEY = bytes(range(32))
OTHER_KEY = bytes(range(64, 96))
SERVER = "lowlevel-flows"
MARKER = "lowlevel-state-5e1d"


# --- the server --------------------------------------------------------------------------------


def _ask(key: str, message: str) -> ElicitRequest:
    schema = {"type": "object", "properties": {key: {"type": "string"}}, "required": [key]}
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))


def _answer(responses: dict[str, Any] | None, key: str) -> str | None:
    found = (responses or {}).get(key)
    if isinstance(found, ElicitResult) and found.content:
        value = found.content.get(key)
        return value if isinstance(value, str) else None
    return None


def build_lowlevel(seen_states: list[str | None], *, key: bytes = KEY, audience: str = SERVER) -> Server[Any]:
    """A lowlevel server whose tool, prompt and resource each ask before answering; handlers log their state."""

    async def call_tool(
        ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult | InputRequiredResult:
        seen_states.append(params.request_state)
        name = (params.arguments or {}).get("name", "?")
        region = params.request_state.split(":", 1)[1] if params.request_state else ""
        if not region:
            answered = _answer(params.input_responses, "region")
            if answered is None:
                return InputRequiredResult(
                    input_requests={"region": _ask("region", f"Region for {name}?")}, request_state=f"{MARKER}:"
                )
            region = answered
        size = _answer(params.input_responses, "size")
        if size is None:
            return InputRequiredResult(
                input_requests={"size": _ask("size", f"Size for {name}?")}, request_state=f"{MARKER}:{region}"
            )
        return CallToolResult(content=[TextContent(type="text", text=f"provisioned {name} in {region} at {size}")])

    async def get_prompt(
        ctx: ServerRequestContext[Any], params: GetPromptRequestParams
    ) -> GetPromptResult | InputRequiredResult:
        seen_states.append(params.request_state)
        audience_answer = _answer(params.input_responses, "audience")
        if audience_answer is None or params.request_state != MARKER:
            return InputRequiredResult(
                input_requests={"audience": _ask("audience", "Who is it for?")}, request_state=MARKER
            )
        text = f"Brief {audience_answer}."
        return GetPromptResult(messages=[PromptMessage(role="user", content=TextContent(type="text", text=text))])

    async def read_resource(
        ctx: ServerRequestContext[Any], params: ReadResourceRequestParams
    ) -> ReadResourceResult | InputRequiredResult:
        seen_states.append(params.request_state)
        fmt = _answer(params.input_responses, "format")
        if fmt is None or params.request_state != MARKER:
            return InputRequiredResult(input_requests={"format": _ask("format", "Format?")}, request_state=MARKER)
        return ReadResourceResult(contents=[TextResourceContents(uri=str(params.uri), text=f"report as {fmt}")])

    async def list_tools(ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None) -> ListToolsResult:
        schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        return ListToolsResult(tools=[Tool(name="provision", input_schema=schema)])

    server: Server[Any] = Server(
        SERVER,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_get_prompt=get_prompt,
        on_read_resource=read_resource,
    )
    server.middleware.append(RequestStateBoundary(security(AESGCMCodec([key])), default_audience=audience))
    return server


async def _on_elicit(context: Any, params: Any) -> ElicitResult:
    key = next(iter(params.requested_schema["properties"]))
    return ElicitResult(action="accept", content={key: f"{key}-answer"})


# --- driving rounds by hand --------------------------------------------------------------------


@dataclass
class Refusal:
    code: int
    message: str
    data: object
    reasons: list[str]
    tracebacks: int


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(fn)


async def round_one(server: Server[Any], arguments: dict[str, Any] | None = None) -> str:
    async with Client(server) as client:
        first = await client.session.call_tool("provision", arguments or {"name": "orders"}, allow_input_required=True)
    assert isinstance(first, InputRequiredResult)
    assert first.request_state is not None
    return first.request_state


async def round_two(
    server: Server[Any], token: str, arguments: dict[str, Any] | None = None
) -> CallToolResult | InputRequiredResult | Refusal:
    answer: dict[str, Any] = {"region": ElicitResult(action="accept", content={"region": "eu"})}
    capture = _Capture()
    log = logging.getLogger(SDK_LOGGER)
    log.addHandler(capture)
    try:
        async with Client(server) as client:
            try:
                return await client.session.call_tool(
                    "provision", arguments or {"name": "orders"}, input_responses=answer, request_state=token,
                    allow_input_required=True,
                )
            except MCPError as exc:
                error = exc.error
    finally:
        log.removeHandler(capture)
    messages = [r.getMessage() for r in capture.records]
    reasons = [m.split(": ", 1)[1] for m in messages if m.startswith("requestState rejected on ")]
    return Refusal(error.code, error.message, error.data, reasons, sum(r.exc_info is not None for r in capture.records))


def refuse(server: Server[Any], token: str, arguments: dict[str, Any] | None = None) -> Refusal:
    outcome = run(lambda: round_two(server, token, arguments))
    assert isinstance(outcome, Refusal), f"the server accepted the token: {outcome!r}"
    return outcome


# --- tests -------------------------------------------------------------------------------------


def test_flows_complete_and_handlers_see_only_plaintext() -> None:
    seen: list[str | None] = []
    server = build_lowlevel(seen)

    async def go() -> tuple[str, str, str, str]:
        async with Client(server, elicitation_callback=_on_elicit) as client:
            tool = await client.call_tool("provision", {"name": "orders"})
            prompt = await client.get_prompt("briefing", {"topic": "x"})
            resource = await client.read_resource("report://2026")
            first = await client.session.call_tool("provision", {"name": "orders"}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult)
        assert first.request_state is not None
        block, content, contents = tool.content[0], prompt.messages[0].content, resource.contents[0]
        assert isinstance(block, TextContent)
        assert isinstance(content, TextContent)
        assert isinstance(contents, TextResourceContents)
        return block.text, content.text, contents.text, first.request_state

    tool, prompt, resource, wire = run(go)
    assert tool == "provisioned orders in region-answer at size-answer"
    assert prompt == "Brief audience-answer."
    assert resource == "report as format-answer"
    # Handlers saw plaintext on every retry; the wire token is our codec's, sealing the SDK's envelope.
    assert [s for s in seen if s is not None] == [f"{MARKER}:", f"{MARKER}:region-answer", MARKER, MARKER]
    assert MARKER.encode() not in b64u_decode(wire)
    envelope = json.loads(AESGCMCodec([KEY]).unseal(wire))
    assert (envelope["s"], envelope["aud"], envelope["t"]) == (f"{MARKER}:", SERVER, "provision")


def _flip(token: str) -> str:
    raw = bytearray(b64u_decode(token))
    raw[len(raw) // 2] ^= 0x01
    return b64u_encode(bytes(raw))


def test_same_refusals_as_mcpserver() -> None:
    server = build_lowlevel([])
    token = run(lambda: round_one(server))
    sdk_codec = AESGCMCodec([KEY])
    sdk_token = mint_token(sdk_codec)
    cases: list[tuple[str, Refusal, str]] = [
        ("tampered", refuse(server, _flip(token)), submit_token(sdk_codec, _flip(sdk_token)).reason),
        ("other args", refuse(server, token, {"name": "billing"}),
         submit_token(sdk_codec, sdk_token, arguments={"name": "billing"}).reason),
        ("other audience", refuse(build_lowlevel([], audience="another-service"), token),
         submit_token(sdk_codec, sdk_token, server_name="another-service").reason),
        ("foreign key", refuse(build_lowlevel([], key=OTHER_KEY), token),
         submit_token(AESGCMCodec([OTHER_KEY]), sdk_token).reason),
    ]
    for name, ours, _ in cases:
        assert (ours.code, ours.message, ours.data) == (
            INVALID_PARAMS, REJECTION_MESSAGE, {"reason": "invalid_request_state"}
        ), name
        assert ours.tracebacks == 0, name
    assert [(name, ours.reasons, theirs) for name, ours, theirs in cases] == [
        ("tampered", ["seal"], "seal"),
        ("other args", ["request binding"], "request binding"),
        ("other audience", ["audience"], "audience"),
        ("foreign key", ["unknown_key"], "unknown_key"),
    ]


def test_unsealed_plaintext_state_is_refused() -> None:
    # What a lowlevel server without the boundary would have put on the wire.
    assert refuse(build_lowlevel([]), f"{MARKER}:").reasons == ["malformed"]
