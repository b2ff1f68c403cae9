"""Any codec (or a whole `RequestStateSecurity`) as the MCP SDK's request-state codec, in a real MCPServer, FastMCP
or lowlevel `Server` (`KINDS`: the contract tests run on each).

`run_mcp_flows` drives a tool, a resolver tool, a prompt and a resource template to completion and checks every wire
token; `assert_mcp_rejects` sends a bad token and checks the SDK's frozen -32602 answer and the reason logged.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import logging.handlers
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Annotated, Any

import anyio
import anyio.to_thread
import httpx
from examples import fleet_server
from mcp import Client, MCPError
from mcp import types as sdk
from mcp.server import Server
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, Elicit, MCPServer, RequestStateSecurity, Resolve
from mcp.server.request_state import RequestStateBoundary
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult, ErrorData, InputRequiredResult
from pydantic import BaseModel

from statecodec import AESGCMCodec, Codec, generate_key
from statecodec.mcp import SingleUseMiddleware
from statecodec.middleware import sdk_server
from statecodec.single_use import SingleUse
from statecodec.store import MemoryStore, Store

SERVER_NAME = "statecodec-flows"
TOOL = "provision"
TOOL_ARGS: dict[str, Any] = {"name": "orders"}
INVALID_PARAMS = -32602
REJECTION_MESSAGE = "Invalid or expired requestState"
SDK_LOGGER = "mcp.server.request_state"
STATE_MARKER = "handler-state-7f3a"  # handler state in plain text; an encrypting codec must not show it
KEY, STORE_KEY = generate_key(), generate_key()  # the codec's key where a test needs no other, single use's store key
HTTP = SimpleNamespace(url="http://127.0.0.1:8000/mcp")  # examples/fleet_server.py's app, as `serving` serves it

Policy = Codec | RequestStateSecurity
KINDS = ("MCPServer", "FastMCP", "Server")  # "Server": the SDK's lowlevel one; pytest.mark.parametrize("kind", KINDS)


def _ask(key: str, message: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {key: {"type": "string"}}, "required": [key]}
    return {key: ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))}


def answer(responses: dict[str, Any] | None, key: str) -> str | None:
    """The accepted answer to `key` among a round's input responses."""
    found = (responses or {}).get(key)
    value = found.content.get(key) if isinstance(found, ElicitResult) and found.content else None
    return value if isinstance(value, str) else None


class Region(BaseModel):
    region: str


class Tier(BaseModel):
    tier: str


async def _ask_region(name: str) -> Elicit[Region]:
    return Elicit(f"Region for {name}?", Region)


async def _ask_tier(name: str, region: Annotated[Region, Resolve(_ask_region)]) -> Elicit[Tier]:
    return Elicit(f"Tier for {name} in {region.region}?", Tier)


def guarded(middleware: SingleUseMiddleware, kind: str = "MCPServer") -> dict[str, Any]:
    """The options that put `middleware` on a server of `kind`, as the docs show: FastMCP takes its lifespan alone;
    a lowlevel `Server` gets it appended after its boundary."""
    if kind == "FastMCP":
        return {"lifespan": middleware.lifespan}
    return {"middleware": [middleware], "lifespan": middleware.lifespan}


Step = Callable[[str, Any], Awaitable[Any]]  # a tool's round: its `name`, what has `request_state`, `input_responses`


async def _provision(name: str, ctx: Any) -> str | InputRequiredResult:
    """Two rounds of hand-built state: region, then size; the state carries the region."""
    state: dict[str, str] = json.loads(ctx.request_state) if ctx.request_state else {}
    region = state.get("region") or answer(ctx.input_responses, "region")
    if region is None:
        ask = _ask("region", f"Region for {name}?")
        return InputRequiredResult(input_requests=ask, request_state=json.dumps({"marker": STATE_MARKER}))
    size = answer(ctx.input_responses, "size")
    if size is None:
        ask = _ask("size", f"Size for {name} in {region}?")
        state = {"region": region, "marker": STATE_MARKER}
        return InputRequiredResult(input_requests=ask, request_state=json.dumps(state))
    return f"provisioned {name} in {region} at size {size}"


