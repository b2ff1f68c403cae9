"""The fleet registry: every instance reports through the store the key ids it accepts; `rotate` reads them.

Threat: a rotation step judged from reports that are stale, dated by another clock, gone, or two instances' merged
under one name. Every entry is dated by the store's clock and keyed by name and a per-process nonce; an instance that
left still counts for the wait before its key is retired; a pulled key id is kept for good (docs/rotation.md).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from statecodec._settings import INSTANCE_NAME
from statecodec.errors import StoreError
from statecodec.reload import Snapshot
from statecodec.rotation import Fleet, Member
from statecodec.store import MemoryStore, Store, bounded

if TYPE_CHECKING:
    from statecodec.redis_store import RedisStore

__all__ = ["RedisRegistry", "Registry", "Reporter", "read_fleet", "registry_for"]

# (now, (name/nonce, expires, entry) by name, until when tokens under a key id live, when each key id was pulled)
Rows = tuple[int, list[tuple[str, int, str]], dict[str, int], dict[str, int]]


class Registry(Protocol):
    """The fleet registry's calls, as docs/formats.md describes its scripts (`announce` returns the pulled key ids)."""

    async def announce(self, name: str, ring: str, doc: str, lifetime_ms: int,
                       live: Sequence[tuple[str, int]] = ()) -> list[str]: ...
    async def pull(self, key_id: str) -> None: ...
    async def fleet(self) -> Rows: ...
    async def leave(self, name: str) -> None: ...
    async def aclose(self) -> None: ...


def registry_for(store: Store) -> Registry | None:
    """The registry beside a configured store: the Redis store's; none beside the in-process store (no one reads it)."""
    return None if isinstance(store, MemoryStore) else RedisRegistry(cast("RedisStore", store))


# After the store's Lua prelude (`now`, `n`, `sweep`) and a sweep of expired entries; KEYS, ARGV: docs/formats.md.
_SCRIPTS = {
    "announce": """local loaded, ring = string.match(redis.call('HGET', KEYS[1], ARGV[1]) or '', '^(%d+) (%S+) ')
if ring ~= ARGV[2] then loaded = n(now) end
redis.call('HSET', KEYS[1], ARGV[1], loaded .. ' ' .. ARGV[2] .. ' ' .. ARGV[3])
redis.call('ZADD', KEYS[2], n(now + tonumber(ARGV[4])), ARGV[1])
for i = 5, #ARGV, 2 do
  local live = now + tonumber(ARGV[i + 1])
  if live > (tonumber(redis.call('HGET', KEYS[3], ARGV[i])) or 0) then redis.call('HSET', KEYS[3], ARGV[i], n(live)) end
end
return redis.call('HGETALL', KEYS[4])""",
    "fleet": """local expiry = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '+inf', 'WITHSCORES')
return {now, redis.call('HGETALL', KEYS[1]), expiry, redis.call('HGETALL', KEYS[3]), redis.call('HGETALL', KEYS[4])}""",
    # the first pull's time is kept; HGET and HSET, which the documented minimal ACL allows (HSETNX is not in it)
    "pull": "if not redis.call('HGET', KEYS[4], ARGV[1]) then redis.call('HSET', KEYS[4], ARGV[1], n(now)) end",
    "leave": """redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])""",
}


