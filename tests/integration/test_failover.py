"""A failover that loses claims, on real `redis-server` processes: the replication link to a replica is cut, claims
are made on its primary, then the replica is promoted without them. Threat: each of those consumed tokens accepted
again, silently. What holds: the promoted node has a new replication id, so the next claim begins a new epoch, every
token minted before it is refused (as after a flush), and each instance logs it once naming the node; with
``STATECODEC_STORE_REPLICAS`` a claim no replica acknowledged is refused, its cause named.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from tests.plugins import eventually
from tests.plugins.redis import RedisServer, guarded, shard

from statecodec import ConfigurationError, InvalidToken, StoreError
from statecodec.mcp import store_from_env
from statecodec.single_use import SingleUse

pytestmark = pytest.mark.integration
FAST_SYNC = ["--repl-diskless-sync-delay", "0"]  # a replica synchronises at once, not after 5 s
NEW_EPOCH = "began a new epoch (flushed, restarted, or failed over: it may lack claims)"


@pytest.fixture
def replicated() -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and its replica of this test's own, in sync."""
    with RedisServer(extra=FAST_SYNC) as primary, RedisServer(extra=[*FAST_SYNC, "--replicaof", "127.0.0.1",
                                                                    str(primary.port)]) as replica:
        eventually(lambda: synced(replica))
        yield primary, replica


def cut(primary: RedisServer, replica: RedisServer) -> None:
    """The replication link cut: the replica stopped (it cannot reconnect), its connection closed by the primary, so
    nothing written from now on reaches it (a paused replica alone would read what its socket buffered)."""
    replica.pause()
    primary.cli("CLIENT", "KILL", "TYPE", "replica")


def synced(replica: RedisServer) -> bool:
    return "master_link_status:up" in replica.cli("INFO", "replication")


async def presented(guard: SingleUse, tokens: list[bytes]) -> list[str]:
    """What `guard` answers each token: "accepted", or the reason it refused it."""
    answers = []
    for stamped in tokens:
        try:
            answers.append("accepted" if await guard.consume(stamped) == b"x" else "?")
        except InvalidToken as exc:
            answers.append(exc.reason)
    return answers


def refused_as_forgotten(answers: list[str]) -> None:
    """None accepted (the figure), each refused as minted before the store's new epoch."""
    assert answers.count("accepted") == 0, f"{answers.count('accepted')} presentations of consumed tokens accepted"
    assert set(answers) == {"store_unavailable"}


async def answering(guard: SingleUse) -> None:
    """Until the store answers this instance again (a cluster client learns the new topology on a failed call)."""
    for _ in range(300):
        try:
            await guard.store.health(fingerprint=b"")
            return
        except StoreError:
            await asyncio.sleep(0.1)
    raise AssertionError("the store never answered after the failover")


