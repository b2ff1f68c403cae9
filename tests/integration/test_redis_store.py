"""RedisStore against a real `redis-server`, what only a networked store has: the minimal ACL, TLS, no URL secret
echoed, failures named by host:port and cause, the memory policy, many revocations, malformed entries, the
operator's commands on a live store, a Redis Cluster. The contract every store keeps: tests/test_store_contract.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import errno
import ipaddress
import json
import logging
import re
import socket
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar
from unittest.mock import ANY

import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tests.plugins import free_port
from tests.plugins.redis import KEY, RedisServer, guard_on, guarded

from statecodec import ConfigurationError, InvalidToken, StoreError, StoreUnreachable, format_keys
from statecodec.cli.main import main
from statecodec.redis_store import RedisStore
from statecodec.registry import RedisRegistry
from statecodec.single_use import SingleUse
from statecodec.store import Outcome

pytestmark = pytest.mark.integration
T = TypeVar("T")
PASSWORD = "s3cret/Pa?ss#7@f1e"  # every URL delimiter: it must never become the host:port of a message
QUOTED = PASSWORD.replace("/", "%2F").replace("?", "%3F").replace("#", "%23").replace("@", "%40")
# The minimal ACL (docs/single-use.md): what the client sends, and what the scripts call, on the namespace's keys.
ACL_COMMANDS = ["+evalsha", "+eval", "+info", "+time", "+hmget", "+hget", "+hset", "+hdel", "+hgetall", "+get", "+set"]
ACL_COMMANDS += ["+hlen", "+hscan", "+zadd", "+zrem", "+zrangebyscore"]
CLUSTER_ACL_COMMANDS = ["+cluster|slots", "+cluster|shards", "+command"]  # read by a cluster client when it starts
ACL_RULES = ["on", f">{PASSWORD}", "resetkeys", "resetchannels", "~{statecodec}:*", "-@all", *ACL_COMMANDS]


def run(scenario: Callable[..., Coroutine[Any, Any, T]], *args: Any, **kw: Any) -> T:
    return asyncio.run(scenario(*args, **kw))


async def minted(url: str, principal: tuple[str | None, str | None, str | None], namespace: str = "statecodec"
                 ) -> bytes:
    """A token stamped for `principal` as a server mints one: its principal's form recorded before it leaves."""
    async with guarded(url, namespace=namespace) as guard:
        stamped = guard.stamp(b"x", principal=principal)
        await guard.start()  # `unrecorded` is not empty: the new form is recorded
        return stamped


async def opened(url: str, **kw: Any) -> SingleUse:
    """A guard started on `url` and closed again: the start's error, if any."""
    async with guarded(url, **kw) as guard:
        return guard


def assert_silent(exc: BaseException) -> None:
    assert "s3cret" not in " ".join((str(exc), repr(exc), str(exc.__context__), str(exc.__cause__)))  # nor QUOTED


