"""`statecodec rotate begin | advance | status` against live-reloading instances on a real Redis.

Attacks: advancing while an instance lags or refuses its reload, retiring the old key before its tokens expired, a
hand-edited key file, a re-run after a crash, forged registry entries, `begin` on a file the servers do not read; and
around `pull`: a tampered pull line, an unknown key id, an instance down during the pull or started from an old copy.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from statecodec import AESGCMCodec, InvalidToken, KeyRing, Reason, SealError, format_keys, generate_key, rotation
from statecodec.cli.main import main
from statecodec.envelope import wrapped_key_id
from statecodec.mcp import from_env
from statecodec.reload import ReloadingCodec
from tests.plugins import eventually
from tests.plugins.redis import RedisServer

Run = Callable[..., tuple[int, dict[str, Any]]]


@pytest.fixture
def rotate(redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """`statecodec rotate ACTION --json` on the key file ``ring``, against the fleet registry in `redis_url`."""
    for name in [name for name in os.environ if name.startswith("STATECODEC_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("STATECODEC_STORE_URL", redis_url)
    monkeypatch.setenv("STATECODEC_KEYS_FILE", str(tmp_path / "ring"))

    def run(*argv: str) -> tuple[int, dict[str, Any]]:
        code = main(["rotate", *argv, "--json"])
        return code, json.loads(capsys.readouterr().out)

    return run


@pytest.fixture
def instances(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., ReloadingCodec]]:
    started: list[ReloadingCodec] = []

    def start(name: str, ring: Path, ttl: int = 1) -> ReloadingCodec:
        settings = {"STATECODEC_KEYS_FILE": str(ring), "STATECODEC_RELOAD_INTERVAL": "0.05", "STATECODEC_TTL": str(ttl),
                    "STATECODEC_FUTURE_SKEW": "0", "STATECODEC_STORE_URL": redis_url, "STATECODEC_INSTANCE": name}
        protection = from_env(settings)
        assert isinstance(protection.codec, ReloadingCodec)
        protection.codec.start(protection.report)
        started.append(protection.codec)
        return started[-1]

    yield start
    for codec in started:
        codec.close()


def test_advance_waits_for_the_lagging_instance_by_name_and_for_the_old_keys_tokens(
    rotate: Run, instances: Callable[..., ReloadingCodec], tmp_path: Path
) -> None:
    ring, lagging = tmp_path / "ring", tmp_path / "web-2.ring"
    ring.write_text(format_keys([generate_key()]), encoding="utf-8")
    shutil.copy(ring, lagging)
    instances("web-1", ring)
    instances("web-2", lagging)
    assert eventually(lambda: rotate("begin")[1]["written"])  # once both instances reported
    assert rotate("begin")[1]["written"] is False  # a re-run writes nothing
    assert stat.S_IMODE(ring.stat().st_mode) == 0o600
    code, refused = eventually(lambda: (result := rotate("advance"))[1]["blockers"][0].startswith("web-2") and result)
    assert (code, [b.split(" ")[0] for b in refused["blockers"]]) == (1, ["web-2"])
    shutil.copy(ring, lagging)  # web-2's copy catches up
    advanced = eventually(lambda: (result := rotate("advance"))[0] == 0 and result[1])
    assert advanced["key_ids"] == refused["key_ids"][::-1]
    shutil.copy(ring, lagging)
    code, early = eventually(lambda: not (result := rotate("advance"))[1]["blockers"] and result)
    assert (code, early["key_ids"]) == (1, refused["key_ids"][::-1])
    assert 0 < early["wait_seconds"] <= 1 + 3 * 0.05 + 1  # ttl + future skew after the entries' last old primary
    assert rotate("advance", "--to", "2")[0] == 0  # a re-run of a step already taken changes nothing
    ring.write_text(ring.read_text().replace("phase 2", "phase 1"), encoding="utf-8")  # its marker no longer matches
    code, edited = rotate("status")
    assert (code, edited["error"], "edited by hand" in edited["message"]) == (2, "configuration", True)


@pytest.mark.parametrize("damage", ["truncated", "drops its primary"])
def test_a_refused_reload_is_reported_in_status_and_the_instance_keeps_serving(
    rotate: Run, instances: Callable[..., ReloadingCodec], tmp_path: Path, damage: str
) -> None:
    ring, own = tmp_path / "ring", tmp_path / "web-1.ring"
    ring.write_text(format_keys([generate_key()]), encoding="utf-8")
    shutil.copy(ring, own)
    web1 = instances("web-1", own)
    token, keys = web1.seal(b"state"), web1.key_ids
    eventually(lambda: rotate("begin")[0] == 0)  # the operator's file moves on; web-1's own copy is damaged
    own.write_text(ring.read_text()[:20] if damage == "truncated" else format_keys([generate_key()]), encoding="utf-8")

    def reported() -> dict[str, Any] | None:
        status = rotate("status")[1]
        return status if any(instance["error"] for instance in status["instances"]) else None

    status = eventually(reported)
    assert ("is the primary" in status["instances"][0]["error"]) == (damage == "drops its primary")
    assert [blocker.partition(":")[0] for blocker in status["blockers"]] == ["web-1"]  # advance waits for it
    assert (web1.key_ids, web1.unseal(token)) == (keys, b"state")


def test_retiring_waits_for_the_longest_lived_tokens_under_the_old_key_though_their_sealer_left(
    rotate: Run, instances: Callable[..., ReloadingCodec], tmp_path: Path
) -> None:
    ring = tmp_path / "ring"
    ring.write_text(format_keys([generate_key()]), encoding="utf-8")
    long_lived = instances("web-1", ring, ttl=600)  # its tokens under the old key live 600 s wherever they land
    instances("web-2", ring)
    eventually(lambda: rotate("begin")[0] == 0)
    eventually(lambda: rotate("advance")[0] == 0)
    eventually(lambda: not rotate("status")[1]["blockers"])
    long_lived.close()  # scaled down: it leaves the registry, its tokens do not leave the clients
    code, early = rotate("advance")
    assert (code, early["blockers"]) == (1, [])
    assert early["wait_seconds"] > 590


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (("HSET", "{statecodec}:fleet-tokens", "ffffffff", "soon"), "store"),  # until when a key's tokens live
        (("ZADD", "{statecodec}:fleet-expiry", "+inf", "web-9"), "store"),  # an entry that never expires
        (("HSET", "{statecodec}:fleet", "web-9\n\x1b[2Jnext        phase 3: safe now", '1 IDS {"error": null}'), None),
        (("HSET", "{statecodec}:fleet", "web-9", '1 IDS {"error": "\\u001b[2J"}'), None),
    ],
)
def test_a_forged_registry_entry_blocks_every_step_and_prints_as_malformed(
    rotate: Run, instances: Callable[..., ReloadingCodec], tmp_path: Path, redis_server: RedisServer,
    command: tuple[str, ...], expected: str | None,
) -> None:
    ring = tmp_path / "ring"
    ring.write_text(format_keys([generate_key()]), encoding="utf-8")
    instances("web-1", ring)
    eventually(lambda: rotate("begin")[0] == 0)
    eventually(lambda: rotate("advance")[0] == 0)
    written = ring.read_text()
    ids = ",".join(rotate("status")[1]["key_ids"])  # web-1 reports its own entry again at every poll: web-9 is forged
    redis_server.cli(*(part.replace("IDS", ids) for part in command))
    code, result = rotate("advance")
    assert ring.read_text() == written
    if expected is not None:
        assert (code, result["error"]) == (1, expected)
        return
    forged = [blocker for blocker in result["blockers"] if "malformed" in blocker]
    assert (code, len(forged), forged[0].isprintable()) == (1, 1, True)


def test_begin_on_a_key_file_the_servers_do_not_run_is_refused_naming_them(
    rotate: Run, instances: Callable[..., ReloadingCodec], tmp_path: Path
) -> None:
    served, elsewhere = tmp_path / "served.ring", tmp_path / "ring"  # the operator's default file is not the served one
    served.write_text(format_keys([generate_key()]), encoding="utf-8")
    elsewhere.write_text(format_keys([generate_key()]), encoding="utf-8")
    instances("web-1", served)
    code, refused = eventually(lambda: (result := rotate("begin"))[1]["blockers"][0].startswith("web-1") and result)
    assert (code, refused["written"], refused["blockers"][0].split(" ")[0]) == (1, False, "web-1")
    assert "phase" not in elsewhere.read_text()
    assert rotate("begin", "--keys-file", str(served))[1]["written"]


def test_a_registry_call_on_a_store_that_never_answers_ends_at_the_stores_deadline() -> None:
    from statecodec.errors import StoreUnreachable
    from statecodec.redis_store import RedisStore
    from statecodec.registry import RedisRegistry

    class Silent:  # a client whose every call waits forever
        async def execute_command(self, *args: Any) -> Any:
            await asyncio.Event().wait()

    # a timeout a loaded machine's loop meets: a loop late by deadline/8 reads as busy, not as the store's silence
    registry = RedisRegistry(RedisStore(cast(Any, Silent()), where="silent:1", namespace="n", timeout=0.5))
    with pytest.raises(StoreUnreachable, match=r"silent:1 did not answer within 1 s"):
        asyncio.run(asyncio.wait_for(registry.fleet(), 30))


# --- an emergency key pull: `rotate pull KID` ------------------------------------------------------------------


def _ring(path: Path, *keys: bytes) -> tuple[str, ...]:
    path.write_text(format_keys(keys).replace(",", "\n") + "\n", encoding="utf-8")
    return KeyRing(keys).key_ids


def _refused_unknown_key(codec: ReloadingCodec, token: str) -> bool:
    with pytest.raises(InvalidToken) as info:
        codec.unseal(token)
    return info.value.reason is Reason.UNKNOWN_KEY


def test_pull_drops_the_primary_then_a_demoted_key_at_the_next_poll_logged_as_an_incident_and_shown_in_status(
    rotate: Run, instances: Callable[..., ReloadingCodec], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ring, keys = tmp_path / "ring", [generate_key() for _ in range(3)]
    while KeyRing(keys[:1]).key_ids[0].isdigit():  # a key id with letters, so that the capitals below are tested
        keys[0] = generate_key()
    leaked, kept, demoted = _ring(ring, *keys)
    web1, web2 = instances("web-1", ring, ttl=600), instances("web-2", ring, ttl=600)  # no drop would be on time
    forged = [AESGCMCodec([key]).seal(b"forged") for key in keys]
    code, pulled = rotate("pull", leaked.upper())  # as a log or a ticket may spell it
    assert (code, pulled["pulled"], pulled["key_ids"], pulled["recorded"]) == (0, leaked, [kept, demoted], True)
    assert eventually(lambda: web1.key_ids == web2.key_ids == (kept, demoted))
    assert all(_refused_unknown_key(codec, forged[0]) for codec in (web1, web2))
    assert web2.unseal(forged[1]) == b"forged"
    assert web1.unseal(web2.seal(b"flow")) == b"flow"  # flows under the other keys untouched
    assert rotate("status")[1]["phase"] == 2  # [kept, demoted] reads as phase 2 of a rotation: `advance` retires it
    assert rotate("pull", demoted)[0] == 0
    assert eventually(lambda: web1.key_ids == web2.key_ids == (kept,))
    assert all(_refused_unknown_key(codec, forged[2]) for codec in (web1, web2))

    def both_pulled() -> dict[str, Any] | None:
        status = rotate("status")[1]
        return status if all(len(instance["pulled"]) == 2 for instance in status["instances"]) else None

    status = eventually(both_pulled)
    assert sorted(status["pulled"]) == sorted([leaked, demoted])
    assert [i["pulled"] for i in status["instances"]] == [sorted([leaked, demoted])] * 2
    incidents = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
    assert sum(leaked in line for line in incidents) == sum(demoted in line for line in incidents) == 2  # each one
    assert not any(format_keys([key]) in caplog.text for key in keys)


def test_a_pull_of_a_key_the_file_does_not_hold_writes_nothing_and_names_what_it_holds(
    rotate: Run, tmp_path: Path
) -> None:
    ring = tmp_path / "ring"
    held = _ring(ring, generate_key())
    written = ring.read_text()
    code, refused = rotate("pull", "deadbeef")
    assert (code, refused["error"], held[0] in refused["message"], ring.read_text()) == (2, "configuration", True,
                                                                                         written)


def test_a_tampered_pull_line_overrides_nothing_but_the_keys_it_names(
    instances: Callable[..., ReloadingCodec], tmp_path: Path
) -> None:
    ring, keys = tmp_path / "ring", [generate_key() for _ in range(3)]
    first, second, third = _ring(ring, *keys)
    web1 = instances("web-1", ring, ttl=600)
    for pulls, left, why in ((first, keys[2:], "drops key " + second), (second, keys[1:], "pulled")):
        ring.write_text(f"# statecodec pulled: {pulls}\n{format_keys(left)}\n", encoding="utf-8")  # by hand

        def refused(why: str = why) -> bool:
            return web1.error is not None and why in web1.error

        assert eventually(refused)
        assert web1.key_ids == (first, second, third)  # kept: a pull line is no licence to drop any other key
    assert web1.unseal(AESGCMCodec([keys[0]]).seal(b"x")) == b"x"  # no key was pulled through the registry


@pytest.mark.parametrize("copy", ["old", "current"])
def test_an_instance_down_during_the_pull_never_honours_the_pulled_key_whichever_file_it_comes_back_with(
    rotate: Run, instances: Callable[..., ReloadingCodec], tmp_path: Path, copy: str
) -> None:
    ring, old, keys = tmp_path / "ring", tmp_path / "old.ring", [generate_key(), generate_key()]
    leaked, kept = _ring(ring, *keys)
    shutil.copy(ring, old)
    eventually(lambda: instances("web-1", ring) and rotate("pull", leaked)[0] == 0)  # web-2 is down meanwhile
    back = instances("web-2", old if copy == "old" else ring)  # an old image, or a host whose copy lagged
    forged = AESGCMCodec(keys[:1]).seal(b"forged")
    assert eventually(lambda: copy == "current" or isinstance(back.error, str))
    assert _refused_unknown_key(back, forged)
    if copy == "old":  # fenced: it seals and opens nothing until its file drops the key, and says so
        with pytest.raises(SealError):
            back.seal(b"x")
        assert "pulled" in eventually(lambda: next(i["error"] for i in rotate("status")[1]["instances"]
                                                   if i["key_ids"][0] == leaked) or "")
        shutil.copy(ring, old)
        eventually(lambda: back.key_ids == (kept,) and back.error is None)
    assert back.unseal(back.seal(b"flow")) == b"flow"


def test_a_re_run_of_a_pull_leaves_the_key_file_as_it_stands(rotate: Run, tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    leaked, old, new = (generate_key() for _ in range(3))
    _ring(ring, leaked, old, new)
    (leaked_id,), (old_id, new_id) = KeyRing([leaked]).key_ids, KeyRing([old, new]).key_ids
    assert rotate("pull", leaked_id)[0] == 0
    # the operator then begins a rotation by hand, and a re-run of the pull (after a crash, say) follows
    text = f"# statecodec pulled: {leaked_id}\n{rotation.marked(1, old_id, new_id)}\n{format_keys([old, new])}\n"
    ring.write_text(text, encoding="utf-8")
    code, again = rotate("pull", leaked_id)
    assert (code, again["key_ids"], again["recorded"]) == (0, [old_id, new_id], True)
    assert ring.read_text(encoding="utf-8") == text  # the rotation's own marker kept, not turned into phase 2


def test_pull_leaves_a_usable_primary_and_says_what_to_do_where_it_cannot_pull(
    rotate: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ring = tmp_path / "ring"
    only = _ring(ring, generate_key())[0]
    code, pulled = rotate("pull", only)
    assert (code, pulled["generated"], len(pulled["key_ids"])) == (0, True, 1)
    assert KeyRing.from_file(ring).key_ids == tuple(pulled["key_ids"]) != (only,)
    assert rotate("pull", only)[0] == 0  # a re-run after a crash: recorded again, nothing else changes
    monkeypatch.delenv("STATECODEC_KEYS_FILE")
    monkeypatch.setenv("STATECODEC_KEYS", format_keys([generate_key()]))
    code, inline = rotate("pull", only)
    assert (code, "restart them all at once" in inline["message"]) == (2, True)
    blob = format_keys([b"w" * 40 + bytes(range(8))])  # a wrapped data key: its id is a digest, no KMS needed
    (tmp_path / "wrapped").write_text(blob + "\n", encoding="utf-8")
    monkeypatch.setenv("STATECODEC_CODEC", "aws-kms")
    monkeypatch.setenv("STATECODEC_WRAPPED_KEYS_FILE", str(tmp_path / "wrapped"))
    kid = wrapped_key_id(b"w" * 40 + bytes(range(8))).hex()
    code, alone = rotate("pull", kid)
    assert (code, "new-data-key" in alone["message"]) == (2, True)


def test_two_instances_started_with_one_name_are_both_in_status_and_advance_waits_for_both(
    rotate: Run, instances: Callable[..., ReloadingCodec], tmp_path: Path
) -> None:
    ring, lagging = tmp_path / "ring", tmp_path / "lagging.ring"
    _ring(ring, generate_key())
    shutil.copy(ring, lagging)
    instances("web-1", ring)
    instances("web-1", lagging)  # two containers of one host name, each PID 1
    status = eventually(lambda: len((s := rotate("status")[1])["instances"]) == 2 and s)
    names = [i["name"] for i in status["instances"]]
    assert names[0] != names[1]
    assert all(name.startswith("web-1/") for name in names)
    assert eventually(lambda: rotate("begin")[0] == 0)
    code, refused = eventually(lambda: len((result := rotate("advance"))[1]["blockers"]) == 1 and result)
    assert (code, refused["blockers"][0].split(" ")[0] in names) == (1, True)  # the one that lacks the new key
    shutil.copy(ring, lagging)  # the one that lacked the new key catches up: only now may the fleet move on
    assert eventually(lambda: rotate("advance")[0] == 0)
