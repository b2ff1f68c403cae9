"""Any codec as the MCP SDK's request-state codec, in a real MCPServer with an in-memory Client.

Reusable by every codec's tests::

    from tests.mcp_flows import assert_mcp_rejects, run_mcp_flows

    report = run_mcp_flows(MyCodec(...))         # tool, resolver tool, prompt, resource template
    assert_mcp_rejects(MyCodec(...), tamper, reason="seal")

`run_mcp_flows` drives four multi-round flows to completion with elicitation
answered by the client callback, and checks that every round's
``requestState`` on the wire was sealed by the codec and came back verbatim.
`assert_mcp_rejects` sends a bad token (a string, or a function of a genuine
round-one token) and checks the SDK's frozen -32602 answer and the reason
code the server logged. Both accept a whole `RequestStateSecurity`, or a
codec, which they hand the SDK the documented way (`statecodec.mcp.security`),
and have `*_async` twins for tests already inside an event loop.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
from mcp import Client, MCPError
from mcp.client import ClientRequestContext
from mcp.server.mcpserver import Context, Elicit, MCPServer, RequestStateSecurity, Resolve
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    InputRequiredResult,
    InputResponses,
    TextContent,
    TextResourceContents,
)
from pydantic import BaseModel

from statecodec.config import Codec
from statecodec.mcp import security

__all__ = [
    "INVALID_PARAMS",
    "REJECTION_MESSAGE",
    "SDK_LOGGER",
    "SERVER_NAME",
    "STATE_MARKER",
    "TOOL",
    "TOOL_ARGS",
    "FlowReport",
    "Rejection",
    "accept_token",
    "accept_token_async",
    "assert_mcp_rejects",
    "assert_mcp_rejects_async",
    "build_server",
    "mint_token",
    "mint_token_async",
    "run_mcp_flows",
    "run_mcp_flows_async",
    "submit_token",
    "submit_token_async",
]

SERVER_NAME = "statecodec-flows"
TOOL = "provision"
TOOL_ARGS: dict[str, Any] = {"name": "orders"}
INVALID_PARAMS = -32602
REJECTION_MESSAGE = "Invalid or expired requestState"
SDK_LOGGER = "mcp.server.request_state"
# Handler state written in plain text; an encrypting codec must not show it on the wire.
STATE_MARKER = "handler-state-7f3a"

Policy = Codec | RequestStateSecurity


def _ask(field_name: str, message: str) -> ElicitRequest:
    return ElicitRequest(
        params=ElicitRequestFormParams(
            message=message,
            requested_schema={
                "type": "object",
                "properties": {field_name: {"type": "string"}},
                "required": [field_name],
            },
        )
    )


def _answer(responses: dict[str, Any], key: str) -> str | None:
    found = responses.get(key)
    if isinstance(found, ElicitResult) and found.action == "accept" and found.content:
        value = found.content.get(key)
        return value if isinstance(value, str) else None
    return None


class Region(BaseModel):
    region: str


class Tier(BaseModel):
    tier: str


async def _ask_region(name: str) -> Elicit[Region]:
    return Elicit(f"Region for {name}?", Region)


async def _ask_tier(name: str, region: Annotated[Region, Resolve(_ask_region)]) -> Elicit[Tier]:
    return Elicit(f"Tier for {name} in {region.region}?", Tier)


def build_server(security: RequestStateSecurity, *, name: str = SERVER_NAME) -> MCPServer[Any]:
    """An MCPServer whose tool, resolver tool, prompt and resource template each ask before answering."""
    server: MCPServer[Any] = MCPServer(name, request_state_security=security)

    @server.tool(name=TOOL)
    async def provision(name: str, ctx: Context[Any, Any]) -> str | InputRequiredResult:
        """Two rounds of hand-built state: region, then size; the state carries the region."""
        responses = dict(ctx.input_responses or {})
        state: dict[str, str] = json.loads(ctx.request_state) if ctx.request_state else {}
        if "region" not in state:
            region = _answer(responses, "region")
            if region is None:
                return InputRequiredResult(
                    input_requests={"region": _ask("region", f"Region for {name}?")},
                    request_state=json.dumps({"marker": STATE_MARKER}),
                )
            state["region"] = region
        size = _answer(responses, "size")
        if size is None:
            return InputRequiredResult(
                input_requests={"size": _ask("size", f"Size for {name} in {state['region']}?")},
                request_state=json.dumps({**state, "marker": STATE_MARKER}),
            )
        return f"provisioned {name} in {state['region']} at size {size}"

    @server.tool(name="deploy")
    async def deploy(
        name: str,
        region: Annotated[Region, Resolve(_ask_region)],
        tier: Annotated[Tier, Resolve(_ask_tier)],
    ) -> str:
        """Resolver form: the SDK builds both rounds' state itself."""
        return f"deployed {name} in {region.region} on {tier.tier}"

    @server.prompt(name="briefing")
    async def briefing(topic: str, ctx: Context[Any, Any]) -> list[UserMessage] | InputRequiredResult:
        audience = _answer(dict(ctx.input_responses or {}), "audience")
        if audience is None:
            return InputRequiredResult(
                input_requests={"audience": _ask("audience", f"Who is the {topic} briefing for?")},
                request_state=STATE_MARKER,
            )
        return [UserMessage(f"Brief {audience} on {topic} (state {ctx.request_state}).")]

    @server.resource("report://{year}", name="report")
    async def report(year: str, ctx: Context[Any, Any]) -> str | InputRequiredResult:
        fmt = _answer(dict(ctx.input_responses or {}), "format")
        if fmt is None:
            return InputRequiredResult(
                input_requests={"format": _ask("format", f"Format of the {year} report?")},
                request_state=STATE_MARKER,
            )
        return f"report {year} as {fmt} (state {ctx.request_state})"

    return server


