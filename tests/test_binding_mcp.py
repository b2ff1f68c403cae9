"""A lowlevel MCP `Server` (no SDK boundary) protected by BoundCodec through `Server.middleware`.

The lowlevel tier seals nothing by itself: `requestState` crosses the wire as
the handler wrote it. Appending `statecodec.mcp.BoundStateMiddleware` gives it
what `MCPServer`'s boundary gives: handlers read and write plaintext, every
token is bound to its request, principal, audience and lifetime, and every
refusal is the SDK's frozen -32602 answer with the real reason in the server
log only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.server import Server, ServerRequestContext
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

from statecodec import AESGCMCodec, BoundCodec
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.binding import mcp_request_context
from statecodec.mcp import BoundStateMiddleware
from tests.mcp_flows import REJECTION_MESSAGE, mint_token, submit_token

KEY = bytes(range(32))
OTHER_KEY = bytes(range(64, 96))
BINDING_KEY = bytes(range(100, 132))
SERVER = "lowlevel-flows"
T0 = 1_767_225_600.0
LOGGER = "statecodec.mcp"
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


@dataclass
class World:
    """The clock and the signed-in user, as the server's auth layer would see them."""

    now: float = T0
    user: str | None = "alice"
    seen_states: list[str | None] | None = None

    def clock(self) -> float:
        return self.now


def build_lowlevel(world: World, *, key: bytes = KEY, audience: str = SERVER) -> Server[Any]:
    codec = BoundCodec(AESGCMCodec([key]), audience=audience, binding_key=BINDING_KEY, clock=world.clock)
    states: list[str | None] = []
    world.seen_states = states

    async def call_tool(
        ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult | InputRequiredResult:
        states.append(params.request_state)
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
        states.append(params.request_state)
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
        states.append(params.request_state)
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
    server.middleware.append(BoundStateMiddleware(codec, principal=lambda ctx: world.user))
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


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


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
    log = logging.getLogger(LOGGER)
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
    reasons = [m.split(": ", 1)[1] for m in capture.messages if m.startswith("requestState rejected on ")]
    return Refusal(error.code, error.message, error.data, reasons)


def refuse(server: Server[Any], token: str, arguments: dict[str, Any] | None = None) -> Refusal:
    outcome = run(lambda: round_two(server, token, arguments))
    assert isinstance(outcome, Refusal), f"the server accepted the token: {outcome!r}"
    return outcome


# --- tests -------------------------------------------------------------------------------------


def test_flows_complete_and_handlers_see_only_plaintext() -> None:
    world = World()
    server = build_lowlevel(world)
    codec = BoundCodec(AESGCMCodec([KEY]), audience=SERVER, binding_key=BINDING_KEY, clock=world.clock)

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
    # Handlers saw plaintext on every retry; the wire token is a BoundCodec token bound to the request.
    assert world.seen_states is not None
    assert [s for s in world.seen_states if s is not None] == [f"{MARKER}:", f"{MARKER}:region-answer", MARKER, MARKER]
    assert MARKER.encode() not in b64u_decode(wire)
    context = mcp_request_context("tools/call", {"name": "provision", "arguments": {"name": "orders"}})
    assert codec.unseal(wire, principal="alice", context=context) == f"{MARKER}:".encode()


def test_genuine_token_is_accepted_in_round_two() -> None:
    world = World()
    server = build_lowlevel(world)
    token = run(lambda: round_one(server))
    outcome = run(lambda: round_two(server, token))
    assert isinstance(outcome, InputRequiredResult)  # on to the size question


def _flip(token: str) -> str:
    raw = bytearray(b64u_decode(token))
    raw[len(raw) // 2] ^= 0x01
    return b64u_encode(bytes(raw))


def test_same_refusals_as_mcpserver() -> None:
    world = World()
    server = build_lowlevel(world)
    token = run(lambda: round_one(server))
    sdk_codec = AESGCMCodec([KEY])
    sdk_token = mint_token(sdk_codec)
    cases: list[tuple[str, Refusal, str]] = [
        ("tampered", refuse(server, _flip(token)), submit_token(sdk_codec, _flip(sdk_token)).reason),
        ("other args", refuse(server, token, {"name": "billing"}),
         submit_token(sdk_codec, sdk_token, arguments={"name": "billing"}).reason),
        ("other audience", refuse(build_lowlevel(World(), audience="another-service"), token),
         submit_token(sdk_codec, sdk_token, server_name="another-service").reason),
        ("foreign key", refuse(build_lowlevel(World(), key=OTHER_KEY), token),
         submit_token(AESGCMCodec([OTHER_KEY]), sdk_token).reason),
    ]
    sdk_rejection = submit_token(sdk_codec, _flip(sdk_token))
    for name, ours, _ in cases:
        assert (ours.code, ours.message, ours.data) == (
            sdk_rejection.code, sdk_rejection.message, sdk_rejection.data
        ), name
    assert [(name, ours.reasons, theirs) for name, ours, theirs in cases] == [
        ("tampered", ["seal"], "seal"),
        ("other args", ["binding"], "request binding"),
        ("other audience", ["audience"], "audience"),
        ("foreign key", ["unknown_key"], "unknown_key"),
    ]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda w: setattr(w, "now", T0 + 600), "expired"),
        (lambda w: setattr(w, "now", T0 - 61), "not_yet_valid"),
        (lambda w: setattr(w, "user", "bob"), "principal"),
        (lambda w: setattr(w, "user", None), "principal"),  # minted for alice, presented anonymously
    ],
    ids=["expired", "future", "other-user", "drift"],
)
def test_time_and_principal_refusals(change: Callable[[World], None], reason: str) -> None:
    world = World()
    server = build_lowlevel(world)
    token = run(lambda: round_one(server))
    change(world)
    refusal = refuse(server, token)
    assert (refusal.code, refusal.message, refusal.reasons) == (INVALID_PARAMS, REJECTION_MESSAGE, [reason])


