"""What single use adds to a token, measured by `statecodec bench` (``--store-url`` for a Redis store).

Single use stamps a token at seal and consumes it at unseal. A token cannot be unsealed twice, so each case times
the seal of a fresh token and the seal and unseal of another (`BoundCodec` with a principal and a request context,
300 bytes of state), interleaved in the same rounds; the unseal is their difference. The figures are what single
use adds, per token (seal and unseal) and per unseal:

- over the in-process store (`MemoryStore`), as a ratio to `BoundCodec`'s own;
- over a Redis store, as a ratio to one bare ``PING`` round trip to the same server, timed in the same rounds
  (the goal is about 1: one claim, one round trip), with the scripts the server ran per token (its own count);
- and how late a task on the event loop wakes while tokens are consumed through `SingleUseCodec` (whose store
  calls run on its own loop thread), called from a worker thread and from the loop itself.

Nothing here is imported by ``import statecodec``; redis is imported only when ``--store-url`` is given.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from statecodec import AESGCMCodec, BoundCodec
from statecodec.binding import mcp_request_context
from statecodec.cli.bench import PAYLOADS, interleave, paired
from statecodec.errors import ConfigurationError
from statecodec.single_use import SingleUse, SingleUseCodec
from statecodec.store import MemoryStore, Store

_PRINCIPAL = "user-42"
_NAMESPACE = "statecodec-bench"  # claims the bench makes never share keys with a fleet's namespace
_TTL_S = 60.0  # the bench's claims leave the store within a minute
_TIMEOUT_S = 0.25  # the store's default (docs/single-use.md)
_TICK_S = 0.001
_CONSUME_EVERY_S = 0.005
_ROUND_TRIP_TOKENS = 200
_REDIS_HINT = "--store-url needs the redis package: pip install 'statecodec[redis]'"
Op = Callable[[], object]


def _codecs(store: Store) -> tuple[BoundCodec, SingleUseCodec]:
    bound = BoundCodec(AESGCMCodec([os.urandom(32)]), audience="bench", binding_key=os.urandom(32))
    return bound, SingleUseCodec(bound, SingleUse(store, key=os.urandom(32), ttl=_TTL_S))


def _ops(codec: BoundCodec | SingleUseCodec) -> tuple[Op, Op]:
    """(seal then unseal one fresh token, as a flow does once per retry; seal alone): their difference is the
    unseal of a fresh token, which a single-use token cannot be unsealed twice to time alone."""
    state = PAYLOADS["state"]
    context = mcp_request_context("tools/call", {"name": "provision", "arguments": {"name": "orders"}})

    def seal() -> str:
        return codec.seal(state, principal=_PRINCIPAL, context=context)

    def pair() -> bytes:
        return codec.unseal(seal(), principal=_PRINCIPAL, context=context)

    if pair() != state:  # checks before measuring: a store that refuses fails here
        raise RuntimeError(f"{type(codec).__name__}: unseal(seal(state)) is not the state")
    return pair, seal


class _Redis:
    """A Redis store built by `RedisStore.from_url`, and a bare client for ``PING`` and the server's own count of
    the commands it was sent (``INFO commandstats``)."""

    def __init__(self, url: str) -> None:
        try:
            import redis

            from statecodec.redis_store import RedisStore
        except ImportError:
            raise ConfigurationError(_REDIS_HINT) from None
        try:
            self.store = RedisStore.from_url(url, namespace=_NAMESPACE, timeout=_TIMEOUT_S)
        except ConfigurationError:
            raise ConfigurationError("--store-url is not a Redis URL (redis://, rediss://, unix://)") from None
        self.bare = redis.Redis.from_url(url, socket_timeout=_TIMEOUT_S, socket_connect_timeout=_TIMEOUT_S)
        try:
            self.bare.ping()
        except Exception:
            self.close()
            raise ConfigurationError("--store-url: the Redis server does not answer a PING") from None

    def _scripts_run(self) -> int:
        stats: dict[str, Any] = self.bare.info("commandstats")
        return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval"))

    def round_trips(self, op: Op, count: int) -> float:
        """Scripts the server ran per call of `op` (each is one round trip: nothing else is sent per token)."""
        before = self._scripts_run()
        for _ in range(count):
            op()
        return (self._scripts_run() - before) / count

    def close(self) -> None:
        self.bare.close()


@contextmanager
def redis_store(url: str | None) -> Iterator[_Redis | None]:
    """The Redis store at `url` (None without one), checked before anything is measured; closed afterwards."""
    if url is None:
        yield None
        return
    store = _Redis(url)
    try:
        yield store
    finally:
        store.close()


def _lag(consume: Callable[[], object] | None, on_loop: bool, duration: float) -> list[float]:
    """How late (seconds) a 1 ms sleeper on the loop wakes while `consume` runs every 5 ms, in a worker thread or
    on the loop itself."""

    async def main() -> list[float]:
        late: list[float] = []
        stop = time.perf_counter() + duration

        async def ticker() -> None:
            while (now := time.perf_counter()) < stop:
                await asyncio.sleep(_TICK_S)
                late.append(time.perf_counter() - now - _TICK_S)

        async def consumer() -> None:
            while consume is not None and time.perf_counter() < stop:
                if on_loop:
                    consume()
                else:
                    await asyncio.to_thread(consume)
                await asyncio.sleep(_CONSUME_EVERY_S)

        await asyncio.gather(ticker(), consumer())
        return late

    return asyncio.run(main())


def _lag_figures(late: list[float]) -> dict[str, float]:
    ordered = sorted(late)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
        "max_ms": ordered[-1] * 1000,
    }


def _consumer(codec: SingleUseCodec, count: int) -> Callable[[], object]:
    """Unseal one more of `count` tokens sealed in advance, so that only the unseal runs in the timed window."""
    context = mcp_request_context("tools/call", {"name": "provision", "arguments": {"name": "orders"}})
    tokens = iter([codec.seal(PAYLOADS["state"], principal=_PRINCIPAL, context=context) for _ in range(count)])
    return lambda: codec.unseal(next(tokens), principal=_PRINCIPAL, context=context)


def run(rounds: int, redis: _Redis | None, lag_s: float) -> dict[str, Any]:
    """Time the rounds (interleaved, as every `statecodec bench` case) and the loop lag."""
    bound, in_process = _codecs(MemoryStore())
    codecs: dict[str, BoundCodec | SingleUseCodec] = {"bound": bound, "memory": in_process}
    shared: SingleUseCodec | None = None
    ops: dict[str, Op] = {}
    if redis is not None:
        shared = codecs["redis"] = _codecs(redis.store)[1]
        ops["ping"] = redis.bare.ping
    for name, codec in codecs.items():
        ops[name], ops[f"{name}/seal"] = _ops(codec)
    samples = interleave(ops, rounds)
    for name in codecs:
        samples[f"{name}/unseal"] = [p - s for p, s in zip(samples[name], samples[f"{name}/seal"], strict=True)]

    def added(name: str, op: str = "") -> list[float]:
        return [s - b for s, b in zip(samples[name + op], samples["bound" + op], strict=True)]

    doc: dict[str, Any] = {
        "bound_pair_us": statistics.median(samples["bound"]) * 1e6,
        "bound_unseal_us": statistics.median(samples["bound/unseal"]) * 1e6,
        "memory_added_us": statistics.median(added("memory")) * 1e6,
        "memory_added_vs_bound": paired(added("memory"), samples["bound"]),
        "memory_unseal_added_us": statistics.median(added("memory", "/unseal")) * 1e6,
        "memory_unseal_added_vs_bound_unseal": paired(added("memory", "/unseal"), samples["bound/unseal"]),
    }
    if redis is not None:
        doc["ping_us"] = statistics.median(samples["ping"]) * 1e6
        doc["redis_added_us"] = statistics.median(added("redis")) * 1e6
        doc["redis_added_vs_ping"] = paired(added("redis"), samples["ping"])
        doc["redis_unseal_added_us"] = statistics.median(added("redis", "/unseal")) * 1e6
        doc["redis_unseal_added_vs_ping"] = paired(added("redis", "/unseal"), samples["ping"])
        doc["round_trips_per_token"] = redis.round_trips(ops["redis"], _ROUND_TRIP_TOKENS)
    per_tick = int(lag_s / _CONSUME_EVERY_S) + 10  # more tokens than the consumer can reach in `lag_s`
    lag = {"idle": _lag_figures(_lag(None, False, lag_s))}
    for name, guarded in (("memory", in_process), ("redis", shared)):
        if guarded is None:
            continue
        for where, on_loop in (("thread", False), ("loop", True)):
            lag[f"{name}/{where}"] = _lag_figures(_lag(_consumer(guarded, per_tick), on_loop, lag_s))
    doc["loop_lag"] = lag
    for guarded in (in_process, shared):
        if guarded is not None:
            guarded.close()
    return doc


def table(doc: dict[str, Any]) -> str:
    lines = [
        "\n\nsingle use (BoundCodec with a principal and a request context; a token is sealed once, unsealed once):",
        f"  BoundCodec seal+unseal {doc['bound_pair_us']:.1f} us, unseal {doc['bound_unseal_us']:.1f} us",
        f"  the in-process store adds {doc['memory_added_us']:.1f} us per token ({doc['memory_added_vs_bound']:.2f}x"
        f" of the pair), {doc['memory_unseal_added_us']:.1f} us per unseal"
        f" ({doc['memory_unseal_added_vs_bound_unseal']:.2f}x of the unseal)",
    ]
    if "ping_us" in doc:
        lines.append(
            f"  the Redis store adds {doc['redis_added_us']:.1f} us per token, {doc['redis_unseal_added_us']:.1f} us"
            f" per unseal: {doc['redis_added_vs_ping']:.2f}x and {doc['redis_unseal_added_vs_ping']:.2f}x of one bare"
            f" PING ({doc['ping_us']:.1f} us); {doc['round_trips_per_token']:.2f} round trips per consumed token"
        )
    lines.append(f"  event-loop lag of a 1 ms sleeper while a token is consumed every {_CONSUME_EVERY_S * 1000:g} ms:")
    lines += [
        f"    {case:14} p50 {f['p50_ms']:.3f} ms  p99 {f['p99_ms']:.3f} ms  max {f['max_ms']:.3f} ms"
        for case, f in doc["loop_lag"].items()
    ]
    return "\n".join(lines)
