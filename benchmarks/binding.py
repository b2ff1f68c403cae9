"""What `BoundCodec` adds to an MCP round beside the SDK's `RequestStateBoundary`, and what a long binding key ring
costs `unseal` (not a test).

1. ``round``: one retried tools/call by an authenticated client, around the same `AESGCMCodec` and ~300-byte state.
   `BoundCodec`'s round is `mcp_request_context`, `unseal` and `seal`; the SDK's is `RequestStateBoundary.__call__`
   around a handler answering ``input_required``, awaited as a server awaits it (it never suspends, so no event
   loop is timed). What each adds is its round minus the codec's own unseal and seal of the state, and for the SDK
   minus its handler too. Figure: BoundCodec's added cost over the SDK's.
2. ``ring``: `unseal` of a token bound under the oldest of 200 binding keys, over `unseal` of the same token by a
   codec holding that key alone: for tokens of the current format (version 0x02, a key id), and of version 0x01
   (read through their lifetime: one HMAC per key tried); ``accept`` as sealed, ``refuse`` presented with another
   context, which any client holding one token can do.
3. ``binding``: the binding work alone, no principal: `mcp_request_context`, `unseal` and `seal` of a ~200-byte
   state with that context, minus the same unseal and seal on the bare `AESGCMCodec`; against the SDK's
   `RequestStateBoundary._unseal` then `._seal` reusing its binding (as its `__call__` drives them, with
   ``bind_principal=None``) minus the same on a bare `AESGCMRequestStateCodec`. Unlike ``round``, no dispatch,
   handler or principal is counted on either side. Figure: BoundCodec's binding work over the SDK's.
4. ``parts``: what two of `BoundCodec`'s choices buy, per call: `json.dumps` with keywords (a new `JSONEncoder` each
   call) against one module-level encoder, and `hmac.new` against copying an HMAC keyed once.

Each round times every operation (in this process's CPU time) in a fresh random order, keeping each operation's
fastest of three batches (`statecodec bench`'s interleaving), so that every side sees the same machine load; a
figure is the median over rounds of the per-round ratio.

Run: ``python benchmarks/binding.py [--rounds 61] [--batch-ms 5]``.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any, cast

from mcp.server.context import ServerRequestContext
from mcp.server.request_state import AESGCMRequestStateCodec, RequestStateBoundary, RequestStateSecurity

from statecodec import AESGCMCodec, BoundCodec, InvalidToken, KeyRing, generate_key
from statecodec.binding import mcp_request_context
from statecodec.cli.bench import interleave
from statecodec.sync import finish

Op = Callable[[], object]
METHOD = "tools/call"
PRINCIPAL = '{"client_id":"app-1","issuer":"https://id.example.com","subject":"user-42"}'
PARAMS: dict[str, Any] = {"name": "provision", "arguments": {"name": "orders", "tier": "standard", "replicas": 3}}
STATE = b'{"step":2,"asked":"region","draft":"' + b"x" * 260 + b'"}'
SMALL_STATE = b'{"step":2,"asked":"region","draft":"' + b"x" * 160 + b'"}'  # ~200 bytes



def round_ops() -> dict[str, Op]:
    """One retried tools/call each way, plus the codec alone (`bare`) and the SDK's handler alone."""
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
    first: dict[str, Any] = cast(dict[str, Any], finish(boundary(request(PARAMS), handler)))
    retry = request({**PARAMS, "requestState": first["requestState"]})
    bound = BoundCodec(codec, audience="bench", binding_key=generate_key())
    bound_token = bound.seal(STATE, principal=PRINCIPAL, context=mcp_request_context(METHOD, retry.params))
    bare_token = codec.seal(STATE)

    def bound_round() -> str:
        context = mcp_request_context(METHOD, retry.params)
        bound.unseal(bound_token, principal=PRINCIPAL, context=context)
        return bound.seal(STATE, principal=PRINCIPAL, context=context)

    return {
        "bare": lambda: (codec.unseal(bare_token), codec.seal(STATE)),
        "bound": bound_round,
        "handler": lambda: finish(handler(retry)),
        "boundary": lambda: finish(boundary(retry, handler)),
    }


def binding_ops() -> dict[str, Op]:
    """The binding work of one round without a principal, each side with its bare codec beside it."""
    codec, sdk_codec = AESGCMCodec([os.urandom(32)]), AESGCMRequestStateCodec([os.urandom(32)])
    bound = BoundCodec(codec, audience="bench", binding_key=generate_key())
    token = bound.seal(SMALL_STATE, context=mcp_request_context(METHOD, PARAMS))
    boundary = RequestStateBoundary(RequestStateSecurity(codec=sdk_codec, bind_principal=None),
                                    default_audience="bench")  # fmt: skip
    state = SMALL_STATE.decode()
    ctx: Any = ServerRequestContext(session=cast(Any, None), lifespan_context={}, protocol_version="2026-07-28",
                                    method=METHOD, params=PARAMS)  # fmt: skip
    retry: Any = ServerRequestContext(session=cast(Any, None), lifespan_context={}, protocol_version="2026-07-28",
                                      method=METHOD, params={**PARAMS, "requestState": boundary._seal(ctx, state)})
    bare_token, sdk_bare_token = codec.seal(SMALL_STATE), sdk_codec.seal(SMALL_STATE)

    def ours() -> str:
        context = mcp_request_context(METHOD, retry.params)
        bound.unseal(token, context=context)
        return bound.seal(SMALL_STATE, context=context)

    def theirs() -> str:  # as RequestStateBoundary.__call__ drives them: unseal, then seal under the same binding
        plaintext, binding = boundary._unseal(retry)
        return boundary._seal(retry, plaintext, binding)

    return {
        "bare": lambda: (codec.unseal(bare_token), codec.seal(SMALL_STATE)),
        "bound": ours,
        "sdk bare": lambda: (sdk_codec.unseal(sdk_bare_token), sdk_codec.seal(SMALL_STATE)),
        "sdk": theirs,
    }


