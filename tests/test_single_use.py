"""SingleUse and SingleUseCodec on their own: the su2 stamp (vectors, re-derived from docs/formats.md alone), what
reaches the store, failure modes, configuration. Store behaviour on every store: tests/test_store_contract.py."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import pickle
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecodec import AESGCMCodec, BoundCodec, ConfigurationError, InvalidToken, KeyRing, StoreError, format_keys
from statecodec.cli.main import main
from statecodec.errors import StoreBusy, StoreDown, StoreUnreachable
from statecodec.mcp import guard_from_env, store_from_env
from statecodec.single_use import SingleUse, SingleUseCodec, unchecked
from statecodec.store import Hello, MemoryStore, Outcome, Verdict
from tests.secrecy import refused
from tests.test_vectors import hkdf

VECTORS = json.loads((Path(__file__).parent / "vectors" / "single_use.json").read_text(encoding="utf-8"))
KEY = base64.urlsafe_b64decode(VECTORS["store_key"] + "=")
EPOCH = bytes.fromhex(VECTORS["epoch"])
ENV = {"STATECODEC_STORE_URL": "memory", "STATECODEC_STORE_KEY": format_keys([KEY])}


class Fixed(MemoryStore):
    """At the vectors' epoch and a fixed time: records each claim, answers FIRST, else raises `error` (or, when it is
    ``"unreadable"``, answers a time the guard cannot read)."""

    where = "fixed:0"

    def __init__(self, now_ms: int) -> None:
        super().__init__()
        self.now, self.claims, self.outcome = now_ms, list[dict[str, Any]](), Outcome.FIRST
        self.error: BaseException | str | None = None

    async def hello(self, **kw: Any) -> Hello:
        return Hello("ok", EPOCH, self.now)

    async def claim(self, **kw: Any) -> Verdict:
        self.claims.append(kw)
        if isinstance(self.error, BaseException):
            raise self.error
        return Verdict(self.outcome, EPOCH, None if self.error else self.now)  # type: ignore[arg-type]


def fixed_guard(now_ms: int, ttl: float = 600, **kw: Any) -> tuple[SingleUse, Fixed]:
    guard = SingleUse(store := Fixed(now_ms), key=KEY, ttl=ttl, **{"clock": lambda: now_ms / 1000, **kw})
    asyncio.run(guard.start())
    return guard, store


@pytest.mark.parametrize("v", VECTORS["valid"], ids=lambda v: v["name"])
def test_the_vectors_restamp_byte_for_byte_and_claim_the_pinned_digests(v: dict[str, Any]) -> None:
    """Every byte is also re-derived from docs/formats.md alone, with `hmac` and HKDF-SHA256 (below)."""
    guard, store = fixed_guard(v["issued_ms"], ttl=(v["expires_ms"] - v["issued_ms"]) / 1000)
    principal = v["principal"] and tuple(v["principal"])
    with mock.patch("secrets.token_bytes", return_value=bytes.fromhex(v["token_id"])):
        stamped = guard.stamp(v["state"].encode(), principal=principal, scopes=v["scopes"])
    assert stamped.decode() == v["stamped"]
    assert asyncio.run(guard.consume(v["stamped"].encode())) == v["state"].encode()
    claim = store.claims[0]
    assert (claim["key"].hex(), claim["fingerprint"].hex()) == (v["claim_key"], VECTORS["fingerprint"])
    assert claim["epoch"] == EPOCH
    assert [s.hex() for s in claim["scopes"]] == [*v["scope_digests"], VECTORS["all_scope"]]
    assert (claim["issued_ms"], claim["expires_ms"]) == (v["issued_ms"], v["expires_ms"])
    keys = {name: hkdf(KEY, info.encode()) for name, info in VECTORS["hkdf_info"].items()}
    assert _mac(keys["fingerprint"], _field(VECTORS["namespace"])).hex() == VECTORS["fingerprint"]
    assert _mac(keys["scope"], _field("all") + _field(None) + _field(None)).hex() == VECTORS["all_scope"]
    client, issuer, subject = v["principal"] or (None, None, None)
    fields = [("principal", issuer, subject)] * bool(subject) + [("client", issuer, client)] * bool(client)
    fields += [("scope", name, value) for name, value in v["scopes"].items()]
    digests = [_mac(keys["scope"], b"".join(map(_field, f))) for f in fields]
    assert [d.hex() for d in digests] == v["scope_digests"]
    body = bytes.fromhex(v["token_id"]) + v["issued_ms"].to_bytes(6, "big") + v["expires_ms"].to_bytes(6, "big")
    body += EPOCH + bytes([len(digests)]) + b"".join(digests)
    tag = _mac(keys["stamp"], b"su2." + body + v["state"].encode())
    assert b"su2." + base64.urlsafe_b64encode(body + tag).rstrip(b"=") + b"." + v["state"].encode() == stamped
    assert _mac(keys["claim"], bytes.fromhex(v["token_id"])).hex() == v["claim_key"]


@pytest.mark.parametrize("v", VECTORS["invalid"], ids=lambda v: v["name"])
def test_the_invalid_vectors_are_refused_and_claim_nothing(v: dict[str, Any]) -> None:
    guard, store = fixed_guard(VECTORS["valid"][1]["issued_ms"])
    with pytest.raises(InvalidToken) as info:
        asyncio.run(guard.consume(v["stamped"].encode()))
    assert (info.value.reason.value, store.claims) == (v["reason"], [])  # point 6: a moved stamp is `seal`


def test_a_single_use_codec_records_a_new_form_before_its_token_leaves() -> None:
    store = MemoryStore()
    inner = BoundCodec(AESGCMCodec(KeyRing.generate()), audience="a", binding_key=KEY)
    with closing(SingleUseCodec(inner, SingleUse(store, key=KEY, ttl=60))) as codec:
        token = codec.seal(b"x", principal="alice")  # issue 32: `revoke --principal alice` checks this record
        forms = asyncio.run(store.health(fingerprint=codec.guard._fingerprint))["forms"]
        assert forms == {codec.guard.form("principal", None): mock.ANY}
        assert not codec.guard.unrecorded
        assert codec.unseal(token, principal="alice") == b"x"


def test_a_reserved_scope_name_is_refused_at_mint() -> None:
    # issue 32: the earlier API's scope, which `revoke --principal` would never reach
    with closing(SingleUseCodec(AESGCMCodec(KeyRing.generate()), SingleUse(MemoryStore(), key=KEY, ttl=60))) as codec:
        for name in ("principal", "client", "issuer", "subject", "all"):
            with pytest.raises(ConfigurationError, match=f"the scope name {name} is reserved"):
                codec.seal(b"y", scopes={name: "alice"})
        assert codec.unseal(codec.seal(b"x", scopes={"tenant": "acme"})) == b"x"


def test_an_unspent_stamp_cannot_carry_a_consumed_state() -> None:
    guard, store = fixed_guard(1_767_225_600_000)  # point 6: the tag covers the state it precedes
    consumed, unspent = guard.stamp(b"transfer 100 to mallory"), guard.stamp(b"noop")
    assert asyncio.run(guard.consume(consumed)) == b"transfer 100 to mallory"
    grafted = unspent.rpartition(b".")[0] + b".transfer 100 to mallory"
    with pytest.raises(InvalidToken, match="seal"):
        asyncio.run(guard.consume(grafted))
    body = bytes(16) + (1_767_225_600_000).to_bytes(6, "big") * 2 + EPOCH + bytes([17]) + bytes(16 * 17)
    tag = _mac(hkdf(KEY, VECTORS["hkdf_info"]["stamp"].encode()), b"su2." + body)
    with pytest.raises(InvalidToken, match="malformed"):  # more than 16 scopes, under a valid tag (n is 0 to 16)
        asyncio.run(guard.consume(b"su2." + base64.urlsafe_b64encode(body + tag).rstrip(b"=") + b"."))
    assert len(store.claims) == 1  # both refused before the store was asked


def _field(value: str | None) -> bytes:
    data = None if value is None else value.encode("utf-8")
    return b"\x00" if data is None else b"\x01" + len(data).to_bytes(4, "big") + data


def _mac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()[:16]


def test_a_clock_that_steps_after_the_stores_last_answer_stops_minting() -> None:
    now = [1_767_225_600.0]  # point 5: a token dated past a revocation, minted before the next claim compares
    guard, _ = fixed_guard(1_767_225_600_000, clock=lambda: now[0])
    now[0] += 30
    with pytest.raises(StoreError, match="cannot mint"):
        guard.stamp(b"x")
    assert not guard.started  # until `start` compares again


@given(st.binary(max_size=200))
def test_anything_but_a_stamp_is_refused_before_the_store(data: bytes) -> None:
    guard, store = fixed_guard(1_767_225_600_000)
    with pytest.raises(InvalidToken) as info:
        asyncio.run(guard.consume(data))
    assert info.value.reason.value in {"malformed", "seal"}
    assert store.claims == []


def test_a_revocation_is_recorded_at_mint_and_no_path_takes_scopes_at_unseal() -> None:
    guard = SingleUse(MemoryStore(), key=KEY, ttl=600)  # point 1: over a codec without a principal= argument
    codec = SingleUseCodec(AESGCMCodec(KeyRing.generate()), guard)
    try:
        token, other = (codec.seal(b"s", principal=("app", "https://idp", who)) for who in ("alice", "bob"))
        codec.run(guard.revoke(principal="alice", issuer="https://idp"))
        with pytest.raises(TypeError):
            codec.unseal(token, scopes={"principal": None})
        with pytest.raises(InvalidToken, match="revoked"):
            codec.unseal(token)
        assert codec.unseal(other) == b"s"
        bound = SingleUseCodec(BoundCodec(AESGCMCodec(KeyRing.generate()), audience="a", binding_key=KEY), guard)
        token = bound.seal(b"b", principal="carol")  # a str principal: bound by the inner codec and revocable
        with pytest.raises(InvalidToken, match="principal"):
            bound.unseal(token, principal="mallory")
        codec.run(guard.revoke(principal="carol"))
        with pytest.raises(InvalidToken, match="revoked"):
            bound.unseal(token, principal="carol")
        bound.close()
    finally:
        codec.close()
        codec.close()
    for call in (lambda: codec.seal(b"t"), lambda: codec.unseal(other)):  # a closed codec refuses by name
        with pytest.raises(StoreError, match="closed"):
            call()
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(codec)
    assert KEY.hex() not in repr(codec) + repr(guard)


def _loop_threads() -> int:
    return [thread.name for thread in threading.enumerate()].count("statecodec-single-use")


def test_over_the_in_process_store_a_token_is_accepted_once_across_threads_with_no_loop_thread() -> None:
    """MemoryStore never suspends: each thread consumes in place, under the store's lock, and one alone accepts."""
    before = _loop_threads()
    with closing(SingleUseCodec(AESGCMCodec(KeyRing.generate()), SingleUse(MemoryStore(), key=KEY, ttl=600))) as codec:
        token = codec.seal(b"s", principal=("app", "https://idp", "alice"))

        def attempt(_: int) -> bytes | str:
            try:
                return codec.unseal(token)
            except InvalidToken as refused:
                return refused.reason.value

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(attempt, range(64)))
        assert results.count(b"s") == 1
        assert set(results) == {b"s", "replayed"}
        assert _loop_threads() == before


