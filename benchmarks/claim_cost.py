"""What reading the replication id costs a claim, on a real redis-server over loopback (not a test).

The claim script reads ``INFO replication`` on every claim (a promoted replica or a restarted server has a new id:
the store begins a new epoch). Variants, each a `SingleUse.consume` of a fresh token (one claim round trip):

- ``before``: the claim script with that read replaced by the id already recorded (what a claim cost before);
- ``after``: the claim script as shipped;
- ``replicas``: as shipped, with ``STATECODEC_STORE_REPLICAS=1`` against a primary with one replica (``WAIT 1``
  after each claim, on the same connection);
- ``unbatched``: as shipped, each script sent by a direct ``execute_command``, as before claims made together
  shared a pipeline (a lone claim is sent at once: this shows what the batching costs a claim made alone).

Each round times a batch of each variant in a fresh random order (wall time, the store's work included); a figure
is the median over rounds of the per-round ratio to ``before``.

Run: ``python benchmarks/claim_cost.py [--rounds 41] [--batch 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.plugins import eventually
from tests.plugins.redis import RedisServer

from statecodec import generate_key
from statecodec import redis_store as rs
from statecodec.redis_store import RedisStore
from statecodec.single_use import SingleUse

READ = "redis.call('INFO', 'replication')"


async def measure(url: str, rounds: int, batch: int) -> dict[str, list[float]]:
    shipped, read = rs._RUN["claim"], f"string.match({READ}, 'master_replid:(%x+)') or ''"
    if shipped.source.count(read) != 1:
        raise RuntimeError("the claim script no longer reads the replication id as this benchmark expects")
    source = shipped.source.replace(read, "m[6] or ''")  # the id recorded stands in: no INFO call, same decisions
    before = rs.Script(source, hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest())
    key = generate_key()
    guards = {"before": SingleUse(RedisStore.from_url(url, timeout=2), key=key, ttl=600),
              "after": SingleUse(RedisStore.from_url(url, timeout=2), key=key, ttl=600),
              "replicas": SingleUse(RedisStore.from_url(url, timeout=2, replicas=1), key=key, ttl=600),
              "unbatched": SingleUse(RedisStore.from_url(url, timeout=2), key=key, ttl=600)}
    unbatched = guards["unbatched"].store
    assert isinstance(unbatched, RedisStore)

    async def direct(verb: str, code: str, keys: list[str], args: Sequence[str | int | bytes], acks: int) -> Any:
        return await unbatched._client.execute_command(verb, code, len(keys), *keys, *args)

    unbatched._eval = direct  # type: ignore[method-assign]
    times: dict[str, list[float]] = {name: [] for name in guards}
    try:
        for guard in guards.values():
            await guard.start()
        for _ in range(rounds):
            for name in random.sample(list(guards), len(guards)):
                guard = guards[name]
                tokens = [guard.stamp(b"x") for _ in range(batch)]
                rs._RUN["claim"] = before if name == "before" else shipped
                started = time.perf_counter()
                for stamped in tokens:
                    await guard.consume(stamped)
                times[name].append((time.perf_counter() - started) / batch)
    finally:
        rs._RUN["claim"] = shipped
        for guard in guards.values():
            await guard.aclose()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    fast = ["--repl-diskless-sync-delay", "0"]
    with RedisServer(extra=fast) as primary, RedisServer(extra=[*fast, "--replicaof", "127.0.0.1",
                                                                str(primary.port)]) as replica:
        eventually(lambda: "master_link_status:up" in replica.cli("INFO", "replication"))
        times = asyncio.run(measure(primary.url, args.rounds, args.batch))
    base = times["before"]
    print(f"{args.rounds} interleaved rounds of {args.batch} claims each, medians, wall time")
    for name, values in times.items():
        ratio = statistics.median(v / b for v, b in zip(values, base, strict=True))
        print(f"{name}: {statistics.median(values) * 1e6:.1f} us a claim, {ratio:.3f}x before")


if __name__ == "__main__":
    main()