@pytest.fixture
def operator(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings of an operator's `statecodec` commands: the session server, the fleet's store key."""
    monkeypatch.setenv("STATECODEC_STORE_URL", redis_url)
    monkeypatch.setenv("STATECODEC_STORE_KEY", format_keys([KEY]))


@pytest.fixture
def acl_user(redis_url: str, redis_server: RedisServer) -> Iterator[str]:
    """The URL of an ACL user holding only the minimal command set, its password full of URL delimiters."""
    redis_server.cli("ACL", "SETUSER", "statecodec", "reset", *ACL_RULES)
    redis_server.cli("ACL", "LOG", "RESET")
    yield f"redis://statecodec:{QUOTED}@127.0.0.1:{redis_server.port}/0"
    redis_server.cli("ACL", "DELUSER", "statecodec")


# --- ACL, credentials, failures named by host:port and cause ---------------------------------------------------


def test_the_minimal_acl_user_can_do_everything_the_store_does(acl_user: str, redis_server: RedisServer) -> None:
    async def scenario() -> None:
        async with guarded(acl_user) as guard:
            stamped, again = guard.stamp(b"x", principal=("c", "i", "alice")), guard.stamp(b"y")
            assert await guard.consume(stamped) == b"x"
            await guard.revoke(principal="alice", issuer="i")
            assert await guard.lift(principal="alice", issuer="i") is True
            redis_server.cli("SCRIPT", "FLUSH")  # a lost script cache: EVALSHA fails, EVAL runs the script again
            assert await guard.consume(again) == b"y"
            assert (await guard.health())["owner"] == "ok"
            retried, retry, store = guard.stamp(b"z"), b"r" * 16, guard.store  # the retry-safe mode's claim and keep
            key = (await guard.claim(retried, retry))[1]
            assert await store.keep(key=key, retry=retry, result=b"kept", within_ms=60_000)  # SET ... KEEPTTL (6.0+)
            assert (await guard.claim(retried, retry))[2] == (Outcome.SAME, guard._epoch, ANY, (), b"kept", ANY, 0)
            assert isinstance(store, RedisStore)
            registry = RedisRegistry(store)  # the fleet registry's scripts, through the store's connection
            await registry.announce("web-1", "k1,k0", "{}", 5000, [("k0", 1000)])
            assert [row[0] for row in (await registry.fleet())[1]] == ["web-1"]
            await registry.leave("web-1")

    async def revoke(url: str) -> None:
        async with guarded(url) as guard:
            await guard.revoke(everything=True)

    run(scenario)
    assert redis_server.cli("ACL", "LOG") == ""  # nothing was refused
    redis_server.cli("ACL", "SETUSER", "statecodec", "-zadd")  # a missing command or a wrong password: answered
    for url, message in ((acl_user, "ACL user lacks"), (acl_user.replace("%40f1e", "%40f1x"), "user name or password")):
        with pytest.raises(StoreError, match=message) as info:
            run(revoke, url)
        assert not isinstance(info.value, StoreUnreachable)  # answered: refused in every mode
        assert_silent(info.value)


@pytest.mark.parametrize(
    ("url", "failure", "message"),
    [
        ("redis://u:{p}@127.0.0.1:{closed}/0", StoreUnreachable, "127.0.0.1:{closed} is unreachable: connection ref"),
        ("redis://u:{p}@nohost.invalid:6379/0", StoreUnreachable, "nohost.invalid:6379 is unreachable: its host"),
        ("redis://default:{p}@127.0.0.1:{port}/99", StoreError, "127.0.0.1:{port} has no such database"),
    ],
    ids=["refused", "dns", "database"],
)
def test_each_failure_names_host_port_and_its_cause_only(
    redis_url: str, redis_server: RedisServer, url: str, failure: type[StoreError], message: str
) -> None:
    redis_server.cli("CONFIG", "SET", "requirepass", PASSWORD)
    try:
        ports = {"p": QUOTED, "closed": free_port(), "port": redis_server.port}
        with pytest.raises(failure, match=message.format(**ports)) as info:
            run(opened, url.format(**ports))
    finally:
        redis_server.cli("-a", PASSWORD, "CONFIG", "SET", "requirepass", "")
    assert_silent(info.value)


def test_a_store_that_stops_answering_is_unreachable_and_the_same_guard_recovers(
    redis_url: str, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> list[bytes | BaseException]:
        # Accept mode's timeout is 1 s: of its burst, the claims that waited for a connection are this instance's
        # load, refused `store_busy` whether or not a timed-out claim gave them one before their deadline.
        refusing, accepting = guarded(redis_url, timeout=0.25), guarded(redis_url, timeout=1, on_store_error="accept")
        async with refusing as refuse, accepting as accept:
            stamped = [refuse.stamp(b"x") for _ in range(3)]
            redis_server.pause()
            try:
                with pytest.raises(StoreUnreachable, match=r"127.0.0.1:\d+ did not answer within 0.25 s"):
                    await opened(redis_url, timeout=0.25)  # start names host:port and the cause
                with pytest.raises(InvalidToken, match="store_unavailable"):
                    await refuse.consume(stamped[0])
                # Availability first accepts nothing from a connected store that is slow (a client can make it so):
                # the claims in flight time out, refused; the 200 that waited for a connection: this instance's queue.
                burst = (accept.consume(stamped[1]) for _ in range(300))
                outcomes = await asyncio.gather(*burst, return_exceptions=True)
            finally:
                redis_server.resume()
            assert await refuse.consume(stamped[2]) == b"x"
            return outcomes

    with caplog.at_level(logging.WARNING, "statecodec.single_use"):
        outcomes = run(scenario)
    assert outcomes.count(b"x") == 0
    assert sum(str(o) == "store_busy" for o in outcomes) > 100
    assert "did not answer within 0.25 s: tokens refused until it answers" in caplog.text


def test_claims_made_together_share_round_trips(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> tuple[list[bytes], int]:
        async with guarded(redis_url) as guard:
            stamped = [guard.stamp(b"x") for _ in range(201)]
            assert await guard.consume(stamped.pop()) == b"x"  # the claim script loaded: no second exchange for it
            client, sent = guard.store._client, list[object]()  # type: ignore[attr-defined]
            for name in ("execute_command", "pipeline"):  # a call sent alone, a batch
                monkeypatch.setattr(client, name, counted(getattr(client, name), sent))
            outcomes = await asyncio.gather(*(guard.consume(token) for token in stamped))
            return outcomes, len(sent)

    def counted(method: Callable[..., Any], sent: list[object]) -> Callable[..., Any]:
        def call(*args: Any, **kw: Any) -> Any:
            sent.append(method)
            return method(*args, **kw)

        return call

    outcomes, exchanges = run(scenario)
    assert outcomes == [b"x"] * 200
    assert exchanges <= 10  # 200 claims at once, 100 connection slots: the first sent alone, then pipelines of ~100


def test_a_batch_that_fails_before_it_is_sent_answers_its_callers_at_once(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> float:
        # A Cluster client that never learnt its slots cannot even route WAIT: the batch fails while it is built.
        store = RedisStore.from_url(f"redis+cluster://127.0.0.1:{free_port()}", timeout=0.5, replicas=1)
        started = time.monotonic()
        try:
            with pytest.raises(StoreUnreachable, match="is unreachable"):  # a hang fails at 5 s
                async with asyncio.timeout(5):
                    await store.claim(fingerprint=b"f", key=b"k", epoch=b"e", issued_ms=1, expires_ms=2,
                                      lifetime_ms=1, skew_ms=0, scopes=())
            return time.monotonic() - started
        finally:
            await store.aclose()

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        assert run(scenario) < 2 * 0.5  # within the store's deadline, not waiting for `bounded` to give up
    assert "never retrieved" not in caplog.text


def test_an_instance_too_busy_to_read_the_answer_refuses_even_in_accept_mode(redis_url: str) -> None:
    async def scenario() -> list[object]:
        async def flood() -> None:
            time.sleep(1.0)  # what a flood of requests does to this instance's event loop

        async with guarded(redis_url, on_store_error="accept", timeout=0.25) as guard:
            stamped = guard.stamp(b"x")
            assert await guard.consume(stamped) == b"x"
            return await asyncio.gather(*(guard.consume(stamped) for _ in range(10)), flood(), return_exceptions=True)

    outcomes = run(scenario)  # the store answered in time: only this loop was late to read it
    assert b"x" not in outcomes


def test_a_store_at_maxclients_or_loading_has_answered_and_is_refused_even_in_accept_mode() -> None:
    with RedisServer(extra=["--maxclients", "1"]) as full:  # the answer: "ERR max number of clients reached"
        (holder := redis.Redis(port=full.port)).ping()
        with pytest.raises(StoreError, match="is busy") as info:
            run(opened, full.url)
        holder.close()
    assert not isinstance(info.value, StoreUnreachable)  # a flood cannot switch availability first on


def calls(server: RedisServer, command: str = "evalsha") -> int:
    """How many `command` the server has run since its statistics were reset: its own fact, no clock."""
    return int(next(iter(re.findall(rf"cmdstat_{command}:calls=(\d+)", server.cli("INFO", "commandstats"))), "0"))


def test_a_claim_or_keep_that_reaches_the_store_after_its_deadline_records_nothing(
    redis_url: str, redis_server: RedisServer
) -> None:
    """A stalled store runs what was queued once it resumes, after the instance refused: a refused token is never
    spent (else its retry is `replayed`) and a refused keep keeps nothing."""

    async def scenario() -> None:
        async with guarded(redis_url, timeout=0.25) as guard:
            refused, kept, retry = guard.stamp(b"x"), guard.stamp(b"y"), b"r" * 16
            key = (await guard.claim(kept, retry))[1]  # loads the claim script: a late EVALSHA runs, not NOSCRIPT
            assert not await guard.store.keep(key=key, retry=b"w" * 16, result=b"", within_ms=60_000)  # and keep's
            redis_server.cli("CONFIG", "RESETSTAT")
            redis_server.pause()
            try:
                with pytest.raises(InvalidToken, match="store_unavailable"):
                    await guard.consume(refused)
                with pytest.raises(StoreUnreachable):
                    await guard.keep(key, retry, b"{}", 60)
            finally:
                redis_server.resume()
            for _ in range(1000):  # until the store ran both, late (each poll a round trip)
                if calls(redis_server) >= 2:
                    break
            assert calls(redis_server) == 2
            assert await guard.consume(refused) == b"x"  # once, not `replayed`: the late claim recorded nothing
            with pytest.raises(InvalidToken, match="replayed"):
                await guard.consume(refused)
            nothing_kept_late = (Outcome.SAME, ANY, ANY, (), b"", ANY, ANY)
            assert (await guard.claim(kept, retry))[2] == nothing_kept_late

    run(scenario)


def test_each_error_a_store_answers_is_named_as_its_own_cause_and_logged_apart(
    redis_url: str, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Full, no replicas, a read-only replica, a replica without its primary: each refused in every mode (answered),
    each named, each its own log line within the limiter's 10 s (one cause cannot hide the next)."""
    closed = str(free_port())
    faults = [
        ([["CONFIG", "SET", "maxmemory", "1"]], [["CONFIG", "SET", "maxmemory", "0"]], "is full (maxmemory)"),
        ([["CONFIG", "SET", "min-replicas-to-write", "1"]], [["CONFIG", "SET", "min-replicas-to-write", "0"]],
         "fewer replicas than its min-replicas-to-write (NOREPLICAS)"),
        ([["REPLICAOF", "127.0.0.1", closed]], [["REPLICAOF", "NO", "ONE"]], "is a read-only replica"),
        ([["CONFIG", "SET", "replica-serve-stale-data", "no"], ["REPLICAOF", "127.0.0.1", closed]],
         [["REPLICAOF", "NO", "ONE"], ["CONFIG", "SET", "replica-serve-stale-data", "yes"]], "lost its primary"),
    ]

    async def scenario() -> None:
        async with guarded(redis_url, on_store_error="accept") as guard:
            for fault, undo, _ in faults:
                stamped, keys = guard.stamp(b"x"), redis_server.cli("DBSIZE")
                for command in fault:
                    redis_server.cli(*command)
                try:
                    with pytest.raises(InvalidToken, match="store_unavailable"):  # answered: even in accept mode
                        await guard.consume(stamped)
                finally:
                    for command in undo:
                        redis_server.cli(*command)
                assert redis_server.cli("DBSIZE") == keys  # the refused token was not spent
                if fault[-1][0] == "REPLICAOF":  # a replica promoted (a new replication id): it may lack claims
                    with pytest.raises(InvalidToken, match="store_unavailable"):  # a new epoch, as after a flush
                        await guard.consume(stamped)
                else:
                    assert await guard.consume(stamped) == b"x"  # the refused token was not spent

    with caplog.at_level(logging.WARNING, "statecodec.single_use"):
        run(scenario)
    for _, _, cause in faults:
        assert caplog.text.count(cause) == 1, cause


def test_a_redirect_storm_on_a_cluster_is_named(redis_cluster: list[RedisServer], redis_cluster_url: str) -> None:
    """A slot left migrating to a node that does not import it: each node sends the call to the other (ASK, MOVED)
    until the client stops; named as such, refused in every mode."""
    slot = int(redis_cluster[0].cli("CLUSTER", "KEYSLOT", "{statecodec}:meta"))
    mine = [line.split() for node in redis_cluster for line in node.cli("CLUSTER", "NODES").splitlines()
            if "myself" in line]
    owner, other = next((node, mine[(i + 1) % 3][0]) for i, node in enumerate(redis_cluster)
                        if int(mine[i][8].split("-")[0]) <= slot <= int(mine[i][8].split("-")[1]))
    owner.cli("CLUSTER", "SETSLOT", str(slot), "MIGRATING", other)
    try:
        with pytest.raises(StoreError, match=r"kept redirecting the call \(MOVED/ASK\)") as info:
            run(opened, redis_cluster_url, on_store_error="accept")
        assert not isinstance(info.value, StoreUnreachable)
    finally:
        owner.cli("CLUSTER", "SETSLOT", str(slot), "STABLE")


def test_a_burst_on_a_healthy_store_is_served_and_saturation_is_retryable(
    redis_url: str, redis_server: RedisServer
) -> None:
    """1,000 distinct tokens presented at once, ten times the connections: every one accepted, once. A presentation
    that waited for a connection past the deadline is refused `store_busy`, which a client can tell from a forgery."""
    from statecodec.errors import Reason
    from statecodec.middleware import refusal

    async def scenario() -> list[bytes | BaseException]:
        async with guarded(redis_url, timeout=1) as guard:
            stamped = [guard.stamp(str(n).encode()) for n in range(1000)]
            redis_server.cli("CONFIG", "RESETSTAT")
            outcomes = await asyncio.gather(*(guard.consume(t) for t in stamped), return_exceptions=True)
            again = await asyncio.gather(*(guard.consume(t) for t in stamped[:50]), return_exceptions=True)
            assert [str(o) for o in again] == ["replayed"] * 50
            return outcomes

    assert run(scenario) == [str(n).encode() for n in range(1000)]
    assert calls(redis_server) == 1050  # one round trip each, none refused before it
    answer = refusal("tools/call", Reason.STORE_BUSY).error
    assert (answer.message, answer.data) == ("requestState not checked, server busy: retry shortly",
                                             {"reason": "store_busy"})


# --- the operator's commands on a live store; many revocations, malformed entries --------------------------------


async def many_revocations_and_a_malformed_one(url: str, server: RedisServer) -> str:
    """Ten claims under 100,000 revocations and a malformed one (whose scope it returns): all accepted."""
    async with guarded(url) as guard:
        tokens = [guard.stamp(b"x", principal=("c", "i", "alice")) for _ in range(10)]
        client = redis.Redis(port=server.port)
        client.hset("{statecodec}:r", mapping={f"{n:032x}": "1:9999999999999" for n in range(100_000)})
        alice = guard._scope("principal", "i", "alice").hex()
        client.hset("{statecodec}:r", alice, "not-an-entry")
        client.config_resetstat()
        client.close()
        assert [await guard.consume(t) for t in tokens] == [b"x"] * 10  # neither refused nor every token refused
        return alice


def test_revoke_and_store_check_on_a_live_store_and_under_the_wrong_settings(
    redis_url: str, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture, operator: None,
) -> None:
    assert main(["revoke", "--principal", "alice"]) == 2  # point 3: no server has used this store yet
    assert "no server has used the store" in capsys.readouterr().err
    assert main(["store", "check"]) == 1  # nor is it "ready": a wrong namespace looks just like this
    assert "no server has used this store" in capsys.readouterr().out
    guard = run(opened, redis_url)
    run(minted, redis_url, ("c", "https://idp", "alice"))  # the fleet mints under an issuer
    assert main(["revoke", "--principal", "alice"]) == 1  # covers no token whose access token names an issuer
    assert "tokens minted under an issuer need --issuer" in capsys.readouterr().out
    assert main(["revoke", "--principal", "alice", "--issuer", "https://idp", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["revoked_until"].startswith(str(datetime.date.today().year))
    stamped = guard.stamp(b"x", principal=("c", "https://idp", "alice"))  # minted now: within the revocation
    with pytest.raises(InvalidToken, match="revoked"):
        run(consume_once, redis_url, stamped)  # at once, on another instance: no view to wait for
    assert main(["revoke", "--principal", "alice", "--issuer", "https://idp", "--lift"]) == 0
    assert run(consume_once, redis_url, guard.stamp(b"y", principal=("c", "https://idp", "alice"))) == b"y"
    assert main(["store", "check"]) == 0
    report = capsys.readouterr().out
    assert "owner             this store key and namespace" in report
    assert "(" not in report  # readable: no Python reprs, no raw epoch floats
    alice = run(many_revocations_and_a_malformed_one, redis_url, redis_server)
    assert alice in caplog.text  # skipped and named
    stats = redis_server.cli("INFO", "commandstats")
    assert "cmdstat_evalsha:calls=10," in stats  # one round trip per token, whatever is revoked
    assert "hgetall" not in stats
    assert "hscan" not in stats
    assert main(["store", "check", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["malformed"] == [alice]
    redis_server.cli("DEL", "{statecodec}:r", "{statecodec}:rx")
    redis_server.cli("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")  # an evicting policy reopens replays:
    try:
        with pytest.raises(ConfigurationError, match="maxmemory-policy allkeys-lru: an evicted claim reopens"):
            run(opened, redis_url)  # no server starts on it
        assert main(["store", "check"]) == 1
        assert "maxmemory-policy is allkeys-lru" in capsys.readouterr().out
    finally:
        redis_server.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
    monkeypatch.setenv("STATECODEC_STORE_KEY", format_keys([bytes(range(90, 122))]))
    for args in (["revoke", "--all"], ["store", "check"]):
        assert main(args) == 2
        assert "belongs to another store key or namespace" in capsys.readouterr().err
    monkeypatch.setenv("STATECODEC_STORE_URL", f"redis://127.0.0.1:{free_port()}/0")
    for args in (["revoke", "--all"], ["store", "check"]):
        assert main(args) == 1  # the same unreachable store, the same exit code
        assert "connection refused" in capsys.readouterr().err


@pytest.fixture
def revoke(operator: None, capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str]]:
    """`statecodec revoke ARGS` on an empty store (`redis_url` flushed it), the fleet's settings but the namespace:
    (exit status, stdout)."""

    def command(*args: str) -> tuple[int, str]:
        code = main(["revoke", *args])
        return code, capsys.readouterr().out.strip()

    return command


def test_a_revocation_by_issuer_when_the_stamps_record_none_is_refused(
    redis_url: str, revoke: Callable[..., tuple[int, str]]
) -> None:
    from mcp.server.auth.provider import AccessToken, principal_components

    # A verifier that leaves `claims` unset (the SDK's field is optional): the stamps record no issuer (issue 32).
    verified = AccessToken(token="t", client_id="app", scopes=[], subject="alice")
    token = run(minted, redis_url, principal_components(verified))
    code, line = revoke("--principal", "alice", "--issuer", "https://idp")
    assert (code, line.count("\n")) == (1, 0)
    assert line.startswith("nothing revoked: no instance recorded minting the tokens of principal alice at issuer")
    assert "record principals with no issuer, clients with no issuer since 20" in line
    assert "--force" in line
    code, line = revoke("--principal", "alice", "--issuer", "https://idp", "--force")  # an older version's tokens
    assert code == 0
    assert line.startswith("revoked the tokens of principal alice at issuer https://idp")
    assert revoke("--principal", "alice")[0] == 0  # what the fleet records: reached
    with pytest.raises(InvalidToken, match="revoked"):
        run(consume_once, redis_url, token)


def test_a_revocation_without_the_issuer_the_stamps_record_is_refused(
    redis_url: str, revoke: Callable[..., tuple[int, str]]
) -> None:
    run(minted, redis_url, ("app", "https://idp", "bob"))  # issue 32
    code, line = revoke("--principal", "bob")
    assert code == 1
    assert "the fleet's tokens record principals at 1 issuer(s), clients at 1 issuer(s) since" in line
    code, line = revoke("--scope", "tenant=acme")
    assert code == 1
    assert "no instance recorded minting the tokens of scope tenant=acme" in line
    assert revoke("--all")[0] == 0  # everything covers every form
    assert revoke("--principal", "bob", "--issuer", "https://idp")[0] == 0


def test_without_a_namespace_a_store_holding_another_is_refused_naming_them(
    redis_url: str, redis_server: RedisServer, revoke: Callable[..., tuple[int, str]],
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    run(minted, redis_url, ("app", "https://idp", "alice"))  # two services, one store key (issue 32)
    run(minted, redis_url, ("app", "https://idp", "carol"), "billing")
    code, line = revoke("--principal", "carol", "--issuer", "https://idp")  # would land in the other's namespace
    assert (code, line) == (1, f"nothing revoked: STATECODEC_STORE_NAMESPACE is not set and the store at "
                               f"127.0.0.1:{redis_server.port} holds namespaces billing, statecodec: set it to the one "
                               "your servers use")
    assert main(["store", "check"]) == 1
    assert "holds namespaces billing, statecodec" in capsys.readouterr().out
    monkeypatch.setenv("STATECODEC_STORE_NAMESPACE", "billing")
    assert revoke("--principal", "carol", "--issuer", "https://idp")[0] == 0
    assert main(["store", "check"]) == 0


async def consume_once(url: str, stamped: bytes) -> bytes:
    async with guarded(url) as guard:
        return await guard.consume(stamped)


# --- TLS ------------------------------------------------------------------------------------------------------


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 it signed: (ca.pem, server.pem, server.key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "statecodec test CA")])

    def signed(subject: x509.Name, key: ec.EllipticCurvePrivateKey, *extensions: Any) -> x509.Certificate:
        builder = x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name).public_key(key.public_key())
        builder = builder.serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical)
        return builder.not_valid_after(now + datetime.timedelta(days=1)).sign(ca_key, hashes.SHA256())

    ca = signed(ca_name, ca_key, (x509.BasicConstraints(ca=True, path_length=None), True),
                (x509.KeyUsage(False, False, False, False, False, True, True, False, False), True),
                (x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False))
    server = signed(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]), server_key,
                    (x509.SubjectAlternativeName([x509.IPAddress(ipaddress.IPv4Address("127.0.0.1"))]), False),
                    (x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), False),
                    (x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False))
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    encoding, pkcs8 = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    paths[2].write_bytes(server_key.private_bytes(encoding, pkcs8, serialization.NoEncryption()))
    return paths


