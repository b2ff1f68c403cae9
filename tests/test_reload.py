"""Live key rings: each attack on a reload (half-applied, garbled, truncated, swapped by symlink, dropping a key
early, racing the request path) leaves the instance serving with one whole ring, and says why without a key."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from statecodec import InvalidToken, format_keys, generate_key
from statecodec.config import codec_from_env
from statecodec.reload import ReloadingCodec

OLD, NEW, OTHER = (generate_key() for _ in range(3))
TTL, SKEW = 10, 5


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def write(path: Path, *keys: bytes) -> None:
    path.write_text(format_keys(keys), encoding="utf-8")


def ring_codec(path: Path, clock: Clock | None = None, interval: float | None = None) -> ReloadingCodec:
    settings = {"STATECODEC_KEYS_FILE": str(path)}
    return ReloadingCodec(lambda: codec_from_env(settings), ttl=TTL, future_skew=SKEW, files=[path],
                          interval=interval, clock=clock or Clock())


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30  # a bound on a hung watcher, not a speed check
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_the_three_phases_reload_whole_and_tokens_of_the_old_key_keep_verifying(tmp_path: Path) -> None:
    ring, clock = tmp_path / "ring", Clock()
    write(ring, OLD)
    codec = ring_codec(ring, clock)
    old_token = codec.seal(b"state")
    write(ring, OLD, NEW)
    assert codec.reload()
    assert codec.unseal(codec.seal(b"a")) == b"a"
    write(ring, NEW, OLD)
    assert codec.reload()
    assert codec.unseal(old_token) == b"state"
    clock.now += TTL + SKEW
    write(ring, NEW)
    assert codec.reload()
    assert codec.error is None
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
    assert codec.key_ids == before
    assert codec.unseal(codec.seal(b"x")) == b"x"
    assert codec.error is not None
    assert "STATECODEC_KEYS_FILE" in codec.error
    for secret in (OLD, NEW):
        assert format_keys([secret]) not in caplog.text + codec.error


def test_a_ring_that_drops_todays_primary_is_refused_at_any_time(tmp_path: Path) -> None:
    ring, clock = tmp_path / "ring", Clock()
    write(ring, OLD, NEW)
    codec = ring_codec(ring, clock)
    before = codec.key_ids
    clock.now += 1e6
    write(ring, NEW)  # phase 1 straight to phase 3: every token sealed until now is under OLD
    assert not codec.reload()
    assert codec.key_ids == before
    assert "is the primary" in str(codec.error)


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
    assert not codec.reload()
    assert "0.5 s more" in str(codec.error)
    assert not codec._due()
    clock.now += 0.5
    assert codec._due()  # retried once the wait is over, though the file did not change again
    assert codec.reload()
    assert len(codec.key_ids) == 1


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
    try:
        (mount / "..data_tmp").symlink_to("v2")
        os.replace(mount / "..data_tmp", mount / "..data")  # what the kubelet does: one rename
        wait_for(lambda: len(codec.key_ids) == 2)
    finally:
        codec.close()


def test_sighup_asks_the_watcher_for_a_reload(tmp_path: Path) -> None:
    rings = iter([[OLD], [OLD, NEW]])
    codec = ReloadingCodec(lambda: codec_from_env({"STATECODEC_KEYS": format_keys(next(rings))}), ttl=TTL,
                           interval=0.01)
    previous = signal.getsignal(signal.SIGHUP)
    try:
        codec.reload_on_sighup()
        os.kill(os.getpid(), signal.SIGHUP)
        wait_for(lambda: len(codec.key_ids) == 2)
    finally:
        signal.signal(signal.SIGHUP, previous)
        codec.close()


def test_tokens_sealed_and_opened_while_rings_swap_are_each_checked_against_one_whole_ring(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    write(ring, OLD, NEW)
    codec, stop, failures = ring_codec(ring), threading.Event(), []

    def swap() -> None:
        phases = [(NEW, OLD), (OLD, NEW)]
        while not stop.is_set():
            write(ring, *phases[0])
            codec.reload()
            phases.reverse()

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        for i in range(2000):
            try:
                assert codec.unseal(codec.seal(b"%d" % i)) == b"%d" % i
            except InvalidToken as exc:
                failures.append(exc)
    finally:
        stop.set()
        swapper.join()
    assert not failures
    assert codec.error is None
