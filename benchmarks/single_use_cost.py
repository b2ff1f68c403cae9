"""What single use over the in-process store adds per token, on the MCP path (not a test).

`SingleUseMiddleware` stamps a state at seal (`SingleUse.stamp`, pure CPU) and awaits `SingleUse.consume` on the
server's event loop at unseal. This times, on one event loop and in interleaved rounds (the order of the cases
alternates each round, so both see the same machine load): one `BoundCodec` seal+unseal pair of a 300-byte state
with a principal and a request context (the reference), and the same pair plus a stamp and a consume over a
`MemoryStore`. Reports the median per token of each, the added time, and its ratio to the reference pair.
(The sync way in, `SingleUseCodec`, adds a hop to its private loop thread on top of this.)

Run: ``python benchmarks/single_use_cost.py [--rounds 101] [--batch 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from statecodec import AESGCMCodec, BoundCodec
from statecodec.binding import mcp_request_context
from statecodec.single_use import SingleUse
from statecodec.store import MemoryStore

STATE = b'{"step":"region","answers":{"name":"orders"},"pad":"' + b"x" * 250 + b'"}'
PRINCIPAL = ("client-1", "https://issuer.example", "user-42")


async def measure(rounds: int, batch: int) -> dict[str, list[float]]:
    bound = BoundCodec(AESGCMCodec([os.urandom(32)]), audience="bench", binding_key=os.urandom(32))
    guard = SingleUse(MemoryStore(), key=os.urandom(32), ttl=600)
    await guard.start()
    context = mcp_request_context("tools/call", {"name": "provision", "arguments": {"name": "orders"}})

    async def pair() -> None:
        for _ in range(batch):
            if (
                bound.unseal(
                    bound.seal(STATE, principal="user-42", context=context), principal="user-42", context=context
                )
                != STATE
            ):
                raise RuntimeError("BoundCodec lost the state")

    async def single_use() -> None:
        for _ in range(batch):
            stamped = guard.stamp(STATE, principal=PRINCIPAL)
            token = bound.seal(stamped, principal="user-42", context=context)
            if await guard.consume(bound.unseal(token, principal="user-42", context=context)) != STATE:
                raise RuntimeError("single use lost the state")

    cases = {"bound pair": pair, "bound pair + single use (memory)": single_use}
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for index in range(rounds):
        for name in list(cases)[:: 1 if index % 2 else -1]:
            start = time.perf_counter()
            await cases[name]()
            samples[name].append((time.perf_counter() - start) / batch)
    await guard.aclose()
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=101)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args(argv)
    samples = asyncio.run(measure(args.rounds, args.batch))
    (reference, plain), (_, guarded) = samples.items()
    added = [g - p for g, p in zip(guarded, plain, strict=True)]
    for name, values in samples.items():
        print(f"{name}: median {statistics.median(values) * 1e6:.1f} us per token")
    ratio = statistics.median(a / p for a, p in zip(added, plain, strict=True))
    print(
        f"single use (stamp + consume, in-process store) adds median {statistics.median(added) * 1e6:.1f} us "
        f"per token = {ratio:.2f} x the {reference} ({args.rounds} interleaved rounds of {args.batch})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