async def _deploy(name: str, ctx: Any) -> str | InputRequiredResult:
    """The resolver tool's two rounds by hand, where the server has no `Resolve`."""
    region = json.loads(ctx.request_state or "{}").get("region") or answer(ctx.input_responses, "region")
    if region is None:
        return InputRequiredResult(input_requests=_ask("region", f"Region for {name}?"), request_state="{}")
    tier = answer(ctx.input_responses, "tier")
    if tier is None:
        ask = _ask("tier", f"Tier for {name} in {region}?")
        return InputRequiredResult(input_requests=ask, request_state=json.dumps({"region": region}))
    return f"deployed {name} in {region} on {tier}"


def _briefing(topic: str, ctx: Any) -> str | InputRequiredResult:
    if (audience := answer(ctx.input_responses, "audience")) is None:
        ask = _ask("audience", f"Who is the {topic} briefing for?")
        return InputRequiredResult(input_requests=ask, request_state=STATE_MARKER)
    return f"Brief {audience} on {topic} (state {ctx.request_state})."


def _report(year: str, ctx: Any) -> str | InputRequiredResult:
    if (fmt := answer(ctx.input_responses, "format")) is None:
        ask = _ask("format", f"Format of the {year} report?")
        return InputRequiredResult(input_requests=ask, request_state=STATE_MARKER)
    return f"report {year} as {fmt} (state {ctx.request_state})"


def build_server(policy: RequestStateSecurity, *, name: str = SERVER_NAME, kind: str = "MCPServer",
                 tool: Step = _provision, **options: Any) -> Any:
    """A server of `kind` whose tool (`tool`'s rounds), resolver tool, prompt and resource template each ask before
    answering; `options` go to its constructor (``middleware``, ``lifespan``, ...)."""
    if kind != "MCPServer":
        return (build_fastmcp if kind == "FastMCP" else build_lowlevel)(policy, name=name, tool=tool, **options)
    server: MCPServer[Any] = MCPServer(name, request_state_security=policy, **options)

    @server.tool(name=TOOL)
    async def provision(name: str, ctx: Context[Any, Any]) -> str | InputRequiredResult:
        return await tool(name, ctx)  # type: ignore[no-any-return]

    @server.tool(name="deploy")
    async def deploy(
        name: str, region: Annotated[Region, Resolve(_ask_region)], tier: Annotated[Tier, Resolve(_ask_tier)]
    ) -> str:
        """Resolver form: the SDK builds both rounds' state itself."""
        return f"deployed {name} in {region.region} on {tier.tier}"

    @server.prompt(name="briefing")
    async def briefing(topic: str, ctx: Context[Any, Any]) -> str | InputRequiredResult:
        return _briefing(topic, ctx)

    @server.resource("report://{year}", name="report")
    async def report(year: str, ctx: Context[Any, Any]) -> str | InputRequiredResult:
        return _report(year, ctx)

    return server


def build_fastmcp(policy: RequestStateSecurity, *, name: str = SERVER_NAME, tool: Step = _provision,
                  **options: Any) -> Any:
    """`build_server`'s components on a FastMCP server, each written as a FastMCP user does (the resolver tool by
    hand: FastMCP has no `Resolve`)."""
    from fastmcp import FastMCP
    from fastmcp.server.dependencies import get_context

    server = FastMCP(name, request_state_security=policy, **options)

    @server.tool(name=TOOL)
    async def provision(name: str) -> str | InputRequiredResult:
        return await tool(name, get_context())  # type: ignore[no-any-return]

    @server.tool(name="deploy")
    async def deploy(name: str) -> str | InputRequiredResult:
        return await _deploy(name, get_context())

    @server.prompt(name="briefing")
    async def briefing(topic: str) -> str | InputRequiredResult:
        return _briefing(topic, get_context())

    @server.resource("report://{year}", name="report")
    async def report(year: str) -> str | InputRequiredResult:
        return _report(year, get_context())

    return server


