"""A real MCP server and client in one process, with sealed requestState; a tampered token is refused.

The server's tool asks a question and hands the client its state sealed: encrypted and authenticated under a
key only the server holds, so the client can echo it back but neither read nor change it. A token with one
character changed is refused with the SDK's fixed error, and the server's log names only the reason code.

    pip install -e '.[mcp]'
    python examples/demo.py              # a fresh key held only by this process
    python examples/demo.py --from-env   # the codec the STATECODEC_* settings describe
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

import anyio
from mcp import Client, MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult, InputResponses

from statecodec import AESGCMCodec, Codec, StatecodecError, codec_from_env

TOOL, ARGUMENTS, ANSWER = "provision", {"name": "orders"}, {"region": "eu-west-1"}
_ASK_REGION = ElicitRequest(
    params=ElicitRequestFormParams(
        message="Which region should the database live in?",
        requested_schema={"type": "object", "properties": {"region": {"type": "string"}}, "required": ["region"]},
    )
)
_INDENT = " " * 9


def build_server(codec: Codec) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("statecodec-demo", request_state_security=RequestStateSecurity(codec=codec))

    @server.tool(name=TOOL)
    async def provision(name: str, ctx: Context[Any, Any]) -> str | InputRequiredResult:
        """Provision a database; asks which region first."""
        answer = (ctx.input_responses or {}).get("region")
        if not isinstance(answer, ElicitResult) or not answer.content:
            # Plain text state: the server seals it on the way out and verifies it on the way back.
            return InputRequiredResult(input_requests={"region": _ASK_REGION}, request_state='{"step": "ask-region"}')
        return f"Provisioned {name!r} in {answer.content['region']} (state was {ctx.request_state})."

    return server


async def _run(codec: Codec) -> int:
    answers: InputResponses = {"region": ElicitResult(action="accept", content=dict(ANSWER))}
    async with Client(build_server(codec)) as client:
        print(f"round 1  tools/call {TOOL} {json.dumps(ARGUMENTS)}")
        first = await client.session.call_tool(TOOL, ARGUMENTS, allow_input_required=True)
        token = getattr(first, "request_state", None)
        if token is None:
            print(f"{_INDENT}unexpected answer from the server")
            return 1
        print(f"{_INDENT}server asks [region]: {_ASK_REGION.params.message}")
        print(f"{_INDENT}sealed requestState ({len(token)} characters; the state encrypted and authenticated under")
        print(f"{_INDENT}the server's key: the client echoes it back, it cannot read or change it):\n{_INDENT}{token}")
        print(f"round 2  tools/call {TOOL} with answer {json.dumps(ANSWER)} and the requestState echoed")
        second = await client.session.call_tool(TOOL, ARGUMENTS, input_responses=answers, request_state=token)
        print(f"{_INDENT}result: {getattr(second.content[0], 'text', second.content)}\n")
        i = len(token) // 2
        bad = token[:i] + ("B" if token[i] == "A" else "A") + token[i + 1 :]
        print(f"tampered round 2: the same call with one character of the requestState changed:\n{_INDENT}{bad}")
        # The SDK's log line joins the narration on stdout, not the stderr handler MCPServer installs.
        logger, handler = logging.getLogger("mcp.server.request_state"), logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(f"{_INDENT}server log: %(message)s"))
        propagate, logger.propagate = logger.propagate, False
        logger.addHandler(handler)
        try:
            await client.session.call_tool(TOOL, ARGUMENTS, input_responses=answers, request_state=bad)
        except MCPError as exc:
            print(f"{_INDENT}client got error {exc.error.code}: {exc.error.message!r}\n")
            print(_NEXT)
            return 0
        finally:
            logger.removeHandler(handler)
            logger.propagate = propagate
    print(f"{_INDENT}the server accepted a tampered token")
    return 1


_NEXT = """next: protect your own server with a key every instance shares (docs/quickstart.md):
  export STATECODEC_KEYS="$(statecodec keygen)"
  then MCPServer(..., request_state_security=statecodec.mcp.security_from_env())"""


def main() -> int:
    parser = argparse.ArgumentParser(description="An MCP server and client in memory: two rounds, then a tamper.")
    parser.add_argument("--from-env", action="store_true", help="use the STATECODEC_* codec, not a fresh key")
    from_env = parser.parse_args().from_env
    try:
        codec = codec_from_env() if from_env else AESGCMCodec.ephemeral()
    except StatecodecError as exc:  # what to set, in one line
        raise SystemExit(f"demo: cannot start: {exc}") from None
    print("statecodec demo: an MCPServer and a Client in one process, connected in memory")
    print(f"codec: {codec!r}" + ("" if from_env else " (fresh key held only by this process)") + "\n", flush=True)
    return int(anyio.run(_run, codec))


if __name__ == "__main__":
    sys.exit(main())
