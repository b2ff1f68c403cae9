"""RedisStore against a real `redis-server`: ACL, TLS, credentials never echoed, a server that stops answering,
restarts or is flushed, revocations reaching another instance, and `SingleUse` end to end.

Every wait polls towards a generous deadline; the only bound asserted on time is that a call to a server that
never answers gives up (far sooner than the deadline), instead of hanging.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tests.plugins.aws import free_port
from tests.plugins.redis import RedisClusterServers, RedisServer

from statecodec import AESGCMCodec, BoundCodec, ConfigurationError, InvalidToken, KeyRing, format_keys
from statecodec.errors import StoreError
from statecodec.redis_store import RedisStore
from statecodec.single_use import Claim, SingleUse, SingleUseCodec, store_from_settings

pytestmark = pytest.mark.integration

STORE_KEY = bytes(range(50, 82))
PASSWORD = "s3cret-Pass-7f1e"
SCOPE = b"\x05" * 16
DEADLINE = 30.0
# The minimal ACL: what the client sends (EVALSHA, EVAL after a script-cache loss, SUBSCRIBE, PING and INFO for
# health) and what the scripts call; keys and channel confined to the namespace. Also in docs/single-use.md.
ACL_COMMANDS = ["+evalsha", "+eval", "+subscribe", "+ping", "+info"]
ACL_COMMANDS += ["+get", "+set", "+time", "+hget", "+hset", "+hdel", "+hgetall", "+zadd", "+zrangebyscore"]
ACL_COMMANDS += ["+zremrangebyscore", "+publish"]
# On a Redis Cluster, also what the cluster client reads when it is built. Also in docs/single-use.md.
CLUSTER_ACL_COMMANDS = ["+cluster|slots", "+command"]
ACL_RULES = ["on", f">{PASSWORD}", "resetkeys", "resetchannels", "~{statecodec}:*", "&{statecodec}:revocations"]
ACL_RULES += ["-@all", *ACL_COMMANDS]

T = TypeVar("T")


def eventually(probe: Callable[[], T | None], what: str) -> T:
    """Poll `probe` until it returns something true, up to a generous deadline."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"not within {DEADLINE} s: {what}")


def raises_store_error(call: Callable[[], object]) -> StoreError | None:
    try:
        call()
    except StoreError as exc:
        return exc
    return None


def answers(call: Callable[[], T]) -> T | None:
    try:
        return call()
    except StoreError:
        return None


def issued_after(store: RedisStore) -> float:
    """An issue time after the store's memory began (plus its clock allowance)."""
    store.revoked_at([])  # sets the epoch when the store has none
    return int((time.time() + store.clock_allowance) * 1000 + 1) / 1000


def assert_silent_about_secrets(exc: BaseException) -> None:
    assert PASSWORD not in str(exc)
    assert "@127.0.0.1" not in str(exc)
    assert exc.__cause__ is None
    assert exc.__context__ is None or PASSWORD not in str(exc.__context__)


@pytest.fixture
def acl_user(redis_url: str, redis_server: RedisServer) -> Iterator[str]:
    """The URL of an ACL user holding only the minimal command set."""
    redis_server.cli("ACL", "SETUSER", "statecodec", "reset", *ACL_RULES)
    redis_server.cli("ACL", "LOG", "RESET")
    yield f"redis://statecodec:{PASSWORD}@127.0.0.1:{redis_server.port}/0"
    redis_server.cli("ACL", "DELUSER", "statecodec")


@pytest.fixture
def stores() -> Iterator[list[RedisStore]]:
    """Stores a test opens, closed after it."""
    opened: list[RedisStore] = []
    yield opened
    for store in opened:
        store.close()


def open_store(stores: list[RedisStore], url: str, **kw: float | bool) -> RedisStore:
    store = RedisStore.from_url(url, **kw)  # type: ignore[arg-type]
    stores.append(store)
    return store


def subscribers(server: RedisServer) -> int:
    _, count = server.cli("PUBSUB", "NUMSUB", "{statecodec}:revocations").split()
    return int(count)


# --- ACL -------------------------------------------------------------------------------------------------------