def ring_ops(size: int = 200) -> dict[str, Op]:
    """Unseal under a ring of `size` binding keys, the token's key last, and under that key alone."""
    codec, context = AESGCMCodec([os.urandom(32)]), mcp_request_context(METHOD, PARAMS)
    oldest, others = generate_key(), [generate_key() for _ in range(size - 1)]
    ops: dict[str, Op] = {}
    for version in (2, 1):
        sealer = BoundCodec(codec, audience="bench", binding_key=oldest, seal_version=version)
        token = sealer.seal(STATE, principal=PRINCIPAL, context=context)
        for name, ring in (("1", [oldest]), (str(size), [*others, oldest])):
            bound = BoundCodec(codec, audience="bench", binding_key=KeyRing(ring))

            def accept(bound: BoundCodec = bound, token: str = token) -> object:
                return bound.unseal(token, principal=PRINCIPAL, context=context)

            def refuse(bound: BoundCodec = bound, token: str = token) -> object:
                try:
                    return bound.unseal(token, principal=PRINCIPAL, context={})
                except InvalidToken as refused:
                    return refused

            ops[f"v{version}/{name}/accept"], ops[f"v{version}/{name}/refuse"] = accept, refuse
    return ops


def part_ops() -> dict[str, Op]:
    """The alternatives `statecodec.binding` chose between, on a round's own inputs."""
    arguments, encoder = PARAMS["arguments"], json.JSONEncoder(sort_keys=True, separators=(",", ":"))
    key, prefix, message = generate_key(), b"\x00\x00\x00\x05bench\x00\x00\x00\x0drequest-state", STATE[:120]
    keyed = hmac.new(key, prefix, "sha256")

    def copied() -> bytes:
        mac = keyed.copy()
        mac.update(message)
        return mac.digest()

    return {
        "dumps": lambda: json.dumps(arguments, sort_keys=True, separators=(",", ":")),
        "encoder": lambda: encoder.encode(arguments),
        "hmac.new": lambda: hmac.new(key, prefix + message, "sha256").digest(),
        "copy": copied,
    }


def check(ops: dict[str, Op]) -> dict[str, Op]:
    """`ops`, once each side that should accept was seen to accept: a side that refuses is not timing a round."""
    for key, op in ops.items():
        if isinstance(op(), InvalidToken) and "refuse" not in key:
            raise RuntimeError(f"{key} refused its token")
    return ops


def median_ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=61)
    parser.add_argument("--batch-ms", type=float, default=5.0)
    args = parser.parse_args()
    ops = {f"round/{k}": op for k, op in round_ops().items()}
    ops.update({f"binding/{k}": op for k, op in binding_ops().items()})
    ops.update({f"ring/{k}": op for k, op in ring_ops().items()})
    ops.update({f"part/{k}": op for k, op in part_ops().items()})
    # CPU time of this process: on a machine shared with other work, wall time also counts their time slices.
    s = interleave(check(ops), args.rounds, args.batch_ms / 1000, timer=time.process_time)
    bare, bound, handler, sdk = (s[f"round/{k}"] for k in ("bare", "bound", "handler", "boundary"))
    ours = [b - c for b, c in zip(bound, bare, strict=True)]
    theirs = [x - h - c for x, h, c in zip(sdk, handler, bare, strict=True)]
    print(f"{args.rounds} interleaved rounds, medians")
    print(f"round: BoundCodec adds {statistics.median(ours) * 1e6:.1f} us, the SDK's boundary "
          f"{statistics.median(theirs) * 1e6:.1f} us: ratio {median_ratio(ours, theirs):.2f}")  # fmt: skip
    ours = [b - c for b, c in zip(s["binding/bound"], s["binding/bare"], strict=True)]
    theirs = [x - c for x, c in zip(s["binding/sdk"], s["binding/sdk bare"], strict=True)]
    print(f"binding: BoundCodec's binding work {statistics.median(ours) * 1e6:.1f} us, the SDK's "
          f"{statistics.median(theirs) * 1e6:.1f} us: ratio {median_ratio(ours, theirs):.2f}")  # fmt: skip
    for version in (2, 1):
        for outcome in ("accept", "refuse"):
            one, many = s[f"ring/v{version}/1/{outcome}"], s[f"ring/v{version}/200/{outcome}"]
            print(f"ring: version {version} {outcome}, 200 keys vs 1: {median_ratio(many, one):.2f} "
                  f"({statistics.median(one) * 1e6:.1f} us with 1 key)")  # fmt: skip
    for slow, fast in (("dumps", "encoder"), ("hmac.new", "copy")):
        a, b = s[f"part/{slow}"], s[f"part/{fast}"]
        print(f"parts: {slow} {statistics.median(a) * 1e6:.2f} us, {fast} {statistics.median(b) * 1e6:.2f} us a call")


if __name__ == "__main__":
    main()