class _Recorder:
    """Passes every call to `inner` and records tokens in both directions."""

    def __init__(self, inner: Codec) -> None:
        self.inner = inner
        self.sealed: list[str] = []
        self.unsealed: list[str] = []

    def seal(self, payload: bytes) -> str:
        token = self.inner.seal(payload)
        self.sealed.append(token)
        return token

    def unseal(self, token: str) -> bytes:
        self.unsealed.append(token)
        return self.inner.unseal(token)


def _security(policy: Policy, codec: Codec | None = None) -> RequestStateSecurity:
    """`policy` as a RequestStateSecurity, its codec optionally replaced (same ttl, principal, audience)."""
    if isinstance(policy, RequestStateSecurity):
        if codec is None:
            return policy
        return RequestStateSecurity(
            codec=codec, ttl=policy.ttl, bind_principal=policy.bind_principal, audience=policy.audience
        )
    return security(codec if codec is not None else policy)


def _codec(policy: Policy) -> Codec:
    return policy.codec if isinstance(policy, RequestStateSecurity) else policy


@dataclass
class FlowReport:
    """What the flows produced: final texts, questions asked, tokens seen in each direction."""

    tool: str = ""
    deploy: str = ""
    prompt: str = ""
    resource: str = ""
    questions: list[str] = field(default_factory=list)
    sealed: list[str] = field(default_factory=list)
    unsealed: list[str] = field(default_factory=list)


