"""What single use costs a token in one process, over `MemoryStore`, as a ratio to one `BoundCodec` pair (not a test).

1. ``guard``: `SingleUse.stamp` of a ~300-byte state recording a (client, issuer, subject) principal, then `consume`
   of the stamp, driven to its end without an event loop (the in-process store never suspends, as on the MCP path,
   where the server's loop awaits it). Figure: its time over one `BoundCodec` seal+unseal pair of the same state with
   a principal and an MCP request context.
2. ``guarded pair``: what `statecodec bench` times: the same stamp inside that pair's state and its consume after the
   pair's unseal, minus the pair, over the pair. It exceeds ``guard``: the two timed together cost more than apart.
3. ``apart``: the control for 2: the guard's stamp+consume then the pair, unrelated, in one operation, minus both
   timed alone. ``twice``, its control: a second `BoundCodec`'s pair then the pair, minus the pair alone twice.
   ``twice`` adds nothing (0.1 us), so timing two operations in one loop costs nothing by itself (this docstring
   said it did): what ``apart`` adds (8-10 us) comes of alternating two different code paths. It is not work:
   under ``valgrind --tool=callgrind`` the guard then the pair execute the guard's instructions plus the pair's
   within 0.4%; the guard twice adds nothing, and the stamp alone, or the store's claim alone, beside the pair about
   1 us. The machine holds one path's code in its caches and predictors, not both; both pay, so ``guarded pair``
   and ``codec`` count as the guard's a cost the pair shares. In a server, other code runs between the two anyway.
4. ``codec``: the sync adapter `SingleUseCodec` around that `BoundCodec`: its seal+unseal pair minus the bare pair,
   over the bare pair.

Each round times every operation (in this process's CPU time, or wall time with ``--wall``) in a fresh random
order, keeping each operation's fastest of three batches (`statecodec bench`'s interleaving); a figure is the median
over rounds of the per-round ratio.

Run: ``python benchmarks/single_use_cost.py [--rounds 61] [--batch-ms 5] [--wall]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from statecodec import AESGCMCodec, BoundCodec, generate_key
from statecodec.binding import mcp_request_context
from statecodec.cli.bench import interleave
from statecodec.single_use import SingleUse, SingleUseCodec
from statecodec.store import MemoryStore
from statecodec.sync import finish

STATE = b'{"step":2,"cursor":"' + b"c" * 278 + b'"}'
WHO, TRIPLE = "user-42", ("app-1", "https://id.example.com", "user-42")
CONTEXT = mcp_request_context("tools/call", {"name": "provision", "arguments": {"name": "orders", "replicas": 3}})



def ops() -> tuple[dict[str, Callable[[], object]], SingleUseCodec]:
    bound, other = (BoundCodec(AESGCMCodec([os.urandom(32)]), audience="bench", binding_key=generate_key())
                    for _ in range(2))
    guard = SingleUse(MemoryStore(), key=generate_key(), ttl=600)
    finish(guard.start())
    adapter = SingleUseCodec(bound, SingleUse(MemoryStore(), key=generate_key(), ttl=600))

    def pair() -> bytes:
        return bound.unseal(bound.seal(STATE, principal=WHO, context=CONTEXT), principal=WHO, context=CONTEXT)

    def stamp_consume() -> bytes:
        return bytes(finish(guard.consume(guard.stamp(STATE, principal=TRIPLE))))

    def guarded_pair() -> bytes:  # what `statecodec bench` times: the pair around a stamp, then its consume
        token = bound.seal(guard.stamp(STATE, principal=TRIPLE), principal=WHO, context=CONTEXT)
        return bytes(finish(guard.consume(bound.unseal(token, principal=WHO, context=CONTEXT))))

    def apart() -> bytes:  # the control: the guard's work and the pair, unrelated, one after the other in one loop
        stamp_consume()
        return pair()

    def twice() -> bytes:  # the control's control: two pairs of the same code, each its own keys
        other.unseal(other.seal(STATE, principal=WHO, context=CONTEXT), principal=WHO, context=CONTEXT)
        return pair()

    def codec_pair() -> bytes:
        token = adapter.seal(STATE, principal=WHO, context=CONTEXT)
        return adapter.unseal(token, principal=WHO, context=CONTEXT)

    checks: dict[str, Callable[[], object]] = {"pair": pair, "guard": stamp_consume,
                                                 "guarded pair": guarded_pair, "apart": apart, "twice": twice,
                                                 "codec": codec_pair}
    for name, op in checks.items():
        if op() != STATE:
            raise RuntimeError(f"{name} did not return its state")
    return checks, adapter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=61)
    parser.add_argument("--batch-ms", type=float, default=5.0)
    parser.add_argument("--wall", action="store_true", help="wall time instead of this process's CPU time")
    args = parser.parse_args()
    timed, adapter = ops()
    try:
        s = interleave(timed, args.rounds, args.batch_ms / 1000, timer=time.perf_counter if args.wall else
                       time.process_time)  # fmt: skip
    finally:
        adapter.close()
    pair, guard, codec = s["pair"], s["guard"], s["codec"]
    added = [c - p for c, p in zip(codec, pair, strict=True)]
    guarded = [g - p for g, p in zip(s["guarded pair"], pair, strict=True)]
    print(f"{args.rounds} interleaved rounds, medians, {'wall' if args.wall else 'CPU'} time")
    print(f"pair: BoundCodec seal+unseal {statistics.median(pair) * 1e6:.1f} us")
    print(f"guard: stamp+consume {statistics.median(guard) * 1e6:.1f} us, "
          f"{statistics.median(g / p for g, p in zip(guard, pair, strict=True)):.2f}x the pair")  # fmt: skip
    print(f"guarded pair: stamp+consume around the pair adds {statistics.median(guarded) * 1e6:.1f} us, "
          f"{statistics.median(a / p for a, p in zip(guarded, pair, strict=True)):.2f}x the pair")  # fmt: skip
    together = [a - g - p for a, g, p in zip(s["apart"], guard, pair, strict=True)]
    doubled = [t - 2 * p for t, p in zip(s["twice"], pair, strict=True)]
    print(f"apart: the guard then the pair in one loop cost {statistics.median(together) * 1e6:.1f} us more than "
          f"the two timed alone; twice: two pairs {statistics.median(doubled) * 1e6:.1f} us more than two alone")
    print(f"codec: SingleUseCodec adds {statistics.median(added) * 1e6:.1f} us, "
          f"{statistics.median(a / p for a, p in zip(added, pair, strict=True)):.2f}x the pair")  # fmt: skip


if __name__ == "__main__":
    main()
