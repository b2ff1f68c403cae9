"""What BoundCodec adds to one MCP round against what the SDK's RequestStateBoundary adds (not a test).

One retried tools/call by an authenticated client, both ways: the boundary as its ``__call__`` runs it (request
identity, unseal and seal of a 300-byte state, a principal), and BoundCodec's unseal and seal with the request
context. What each adds is its round minus the bare codec's unseal and seal (and, for the SDK, minus the handler
it awaits). Every operation is timed in each round in a fresh order (`statecodec bench`'s `interleave`); the
figure is the median over rounds of BoundCodec's added cost over the SDK's in the same round.

Run: ``python benchmarks/mcp_round.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable, Coroutine
from typing import Any, cast

from mcp.server.context import ServerRequestContext
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity

from statecodec import AESGCMCodec, BoundCodec
from statecodec.binding import mcp_request_context
from statecodec.cli.bench import interleave

METHOD, PRINCIPAL = "tools/call", '{"client_id":"app-1","issuer":"https://id.example.com","subject":"user-42"}'
PARAMS: dict[str, Any] = {"name": "provision", "arguments": {"name": "orders", "tier": "standard", "replicas": 3}}
STATE = b'{"flow":"provision","step":2,"cursor":"' + b"c" * 257 + b'"}'


def finish(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """The result of a coroutine that never suspends, without an event loop's cost in the figure."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("the boundary suspended; it cannot be timed without an event loop")


def operations() -> dict[str, Callable[[], object]]:
    codec = AESGCMCodec([os.urandom(32)])
    answer = {"resultType": "input_required", "requestState": STATE.decode()}

    async def handler(ctx: object) -> dict[str, str]:
        return answer

    def request(params: dict[str, Any]) -> Any:  # the boundary reads only the method and the params
        return ServerRequestContext(
            session=cast(Any, None), lifespan_context={}, protocol_version="2026-07-28", method=METHOD, params=params
        )

    boundary = RequestStateBoundary(
        RequestStateSecurity(codec=codec, bind_principal=lambda ctx: PRINCIPAL), default_audience="bench"
    )
    retry = request({**PARAMS, "requestState": finish(boundary(request(PARAMS), handler))["requestState"]})
    bound = BoundCodec(codec, audience="bench", binding_key=os.urandom(32))
    bound_token = bound.seal(STATE, principal=PRINCIPAL, context=mcp_request_context(METHOD, retry.params))
    bare_token = codec.seal(STATE)

    def bound_round() -> str:
        context = mcp_request_context(METHOD, retry.params)
        bound.unseal(bound_token, principal=PRINCIPAL, context=context)
        return bound.seal(STATE, principal=PRINCIPAL, context=context)

    ops: dict[str, Callable[[], object]] = {
        "bare": lambda: (codec.unseal(bare_token), codec.seal(STATE)),
        "BoundCodec": bound_round,
        "handler": lambda: finish(handler(retry)),
        "boundary": lambda: finish(boundary(retry, handler)),
    }
    for op in ops.values():
        op()  # a round either side refuses raises here, before anything is timed
    return ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=101)
    rounds = parser.parse_args().rounds
    values = interleave(operations(), rounds)
    bare, bound, handler, sdk = (values[k] for k in ("bare", "BoundCodec", "handler", "boundary"))
    ratio = statistics.median((b - c) / (s - h - c) for b, c, s, h in zip(bound, bare, sdk, handler, strict=True))
    print(f"MCP round ({rounds} rounds): BoundCodec adds {ratio:.2f}x of what the SDK's RequestStateBoundary adds")


if __name__ == "__main__":
    main()
