"""The single-use contract through `SingleUse` on every store (in-process, a real Redis, a real Redis Cluster).

Each test is an attack: a claim or revocation living by one instance's settings, clocks apart, a flush, a full store
in availability-first mode, a revocation that missed the minting principal. Instances are guards over one backing
store, each with its own clock offset and settings; time moves by `advance` (real time against Redis's clock).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, cast
from unittest.mock import ANY

import pytest

from statecodec import ConfigurationError, InvalidToken, StoreError
from statecodec.errors import StoreDown
from statecodec.registry import Registry, Reporter, read_fleet, registry_for
from statecodec.reload import Snapshot
from statecodec.single_use import SingleUse
from statecodec.store import MemoryStore, Outcome, Store
from tests.memory_registry import MemoryRegistry
from tests.plugins.redis import RedisServer

pytestmark = pytest.mark.anyio
KEY = bytes(range(50, 82))
SKEW = 0.05  # the guards' allowed clock skew: real clocks on one host agree far better
STEP = 60_000  # the bound a kept answer's claim is within (ms): generous, but where the test is about it
ALICE = ("app", "https://idp-a.example", "alice")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Backend:
    """Stores over one backing state, and a clock for the guards to be offset from."""

    def __init__(self, kind: str, urls: list[str], servers: list[RedisServer]) -> None:
        self.kind, self.urls, self.servers, self.stores = kind, urls, servers, list[Store]()
        self.clock = [(1_767_225_600.0 if kind == "memory" else time.time()) - time.monotonic()]
        self.memory = MemoryStore(clock=self.now, max_entries=50)
        self.memory_registry = MemoryRegistry(clock=self.now)

    def now(self) -> float:
        return self.clock[0] + time.monotonic()  # moves as time does: a frozen clock would step

    def store(self, namespace: str = "statecodec", timeout: float = 2) -> Store:
        if self.kind == "memory":
            return self.memory if namespace == "statecodec" else MemoryStore(clock=self.now, namespace=namespace)
        from statecodec.redis_store import RedisStore

        store = RedisStore.from_url(self.urls[len(self.stores) % len(self.urls)], namespace=namespace, timeout=timeout)
        self.stores.append(store)
        return store

    def registry(self) -> Registry:
        """The fleet registry beside the store: for Redis, the store's (a new connection each time)."""
        return self.memory_registry if self.kind == "memory" else cast(Registry, registry_for(self.store()))

    def guard(self, *, offset: float = 0.0, ttl: float = 60, key: bytes = KEY, **kw: Any) -> SingleUse:
        store = kw.pop("store", None) or self.store(kw.pop("namespace", "statecodec"))
        return SingleUse(store, key=key, ttl=ttl, clock_skew=SKEW, clock=lambda: self.now() + offset, **kw)

    async def advance(self, seconds: float) -> None:
        if self.kind == "memory":
            self.clock[0] += seconds
        else:
            await asyncio.sleep(seconds)

    def flush(self) -> None:
        if self.kind == "memory":
            self.memory.__init__(clock=self.now, max_entries=50)  # type: ignore[misc]  # a restart of the process
        for server in self.servers:
            server.flush()

    async def clock_excursion(self, seconds: float) -> None:
        """The store's clock runs `seconds` ahead (its claims expire early), then comes back."""
        if self.kind == "memory":
            self.clock[0] += seconds
            await self.memory.health(fingerprint=b"")  # the store works meanwhile: it drops what "expired"
            self.clock[0] -= seconds
        for server in self.servers[:1]:  # what Redis does on its own clock, done here: TIME cannot be moved
            drop = "for _, k in ipairs(redis.call('KEYS', '{statecodec}:c:*')) do redis.call('DEL', k) end"
            ahead = "redis.call('HSET', KEYS[1], 'seen', redis.call('TIME')[1] * 1000 + ARGV[1])"
            server.cli("-c", "EVAL", f"{drop} {ahead}", "1", "{statecodec}:meta", str(round(seconds * 1000)))

    def fill(self) -> None:  # every write is an answered error from then on
        if self.kind == "memory":
            self.memory._max = 0
        for server in self.servers:
            server.cli("CONFIG", "SET", "maxmemory", "1")

    async def aclose(self) -> None:
        for server in self.servers:
            server.cli("CONFIG", "SET", "maxmemory", "0")
        for store in self.stores:
            await store.aclose()