class RedisRegistry:
    """`Registry` in the Redis store's namespace, run by that store: one connection, one error mapping, its clock."""

    def __init__(self, store: RedisStore) -> None:
        from statecodec.redis_store import script

        sweep = "sweep(KEYS[1], KEYS[2])\n"
        self.store, self._run = store, {name: script(sweep + body) for name, body in _SCRIPTS.items()}
        self._keys = [f"{{{store.namespace}}}:fleet{part}" for part in ("", "-expiry", "-tokens", "-pulled")]

    async def announce(self, name: str, ring: str, doc: str, lifetime_ms: int,
                       live: Sequence[tuple[str, int]] = ()) -> list[str]:
        args = (name, ring, doc, lifetime_ms, *[value for pair in live for value in pair])
        return [kid.decode() for kid in (await self._bounded("announce", *args))[::2]]

    async def pull(self, key_id: str) -> None:
        await self._bounded("pull", key_id)

    async def fleet(self) -> Rows:
        now, entries, expiry, tokens, pulled = await self._bounded("fleet")
        try:
            until = {name.decode(): int(float(at)) for name, at in zip(expiry[::2], expiry[1::2], strict=True)}
            rows = [(name.decode(), until.get(name.decode(), 0), value.decode())
                    for name, value in zip(entries[::2], entries[1::2], strict=True)]
            tokens_until, pulls = ({kid.decode(): int(at) for kid, at in zip(pairs[::2], pairs[1::2], strict=True)}
                                   for pairs in (tokens, pulled))
        except (ValueError, OverflowError):  # not written by `announce`: no step is judged on it
            raise StoreError(f"the fleet registry in {self._keys} at {self.store.where} holds a value not written "
                             "by statecodec; delete those keys (the instances announce again)") from None
        return int(now), sorted(rows), tokens_until, pulls

    async def leave(self, name: str) -> None:
        await self._bounded("leave", name)

    async def _bounded(self, name: str, *args: str | int) -> Any:
        """One script under the store's deadline (a heartbeat, a leave at shutdown, `rotate`: none waits for ever)."""
        return await bounded(self.store, self.store.run(self._run[name], self._keys, *args))

    async def aclose(self) -> None:
        await self.store.aclose()


class Reporter:
    """A `ReloadingCodec`'s `report`: each snapshot announced under `name` and a per-process nonce for `lifetime` s."""

    def __init__(self, registry: Registry, name: str, lifetime: float) -> None:
        self.registry, self.name, self.lifetime_ms = registry, f"{name}/{secrets.token_hex(4)}", int(lifetime * 1000)

    async def __call__(self, snapshot: Snapshot | None) -> list[str]:
        if snapshot is None:  # stopping: leave, and release the connection
            try:
                await self.registry.leave(self.name)
            finally:
                await self.registry.aclose()
            return []
        doc = json.dumps({"error": snapshot.error, "pulled": snapshot.pulled})
        # Durations from now (no clock crosses over): tokens live this instance's wait after it last sealed.
        wait_ms = int(snapshot.wait * 1000)
        live = [(snapshot.accepts[0], self.lifetime_ms + wait_ms)]
        live += [(kid, wait_ms - int(ago * 1000)) for kid, ago in snapshot.demoted]
        return await self.registry.announce(self.name, ",".join(snapshot.accepts), doc, self.lifetime_ms, live)


async def read_fleet(registry: Registry) -> Fleet:
    now, rows, tokens_until, pulled = await registry.fleet()
    names = [entry.partition("/")[0] for entry, _, _ in rows]  # one shared by two: each shown with its nonce
    members = tuple(_member(entry if names.count(name) > 1 else name, until, value)
                    for (entry, until, value), name in zip(rows, names, strict=True))
    return Fleet(now, members, tokens_until, pulled)


def _member(name: str, expires_ms: int, value: str) -> Member:
    """An entry as written by `Reporter`; anything else is a member that blocks every step (fail closed), its name
    printed escaped (no control character reaches the operator's terminal)."""
    loaded, ring, doc = ([*value.split(" ", 2), "", ""])[:3]
    try:
        error, pulled = (entry := json.loads(doc))["error"], tuple(entry.get("pulled", ()))
        ok = (error is None or (isinstance(error, str) and error.isprintable())) and loaded.isdecimal()
        ok = ok and all(isinstance(kid, str) and kid.isalnum() for kid in pulled)
    except (ValueError, KeyError, TypeError, AttributeError):
        ok = False
    named = all(INSTANCE_NAME.fullmatch(part) for part in name.split("/", 1))
    if not (ok and named and ring.isprintable()):
        return Member(name if named else ascii(name), (), "its registry entry is malformed", 0, expires_ms)
    return Member(name, tuple(ring.split(",")), error, int(loaded), expires_ms, pulled)