class Suspending(MemoryStore):
    """A store that yields to its event loop in each call, as one doing I/O does."""

    async def hello(self, **kw: Any) -> Hello:
        await asyncio.sleep(0)
        return await super().hello(**kw)

    async def claim(self, **kw: Any) -> Verdict:
        await asyncio.sleep(0)
        return await super().claim(**kw)


def test_a_store_that_suspends_runs_on_one_loop_thread_started_on_first_use_and_ended_by_close() -> None:
    before = _loop_threads()
    with closing(SingleUseCodec(AESGCMCodec(KeyRing.generate()), SingleUse(Suspending(), key=KEY, ttl=600))) as codec:
        assert _loop_threads() == before
        token = codec.seal(b"s")
        assert _loop_threads() == before + 1
        assert codec.unseal(token) == b"s"
        with pytest.raises(InvalidToken, match="replayed"):
            codec.unseal(token)
    assert _loop_threads() == before


@pytest.mark.parametrize(
    ("outcome", "skew_ms", "reason"),
    [(Outcome.USED, 0, "replayed"), (Outcome.EXPIRED, 0, "expired"), (Outcome.REVOKED, 0, "revoked"),
     (Outcome.FORGOTTEN, 0, "store_unavailable"), (Outcome.FOREIGN, 0, "store_unavailable"),
     (Outcome.FIRST, 1001, "store_unavailable"), (Outcome.USED, 1001, "replayed")],
)
def test_each_verdict_is_refused_with_the_reason_docs_formats_md_names(
    outcome: Outcome, skew_ms: int, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    guard, store = fixed_guard(1_767_225_600_000)  # docs/formats.md, "claim": what the presenting instance makes of it
    stamped = guard.stamp(b"x")
    store.outcome, store.now = outcome, store.now + skew_ms  # the store's clock beyond the 1 s skew: FIRST is refused
    with caplog.at_level(logging.WARNING, "statecodec.single_use"), pytest.raises(InvalidToken) as refused:
        asyncio.run(guard.consume(stamped))
    assert refused.value.reason.value == reason
    assert ("another store key" in caplog.text) is (outcome is Outcome.FOREIGN)


@pytest.mark.parametrize(
    ("error", "mode", "accepted"),
    [
        (StoreDown("the store at fixed:0 is unreachable: connection refused"), "accept", True),
        (StoreDown("the store at fixed:0 is unreachable: connection refused"), "refuse", False),
        (StoreUnreachable("the store at fixed:0 did not answer within 0.25 s"), "accept", False),  # slow: a client can
        (StoreError("the store at fixed:0 is full"), "accept", False),  # one client can fill a store
        (RuntimeError("a bug in a custom store"), "accept", False),
        (ConfigurationError("the store at fixed:0 belongs to another store key"), "accept", False),
        ("unreadable", "accept", False),  # a FIRST claim, then an answer the guard cannot read
    ],
    ids=["down-accept", "down-refuse", "slow-accept", "answered-error", "any-other-exception", "foreign", "unreadable"],
)
def test_availability_first_accepts_only_when_the_store_cannot_be_reached(
    error: BaseException | str, mode: str, accepted: bool, caplog: pytest.LogCaptureFixture
) -> None:
    guard, store = fixed_guard(1_767_225_600_000, on_store_error=mode)  # points 7 and 13
    stamped = [guard.stamp(b"x") for _ in range(3)]
    store.error = error
    caplog.clear()
    with caplog.at_level(logging.WARNING, "statecodec.single_use"):
        for token in stamped:
            if accepted:
                assert asyncio.run(guard.consume(token)) == b"x"
            else:
                with pytest.raises(InvalidToken, match="store_unavailable") as refused:
                    asyncio.run(guard.consume(token))
                assert (refused.value.__cause__, refused.value.__context__) == (None, None)
    assert len(caplog.records) == 1  # one line per cause per interval, not one per token, accepted or refused
    assert all("fixed:0" in r.getMessage() and "a bug in" not in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(  # the others: tests/test_cli.py, test_check_exits_2_on_what_would_stop_the_server_at_start_up
    ("setting", "value", "message"),
    [("STATECODEC_REVOCATION_STALENESS", "1", "is no longer read"),
     ("STATECODEC_STORE_TIMEOUT", "nan", "must be a number of seconds"),
     ("STATECODEC_STORE_KEY", format_keys([KEY, KEY[::-1]]), "holds 2 keys; the store key is one key")],
)
def test_configuration_mistakes_fail_at_construction_naming_the_setting(setting: str, value: str, message: str) -> None:
    env = {**ENV, "STATECODEC_STORE_URL": "redis://127.0.0.1:1/0", setting: value}
    assert f"{setting} {message}" in refused(lambda: guard_from_env(env), KEY)


def test_a_store_url_is_never_echoed_and_a_password_holding_url_delimiters_never_becomes_the_host(
    tmp_path: Path,
) -> None:
    from statecodec.redis_store import RedisStore

    for url in ["htps://user:pa/ss?wo#rd@host:6379/0", "pa$$word@host", "redis:/user:secret@host", "rediss//x:y@h"]:
        (tmp_path / "url").write_text(url)  # an unknown scheme: the text comes from a file too
        for settings in ({"STATECODEC_STORE_URL": url}, {"STATECODEC_STORE_URL_FILE": str(tmp_path / "url")}):
            with pytest.raises(ConfigurationError) as info:
                store_from_env(settings)
            assert all(part not in str(info.value) for part in ("user", "pa", "secret", "host", "word", "x:y"))
    for url in ("redis://u:p/a?s#s@db.example:6390/2", "redis://u:p%2Fa%3Fs@db.example:6390/2"):
        store = RedisStore.from_url(url)  # no connection is made here
        assert store.where == "db.example:6390"
        assert repr(store) == "RedisStore('db.example:6390', namespace='statecodec')"
    for bad in ("redis://u:secret@db.example:notaport/0", "redis://u:secret@/0", "redis+cluster://u:secret@h:1/3"):
        with pytest.raises(ConfigurationError) as info:
            RedisStore.from_url(bad)
        assert "secret" not in str(info.value)


def test_the_redis_store_imports_neither_the_guard_nor_the_providers() -> None:
    code = "import sys, statecodec.redis_store; from statecodec import StoreError, StoreUnreachable; assert not {"
    code += "'statecodec.single_use', 'statecodec.providers'} & set(sys.modules), sys.modules.keys()"
    subprocess.run([sys.executable, "-c", code], check=True)  # point 17: no import circle


def test_the_cli_refuses_an_in_process_store_and_padded_values(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    for args in (["store", "check"], ["revoke", "--all"]):
        assert main(args) == 2
        assert "STATECODEC_STORE_URL=memory is a store inside one process" in capsys.readouterr().err
    for args in (["--scope", "tenant= globex"], ["--principal", " alice"], ["--client", ""], ["--scope", "tenant"]):
        assert main(["revoke", *args]) == 2  # point 3: refused before any store is asked
        out, err = capsys.readouterr()
        assert "without leading or trailing whitespace" in err or "NAME=VALUE" in err
        assert "revoked" not in out


def test_one_cause_of_refusal_does_not_hide_the_next_from_the_log(caplog: pytest.LogCaptureFixture) -> None:
    guard, store = fixed_guard(1_767_225_600_000)
    stamped = [guard.stamp(b"x") for _ in range(4)]
    caplog.clear()
    with caplog.at_level(logging.WARNING, "statecodec.single_use"):
        for error, token in zip(["stalled"] * 2 + ["full"] * 2, stamped, strict=True):
            store.error = StoreError(f"the store at fixed:0 is {error}")
            with pytest.raises(InvalidToken, match="store_unavailable"):
                asyncio.run(guard.consume(token))
    assert [r.getMessage().split(":")[1].split()[-1] for r in caplog.records] == ["stalled", "full"]  # each once


def test_a_clock_beyond_the_skew_is_logged_per_cause_not_once_per_token(caplog: pytest.LogCaptureFixture) -> None:
    ahead = [0.0]
    guard, _ = fixed_guard(1_767_225_600_000, clock=lambda: 1_767_225_600 + ahead[0])
    stamped = [guard.stamp(b"x") for _ in range(20)]
    caplog.clear()
    with caplog.at_level(logging.WARNING, "statecodec.single_use"):
        for token in stamped:
            ahead[0] += 5.0137  # each refusal measures the offset anew: a new figure in the same message
            with pytest.raises(InvalidToken, match="store_unavailable"):
                asyncio.run(guard.consume(token))
    # the claim that found it, then the start that refuses until it is fixed: 20 lines before, one per token
    assert len(caplog.records) == 2, [r.getMessage() for r in caplog.records]


def test_availability_first_is_bounded_per_outage_and_nothing_a_client_does_resets_the_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The attacker's ways around the count bound: replays of what was accepted, and a store made slow, busy or full
    between (each a failure, none an answer) must neither be accepted nor reset it. The list never passes the bound."""
    guard, store = fixed_guard(1_767_225_600_000, on_store_error="accept", accept_max=3)
    tokens = [guard.stamp(b"x") for _ in range(5)]
    down = StoreDown("the store at fixed:0 is unreachable: connection refused")
    slow, busy = StoreUnreachable("the store at fixed:0 did not answer within 0.25 s"), StoreBusy("fixed:0 busy")

    def outcome(token: bytes) -> str:
        try:
            return asyncio.run(guard.consume(token)).decode()
        except InvalidToken as exc:
            return exc.reason.value

    with caplog.at_level(logging.WARNING, "statecodec.single_use"):
        seen = []
        for error, token in [(down, tokens[0]), (down, tokens[0]), (slow, tokens[1]), (busy, tokens[1]),
                             (StoreError("the store at fixed:0 is full"), tokens[1]), (down, tokens[1]),
                             (down, tokens[1]), (down, tokens[2]), (down, tokens[3]), (slow, tokens[4]),
                             (down, tokens[4])]:
            store.error = error
            seen.append(outcome(token))
    assert seen == ["x", "replayed", "store_unavailable", "store_busy", "store_unavailable", "x", "replayed", "x",
                    "store_unavailable", "store_unavailable", "store_unavailable"]
    assert len(guard._unchecked) == 3  # the bound: what waits to be recorded, never the tokens themselves
    assert "availability first ended: its bounds" in caplog.text
    store.error, store.claims[:] = None, []
    assert outcome(tokens[3]) == "x"  # the store answers: the outage ends, and the three are recorded with it
    recorded = [claim["key"] for claim in store.claims[1:]]
    assert len(recorded) == 3
    assert not guard._unchecked
    assert store.claims[0]["key"] not in recorded  # recorded after that claim answered, before it returned
    store.error = down  # a new outage: a new bound
    assert outcome(tokens[4]) == "x"


def test_availability_first_ends_when_its_time_per_outage_has_passed_and_only_an_answer_restarts_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard, store = fixed_guard(1_767_225_600_000, on_store_error="accept", accept_for=0.05)
    tokens = [guard.stamp(b"x") for _ in range(4)]
    store.error = StoreDown("the store at fixed:0 is unreachable: connection refused")
    assert asyncio.run(guard.consume(tokens[0])) == b"x"
    time.sleep(0.06)  # past the bound: monotonic time only moves forward
    with pytest.raises(InvalidToken, match="store_unavailable"):
        asyncio.run(guard.consume(tokens[1]))
    store.error = None
    assert asyncio.run(guard.consume(tokens[2])) == b"x"  # an answer: the outage is over, its one token recorded
    store.error = StoreDown("the store at fixed:0 is unreachable: connection refused")
    assert asyncio.run(guard.consume(tokens[3])) == b"x"


@pytest.mark.parametrize(
    ("kw", "message"),
    [({"accept_max": 0}, "STATECODEC_STORE_ACCEPT_MAX (accept_max) must be 1 to 100000 tokens"),
     ({"accept_max": True}, "STATECODEC_STORE_ACCEPT_MAX"), ({"accept_max": 100_001}, "STATECODEC_STORE_ACCEPT_MAX"),
     ({"accept_for": 0}, "STATECODEC_STORE_ACCEPT_FOR must be a number of seconds more than 0 and at most 600"),
     ({"accept_for": float("nan")}, "STATECODEC_STORE_ACCEPT_FOR"), ({"accept_for": "3"}, "STATECODEC_STORE_ACCEPT_F")],
)
def test_availability_firsts_bounds_are_checked_in_code_as_from_the_settings(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        SingleUse(MemoryStore(), key=KEY, ttl=600, on_store_error="accept", **kw)
    name, value = {"accept_max": ("STATECODEC_STORE_ACCEPT_MAX", "0"), "accept_for": ("STATECODEC_STORE_ACCEPT_FOR",
                                                                                      "601")}[next(iter(kw))]
    assert name in refused(lambda: guard_from_env({**ENV, name: value}), KEY)
    guard = guard_from_env({**ENV, "STATECODEC_STORE_ACCEPT_MAX": "7", "STATECODEC_STORE_ACCEPT_FOR": "2.5"})
    assert (guard.accept_max, guard.accept_for) == (7, 2.5)
    assert (guard_from_env(ENV).accept_max, guard_from_env(ENV).accept_for) == (1000, 30)


def test_a_token_accepted_unchecked_is_noted_for_the_metric_by_the_stores_host() -> None:
    guard, store = fixed_guard(1_767_225_600_000, on_store_error="accept")
    stamped = guard.stamp(b"x")
    store.error = StoreDown("the store at fixed:0 is unreachable: connection refused")
    noted: list[str] = []

    async def present() -> bytes:
        unchecked.set(noted)  # as statecodec.otel sets it around each presentation
        return await guard.consume(stamped)

    assert asyncio.run(present()) == b"x"
    assert noted == ["fixed:0"]