def build_lowlevel(policy: RequestStateSecurity, *, name: str = SERVER_NAME, middleware: Collection[Any] = (),
                   lifespan: Any = None, tool: Step = _provision, tools: dict[str, Step] | None = None) -> Server[Any]:
    """`build_server`'s components on the SDK's lowlevel `Server` (`tools` in place of its two), as
    docs/two-round-tools.md builds one: the SDK's boundary, then `middleware` after it; `lifespan` as its own."""
    steps = tools or {TOOL: tool, "deploy": _deploy}

    async def list_tools(ctx: Any, params: Any) -> sdk.ListToolsResult:
        schema = {"type": "object", "properties": {"name": {"type": "string"}}}
        return sdk.ListToolsResult(tools=[sdk.Tool(name=tool, input_schema=schema) for tool in steps])

    async def call_tool(ctx: Any, params: sdk.CallToolRequestParams) -> sdk.CallToolResult | InputRequiredResult:
        out = await steps[params.name](str((params.arguments or {}).get("name")), params)
        if isinstance(out, InputRequiredResult):
            return out
        data = out.model_dump() if isinstance(out, BaseModel) else None  # a model is structured content too
        text = out.model_dump_json() if isinstance(out, BaseModel) else str(out)
        return sdk.CallToolResult(content=[sdk.TextContent(text=text)], structured_content=data)

    async def get_prompt(ctx: Any, params: sdk.GetPromptRequestParams) -> Any:
        out = _briefing((params.arguments or {})["topic"], params)
        message = sdk.PromptMessage(role="user", content=sdk.TextContent(text=str(out)))
        return out if isinstance(out, InputRequiredResult) else sdk.GetPromptResult(messages=[message])

    async def read_resource(ctx: Any, params: sdk.ReadResourceRequestParams) -> Any:
        out = _report(str(params.uri).removeprefix("report://"), params)
        contents = sdk.TextResourceContents(uri=params.uri, text=str(out))
        return out if isinstance(out, InputRequiredResult) else sdk.ReadResourceResult(contents=[contents])

    server: Server[Any] = Server(name, on_list_tools=list_tools, on_call_tool=call_tool, on_get_prompt=get_prompt,
                                 on_read_resource=read_resource)
    server.lifespan = lifespan or server.lifespan
    server.middleware += [RequestStateBoundary(policy, default_audience=name), *middleware]
    return server


def client(server: Any, **options: Any) -> Client:
    """The SDK's in-memory client of `server` (on FastMCP, of its lowlevel server, whose lifespan runs FastMCP's)."""
    return Client(sdk_server(server), **options)


class FlowReport:
    """The codec of the flows, passing every call to `inner`: the tokens it saw in each direction; then the final
    texts and the questions asked."""

    def __init__(self, inner: Codec) -> None:
        self.inner = inner
        self.sealed, self.unsealed, self.texts, self.questions = list[str](), list[str](), list[str](), list[str]()

    def seal(self, payload: bytes) -> str:
        self.sealed.append(self.inner.seal(payload))
        return self.sealed[-1]

    def unseal(self, token: str) -> bytes:
        self.unsealed.append(token)
        return self.inner.unseal(token)


def single_use(store: Store | None = None, **options: Any) -> SingleUseMiddleware:
    """Single use over `store` (a new in-process one by default), as the SDK's middleware; `options` go to it."""
    return SingleUseMiddleware(SingleUse(store or MemoryStore(), key=STORE_KEY, ttl=600), **options)


@contextlib.asynccontextmanager
async def serving(middleware: SingleUseMiddleware, kind: str = "MCPServer", **policy: Any
                  ) -> AsyncIterator[httpx.AsyncClient]:
    """examples/fleet_server.py's app of `kind` with `middleware`, served in this process at `HTTP`: a client of it."""
    security = RequestStateSecurity(codec=AESGCMCodec([KEY]), **policy)
    async def provision(name: str, ctx: Any) -> Any:
        return fleet_server.provisioned(name, ctx.input_responses, ctx.request_state)

    if kind == "Server":  # the fleet example's tools; `instance` in a worker thread, as the SDK runs a sync tool
        lowlevel = build_lowlevel(security, name=fleet_server.SERVER_NAME, **guarded(middleware, kind), tools={
            TOOL: provision, "instance": lambda *_: anyio.to_thread.run_sync(fleet_server.instance_id)})
        auth = AuthSettings(issuer_url=fleet_server.DEMO_ISSUER, resource_server_url=None)
        app = lowlevel.streamable_http_app(streamable_http_path=fleet_server.MCP_PATH, auth=auth,
                                           token_verifier=fleet_server.DemoTokenVerifier())
    else:
        build = fleet_server.build_fastmcp if kind == "FastMCP" else fleet_server.build_server
        app = fleet_server.app_for(build(security, demo_auth=True, **guarded(middleware, kind)), "127.0.0.1")
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as client:
            yield client


