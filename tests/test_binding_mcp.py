"""A lowlevel MCP `Server` protected by the SDK's own `RequestStateBoundary` around a statecodec codec.

The lowlevel tier seals nothing by itself: `requestState` crosses the wire as the handler wrote it.
Appending the SDK's `RequestStateBoundary` around the codec itself (as
`examples/lowlevel_server.py` does) gives it what `MCPServer` has: handlers read and write plaintext,
and every refusal is the SDK's frozen -32602 answer with our reason code in the server log only.
"""

from __future__ import annotations

import json

import anyio
import pytest
from examples import lowlevel_server
from examples.lowlevel_server import SERVICE, build_server
from mcp.types import CallToolResult, TextContent

from statecodec import AESGCMCodec
from statecodec._encoding import b64u_decode, b64u_encode
from tests.mcp_flows import INVALID_PARAMS, REJECTION_MESSAGE, Rejection, mint_token, round_one, round_two, submit_token

KEY = bytes(range(32))
OTHER_KEY = bytes(range(64, 96))


def refuse(server: object, token: str, arguments: dict[str, str] | None = None) -> Rejection:
    outcome = round_two(server, token, arguments)
    assert isinstance(outcome, Rejection), f"the server accepted the token: {outcome!r}"
    assert (outcome.code, outcome.message, outcome.data) == (
        INVALID_PARAMS, REJECTION_MESSAGE, {"reason": "invalid_request_state"}
    )  # fmt: skip
    assert all(r.exc_info is None for r in outcome.log_records)  # a reason, never a traceback
    return outcome


def _flip(token: str) -> str:
    raw = bytearray(b64u_decode(token))
    raw[len(raw) // 2] ^= 0x01
    return b64u_encode(bytes(raw))


def test_flow_completes_and_the_handler_sees_only_plaintext() -> None:
    server = build_server(AESGCMCodec([KEY]))
    wire = anyio.run(round_one, server)
    # The wire token is our codec's, sealing the SDK's envelope around the handler's plaintext.
    assert b"asked-region" not in b64u_decode(wire)
    envelope = json.loads(AESGCMCodec([KEY]).unseal(wire))
    assert (envelope["s"], envelope["aud"], envelope["t"]) == ("asked-region", SERVICE, "provision")
    done = round_two(server, wire)  # the handler asks again unless it reads its own plaintext back
    assert isinstance(done, CallToolResult)
    assert done.content == [TextContent(type="text", text="provisioned orders in region-answer for alice")]


def test_same_refusals_as_mcpserver(monkeypatch: pytest.MonkeyPatch) -> None:
    server = build_server(AESGCMCodec([KEY]))
    token = anyio.run(round_one, server)
    sdk_codec = AESGCMCodec([KEY])
    sdk_token = mint_token(sdk_codec)
    cases = [
        ("tampered", refuse(server, _flip(token)), submit_token(sdk_codec, _flip(sdk_token))),
        ("other args", refuse(server, token, {"name": "billing"}),
         submit_token(sdk_codec, sdk_token, arguments={"name": "billing"})),
        ("other audience", refuse(build_server(AESGCMCodec([KEY]), "another-service"), token),
         submit_token(sdk_codec, sdk_token, server_name="another-service")),
        ("foreign key", refuse(build_server(AESGCMCodec([OTHER_KEY])), token),
         submit_token(AESGCMCodec([OTHER_KEY]), sdk_token)),
    ]  # fmt: skip
    assert [(name, ours.reasons, theirs.reason) for name, ours, theirs in cases] == [
        ("tampered", ["seal"], "seal"),
        ("other args", ["request binding"], "request binding"),
        ("other audience", ["audience"], "audience"),
        ("foreign key", ["unknown_key"], "unknown_key"),
    ]
    monkeypatch.setattr(lowlevel_server, "current_user", "mallory")
    assert refuse(server, token).reasons == ["principal"]


def test_unsealed_plaintext_state_is_refused() -> None:
    # What a lowlevel server without the boundary would have put on the wire.
    assert refuse(build_server(AESGCMCodec([KEY])), "asked-region").reasons == ["malformed"]