@pytest.fixture(params=["memory", "redis", "cluster"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    urls, servers = [], []  # the in-process store: no server
    if request.param == "redis":
        urls, servers = [request.getfixturevalue("redis_url")], [request.getfixturevalue("redis_server")]
    elif request.param == "cluster":
        request.getfixturevalue("redis_cluster_url")  # flushed
        servers = request.getfixturevalue("redis_cluster")
        urls = [f"redis+cluster://127.0.0.1:{node.port}" for node in servers]
    backend = Backend(request.param, urls, servers)
    yield backend
    await backend.aclose()


async def started(guard: SingleUse) -> SingleUse:
    await guard.start()
    return guard


async def reason(guard: SingleUse, stamped: bytes) -> str:
    with pytest.raises(InvalidToken) as info:
        await guard.consume(stamped)
    return info.value.reason.value


async def test_a_new_store_accepts_the_first_token_and_one_presentation_of_many(backend: Backend) -> None:
    # A long store timeout: the 200 wait up to half of it for a connection, however loaded the machine running the test.
    one, two = [await started(backend.guard(store=backend.store(timeout=10))) for _ in range(2)]  # point 13
    three = await started(backend.guard(store=one.store, on_store_error="accept"))  # a burst is not an outage
    stamped = one.stamp(b"state", principal=ALICE)
    # 200 on one store's 100 connections: a queue, not an outage. More only measures the machine's load against the
    # store timeout (1,200 at once exceeded it on a busy machine).
    outcomes = await asyncio.gather(*(g.consume(stamped) for g in [one, two, three] * 100), return_exceptions=True)
    assert outcomes.count(b"state") == 1
    assert {str(o) for o in outcomes if o != b"state"} == {"replayed"}


async def test_a_claim_and_a_revocation_live_by_the_tokens_expiry_not_an_instances_ttl(backend: Backend) -> None:
    long, short = await started(backend.guard(ttl=5)), await started(backend.guard(ttl=0.2))  # points 2 and 4
    behind = await started(backend.guard(ttl=60, offset=-SKEW / 2))  # a consumer whose clock lags, within skew
    pruned = await started(backend.guard(ttl=0.2, namespace="pruned"))  # only short-lived tokens: point 13
    claimed, revoked, expiring = long.stamp(b"x"), long.stamp(b"y", principal=ALICE), short.stamp(b"z")
    assert await short.consume(claimed) == b"x"
    await short.revoke(principal="alice", issuer=ALICE[1])
    for n in range(5):
        await pruned.revoke(scope=("tenant", f"t{n}"))
    await backend.advance(0.5)  # past the short ttl (and skew): a claim or revocation by its ttl had ended here
    assert await reason(long, claimed) == "replayed"
    assert await reason(long, revoked) == "revoked"
    assert await reason(behind, expiring) == "expired"  # point 5: the token's own expiry, on the store's clock
    await pruned.revoke(scope=("tenant", "last"))  # every token the first five covered has expired: dropped
    assert (await pruned.health())["revocations"] == 1


@pytest.mark.parametrize("offset", [-0.5, 0.5], ids=["behind", "ahead"])
async def test_an_instance_beyond_the_clock_skew_neither_starts_nor_mints_nor_accepts(
    backend: Backend, offset: float
) -> None:
    good = await started(backend.guard())
    stamped = good.stamp(b"x")
    skewed = backend.guard(offset=offset)
    with pytest.raises(ConfigurationError, match="behind" if offset < 0 else "ahead"):
        await skewed.start()
    with pytest.raises(StoreError, match="cannot mint"):
        skewed.stamp(b"y")  # point 5: a fast minter cannot date tokens past a revocation
    assert await reason(skewed, stamped) == "store_unavailable"
    assert await good.consume(stamped) == b"x"  # and it consumed nothing


@pytest.mark.parametrize("event", ["flush", "clock excursion"])
async def test_a_flush_forgets_every_earlier_token_and_the_next_ones_are_accepted(backend: Backend, event: str) -> None:
    ahead = await started(backend.guard(offset=SKEW / 2))  # point 5: clocks apart do not open a window
    used, unused, retry = ahead.stamp(b"1"), ahead.stamp(b"2"), b"\x01" * 16
    state, key, _ = await ahead.claim(used, retry)  # consume's claim, with a retry digest (the retry-safe mode)
    assert state == b"1"
    if event == "flush":
        backend.flush()
    else:  # the store's clock ran ahead (its claims expired early), then came back
        await backend.clock_excursion(600)
    assert await reason(ahead, used) == "store_unavailable"
    assert await reason(ahead, unused) == "store_unavailable"  # cannot be proven unused either
    assert not await ahead.store.keep(key=key, retry=retry, result=b"late", within_ms=STEP)  # claim gone: not kept
    fresh = ahead.stamp(b"3")  # minted under the epoch the store answered with
    assert await ahead.consume(fresh) == b"3"


async def test_revocation_follows_the_minting_principal_issuer_qualified_and_can_be_lifted(backend: Backend) -> None:
    guard = await started(backend.guard())  # point 8
    other_issuer = ("app", "https://idp-b.example", "alice")
    client_named_alice = ("alice", ALICE[1], None)
    tokens = [guard.stamp(b"a", principal=p) for p in (ALICE, other_issuer, client_named_alice, None)]
    await guard.revoke(principal="alice", issuer=ALICE[1])
    assert await reason(guard, tokens[0]) == "revoked"
    assert [await guard.consume(t) for t in tokens[1:]] == [b"a"] * 3
    client_token = guard.stamp(b"c", principal=client_named_alice)
    await guard.revoke(client="alice", issuer=ALICE[1])
    assert await reason(guard, client_token) == "revoked"
    # Operator scopes, everything, and a lift: a wrong revocation can be undone (point 12).
    acme, globex = guard.stamp(b"1", scopes={"tenant": "acme"}), guard.stamp(b"2", scopes={"tenant": "globex"})
    await guard.revoke(scope=("tenant", "acme"))
    assert await reason(guard, acme) == "revoked"
    assert await guard.consume(globex) == b"2"
    everyone = guard.stamp(b"3", principal=("app", ALICE[1], "dave"))
    await guard.revoke(everything=True)
    assert await guard.lift(everything=True) is True
    assert await guard.lift(everything=True) is False
    assert await guard.consume(everyone) == b"3"


async def test_each_form_is_recorded_once_before_its_first_token_leaves_and_a_reserved_scope_name_is_refused(
    backend: Backend,
) -> None:
    guard, other = await started(backend.guard()), await started(backend.guard())  # issue 32: what revoke checks
    guard.stamp(b"x", principal=ALICE, scopes={"tenant": "acme"})
    assert guard.unrecorded == {("principal", ALICE[1]), ("client", ALICE[1]), ("scope", "tenant")}
    assert (await other.health())["forms"] == {}  # the caller's `start` records them before the token leaves
    await guard.start()
    forms = cast(dict[str, int], (await other.health())["forms"])  # read on every instance; keyed, never in clear
    assert forms == {guard.form(*form): ANY for form in [("principal", ALICE[1]), ("client", ALICE[1]),
                                                            ("scope", "tenant")]}
    assert "alice" not in str(forms)
    assert "idp-a" not in str(forms)
    guard.stamp(b"y", principal=("app", ALICE[1], "bob"), scopes={"tenant": "globex"})
    assert not guard.unrecorded  # once per form and process, not per token
    other.stamp(b"z", principal=(None, None, "carol"))
    await other.start()
    assert (await guard.health())["forms"] == {**forms, guard.form("principal", None): ANY}
    foreign = await started(backend.guard(key=bytes(range(90, 122)), namespace="other"))
    assert (await foreign.health())["forms"] == {}  # another owner's forms are neither read nor written
    for name in ("principal", "client", "issuer", "subject", "all"):  # a scope the principal's selector never reaches
        with pytest.raises(ConfigurationError, match=f"the scope name {name} is reserved"):
            guard.stamp(b"w", scopes={name: "alice"})


async def test_a_store_of_another_key_or_namespace_is_refused_by_name(backend: Backend) -> None:
    guard = await started(backend.guard())  # point 3: nothing is "revoked" where no server looks
    foreign = backend.guard(key=bytes(range(90, 122)), store=guard.store)
    for call in (foreign.start, lambda: foreign.revoke(principal="alice"), lambda: foreign.lift(everything=True)):
        with pytest.raises(ConfigurationError, match="another store key or namespace"):
            await call()
    with pytest.raises(ConfigurationError, match="no server has used"):
        await backend.guard(namespace="other").revoke(principal="alice")


async def test_a_full_store_refuses_even_in_accept_mode(backend: Backend) -> None:
    guard = await started(backend.guard(on_store_error="accept"))  # point 7
    stamped = guard.stamp(b"x")
    assert await guard.consume(stamped) == b"x"
    fresh = guard.stamp(b"y")
    backend.fill()
    assert await reason(guard, fresh) == "store_unavailable"
    assert await reason(guard, stamped) in {"replayed", "store_unavailable"}  # Redis refuses any script when full


async def test_a_retry_safe_claim_keeps_one_result_for_the_same_retry_and_a_mixed_fleet_fails_closed(
    backend: Backend,
) -> None:
    guard, plain = await started(backend.guard(ttl=0.3)), await started(backend.guard())  # plain: the mode off
    stamped, spent = guard.stamp(b"x"), guard.stamp(b"y")
    same, other = b"\x01" * 16, b"\x02" * 16
    state, key, first = await guard.claim(stamped, same)
    assert first is not None
    assert (state, first.outcome) == (b"x", Outcome.FIRST)
    running = (await guard.claim(stamped, same))[2]  # its step still runs: dated by the store, for a lost step's bound
    assert running == (Outcome.SAME, first.epoch, ANY, (), b"", ANY, first.now_ms)
    for refused in (guard.claim(stamped, other), plain.claim(stamped)):  # another retry; an instance with it off
        with pytest.raises(InvalidToken, match="replayed"):
            await refused
    assert not await guard.store.keep(key=key, retry=other, result=b"moved", within_ms=STEP)  # not this retry's
    assert not await guard.store.keep(key=key, retry=same, result=b"stale", within_ms=-1)  # a claim past the bound
    assert await guard.store.keep(key=key, retry=same, result=b"\x00sealed\xff", within_ms=STEP)
    assert not await guard.store.keep(key=key, retry=same, result=b"again", within_ms=STEP)  # kept once
    assert (await guard.claim(stamped, same))[2] == (Outcome.SAME, first.epoch, ANY, (), b"\x00sealed\xff", ANY, 0)
    assert await plain.consume(spent) == b"y"  # claimed with the mode off: no retry of it is the same
    with pytest.raises(InvalidToken, match="replayed"):
        await guard.claim(spent, same)
    late_key = (await guard.claim(guard.stamp(b"z"), same))[1]
    await backend.advance(0.35)  # the result lives as long as its token
    assert not await guard.store.keep(key=late_key, retry=same, result=b"late", within_ms=STEP)  # token expired
    with pytest.raises(InvalidToken, match="expired"):
        await guard.claim(stamped, same)


async def test_the_fleet_registry_dates_and_drops_entries_by_the_stores_clock_and_remembers_each_keys_last_use(
    backend: Backend,
) -> None:
    registry = backend.registry()
    # web-1's entry lives 1 s: on a real store, its second announce must come before then, even on a loaded machine
    gone, stays = Reporter(registry, "web-1", lifetime=1), Reporter(registry, "web-2", lifetime=30)
    await gone(Snapshot(("aa", "bb"), None, 2.0))
    loaded = (await read_fleet(registry)).members[0].loaded_ms
    await backend.advance(0.1)
    await gone(Snapshot(("aa", "bb"), None, 2.0))  # a heartbeat: the ring and the time it was loaded are unchanged
    await stays(Snapshot(("bb", "aa"), "the new ring drops key aa too early", 2.0, (("cc", 0.25),)))
    await registry.announce("liar", "ee", "not what an instance writes", 500)
    fleet = await read_fleet(registry)
    assert [(m.name, m.accepts, m.error) for m in fleet.members] == [
        ("liar", (), "its registry entry is malformed"),  # fails closed: it blocks every step
        ("web-1", ("aa", "bb"), None),
        ("web-2", ("bb", "aa"), "the new ring drops key aa too early"),
    ]
    assert fleet.members[1].loaded_ms == loaded
    assert fleet.tokens_until_ms["aa"] == fleet.members[1].expires_ms + 2000  # its tokens live its wait after
    assert 0 <= fleet.now_ms - (fleet.tokens_until_ms["cc"] - 1750) < 1000  # "stopped sealing 0.25 s ago", dated
    await backend.advance(1.0)  # web-1 stopped reporting; so did the liar
    after = await read_fleet(registry)
    assert [m.name for m in after.members] == ["web-2"]
    assert after.tokens_until_ms["aa"] == fleet.tokens_until_ms["aa"]  # what web-1 may have sealed still counts
    await stays(None)  # a clean stop leaves at once
    assert (await read_fleet(backend.registry())).members == ()


class Cut:
    """`store` behind a connection that can be cut: while `cut`, every claim is `StoreDown` (refused, as a stopped
    server's port); what a real outage does: tests/integration/test_redis_store.py."""

    def __init__(self, store: Store) -> None:
        self.store, self.cut = store, False
        # Each member itself: from Python 3.12 a Protocol's isinstance does not see what __getattr__ would answer.
        for name in ("where", "namespace", "deadline", "hello", "keep", "revoke", "lift", "health", "aclose"):
            setattr(self, name, getattr(store, name))

    async def claim(self, **kw: Any) -> Any:
        if self.cut:
            raise StoreDown(f"the store at {self.store.where} is unreachable: connection refused")
        return await self.store.claim(**kw)


async def test_availability_first_records_what_it_accepted_unchecked_so_no_instance_accepts_it_again(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """Instance A accepts tokens unchecked while its store is cut; once the store answers A again (a presentation,
    or `start`, which the heartbeat calls), each is claimed: B refuses them `replayed`. A token claimed before the
    outage and replayed to A during it is accepted (A cannot know), and named in the log when recorded."""
    cut = Cut(backend.store())
    a = await started(backend.guard(store=cast(Store, cut), on_store_error="accept", accept_max=3))
    b = await started(backend.guard())
    spent, *tokens = [a.stamp(b"x") for _ in range(5)]
    assert await b.consume(spent) == b"x"
    cut.cut = True
    assert [await a.consume(t) for t in (tokens[0], spent, tokens[1])] == [b"x"] * 3
    assert await reason(a, tokens[0]) == "replayed"  # on A itself, during the outage too
    assert await reason(a, tokens[2]) == "store_unavailable"  # the bound: three per outage
    cut.cut = False
    with caplog.at_level(logging.WARNING, "statecodec.single_use"):
        await a.start()  # the heartbeat's call: the first that answers records them
    assert "3 tokens accepted unchecked recorded, 1 replays let through, 0 left" in caplog.text
    for token in (tokens[0], tokens[1], spent):
        assert await reason(b, token) == "replayed"
        assert await reason(a, token) == "replayed"
    cut.cut = True
    assert await a.consume(tokens[3]) == b"x"  # a new outage, a new bound
