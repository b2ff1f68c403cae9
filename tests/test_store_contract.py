"""The `Store` contract: what `SingleUse` relies on, run against every store (in-process, and a real Redis).

A claim is atomic and first-wins, kept until its expiry and then dropped; a store refuses to vouch for a token
issued before its memory began; revocations keep the latest instant per scope, until they expire; `health()`
says nothing secret. Behaviours only a networked store has (timeouts, TLS, ACL, pub/sub) are in
tests/integration/test_redis_store.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from statecodec.single_use import Claim, MemoryStore, Store

T0 = 1_767_225_600.0  # whole milliseconds: a store may round revocation instants to the millisecond
SCOPE, OTHER = b"\x01" * 16, b"\x02" * 16
_DEADLINE = 30.0


def _memory() -> Store:
    return MemoryStore()


@pytest.fixture(params=["memory", "redis", "redis-cluster"])
def make_store(request: pytest.FixtureRequest) -> Iterator[Callable[[], Store]]:
    """A factory of stores over one backing state (one process's memory, one flushed Redis database, or one
    flushed three-node Redis Cluster, each store named by another node)."""
    stores: list[Store] = []
    if request.param == "memory":
        shared = MemoryStore()

        def make() -> Store:
            return shared

    else:
        from statecodec.redis_store import RedisStore

        if request.param == "redis":
            urls = [request.getfixturevalue("redis_url")]
        else:
            cluster = request.getfixturevalue("redis_cluster")
            request.getfixturevalue("redis_cluster_url")  # flushed
            urls = [f"redis+cluster://127.0.0.1:{node.port}" for node in cluster.nodes]

        def make() -> Store:
            # clock_allowance 0: the store's memory begins at its first call, and the tests issue tokens just after
            store = RedisStore.from_url(urls[len(stores) % len(urls)], clock_allowance=0)
            store.revoked_at([])  # the first call: the store's memory (its epoch) begins here
            stores.append(store)
            return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def store(make_store: Callable[[], Store]) -> Store:
    return make_store()


def issued_now() -> float:
    """An issue time after the store's memory began, in whole milliseconds as stamps carry it."""
    return int(time.time() * 1000 + 1) / 1000


def test_every_store_is_a_store(store: Store) -> None:
    assert isinstance(store, Store)


def test_the_first_claim_wins_and_every_later_one_is_used(store: Store) -> None:
    issued = issued_now()
    key = b"\x11" * 16
    assert store.claim(key, issued, issued + 600) is Claim.FIRST
    assert store.claim(key, issued, issued + 600) is Claim.USED
    assert store.claim(key, issued + 1, issued + 600) is Claim.USED
    assert store.claim(b"\x12" * 16, issued, issued + 600) is Claim.FIRST


def test_a_claim_is_seen_by_every_store_over_the_same_state(make_store: Callable[[], Store]) -> None:
    first, second = make_store(), make_store()
    issued = issued_now()
    assert first.claim(b"\x13" * 16, issued, issued + 600) is Claim.FIRST
    assert second.claim(b"\x13" * 16, issued, issued + 600) is Claim.USED


def test_concurrent_claims_of_one_key_have_exactly_one_winner(make_store: Callable[[], Store]) -> None:
    stores = [make_store() for _ in range(2)]
    issued = issued_now()
    outcomes: list[Claim | BaseException] = []
    barrier = threading.Barrier(16)

    def claim(index: int) -> None:
        barrier.wait()
        try:
            outcomes.append(stores[index % 2].claim(b"\x14" * 16, issued, issued + 600))
        except BaseException as exc:  # recorded, so the assertion shows it
            outcomes.append(exc)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(str(o) for o in outcomes) == sorted([str(Claim.FIRST)] + [str(Claim.USED)] * 15)


def test_a_claim_is_kept_until_its_expiry_then_dropped(store: Store) -> None:
    issued = issued_now()
    key = b"\x15" * 16
    assert store.claim(key, issued, time.time() + 0.3) is Claim.FIRST
    deadline = time.monotonic() + _DEADLINE
    outcome = store.claim(key, issued, time.time() + 600)
    while outcome is Claim.USED and time.monotonic() < deadline:
        time.sleep(0.05)
        outcome = store.claim(key, issued, time.time() + 600)
    assert outcome is Claim.FIRST  # the entry went with its token: the store holds live tokens only


def test_a_token_issued_before_the_store_began_is_forgotten(store: Store) -> None:
    long_ago = time.time() - 3600
    assert store.claim(b"\x16" * 16, long_ago, time.time() + 600) is Claim.FORGOTTEN
    assert store.claim(b"\x16" * 16, long_ago, time.time() + 600) is Claim.FORGOTTEN  # and never claimed


def test_revocations_keep_the_latest_instant_per_scope(make_store: Callable[[], Store]) -> None:
    store = make_store()
    until = time.time() + 600
    assert store.revoked_at([SCOPE, OTHER]) == 0.0
    store.revoke(SCOPE, T0 + 5, until)
    store.revoke(SCOPE, T0 + 3, until)  # an earlier instant does not lower it
    store.revoke(OTHER, T0 + 1, until)
    assert store.revoked_at([SCOPE]) == T0 + 5
    assert store.revoked_at([OTHER]) == T0 + 1
    assert store.revoked_at([OTHER, SCOPE, b"\x03" * 16]) == T0 + 5
    assert store.revoked_at([]) == store.revoked_at([b"\x03" * 16]) == 0.0
    store.revoke(SCOPE, T0 + 7.5, until)
    assert store.revoked_at([SCOPE]) == T0 + 7.5


def test_a_revocation_ends_at_its_expiry(store: Store) -> None:
    store.revoke(SCOPE, T0, time.time() - 1)  # every token it covered has expired
    assert store.revoked_at([SCOPE]) == 0.0


def test_health_says_nothing_secret(store: Store) -> None:
    health = store.health()
    text = json.dumps(health, default=str)
    assert all(isinstance(name, str) for name in health)
    assert "redis://" not in text
    assert "password" not in text.lower()
    store.close()
    store.close()  # closing twice is harmless