def _security(policy: Policy, codec: Codec | None = None) -> RequestStateSecurity:
    """`policy` as a RequestStateSecurity, its codec optionally replaced (same ttl, principal, audience)."""
    if not isinstance(policy, RequestStateSecurity):
        return RequestStateSecurity(codec=codec or policy)
    if codec is None:
        return policy
    principal, audience = policy.bind_principal, policy.audience
    return RequestStateSecurity(codec=codec, ttl=policy.ttl, bind_principal=principal, audience=audience)


def run_mcp_flows(policy: Policy, *, confidential: bool = True, **server_options: Any) -> FlowReport:
    """Run every flow to completion and check the wire tokens (`confidential=False`: sign-only codecs);
    `server_options` go to `build_server` (``kind``, ``middleware``, ``lifespan``)."""
    inner = policy.codec if isinstance(policy, RequestStateSecurity) else policy
    report = FlowReport(inner)

    async def on_elicit(context: Any, params: Any) -> ElicitResult:
        report.questions.append(params.message)
        key = next(iter(params.requested_schema["properties"]))
        return ElicitResult(action="accept", content={key: f"{key}-answer"})

    async def flows() -> None:
        server = build_server(_security(policy, report), **server_options)
        async with client(server, elicitation_callback=on_elicit) as connected:
            for result in [await connected.call_tool(TOOL, TOOL_ARGS),
                           await connected.call_tool("deploy", {"name": "web"})]:
                assert not result.is_error, result
                report.texts.append(getattr(result.content[0], "text", ""))
            prompt = await connected.get_prompt("briefing", {"topic": "rotation"})
            report.texts.append(getattr(prompt.messages[0].content, "text", ""))
            report.texts.append(getattr((await connected.read_resource("report://2026")).contents[0], "text", ""))
            first = await connected.session.call_tool(TOOL, TOOL_ARGS, allow_input_required=True)
        # Round one by hand: the wire token unseals with the codec to the SDK's envelope of our state.
        assert isinstance(first, InputRequiredResult)
        envelope = json.loads(inner.unseal(first.request_state or ""))
        assert envelope["s"].endswith(json.dumps({"marker": STATE_MARKER}))  # after a single-use stamp, if any
        audience = policy.audience if isinstance(policy, RequestStateSecurity) else None
        assert (envelope["aud"], envelope["m"], envelope["t"]) == (audience or SERVER_NAME, "tools/call", TOOL)

    anyio.run(flows)
    assert report.texts == ["provisioned orders in region-answer at size size-answer",
                            "deployed web in region-answer on tier-answer",
                            f"Brief audience-answer on rotation (state {STATE_MARKER}).",
                            f"report 2026 as format-answer (state {STATE_MARKER})"]
    assert report.questions == ["Region for orders?", "Size for orders in region-answer?", "Region for web?",
                                "Tier for web in region-answer?", "Who is the rotation briefing for?",
                                "Format of the 2026 report?"]
    # Six answered rounds, plus one round-one token from the manual check that is never echoed.
    assert len(report.sealed) == 7
    assert report.unsealed == report.sealed[:6], "the client must echo each round's token verbatim"
    assert len(set(report.sealed)) == len(report.sealed), "each round gets a fresh token"
    for token in report.sealed:
        assert token.isascii()
        assert all(c.isalnum() or c in "-_.~" for c in token), "tokens must be URL-safe"
        if confidential:
            assert STATE_MARKER not in _readable(token), "handler state is readable in the token"
    return report


def _readable(token: str) -> str:
    """The token plus every dot-separated segment decoded as base64url: what any client can read."""
    views = [token]
    for segment in token.split("."):
        with contextlib.suppress(ValueError):  # binascii.Error is one
            views.append(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)).decode("latin-1"))
    return "\n".join(views)


async def round_one(server: Any, arguments: dict[str, Any] | None = None) -> str:
    """A genuine round-one token of `TOOL` from `server` (an MCPServer, a FastMCP or a lowlevel Server)."""
    async with client(server) as connected:
        return await mint(connected, arguments)


def mint_token(policy: Policy) -> str:
    """A genuine round-one token for `TOOL(TOOL_ARGS)`, sealed by a server under `policy`."""
    return str(anyio.run(round_one, build_server(_security(policy))))


