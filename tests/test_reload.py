"""Live key rings: each attack on a reload (half-applied, garbled, truncated, swapped by symlink, dropping a key
early, racing the request path) leaves the instance serving with one whole ring, and says why without a key."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from statecodec import ConfigurationError, InvalidToken, format_keys, generate_key
from statecodec._types import Codec
from statecodec.config import codec_from_env
from statecodec.registry import Reporter, read_fleet
from statecodec.reload import ReloadingCodec
from statecodec.rotation import early_drop
from tests.memory_registry import MemoryRegistry
from tests.plugins import Clock, assert_not_copyable, eventually

OLD, NEW = generate_key(), generate_key()
TTL, SKEW = 10, 5


def write(path: Path, *keys: bytes) -> None:
    path.write_text(format_keys(keys), encoding="utf-8")


def ring_codec(
    path: Path, clock: Clock | None = None, interval: float | None = None, kind: str = "aesgcm"
) -> ReloadingCodec:
    settings = {"STATECODEC_KEYS_FILE": str(path), "STATECODEC_CODEC": kind}
    return ReloadingCodec(lambda: codec_from_env(settings), ttl=TTL, future_skew=SKEW, files=[path],
                          interval=interval, clock=clock or Clock())


@pytest.mark.parametrize("kind", ["aesgcm", "xaesgcm", "jwe", "jws"])  # every kind whose ring is a key file
def test_the_three_phases_reload_whole_and_tokens_of_the_old_key_keep_verifying(tmp_path: Path, kind: str) -> None:
    ring, clock = tmp_path / "ring", Clock()
    write(ring, OLD)
    codec = ring_codec(ring, clock, kind=kind)
    old_token = codec.seal(b"state")
    write(ring, OLD, NEW)
    assert (codec.reload(), codec.unseal(codec.seal(b"a"))) == (True, b"a")
    write(ring, NEW, OLD)
    assert (codec.reload(), codec.unseal(old_token)) == (True, b"state")
    clock.now += TTL + SKEW
    write(ring, NEW)
    assert (codec.reload(), codec.error) == (True, None)
    assert_not_copyable(codec)
    with pytest.raises(InvalidToken):
        codec.unseal(old_token)


@pytest.mark.parametrize("text", ["", "not a key", "AAAA", "# only a comment\n"])
def test_a_garbled_or_truncated_file_keeps_the_current_ring_and_says_why_without_a_key(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    ring = tmp_path / "ring"
    write(ring, OLD, NEW)
    codec = ring_codec(ring)
    before = codec.key_ids
    full = ring.read_text()
    ring.write_text(text or full[: len(full) // 3], encoding="utf-8")
    with caplog.at_level(logging.ERROR, "statecodec.reload"):
        assert not codec.reload()
    assert (codec.key_ids, codec.unseal(codec.seal(b"x"))) == (before, b"x")
    assert "STATECODEC_KEYS_FILE" in str(codec.error)
    for secret in (OLD, NEW):
        assert format_keys([secret]) not in caplog.text + str(codec.error)


def test_a_demoted_key_is_dropped_only_ttl_plus_skew_after_it_stopped_sealing_and_then_without_a_new_write(
    tmp_path: Path,
) -> None:
    ring, clock = tmp_path / "ring", Clock()
    write(ring, OLD, NEW)
    codec = ring_codec(ring, clock)
    write(ring, NEW, OLD)
    assert codec.reload()
    clock.now += TTL + SKEW - 0.5
    write(ring, NEW)
    assert (codec.reload(), codec._due()) == (False, False)
    assert "0.5 s more" in str(codec.error)
    clock.now += 0.5
    assert codec._due()  # retried once the wait is over, though the file did not change again
    assert (codec.reload(), len(codec.key_ids)) == (True, 1)


def test_a_restarted_instance_counts_every_other_key_as_primary_until_its_start(tmp_path: Path) -> None:
    ring, clock = tmp_path / "ring", Clock()
    write(ring, NEW, OLD)  # it knows nothing of when OLD stopped sealing elsewhere
    codec = ring_codec(ring, clock)
    write(ring, NEW)
    assert not codec.reload()
    clock.now += TTL + SKEW
    assert codec.reload()


def test_a_kubernetes_secret_swap_by_symlink_is_seen_by_the_watcher(tmp_path: Path) -> None:
    mount = tmp_path / "secret"
    mount.mkdir()
    for version, keys in (("v1", (OLD,)), ("v2", (OLD, NEW))):
        (mount / version).mkdir()
        write(mount / version / "ring", *keys)
    (mount / "..data").symlink_to("v1")
    (mount / "ring").symlink_to("..data/ring")
    codec = ring_codec(mount / "ring", interval=0.01)
    codec.start()  # the watcher a server's lifespan runs, on a loop thread of the codec's own
    try:
        (mount / "..data_tmp").symlink_to("v2")
        os.replace(mount / "..data_tmp", mount / "..data")  # what the kubelet does: one rename
        eventually(lambda: len(codec.key_ids) == 2)
    finally:
        codec.close()


def test_sighup_asks_the_watcher_for_a_reload(tmp_path: Path) -> None:
    rings = iter([[OLD], [OLD, NEW]])
    codec = ReloadingCodec(lambda: codec_from_env({"STATECODEC_KEYS": format_keys(next(rings))}), ttl=TTL,
                           interval=0.01)
    previous = signal.getsignal(signal.SIGHUP)
    codec.start()
    try:
        codec.reload_on_sighup()
        os.kill(os.getpid(), signal.SIGHUP)
        eventually(lambda: len(codec.key_ids) == 2)
    finally:
        signal.signal(signal.SIGHUP, previous)
        codec.close()


BAD_SETTINGS = [({"STATECODEC_STORE_URL": "memory", f"STATECODEC_{n}": v}, f"^STATECODEC_{n} must be")
                for n, v in (("RELOAD_INTERVAL", "0"), ("FUTURE_SKEW", "-1"), ("INSTANCE", "web 1"))]
BAD_SETTINGS.append(({}, r"^STATECODEC_RELOAD_INTERVAL .*STATECODEC_KEYS_FILE"))  # no file to follow: it never changes


@pytest.mark.parametrize(("settings", "match"), BAD_SETTINGS, ids=["interval", "skew", "instance", "no-file"])
def test_a_bad_live_rotation_setting_stops_the_start_naming_it(settings: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        codec_from_env({"STATECODEC_KEYS": format_keys([OLD]), "STATECODEC_RELOAD_INTERVAL": "5", **settings})


def test_a_wait_that_is_not_a_number_never_lets_a_key_go() -> None:
    assert early_drop(("b", "a"), ("b",), {"a": 0.0}, 1e9, math.nan) is not None  # a wait or a time that is no number


def test_sighup_without_a_watcher_is_refused_rather_than_ignored(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    write(ring, OLD)
    with pytest.raises(ConfigurationError, match="interval"):
        ring_codec(ring).reload_on_sighup()


def test_a_codec_without_key_ids_is_refused_at_start_since_no_reload_of_it_could_be_guarded() -> None:
    class Opaque:
        def seal(self, payload: bytes) -> str:
            return payload.hex()

        def unseal(self, token: str) -> bytes:
            return bytes.fromhex(token)

    with pytest.raises(ConfigurationError, match="key ids"):
        ReloadingCodec(Opaque, ttl=TTL)


def test_a_reload_hanging_on_its_key_provider_keeps_the_instance_in_the_registry(tmp_path: Path) -> None:
    ring, store_clock, release, builds = tmp_path / "ring", Clock(1000.0), threading.Event(), []
    write(ring, OLD)
    registry = MemoryRegistry(clock=store_clock)

    def build() -> Codec:
        builds.append(ring.read_text())
        if len(builds) > 1:
            release.wait()  # as on a key provider that does not answer
        return codec_from_env({"STATECODEC_KEYS_FILE": str(ring)})

    codec = ReloadingCodec(build, ttl=TTL, files=[ring], interval=0.01)
    codec.start(Reporter(registry, "web-1", lifetime=1))
    try:
        write(ring, OLD, NEW)
        eventually(lambda: len(builds) == 2)
        store_clock.now += 10  # the entry's lifetime is over, by the store's clock: only a new heartbeat keeps it
        members = eventually(lambda: asyncio.run(read_fleet(registry)).members)
        assert members[0].accepts == (codec.key_ids[0],)  # the ring it still serves: a step waits for it
        release.set()
        eventually(lambda: len(codec.key_ids) == 2)  # the reload completes once the provider answers
    finally:
        release.set()
        codec.close()


def test_the_servers_lifespan_runs_the_watcher_on_its_loop_and_no_constructor_starts_a_thread(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from statecodec.mcp import from_env

    ring = tmp_path / "ring"
    write(ring, OLD)
    threads = threading.active_count()
    protection = from_env({"STATECODEC_KEYS_FILE": str(ring), "STATECODEC_RELOAD_INTERVAL": "0.05"})
    codec = protection.codec
    assert isinstance(codec, ReloadingCodec)
    assert threading.active_count() == threads  # built, not started: a forked worker starts its own in its lifespan

    async def serve() -> tuple[str, ...]:
        async with protection.lifespan(object()):
            write(ring, OLD, NEW)
            while len(codec.key_ids) < 2:
                await asyncio.sleep(0.02)  # the watcher runs as a task of this loop
        return codec.key_ids

    assert len(asyncio.run(serve())) == 2


def test_a_lifespan_entered_per_connection_keeps_one_watcher_until_its_last_exit(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from statecodec.mcp import from_env

    ring = tmp_path / "ring"
    write(ring, OLD)
    protection = from_env({"STATECODEC_KEYS_FILE": str(ring), "STATECODEC_RELOAD_INTERVAL": "0.05"})
    codec = protection.codec
    assert isinstance(codec, ReloadingCodec)

    async def reloads_to(*keys: bytes) -> None:
        write(ring, *keys)
        while len(codec.key_ids) != len(keys):
            await asyncio.sleep(0.02)

    async def connections() -> None:  # the SDK enters a lowlevel Server's lifespan once per stdio or SSE connection
        async with protection.lifespan(object()):
            async with protection.lifespan(object()):
                await reloads_to(OLD, NEW)
            await reloads_to(NEW, OLD)  # the first connection ended: the watcher still runs for the other
        async with protection.lifespan(object()):
            await reloads_to(NEW, OLD, generate_key())  # a later connection watches again

    asyncio.run(asyncio.wait_for(connections(), 30))


def test_a_reloading_codec_whose_watcher_never_ran_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ring = tmp_path / "ring"
    write(ring, OLD)
    codec = ring_codec(ring, interval=5)  # handed to the SDK as it is: no lifespan, no start()
    with caplog.at_level(logging.ERROR, "statecodec.reload"):
        codec.unseal(codec.seal(b"x"))
        codec.seal(b"y")
    assert [r.getMessage().count("never watched") for r in caplog.records] == [1]


def test_a_loop_thread_used_before_a_fork_serves_the_child_too() -> None:
    code = """if True:
        import os
        from statecodec.sync import LoopThread

        async def one() -> int:
            return 1

        loop = LoopThread()
        assert loop.submit(one()).result() == 1
        if (pid := os.fork()) == 0:
            os._exit(0 if loop.submit(one()).result(30) == 1 else 1)  # the parent's loop thread stayed behind
        loop.close()
        raise SystemExit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_reloading_fleet_without_a_store_key_says_single_use_is_off(caplog: pytest.LogCaptureFixture,
                                                                       tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    pytest.importorskip("redis")
    from statecodec.mcp import from_env

    write(ring := tmp_path / "ring", OLD)
    env = {"STATECODEC_KEYS_FILE": str(ring), "STATECODEC_RELOAD_INTERVAL": "5",
           "STATECODEC_STORE_URL": "redis://127.0.0.1:1/0"}  # the store key's secret did not mount
    with caplog.at_level(logging.WARNING, "statecodec.mcp"):
        assert from_env(env).single_use is None
    assert "single use is off: STATECODEC_STORE_KEY is not set" in caplog.text