async def run_mcp_flows_async(policy: Policy, *, confidential: bool = True) -> FlowReport:
    """Run every flow to completion and check the wire tokens; see the module docstring.

    `confidential=False` is for sign-only codecs (JWS), whose payload is
    readable by design; every other check still applies.
    """
    recorder = _Recorder(_codec(policy))
    server = build_server(_security(policy, recorder))
    report = FlowReport()

    async def on_elicit(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        assert isinstance(params, ElicitRequestFormParams)
        report.questions.append(params.message)
        key = next(iter(params.requested_schema["properties"]))
        return ElicitResult(action="accept", content={key: f"{key}-answer"})

    async with Client(server, elicitation_callback=on_elicit) as client:
        tool = await client.call_tool(TOOL, TOOL_ARGS)
        report.tool = _text(tool)
        deploy = await client.call_tool("deploy", {"name": "web"})
        report.deploy = _text(deploy)
        prompt = await client.get_prompt("briefing", {"topic": "rotation"})
        content = prompt.messages[0].content
        assert isinstance(content, TextContent)
        report.prompt = content.text
        resource = await client.read_resource("report://2026")
        contents = resource.contents[0]
        assert isinstance(contents, TextResourceContents)
        report.resource = contents.text
        audience = policy.audience if isinstance(policy, RequestStateSecurity) else None
        await _check_manual_round(client, recorder.inner, audience or SERVER_NAME)

    report.sealed, report.unsealed = recorder.sealed, recorder.unsealed
    assert report.tool == "provisioned orders in region-answer at size size-answer"
    assert report.deploy == "deployed web in region-answer on tier-answer"
    assert report.prompt == f"Brief audience-answer on rotation (state {STATE_MARKER})."
    assert report.resource == f"report 2026 as format-answer (state {STATE_MARKER})"
    assert report.questions == [
        "Region for orders?",
        "Size for orders in region-answer?",
        "Region for web?",
        "Tier for web in region-answer?",
        "Who is the rotation briefing for?",
        "Format of the 2026 report?",
    ]
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


async def _check_manual_round(client: Client, codec: Codec, audience: str) -> None:
    """Round one by hand: the wire token unseals with the codec to the SDK's envelope of our state."""
    first = await client.session.call_tool(TOOL, TOOL_ARGS, allow_input_required=True)
    assert isinstance(first, InputRequiredResult)
    assert first.request_state is not None
    envelope = json.loads(codec.unseal(first.request_state))
    assert json.loads(envelope["s"]) == {"marker": STATE_MARKER}
    assert envelope["aud"] == audience
    assert envelope["m"] == "tools/call"
    assert envelope["t"] == TOOL


def _readable(token: str) -> str:
    """The token plus every dot-separated segment decoded as base64url: what any client can read."""
    views = [token]
    for segment in token.split("."):
        try:
            views.append(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)).decode("latin-1"))
        except (ValueError, binascii.Error):
            continue
    return "\n".join(views)


def _text(result: CallToolResult) -> str:
    assert not result.is_error, result
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def run_mcp_flows(policy: Policy, *, confidential: bool = True) -> FlowReport:
    """`run_mcp_flows_async` from synchronous code."""

    async def go() -> FlowReport:
        return await run_mcp_flows_async(policy, confidential=confidential)

    return anyio.run(go)


async def mint_token_async(policy: Policy, *, server_name: str = SERVER_NAME) -> str:
    """A genuine round-one token for `TOOL(TOOL_ARGS)`, sealed by a server named `server_name`."""
    async with Client(build_server(_security(policy), name=server_name)) as client:
        first = await client.session.call_tool(TOOL, TOOL_ARGS, allow_input_required=True)
    assert isinstance(first, InputRequiredResult)
    assert first.request_state is not None
    return first.request_state


def mint_token(policy: Policy, *, server_name: str = SERVER_NAME) -> str:
    async def go() -> str:
        return await mint_token_async(policy, server_name=server_name)

    return anyio.run(go)


@dataclass
class Rejection:
    """The wire error and the server log for one refused round."""

    code: int
    message: str
    data: object
    reasons: list[str]
    log_records: list[logging.LogRecord]

    @property
    def reason(self) -> str:
        assert len(self.reasons) == 1, f"expected one logged rejection, got {self.reasons}"
        return self.reasons[0]


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def _sdk_log() -> Iterator[_Capture]:
    logger = logging.getLogger(SDK_LOGGER)
    capture = _Capture()
    previous = logger.level
    logger.addHandler(capture)
    logger.setLevel(logging.DEBUG)
    try:
        yield capture
    finally:
        logger.removeHandler(capture)
        logger.setLevel(previous)


def _reason(record: logging.LogRecord) -> str | None:
    message = record.getMessage()
    prefix = "requestState rejected on "
    if not message.startswith(prefix):
        return None
    return message.split(": ", 1)[1]


async def _round_two(
    policy: Policy, token: str, *, server_name: str, arguments: dict[str, Any] | None
) -> CallToolResult | InputRequiredResult | Rejection:
    answer: InputResponses = {"region": ElicitResult(action="accept", content={"region": "region-answer"})}
    args = TOOL_ARGS if arguments is None else arguments
    with _sdk_log() as capture:
        async with Client(build_server(_security(policy), name=server_name)) as client:
            try:
                return await client.session.call_tool(
                    TOOL, args, input_responses=answer, request_state=token, allow_input_required=True
                )
            except MCPError as exc:
                error = exc.error
    records = list(capture.records)
    reasons = [r for r in map(_reason, records) if r is not None]
    return Rejection(error.code, error.message, error.data, reasons, records)