@pytest.fixture(scope="module")
def tls_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The rediss URL of a redis-server with a TLS port (and its plain port, for the fixture's own checks), its CA
    in ``ssl_ca_certs``. Skipped only when this redis-server was built without TLS."""
    ca, cert, key = _certificates(tmp_path_factory.mktemp("tls"))
    tls_port = free_port()
    server = RedisServer(extra=["--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
                                "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no", "--requirepass", PASSWORD])
    try:
        server.start()
    except RuntimeError as exc:
        # A build without TLS: Redis 7 says "TLS ... not supported"; 6.2 does not know the tls-port directive.
        if not ("TLS" in str(exc) and "not supported" in str(exc).lower()) and "'tls-port" not in str(exc):
            raise
        pytest.skip("this redis-server build has no TLS support")
    try:
        yield f"rediss://default:{PASSWORD}@127.0.0.1:{tls_port}/0?ssl_ca_certs={ca}"
    finally:
        server.close()


def test_tls_with_a_private_ca_and_a_server_it_cannot_verify(tls_url: str) -> None:
    assert run(opened, tls_url).started
    with pytest.raises(StoreUnreachable, match="TLS failed") as info:
        run(opened, tls_url.rpartition("?")[0])  # the system's CAs: this server is unknown
    assert_silent(info.value)


def test_a_cluster_keeps_a_namespace_in_one_slot_under_the_minimal_acl(
    redis_cluster: list[RedisServer], redis_cluster_url: str
) -> None:
    for node in redis_cluster:
        node.cli("ACL", "SETUSER", "statecodec", "reset", *ACL_RULES, *CLUSTER_ACL_COMMANDS)
        node.cli("ACL", "LOG", "RESET")

    async def scenario() -> None:
        urls = [f"redis+cluster://statecodec:{QUOTED}@127.0.0.1:{node.port}" for node in redis_cluster]
        async with guarded(urls[1]) as one, guarded(urls[2]) as two:
            stamped = [one.stamp(b"x", principal=("c", "i", "alice")) for _ in range(20)]
            assert [await two.consume(t) for t in stamped[:19]] == [b"x"] * 19
            await two.revoke(principal="alice", issuer="i")
            with pytest.raises(InvalidToken, match="revoked"):
                await one.consume(stamped[19])

    try:
        run(scenario)
        holding = [node for node in redis_cluster if int(node.cli("DBSIZE")) > 0]
        assert len(holding) == 1
        keys = holding[0].cli("KEYS", "*").split()
        assert {k for k in keys if ":c:" not in k} == {"{statecodec}:meta", "{statecodec}:r", "{statecodec}:rx"}
        assert len(keys) == 3 + 19
        assert len({holding[0].cli("CLUSTER", "KEYSLOT", key) for key in keys}) == 1
        assert 0 < int(holding[0].cli("PTTL", next(k for k in keys if ":c:" in k))) <= 600_000  # the token's expiry
        assert all(node.cli("ACL", "LOG") == "" for node in redis_cluster)
    finally:
        for node in redis_cluster:
            node.cli("ACL", "DELUSER", "statecodec")


def test_store_check_names_a_malformed_entry_whose_name_is_not_utf8_escaped_and_goes_on(
    redis_url: str, redis_server: RedisServer, operator: None, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    namespace = f"bytes-{time.monotonic_ns()}"
    monkeypatch.setenv("STATECODEC_STORE_NAMESPACE", namespace)
    run(opened, redis_url, namespace=namespace)  # a server has used it
    client = redis.Redis(port=redis_server.port)
    client.hset(f"{{{namespace}}}:r", b"\xff\x1b[2J", b"?")  # malformed, by one with write access; not UTF-8
    client.close()
    assert main(["store", "check", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["malformed"] == ["\\xff\\x1b[2J"]  # escaped: no control character


def test_store_check_and_revoke_work_in_bounded_increments_at_100000_revocations(
    redis_url: str, redis_server: RedisServer, operator: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """No operator command holds the store: `store check` reads the revocations by HSCAN batches (no command reads
    them all), a `revoke` drops at most 100 expired entries per call; a malformed entry is named and skipped."""
    run(opened, redis_url)  # a server has used it
    client = redis.Redis(port=redis_server.port)
    client.hset("{statecodec}:r", mapping={f"{n:032x}": "1:2" for n in range(100_000)})  # expired long ago
    client.zadd("{statecodec}:rx", {f"{n:032x}": 2 for n in range(100_000)})
    client.hset("{statecodec}:r", b"\xffbad", b"?")
    redis_server.cli("CONFIG", "RESETSTAT")
    assert main(["store", "check", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["revocations"], report["malformed"]) == (100_001, ["\\xffbad"])
    assert calls(redis_server, "hgetall") <= 1  # the forms hash: a handful
    assert calls(redis_server, "hscan") >= 100  # batches of about 1,000
    assert main(["revoke", "--principal", "alice", "--force"]) == 0  # no token was minted: no form recorded
    assert (client.zcard("{statecodec}:rx"), client.hlen("{statecodec}:r")) == (100_000 - 100 + 1, 100_001 - 100 + 1)
    client.close()


def test_availability_first_through_a_real_outage_stops_at_its_bound_and_no_token_runs_twice_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """redis-server stopped by PID (connections refused), restarted on the same port from its saved memory: A accepts
    at most its bound unchecked, then refuses; its first answered call records them; neither A nor B accepts one
    again (the restart began a new epoch besides). A second instance in refuse mode refuses throughout."""
    with RedisServer() as server:  # its own: this test stops it

        async def scenario() -> tuple[list[str], list[str], list[str]]:
            async with guarded(server.url, on_store_error="accept", accept_max=5, timeout=0.25) as a, \
                    guarded(server.url, timeout=0.25) as b:
                tokens = [a.stamp(b"x") for _ in range(9)]
                server.cli("SAVE")  # what a restart with persistence keeps: the claims, the epoch
                server.stop()
                during = [await outcome(a, token) for token in tokens[:7]]
                during += [await outcome(a, tokens[0]), await outcome(b, tokens[8])]
                server.start()
                with caplog.at_level(logging.WARNING, "statecodec.single_use"):
                    after = [await outcome(a, tokens[7])]  # A's first answered call: its five recorded first
                replays = [await outcome(guard, token) for token in tokens[:5] for guard in (a, b)]
                return during, after, replays

        during, after, replays = run(scenario)
    assert during == ["x"] * 5 + ["store_unavailable"] * 2 + ["replayed", "store_unavailable"]
    # A restart begins a new epoch (it may have lost claims): older tokens are refused, those accepted unchecked too
    assert after == ["store_unavailable"]
    assert replays == ["store_unavailable"] * 10
    assert "5 tokens accepted unchecked recorded, 0 replays let through, 0 left" in caplog.text


async def outcome(guard: SingleUse, token: bytes) -> str:
    try:
        return (await guard.consume(token)).decode()
    except InvalidToken as exc:
        return exc.reason.value


def test_a_client_flooding_large_kept_answers_never_opens_availability_first(redis_url: str) -> None:
    """The attack: identical retries of one's own flow keeping 4 MB answers make Redis answer late. Another instance in
    availability-first mode must refuse what it cannot check, never accept it unchecked (whether or not this run's
    flood was slow enough to time a claim out: either way no claim is accepted without the store's verdict)."""

    async def scenario() -> list[object]:
        other = guard_on(redis_url, on_store_error="accept", timeout=0.01)
        async with guarded(redis_url) as flooder, contextlib.aclosing(other):
            for _ in range(50):  # a hello within 10 ms: a loaded machine may need a few (not started, it refuses)
                with contextlib.suppress(StoreError):  # unreachable, or this loop too busy to read the answer
                    await other.start()
                    break
            retry, big = b"r" * 16, b"k" * (4 << 20)
            keys = [(await flooder.claim(flooder.stamp(b"f"), retry))[1] for _ in range(8)]
            keep = flooder.store.keep
            flood = [keep(key=key, retry=retry, result=big, within_ms=60_000) for key in keys for _ in range(3)]
            claims = [other.claim(flooder.stamp(b"x")) for _ in range(200)]  # one key: either instance's stamps
            outcomes = await asyncio.gather(*flood, *claims, return_exceptions=True)
            return outcomes[len(flood):]

    outcomes = run(scenario)
    assert all((isinstance(o, tuple) and o[2] is not None) or str(o) in ("store_unavailable", "store_busy")
               for o in outcomes), {str(o) for o in outcomes}


def test_only_a_refused_or_reset_connection_or_an_unresolvable_name_is_down() -> None:
    """What availability first accepts through is decided by the cause: a timeout (a client can slow a connected store)
    or this host out of file descriptors (a client can cause that too, by holding connections) is never `StoreDown`."""
    from statecodec.errors import StoreDown

    store = RedisStore.from_url("redis://127.0.0.1:1/0")

    def failure(cause: BaseException) -> StoreError:  # as the client raises it: inside its handler of `cause`
        exc = redis.exceptions.ConnectionError("Error connecting")
        exc.__context__ = cause
        return store._failure(exc)

    down = [ConnectionRefusedError(111, "refused"), ConnectionResetError(104, "reset"), socket.gaierror(-2, "name")]
    up = [OSError(errno.EMFILE, "Too many open files"), TimeoutError("timed out"), OSError(errno.EHOSTUNREACH, "no")]
    assert [type(failure(cause)) for cause in down] == [StoreDown] * 3
    assert [type(failure(cause)) for cause in up] == [StoreUnreachable] * 3
    assert [str(failure(cause)).rsplit(": ", 1)[1] for cause in down] == [
        "connection refused", "connection reset", "its host name does not resolve"]