def test_the_minimal_acl_user_can_do_everything_the_store_does(
    acl_user: str, redis_server: RedisServer, stores: list[RedisStore]
) -> None:
    store, other = open_store(stores, acl_user), open_store(stores, acl_user, staleness=600)
    issued = issued_after(store)
    assert store.claim(b"\x01" * 16, issued, issued + 600) is Claim.FIRST
    assert other.claim(b"\x01" * 16, issued, issued + 600) is Claim.USED
    eventually(lambda: subscribers(redis_server) >= 2, "both stores subscribed")
    store.revoke(SCOPE, issued, issued + 600)
    assert eventually(lambda: other.revoked_at([SCOPE]), "the revocation published to the other store") == issued
    redis_server.cli("SCRIPT", "FLUSH")  # a lost script cache: EVALSHA fails, EVAL runs the script again
    assert store.claim(b"\x02" * 16, issued, issued + 600) is Claim.FIRST
    assert store.health()["reachable"] is True
    assert redis_server.cli("ACL", "LOG") == ""  # nothing was refused


def test_a_missing_command_is_a_store_error_naming_the_acl(
    acl_user: str, redis_server: RedisServer, stores: list[RedisStore]
) -> None:
    redis_server.cli("ACL", "SETUSER", "statecodec", "-publish")
    store = open_store(stores, acl_user, listen=False)
    with pytest.raises(StoreError, match="ACL") as info:
        store.revoke(SCOPE, time.time(), time.time() + 600)
    assert_silent_about_secrets(info.value)


# --- credentials and configuration -------------------------------------------------------------------------------


def test_the_password_is_never_echoed(acl_user: str, stores: list[RedisStore]) -> None:
    wrong = acl_user.replace(PASSWORD, PASSWORD[::-1])
    store = open_store(stores, wrong, listen=False)
    for call in (lambda: store.claim(b"\x01" * 16, time.time(), time.time() + 60), store.health):
        with pytest.raises(StoreError, match="user name or password") as info:
            call()
        assert_silent_about_secrets(info.value)
        assert PASSWORD[::-1] not in str(info.value)
    assert PASSWORD[::-1] not in repr(store)
    good = open_store(stores, acl_user)
    text = repr(good) + json.dumps(good.health(), default=str)
    assert PASSWORD not in text
    assert "statecodec:" not in repr(good)  # no user name either


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (f"redis://u:{PASSWORD}@127.0.0.1:1/0?socket_timeout=30", "socket_timeout"),
        (f"redis://u:{PASSWORD}@127.0.0.1:1/0?protocol=3", "protocol"),
        (f"http://u:{PASSWORD}@127.0.0.1:1/0", "STATECODEC_STORE_URL must be"),
        (f"redis://u:{PASSWORD}@127.0.0.1:notaport/0", "STATECODEC_STORE_URL must be"),
    ],
    ids=["timeout-override", "protocol-override", "scheme", "port"],
)
def test_a_bad_url_fails_at_construction_without_echoing_it(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        RedisStore.from_url(url)
    assert_silent_about_secrets(info.value)


def test_a_timeout_the_view_cannot_keep_up_with_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="STATECODEC_REVOCATION_STALENESS"):
        RedisStore.from_url("redis://127.0.0.1:1/0", timeout=1.0, staleness=1.0)


def test_store_from_settings_builds_a_redis_store(redis_url: str) -> None:
    settings = {"STATECODEC_STORE_URL": redis_url, "STATECODEC_STORE_NAMESPACE": "billing"}
    settings |= {"STATECODEC_STORE_TIMEOUT": "0.5", "STATECODEC_REVOCATION_STALENESS": "2"}
    store = store_from_settings(settings)
    try:
        assert isinstance(store, RedisStore)
        assert (store.namespace, store.timeout, store.staleness) == ("billing", 0.5, 2.0)
        issued = issued_after(store)
        assert store.claim(b"\x01" * 16, issued, issued + 60) is Claim.FIRST
    finally:
        store.close()