async def submit_token_async(
    policy: Policy, token: str, *, server_name: str = SERVER_NAME, arguments: dict[str, Any] | None = None
) -> Rejection:
    """Send `token` as round two of `TOOL` (default `TOOL_ARGS`); return the rejection, fail if accepted."""
    outcome = await _round_two(policy, token, server_name=server_name, arguments=arguments)
    if not isinstance(outcome, Rejection):
        raise AssertionError(f"the server accepted the token: {outcome!r}")
    return outcome


def submit_token(
    policy: Policy, token: str, *, server_name: str = SERVER_NAME, arguments: dict[str, Any] | None = None
) -> Rejection:
    async def go() -> Rejection:
        return await submit_token_async(policy, token, server_name=server_name, arguments=arguments)

    return anyio.run(go)


async def accept_token_async(policy: Policy, token: str, *, server_name: str = SERVER_NAME) -> None:
    """Send `token` as round two of `TOOL(TOOL_ARGS)` and check the server carried on to round three."""
    outcome = await _round_two(policy, token, server_name=server_name, arguments=None)
    if isinstance(outcome, Rejection):
        raise AssertionError(f"the server rejected the token: {outcome.reasons}")
    # Round two answers the region and asks for the size, under a fresh token.
    assert isinstance(outcome, InputRequiredResult)
    assert outcome.input_requests is not None
    assert set(outcome.input_requests) == {"size"}
    assert outcome.request_state not in (None, token)


def accept_token(policy: Policy, token: str, *, server_name: str = SERVER_NAME) -> None:
    async def go() -> None:
        await accept_token_async(policy, token, server_name=server_name)

    anyio.run(go)


async def assert_mcp_rejects_async(
    policy: Policy,
    bad_token: str | Callable[[str], str],
    *,
    reason: str | Collection[str] | None = None,
    minted_by: Policy | None = None,
    minted_on: str = SERVER_NAME,
    server_name: str = SERVER_NAME,
) -> str:
    """Check the SDK refuses `bad_token` with its frozen error and our logged reason; return the reason.

    `bad_token` is a token, or a function applied to a genuine round-one token
    sealed by `minted_by` (default: `policy`) on a server named `minted_on`.
    `reason` is the expected reason code, or a collection of acceptable ones.
    The log must carry the reason without a traceback (a codec that raises
    anything but the SDK's `InvalidRequestState` is logged as "codec error"
    with one) and without the token text.
    """
    if callable(bad_token):
        genuine = await mint_token_async(minted_by if minted_by is not None else policy, server_name=minted_on)
        token = bad_token(genuine)
    else:
        token = bad_token
    rejection = await submit_token_async(policy, token, server_name=server_name)
    assert rejection.code == INVALID_PARAMS
    assert rejection.message == REJECTION_MESSAGE
    assert rejection.data == {"reason": "invalid_request_state"}
    got = rejection.reason
    if reason is not None:
        allowed = {reason} if isinstance(reason, str) else set(reason)
        assert got in allowed, f"logged reason {got!r}, expected {sorted(allowed)}"
    for record in rejection.log_records:
        assert record.exc_info is None, f"traceback logged: {record.getMessage()}"
        if len(token) >= 8:
            assert token not in record.getMessage()
    return got


def assert_mcp_rejects(
    policy: Policy,
    bad_token: str | Callable[[str], str],
    *,
    reason: str | Collection[str] | None = None,
    minted_by: Policy | None = None,
    minted_on: str = SERVER_NAME,
    server_name: str = SERVER_NAME,
) -> str:
    """`assert_mcp_rejects_async` from synchronous code."""

    async def go() -> str:
        return await assert_mcp_rejects_async(
            policy, bad_token, reason=reason, minted_by=minted_by, minted_on=minted_on, server_name=server_name
        )

    return anyio.run(go)
