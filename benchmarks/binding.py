"""BoundCodec's claims against the MCP SDK boundary's own claims, around the same codec (not a test).

Both sides wrap one `AESGCMCodec` and carry the same ~300-byte state for the
same request (tools/call, tool name, arguments) and the same principal, and
do what each does per round:

- unseal: the SDK's `RequestStateBoundary._unseal` (codec, JSON parse, claim
  checks, request identity digest, salted principal hash); BoundCodec's
  `unseal` with the principal and the round's context.
- seal: the SDK's `_seal` with the round's binding already computed (as on
  every retry); BoundCodec's `seal` with the round's context.
- the request identity: `mcp_request_context`, computed once per round and
  shared by both directions (timed on its own; the SDK computes its own
  inside `_unseal`).

Cases run round-robin in thread CPU time so machine load hits each alike;
the best batch of each is kept. Prints microseconds per operation, microseconds added over the bare
codec each way, the ratio SDK-added / BoundCodec-added, and the claims
overhead in bytes before encoding. Run: ``python benchmarks/binding.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import timeit
from collections.abc import Callable
from typing import Any, cast

from mcp.server.context import ServerRequestContext
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity, compact_json

from statecodec import AESGCMCodec, BoundCodec, KeyRing
from statecodec.binding import mcp_request_context

STATE = "step-2:" + "x" * 293
METHOD = "tools/call"
PARAMS: dict[str, Any] = {"name": "book_flight", "arguments": {"from": "LIS", "to": "SFO", "seats": 2}}
PRINCIPAL = '{"client_id":"app-1","issuer":"https://id.example.com","subject":"user-42"}'
AUDIENCE = "travel-server"


def interleaved(cases: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Best microseconds per call of each case, measured round-robin in short batches.

    Timed in this thread's CPU time, so being descheduled on a busy machine
    does not count against whichever case happened to be running.
    """
    timers = {name: timeit.Timer(fn, timer=time.thread_time) for name, fn in cases.items()}
    batch = {name: max(1, t.autorange()[0] // 10) for name, t in timers.items()}
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(rounds):
        for name, timer in timers.items():
            best[name] = min(best[name], timer.timeit(number=batch[name]) / batch[name] * 1e6)
    return best


def _ctx(params: dict[str, Any]) -> ServerRequestContext[Any, Any]:
    # The boundary reads only method and params on these paths; no session is needed.
    return ServerRequestContext(
        session=cast(Any, None), lifespan_context={}, protocol_version="2026-07-28", method=METHOD, params=params
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    codec = AESGCMCodec(KeyRing([os.urandom(32)]))
    state = STATE.encode()
    bound = BoundCodec(codec, audience=AUDIENCE, binding_key=os.urandom(32))
    sdk = RequestStateBoundary(
        RequestStateSecurity(codec=codec, bind_principal=lambda ctx: PRINCIPAL), default_audience=AUDIENCE
    )

    context = mcp_request_context(METHOD, PARAMS)
    bare_token = codec.seal(state)
    plain_token = bound.seal(state)
    bound_token = bound.seal(state, principal=PRINCIPAL, context=context)
    sdk_token = sdk._seal(_ctx(PARAMS), STATE)
    unseal_ctx = _ctx({**PARAMS, "requestState": sdk_token})
    plaintext, binding = sdk._unseal(unseal_ctx)
    assert plaintext == STATE
    assert bound.unseal(bound_token, principal=PRINCIPAL, context=context) == state
    seal_ctx = _ctx(PARAMS)
    memo_key = bound._keys[0]

    def cold() -> None:
        # Forget memoised tags, so the next operation computes its MACs: the cost of a
        # round's first operation on an instance that has not seen this context yet.
        memo_key._binding_memo.clear()
        memo_key._principal_memo.clear()

    def cold_seal() -> None:
        cold()
        bound.seal(state, principal=PRINCIPAL, context=context)

    def cold_unseal() -> None:
        cold()
        bound.unseal(bound_token, principal=PRINCIPAL, context=context)

    rows = interleaved(
        {
            "bare codec seal": lambda: codec.seal(state),
            "bare codec unseal": lambda: codec.unseal(bare_token),
            "BoundCodec seal, no principal/context": lambda: bound.seal(state),
            "BoundCodec unseal, no principal/context": lambda: bound.unseal(plain_token),
            "BoundCodec seal, principal + context": lambda: bound.seal(state, principal=PRINCIPAL, context=context),
            "BoundCodec unseal, principal + context": lambda: bound.unseal(
                bound_token, principal=PRINCIPAL, context=context
            ),
            "BoundCodec seal, principal + context, cold": cold_seal,
            "BoundCodec unseal, principal + context, cold": cold_unseal,
            "SDK boundary seal": lambda: sdk._seal(seal_ctx, STATE, binding),
            "SDK boundary unseal": lambda: sdk._unseal(unseal_ctx),
            "(mcp_request_context alone)": lambda: mcp_request_context(METHOD, PARAMS),
        },
        args.rounds,
    )
    width = max(map(len, rows))
    for name, us in rows.items():
        print(f"{name:<{width}}  {us:7.2f} us")

    bare_s, bare_u = rows["bare codec seal"], rows["bare codec unseal"]
    plain_s = rows["BoundCodec seal, no principal/context"] - bare_s
    plain_u = rows["BoundCodec unseal, no principal/context"] - bare_u
    full_s = rows["BoundCodec seal, principal + context"] - bare_s
    full_u = rows["BoundCodec unseal, principal + context"] - bare_u
    cold_s = rows["BoundCodec seal, principal + context, cold"] - bare_s
    cold_u = rows["BoundCodec unseal, principal + context, cold"] - bare_u
    sdk_s, sdk_u = rows["SDK boundary seal"] - bare_s, rows["SDK boundary unseal"] - bare_u
    identity = rows["(mcp_request_context alone)"]
    print("\nadded over the bare codec, microseconds (seal / unseal):")
    print(f"  BoundCodec, no principal/context   +{plain_s:5.2f} / +{plain_u:5.2f}")
    print(f"  BoundCodec, principal + context    +{full_s:5.2f} / +{full_u:5.2f}  (tags memoised: the seal")
    print("                                     that answers a round reuses its unseal's MACs)")
    print(f"  BoundCodec, principal + context,   +{cold_s:5.2f} / +{cold_u:5.2f}  (memo cleared before each")
    print(f"    cold                             operation; +{identity:.2f} once per round for")
    print("                                     mcp_request_context, shared by the unseal and the seal)")
    print(f"  SDK boundary                       +{sdk_s:5.2f} / +{sdk_u:5.2f}  (its request identity inside unseal)")
    print(f"  SDK-added / BoundCodec-added       {sdk_s / full_s:5.1f}x / {sdk_u / full_u:5.1f}x")
    # A round on an instance that has not seen the context: a cold unseal, then a warm seal.
    ours_round, sdk_round = cold_u + full_s + identity, sdk_s + sdk_u
    print(f"  per round (cold unseal + seal)     BoundCodec +{ours_round:.2f}, SDK +{sdk_round:.2f}: "
          f"{sdk_round / ours_round:.1f}x")

    # The SDK's state travels as a JSON string; its claims are everything around it.
    sdk_claims = len(codec.unseal(sdk_token)) - len(compact_json(STATE).encode())
    ours_plain = len(codec.unseal(plain_token)) - len(state)
    ours_full = len(codec.unseal(bound_token)) - len(state)
    print(
        f"\nclaims overhead before encoding: BoundCodec {ours_plain} bytes (no principal), {ours_full} bytes "
        f"(principal); SDK envelope {sdk_claims} bytes (with principal and audience)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