def rejections(records: list[logging.LogRecord]) -> list[str]:
    """The reasons logged in `records` for refused tokens (the SDK's boundary, single use), in order."""
    messages = [r.getMessage() for r in records]
    return [m.split(": ", 1)[1] for m in messages if m.startswith("requestState rejected on ")]


@dataclass
class Rejection:
    """The wire error and the server log for one refused round."""

    code: int
    message: str
    data: object
    log_records: list[logging.LogRecord]


async def mint(client: Client, arguments: dict[str, Any] | None = None) -> str:
    """A genuine round-one token of `TOOL` from a connected `client`."""
    first = await client.session.call_tool(TOOL, arguments or TOOL_ARGS, allow_input_required=True)
    assert isinstance(first, InputRequiredResult)
    assert first.request_state is not None
    return first.request_state


async def present(
    client: Client, token: str, arguments: dict[str, Any] | None = None, region: str = "region-answer"
) -> Any:
    """`token` as round two of `TOOL` (answering `region`) on a connected `client`: the result, or the error."""
    responses: dict[str, Any] = {"region": ElicitResult(action="accept", content={"region": region})}
    try:
        return await client.session.call_tool(
            TOOL, arguments or TOOL_ARGS, input_responses=responses, request_state=token, allow_input_required=True
        )
    except MCPError as exc:
        return exc.error


def round_two(server: Any, token: str, arguments: dict[str, Any] | None = None) -> Any:
    """Send `token` as round two of `TOOL` (answering the region); the result, or the `Rejection`."""
    logger, capture = logging.getLogger(SDK_LOGGER), logging.handlers.BufferingHandler(1 << 20)  # keeps every record
    logger.addHandler(capture)  # the boundary logs each refusal as a WARNING, each failure as an ERROR

    async def go() -> Any:
        async with client(server) as connected:
            return await present(connected, token, arguments)

    try:
        outcome = anyio.run(go)
    finally:
        logger.removeHandler(capture)
    if isinstance(outcome, ErrorData):
        return Rejection(outcome.code, outcome.message, outcome.data, capture.buffer)
    return outcome


def refused(server: Any, token: str, arguments: dict[str, Any] | None = None) -> str:
    """The reason `server` logged for refusing `token` as round two of `TOOL`, after checking its answer is the SDK's
    frozen -32602 and its log holds no traceback (a codec raising anything but the SDK's `InvalidRequestState` is
    logged as "codec error" with one) and no token text."""
    rejection = round_two(server, token, arguments)
    assert isinstance(rejection, Rejection), f"the server accepted the token: {rejection!r}"
    assert (rejection.code, rejection.message) == (INVALID_PARAMS, REJECTION_MESSAGE)
    assert rejection.data == {"reason": "invalid_request_state"}
    for record in rejection.log_records:
        assert record.exc_info is None, f"traceback logged: {record.getMessage()}"
        assert len(token) < 8 or token not in record.getMessage()
    reasons = rejections(rejection.log_records)
    assert len(reasons) == 1, f"expected one logged rejection, got {reasons}"
    return reasons[0]


def accept_token(policy: Policy, token: str) -> None:
    """Send `token` as round two of `TOOL(TOOL_ARGS)` and check the server asked for the size next."""
    outcome = round_two(build_server(_security(policy)), token)
    assert not isinstance(outcome, Rejection), f"the server rejected the token: {rejections(outcome.log_records)}"
    assert isinstance(outcome, InputRequiredResult)
    assert set(outcome.input_requests or {}) == {"size"}
    assert outcome.request_state not in (None, token)


def assert_mcp_rejects(
    policy: Policy, bad_token: str | Callable[[str], str], *, reason: str | Collection[str] | None = None,
    server_name: str = SERVER_NAME, arguments: dict[str, Any] | None = None,
) -> str:
    """Check a server under `policy` named `server_name` refuses `bad_token` (see `refused`); return the reason.
    `bad_token` is a token, or a function applied to a genuine round-one token sealed under `policy`."""
    if callable(bad_token):
        bad_token = bad_token(mint_token(policy))
    got = refused(build_server(_security(policy), name=server_name), bad_token, arguments)
    if reason is not None:
        allowed = {reason} if isinstance(reason, str) else set(reason)
        assert got in allowed, f"logged reason {got!r}, expected {sorted(allowed)}"
    return got