def test_anonymous_state_presented_by_a_signed_in_user_is_refused() -> None:
    world = World(user=None)
    server = build_lowlevel(world)
    token = run(lambda: round_one(server))
    world.user = "alice"
    assert refuse(server, token).reasons == ["principal"]


def test_unsealed_plaintext_state_is_refused() -> None:
    # What a lowlevel server without the middleware would have put on the wire.
    assert refuse(build_lowlevel(World()), f"{MARKER}:").reasons == ["malformed"]


# --- deny on error -----------------------------------------------------------------------------


def _request(params: dict[str, Any]) -> ServerRequestContext[Any, Any]:
    # The middleware reads only method and params; no session is needed.
    from typing import cast

    return ServerRequestContext(
        session=cast(Any, None), lifespan_context={}, protocol_version="2026-07-28", method="tools/call", params=params
    )


def _state_result(state: str) -> Callable[[ServerRequestContext[Any, Any]], Awaitable[Any]]:
    async def call_next(ctx: ServerRequestContext[Any, Any]) -> Any:
        return InputRequiredResult(input_requests={"region": _ask("region", "Region?")}, request_state=state)

    return call_next


def _boom(ctx: object) -> str | None:
    raise RuntimeError("identity provider unavailable")


@pytest.mark.parametrize("principal", [_boom, lambda ctx: 42], ids=["raises", "not-a-str"])
def test_a_failing_principal_binding_fails_closed(
    principal: Callable[[Any], Any], caplog: pytest.LogCaptureFixture
) -> None:
    """As in the SDK: a principal callback that raises or returns a non-str refuses, never proceeds."""
    world = World()
    codec = BoundCodec(AESGCMCodec([KEY]), audience=SERVER, binding_key=BINDING_KEY, clock=world.clock)
    good = BoundStateMiddleware(codec, principal=lambda ctx: "alice")
    bad = BoundStateMiddleware(codec, principal=principal)
    params = {"name": "provision", "arguments": {"name": "orders"}}
    sealed = run(lambda: good(_request(params), _state_result(MARKER)))
    token = sealed.request_state
    caplog.set_level(logging.WARNING, logger=LOGGER)
    # Verifying an echo: the frozen -32602 refusal, the cause in the log only.
    with pytest.raises(MCPError) as refused:
        run(lambda: bad(_request({**params, "requestState": token}), _state_result(MARKER)))
    assert refused.value.error.code == INVALID_PARAMS
    assert refused.value.error.message == REJECTION_MESSAGE
    assert "principal binding" in caplog.text
    # Sealing a first round: a sanitized internal error, never an unbound token.
    with pytest.raises(MCPError) as internal:
        run(lambda: bad(_request(params), _state_result(MARKER)))
    assert internal.value.error.message == "Internal error"
    assert MARKER not in str(internal.value.error)


def test_a_failing_seal_is_an_internal_error_without_its_cause() -> None:
    world = World()
    small = AESGCMCodec([KEY], max_token_length=200)
    codec = BoundCodec(small, audience=SERVER, binding_key=BINDING_KEY, clock=world.clock)
    middleware = BoundStateMiddleware(codec, principal=lambda ctx: None)
    with pytest.raises(MCPError) as internal:
        run(lambda: middleware(_request({"name": "provision"}), _state_result("x" * 1000)))
    assert internal.value.error.message == "Internal error"
    assert "x" * 20 not in str(internal.value.error)