# --- TLS -------------------------------------------------------------------------------------------------------


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 it signed: (ca.pem, server.pem, server.key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "statecodec test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.IPv4Address("127.0.0.1"))]), False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, str, Path]]:
    """A redis-server with a TLS port (and its plain port, for the fixture's own checks): (server, rediss URL,
    CA file). Skipped only when this redis-server was built without TLS."""
    ca, cert, key = _certificates(tmp_path_factory.mktemp("tls"))
    tls_port = free_port()
    server = RedisServer(
        extra=[
            *("--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key)),
            *("--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no", "--requirepass", PASSWORD),
        ]
    )
    try:
        server.start()
    except RuntimeError as exc:
        # A build without TLS: Redis 7 says "TLS ... not supported"; 6.2 does not know the tls-port directive.
        if not ("TLS" in str(exc) and "not supported" in str(exc).lower()) and "'tls-port" not in str(exc):
            raise
        pytest.skip("this redis-server build has no TLS support")
    try:
        yield server, f"rediss://default:{PASSWORD}@127.0.0.1:{tls_port}/0?ssl_ca_certs={ca}", ca
    finally:
        server.close()


def test_tls_with_a_private_ca(tls_server: tuple[RedisServer, str, Path], stores: list[RedisStore]) -> None:
    _, url, _ = tls_server
    store = open_store(stores, url)
    issued = issued_after(store)
    assert store.claim(b"\x01" * 16, issued, issued + 60) is Claim.FIRST
    assert store.claim(b"\x01" * 16, issued, issued + 60) is Claim.USED
    store.revoke(SCOPE, issued, issued + 60)
    assert store.revoked_at([SCOPE]) == issued
    assert store.health()["reachable"] is True


def test_tls_refuses_a_server_it_cannot_verify(
    tls_server: tuple[RedisServer, str, Path], stores: list[RedisStore]
) -> None:
    _, url, _ = tls_server
    store = open_store(stores, url.partition("?")[0], listen=False)  # the system's CAs: this server is unknown
    with pytest.raises(StoreError, match="TLS") as info:
        store.claim(b"\x01" * 16, time.time(), time.time() + 60)
    assert_silent_about_secrets(info.value)


# --- faults: a server that stops answering, restarts, is flushed --------------------------------------------------


def test_a_server_that_stops_answering_fails_every_call_and_the_same_store_recovers(
    redis_url: str, redis_server: RedisServer, stores: list[RedisStore]
) -> None:
    store = open_store(stores, redis_url, timeout=0.25, staleness=0.5)
    issued = issued_after(store)
    redis_server.pause()
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"did not answer within 0\.25 s") as info:
        store.claim(b"\x01" * 16, issued, issued + 600)
    assert time.monotonic() - started < DEADLINE / 3  # it gave up instead of hanging or retrying at length
    assert info.value.__context__ is None
    # The view is no longer refreshed: once past its staleness bound, revoked_at refuses to answer from it.
    eventually(lambda: raises_store_error(lambda: store.revoked_at([SCOPE])), "a stale view refused")
    redis_server.resume()
    # The same object answers again; the paused claim may have been applied on resume, so use a fresh key.
    assert eventually(lambda: answers(lambda: store.claim(b"\x02" * 16, issued, issued + 600)), "claims") is (
        Claim.FIRST
    )
    assert eventually(lambda: answers(lambda: store.revoked_at([SCOPE])) is not None, "a fresh view")


def test_a_restart_without_persistence_forgets_and_the_same_store_recovers(
    redis_url: str, redis_server: RedisServer, stores: list[RedisStore]
) -> None:
    store = open_store(stores, redis_url)
    issued = issued_after(store)
    assert store.claim(b"\x01" * 16, issued, issued + 600) is Claim.FIRST
    store.revoke(SCOPE, issued, issued + 600)
    redis_server.restart()
    # A token issued before the restart cannot be proven unused: no replay after the store lost its memory.
    outcome = eventually(lambda: answers(lambda: store.claim(b"\x01" * 16, issued, issued + 600)), "answers")
    assert outcome is Claim.FORGOTTEN
    assert store.revoked_at([SCOPE]) == issued  # the view only grows: a lost hash does not lift a revocation
    later = issued_after(store)
    assert store.claim(b"\x02" * 16, later, later + 600) is Claim.FIRST


def test_a_flush_forgets_every_earlier_token(
    redis_url: str, redis_server: RedisServer, stores: list[RedisStore]
) -> None:
    store = open_store(stores, redis_url)
    issued = issued_after(store)
    assert store.claim(b"\x01" * 16, issued, issued + 600) is Claim.FIRST
    redis_server.flush()
    assert store.claim(b"\x01" * 16, issued, issued + 600) is Claim.FORGOTTEN
    assert store.claim(b"\x03" * 16, issued, issued + 600) is Claim.FORGOTTEN
    assert store.health()["epoch"] >= issued - store.clock_allowance  # type: ignore[operator]


def test_the_clock_allowance_covers_tokens_stamped_just_after_the_store_began(
    redis_url: str, stores: list[RedisStore]
) -> None:
    store = open_store(stores, redis_url, clock_allowance=60)
    store.revoked_at([])
    epoch = store.health()["epoch"]
    assert isinstance(epoch, float)
    # A token stamped 30 s after the epoch by a clock that may run 60 s ahead may predate the epoch.
    assert store.claim(b"\x01" * 16, epoch + 30, epoch + 600) is Claim.FORGOTTEN
    assert store.claim(b"\x01" * 16, epoch + 61, epoch + 600) is Claim.FIRST


# --- revocations across instances ------------------------------------------------------------------------------


def test_a_revocation_reaches_another_instance_through_pub_sub(
    redis_url: str, redis_server: RedisServer, stores: list[RedisStore]
) -> None:
    # The listener reloads in full only every 300 s here: what arrives sooner came through pub/sub.
    listener = open_store(stores, redis_url, staleness=600)
    writer = open_store(stores, redis_url, listen=False)
    eventually(lambda: subscribers(redis_server) >= 1, "the listener subscribed")
    listener.revoked_at([])
    writer.revoke(SCOPE, 1_767_225_600.0, time.time() + 600)
    assert eventually(lambda: listener.revoked_at([SCOPE]), "the revocation arrived") == 1_767_225_600.0


def test_a_revocation_reaches_another_instance_within_its_staleness_bound(
    redis_url: str, stores: list[RedisStore]
) -> None:
    """The default bounds: pub/sub, and a full reload every half second behind it."""
    reader = open_store(stores, redis_url, staleness=1.0)
    writer = open_store(stores, redis_url, listen=False)
    assert reader.revoked_at([SCOPE]) == 0.0
    writer.revoke(SCOPE, 1_767_225_600.0, time.time() + 600)
    assert eventually(lambda: reader.revoked_at([SCOPE]), "the revocation arrived") == 1_767_225_600.0
    assert reader.health()["staleness"] == 1.0


# --- SingleUse end to end --------------------------------------------------------------------------------------


def test_single_use_over_redis_across_two_instances(
    redis_url: str, redis_server: RedisServer, stores: list[RedisStore]
) -> None:
    ring, binding = KeyRing.generate(), KeyRing.generate()
    one, two = (
        SingleUseCodec(
            BoundCodec(AESGCMCodec(ring), audience="billing", binding_key=binding),
            SingleUse(open_store(stores, redis_url), key=STORE_KEY),
        )
        for _ in range(2)
    )
    stores[0].revoked_at([])  # the store's memory begins here; a token stamped within the allowance is forgotten
    began = stores[0].health()["epoch"]
    assert isinstance(began, float)
    eventually(lambda: time.time() > began + stores[0].clock_allowance, "the clock allowance passed")
    token = one.seal(b"step", principal="alice")
    assert two.unseal(token, principal="alice") == b"step"
    with pytest.raises(InvalidToken, match="replayed"):
        one.unseal(token, principal="alice")
    late = one.seal(b"late", principal="alice")
    two.guard.revoke("principal", "alice")

    def refused_as_revoked() -> bool:
        try:
            one.unseal(late, principal="alice")
        except InvalidToken as exc:
            return exc.reason.value == "revoked"
        return False

    assert eventually(refused_as_revoked, "the revocation reached the other instance")
    kept = one.seal(b"kept", principal="bob")
    redis_server.flush()
    with pytest.raises(InvalidToken, match="store_unavailable"):  # the store forgot: no replay can be ruled out
        two.unseal(kept, principal="bob")


def test_the_command_line_revokes_on_a_live_fleet(
    redis_url: str, stores: list[RedisStore], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from statecodec.cli.main import main

    monkeypatch.setenv("STATECODEC_STORE_URL", redis_url)
    monkeypatch.setenv("STATECODEC_STORE_KEY", format_keys([STORE_KEY]))
    instance = SingleUse(open_store(stores, redis_url), key=STORE_KEY)
    stamped = instance.stamp(b"x")
    assert main(["revoke", "--principal", "alice", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["revoked"] == "principal"

    # Consumed once, after the staleness bound (1 s): by then the instance's view holds the revocation, through
    # pub/sub or a reload. Consuming earlier could race pub/sub and claim the token.
    time.sleep(1.1)
    with pytest.raises(InvalidToken) as refused:
        instance.consume(stamped, {"principal": "alice"})
    assert refused.value.reason.value == "revoked"
    assert main(["store", "check", "--json"]) == 0
    health = json.loads(capsys.readouterr().out)
    assert health["ready"] is True
    assert health["revocations"] >= 1


# --- layout and construction -----------------------------------------------------------------------------------


def test_the_keys_sit_under_one_hash_tag_and_hold_only_digests(
    redis_url: str, redis_server: RedisServer, stores: list[RedisStore]
) -> None:
    store = open_store(stores, redis_url, listen=False)
    billing = RedisStore.from_url(redis_url, namespace="billing", listen=False)
    stores.append(billing)
    issued = issued_after(store)
    store.claim(b"\xab" * 16, issued, issued + 600)
    store.revoke(SCOPE, issued, issued + 600)
    billing.revoked_at([])
    keys = set(redis_server.cli("KEYS", "*").split())
    assert keys == {
        "{statecodec}:epoch",
        "{statecodec}:claim:" + "ab" * 16,
        "{statecodec}:revoked",
        "{statecodec}:revoked:expiry",
        "{billing}:epoch",
    }
    assert redis_server.cli("HKEYS", "{statecodec}:revoked") == SCOPE.hex()
    assert 0 < int(redis_server.cli("PTTL", "{statecodec}:claim:" + "ab" * 16)) <= 602_000  # it expires with its token


@pytest.mark.parametrize("namespace", ["", "a{b}", "x" * 65, "sp ace"])
def test_a_namespace_outside_the_hash_tag_alphabet_is_refused(namespace: str) -> None:
    with pytest.raises(ConfigurationError, match="STATECODEC_STORE_NAMESPACE"):
        RedisStore.from_url("redis://127.0.0.1:1/0", namespace=namespace, listen=False)


def test_an_injected_client_needs_a_socket_timeout(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        with pytest.raises(ConfigurationError, match="socket_timeout"):
            RedisStore(client)
        bounded = redis.Redis.from_url(redis_url, socket_timeout=0.5, socket_connect_timeout=0.5)
        store = RedisStore(bounded, listen=False)
        assert store.timeout == 0.5
        store.close()  # an injected client belongs to the caller: it stays usable
        assert bounded.ping() is True
        bounded.close()
    finally:
        client.close()


def test_health_warns_of_a_server_that_can_evict_or_forget(
    redis_url: str, redis_server: RedisServer, stores: list[RedisStore]
) -> None:
    store = open_store(stores, redis_url, listen=False)
    assert [w for w in store.health()["warnings"] if "maxmemory" in w] == []  # type: ignore[attr-defined]
    redis_server.cli("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
    try:
        warnings = store.health()["warnings"]
    finally:
        redis_server.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
    assert any("allkeys-lru" in w for w in warnings)  # type: ignore[attr-defined]
    assert any("appendonly" in w for w in warnings)  # type: ignore[attr-defined]


# --- Redis Cluster ---------------------------------------------------------------------------------------------


def test_a_cluster_keeps_a_namespace_in_one_slot_on_one_node(
    redis_cluster: RedisClusterServers, redis_cluster_url: str, stores: list[RedisStore]
) -> None:
    store = open_store(stores, redis_cluster_url)
    issued = issued_after(store)
    for n in range(20):  # claims whose digests would spread over every node without the hash tag
        assert store.claim(bytes([n]) * 16, issued, issued + 600) is Claim.FIRST
    store.revoke(SCOPE, issued, issued + 600)
    holding = [node for node in redis_cluster.nodes if int(node.cli("DBSIZE")) > 0]
    assert len(holding) == 1
    keys = holding[0].cli("KEYS", "*").split()
    assert len(keys) == 20 + 3  # the claims, the epoch, the revocation hash and its expiry set
    assert len({holding[0].cli("CLUSTER", "KEYSLOT", key) for key in keys}) == 1
    assert store.health()["server"] in {f"127.0.0.1:{node.port}" for node in redis_cluster.nodes}


def test_a_claim_and_a_revocation_cross_a_cluster_between_stores_named_by_different_nodes(
    redis_cluster: RedisClusterServers, redis_cluster_url: str, stores: list[RedisStore]
) -> None:
    first, second = (f"redis+cluster://127.0.0.1:{node.port}" for node in redis_cluster.nodes[1:])
    # The listener reloads in full only every 300 s here: what arrives sooner came through pub/sub.
    listener, writer = open_store(stores, first, staleness=600), open_store(stores, second)
    issued = issued_after(writer)
    assert writer.claim(b"\x09" * 16, issued, issued + 600) is Claim.FIRST
    assert listener.claim(b"\x09" * 16, issued, issued + 600) is Claim.USED
    listener.revoked_at([])
    # A cluster broadcasts each PUBLISH to every node: the listener may be subscribed on any of them.
    eventually(lambda: sum(subscribers(node) for node in redis_cluster.nodes) >= 1, "the listener subscribed")
    writer.revoke(SCOPE, 1_767_225_600.0, time.time() + 600)
    assert eventually(lambda: listener.revoked_at([SCOPE]), "the revocation arrived") == 1_767_225_600.0


def test_a_cluster_that_does_not_answer_at_start_is_a_store_error_without_the_password() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(StoreError, match="gave no slots") as info:
        RedisStore.from_url(f"redis+cluster://user:{PASSWORD}@127.0.0.1:{port}")
    assert_silent_about_secrets(info.value)


def test_the_minimal_acl_user_on_a_cluster_needs_only_the_slot_map_and_the_command_table_more(
    redis_cluster: RedisClusterServers, redis_cluster_url: str, stores: list[RedisStore]
) -> None:
    # A cluster client reads the slot map (CLUSTER SLOTS) and the command table (COMMAND) when it is built.
    for node in redis_cluster.nodes:
        node.cli("ACL", "SETUSER", "statecodec", "reset", *ACL_RULES, *CLUSTER_ACL_COMMANDS)
        node.cli("ACL", "LOG", "RESET")
    try:
        url = f"redis+cluster://statecodec:{PASSWORD}@127.0.0.1:{redis_cluster.nodes[0].port}"
        store, other = open_store(stores, url), open_store(stores, url, staleness=600)
        issued = issued_after(store)
        assert store.claim(b"\x01" * 16, issued, issued + 600) is Claim.FIRST
        assert other.claim(b"\x01" * 16, issued, issued + 600) is Claim.USED
        eventually(lambda: sum(subscribers(node) for node in redis_cluster.nodes) >= 2, "both stores subscribed")
        store.revoke(SCOPE, issued, issued + 600)
        assert eventually(lambda: other.revoked_at([SCOPE]), "the revocation published to the other store") == issued
        assert store.health()["reachable"] is True
        assert all(node.cli("ACL", "LOG") == "" for node in redis_cluster.nodes)  # nothing was refused
    finally:
        for node in redis_cluster.nodes:
            node.cli("ACL", "DELUSER", "statecodec")