def test_a_promoted_replica_that_missed_claims_begins_a_new_epoch_and_no_consumed_token_is_accepted_again(
    replicated: tuple[RedisServer, RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    """One primary, one replica: claims made while the link is cut, then the node at the URL serves the replica's
    history (the old primary rejoins as its replica, a full resynchronisation drops the claims, then it is promoted
    back): 0 of the consumed tokens accepted again, the tokens in flight refused, new ones accepted at once."""
    primary, replica = replicated

    async def scenario() -> None:
        async with guarded(primary.url) as a, guarded(primary.url) as b, guarded(primary.url) as c:
            consumed, in_flight = [(a, b)[i % 2].stamp(b"x") for i in range(8)], [a.stamp(b"x"), b.stamp(b"x")]
            cut(primary, replica)
            assert [await (a, b)[i % 2].consume(t) for i, t in enumerate(consumed)] == [b"x"] * 8
            primary.pause()  # else the resumed replica could reconnect and read the claims first
            replica.resume()
            replica.cli("REPLICAOF", "NO", "ONE")
            primary.resume()
            primary.cli("REPLICAOF", "127.0.0.1", str(replica.port))
            eventually(lambda: synced(primary))
            primary.cli("REPLICAOF", "NO", "ONE")
            refused_as_forgotten(await presented(a, consumed) + await presented(b, consumed))
            refused_as_forgotten(await presented(b, in_flight))  # the cost: minted before, refused too
            assert await a.consume(b.stamp(b"x")) == b"x"  # the new epoch serves at once
            await c.start()  # an instance that learns it by its hello (recording a form) logs it too

    with caplog.at_level(logging.WARNING, "statecodec.single_use"):
        asyncio.run(scenario())
    logged = [r.getMessage() for r in caplog.records if NEW_EPOCH in r.getMessage()]
    assert logged == [f"the store at 127.0.0.1:{primary.port} {NEW_EPOCH}: older tokens refused"] * 3  # each once


def test_a_cluster_failover_that_lost_claims_is_detected_and_the_durability_setting_refuses_them_first(
    redis_cluster_with_replicas: list[RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    """Three masters, three replicas: the link to the namespace's replica cut, claims made on its master, the master
    killed (SIGKILL) and the replica promoted (CLUSTER FAILOVER TAKEOVER). Two instances: 0 replays, each logs the new
    epoch once naming the promoted node. A third with STATECODEC_STORE_REPLICAS=1: its claims during the cut refused,
    the cause named."""
    nodes = redis_cluster_with_replicas
    master, replica = shard(nodes, "{statecodec}:meta")
    seed = next(node for node in nodes if node not in (master, replica))  # the URL names a node that stays up
    url = f"redis+cluster://127.0.0.1:{seed.port}"

    async def scenario() -> None:
        async with guarded(url) as a, guarded(url) as b, guarded(url, replicas=1) as durable:
            consumed = [(a, b)[i % 2].stamp(b"x") for i in range(8)]
            assert await durable.consume(durable.stamp(b"x")) == b"x"  # acknowledged by the replica
            refused = [durable.stamp(b"x") for _ in range(2)]
            cut(master, replica)
            assert [await (a, b)[i % 2].consume(t) for i, t in enumerate(consumed)] == [b"x"] * 8
            for stamped in refused:
                with pytest.raises(InvalidToken, match="store_unavailable"):
                    await durable.consume(stamped)
            master.kill()
            replica.resume()
            replica.cli("CLUSTER", "FAILOVER", "TAKEOVER")
            eventually(lambda: "role:master" in replica.cli("INFO", "replication"))
            eventually(lambda: all("cluster_state:ok" in n.cli("CLUSTER", "INFO") for n in nodes if n is not master))
            for guard in (a, b):
                await answering(guard)
            refused_as_forgotten(await presented(a, consumed) + await presented(b, consumed))
            assert await b.consume(a.stamp(b"x")) == b"x"  # the new epoch serves at once

    with caplog.at_level(logging.WARNING, "statecodec.single_use"):
        asyncio.run(scenario())
    logged = [r.getMessage() for r in caplog.records if NEW_EPOCH in r.getMessage()]
    assert logged == [f"the store at 127.0.0.1:{replica.port} {NEW_EPOCH}: older tokens refused"] * 2  # each once
    assert caplog.text.count("claim not acknowledged by 1 replicas (STATECODEC_STORE_REPLICAS)") == 1  # per 10 s


def test_with_the_durability_setting_a_claim_no_replica_holds_is_refused_and_spent(
    replicated: tuple[RedisServer, RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    """STATECODEC_STORE_REPLICAS=1: while the link is cut each claim is refused, the cause named; it was recorded on
    the primary, so once the link is back the same token is `replayed` (spent, though refused), a new one accepted."""
    primary, replica = replicated

    async def scenario() -> None:
        async with guarded(primary.url, replicas=1) as guard:
            assert await guard.consume(guard.stamp(b"x")) == b"x"
            stamped = guard.stamp(b"x")
            cut(primary, replica)
            with pytest.raises(InvalidToken, match="store_unavailable"):
                await guard.consume(stamped)
            replica.resume()
            with pytest.raises(InvalidToken, match="replayed"):
                await guard.consume(stamped)
            eventually(lambda: synced(replica))
            assert await guard.consume(guard.stamp(b"x")) == b"x"

    with caplog.at_level(logging.WARNING, "statecodec.single_use"):
        asyncio.run(scenario())
    assert f"127.0.0.1:{primary.port}: claim not acknowledged by 1 replicas (STATECODEC_STORE_REPLICAS)" in caplog.text


def test_the_replicas_setting_is_read_and_checked_by_name() -> None:
    url = {"STATECODEC_STORE_URL": "redis://127.0.0.1:1/0"}
    assert store_from_env(url).replicas == 0  # type: ignore[attr-defined]
    assert store_from_env({**url, "STATECODEC_STORE_REPLICAS": "2"}).replicas == 2  # type: ignore[attr-defined]
    for bad in ("-1", "1.5", "17", "two"):
        with pytest.raises(ConfigurationError, match="STATECODEC_STORE_REPLICAS must be a whole number") as info:
            store_from_env({**url, "STATECODEC_STORE_REPLICAS": bad})
        assert bad not in str(info.value)
    with pytest.raises(ConfigurationError, match="STATECODEC_STORE_REPLICAS is set but the in-process store has no"):
        store_from_env({"STATECODEC_STORE_URL": "memory", "STATECODEC_STORE_REPLICAS": "1"})


def test_a_store_from_before_the_replication_id_adopts_it_without_a_new_epoch(redis_server: RedisServer,
                                                                              redis_url: str) -> None:
    """An upgrade: a store whose meta has no `rid` records the answering node's and keeps its epoch, so no token
    in flight is refused; the tokens it claimed stay claimed."""

    async def scenario() -> None:
        async with guarded(redis_url) as guard:
            spent, live = guard.stamp(b"x"), guard.stamp(b"x")
            assert await guard.consume(spent) == b"x"
            redis_server.cli("HDEL", "{statecodec}:meta", "rid")  # as a release before it left the store
            assert await presented(guard, [live, spent]) == ["accepted", "replayed"]
            assert len(redis_server.cli("HGET", "{statecodec}:meta", "rid")) == 40  # adopted

    asyncio.run(scenario())


def test_a_restart_with_persistence_begins_a_new_epoch(caplog: pytest.LogCaptureFixture) -> None:
    """The append-only file keeps every claim, but a restarted Redis has a new replication id, and a script cannot
    tell a restart that lost the last second (appendfsync everysec) from one that lost nothing: a new epoch, the
    tokens minted before it refused (docs/single-use.md says what this costs), logged once."""
    with RedisServer(extra=["--appendonly", "yes", "--appendfsync", "always"]) as server:

        async def scenario() -> None:
            async with guarded(server.url) as guard:
                spent, in_flight = guard.stamp(b"x"), guard.stamp(b"x")
                assert await guard.consume(spent) == b"x"
                server.stop()
                server.start()
                refused_as_forgotten(await presented(guard, [spent, in_flight]))
                assert server.cli("EXISTS", "{statecodec}:meta") == "1"  # the data came back: only the id changed
                assert await guard.consume(guard.stamp(b"x")) == b"x"

        with caplog.at_level(logging.WARNING, "statecodec.single_use"):
            asyncio.run(scenario())
    assert caplog.text.count(NEW_EPOCH) == 1
