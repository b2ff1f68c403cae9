"""A lowlevel MCP `Server` with the SDK's own `RequestStateBoundary` around a statecodec codec, as
`examples/lowlevel_server.py` builds it: handlers see plaintext, refusals are `MCPServer`'s, reasons in the log only."""

from __future__ import annotations

import json

import anyio
import pytest
from examples import lowlevel_server
from examples.lowlevel_server import SERVICE, build_server
from mcp.types import CallToolResult, TextContent

from statecodec import AESGCMCodec
from statecodec._encoding import b64u_decode
from tests.codecs import flip
from tests.mcp_flows import assert_mcp_rejects, mint_token, refused, round_one, round_two

KEY, OTHER_KEY = bytes(range(32)), bytes(range(64, 96))


def test_same_refusals_as_mcpserver(monkeypatch: pytest.MonkeyPatch) -> None:
    server = build_server(AESGCMCodec([KEY]))
    token = anyio.run(round_one, server)
    assert b"asked-region" not in b64u_decode(token)  # our codec's token, sealing the SDK's envelope
    envelope = json.loads(AESGCMCodec([KEY]).unseal(token))
    assert (envelope["s"], envelope["aud"], envelope["t"]) == ("asked-region", SERVICE, "provision")
    done = round_two(server, token)  # the handler asks again unless it reads its own plaintext back
    assert isinstance(done, CallToolResult)
    assert done.content == [TextContent(type="text", text="provisioned orders in region-answer for alice")]
    sdk_codec, sdk_token = AESGCMCodec([KEY]), mint_token(AESGCMCodec([KEY]))
    assert [refused(server, flip(token)), refused(server, token, {"name": "billing"}),
            refused(build_server(AESGCMCodec([KEY]), "another-service"), token),
            refused(build_server(AESGCMCodec([OTHER_KEY])), token), refused(server, "asked-region")] == [
        assert_mcp_rejects(sdk_codec, flip(sdk_token)),
        assert_mcp_rejects(sdk_codec, sdk_token, arguments={"name": "billing"}),
        assert_mcp_rejects(sdk_codec, sdk_token, server_name="another-service"),
        assert_mcp_rejects(AESGCMCodec([OTHER_KEY]), sdk_token), "malformed",
    ] == ["seal", "request binding", "audience", "unknown_key", "malformed"]  # fmt: skip
    monkeypatch.setattr(lowlevel_server, "current_user", "mallory")
    assert refused(server, token) == "principal"
