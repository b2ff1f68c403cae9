"""Rotation: the plan never drops an in-flight round; check_fleet catches every ordering that would."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecodec import (
    AESGCMCodec,
    BoundCodec,
    ConfigurationError,
    EnvelopeCodec,
    InvalidToken,
    KeyRing,
    XAESGCMCodec,
)
from statecodec.cli.main import main
from statecodec.envelope import default_context
from statecodec.keys import format_keys, parse_keys
from statecodec.rotation import RotationPlan, check_fleet, parse_fleet, reseal
from tests.envelope_wrappers import LocalWrapper
from tests.secrecy import COLLIDING_SECRETS

OLD = bytes(range(32))
NEW = bytes(range(64, 96))
BINDING_KEY = bytes(range(100, 132))
TTL = 600
SKEW = 60
T0 = 1_767_225_600
PLAN = RotationPlan(OLD, NEW, TTL, future_skew=SKEW)


class Clock:
    def __init__(self) -> None:
        self.now: float = T0

    def __call__(self) -> float:
        return self.now


# --- RotationPlan ------------------------------------------------------------------------------


def test_plan_phases_and_configuration_values() -> None:
    old_id, new_id = KeyRing([OLD]).key_ids[0], KeyRing([NEW]).key_ids[0]
    assert [p.key_ids for p in PLAN.phases] == [(old_id, new_id), (new_id, old_id), (new_id,)]
    assert [parse_keys(p.env_value()) for p in PLAN.phases] == [[OLD, NEW], [NEW, OLD], [NEW]]
    assert [p.wait_after_previous for p in PLAN.phases] == [0, 0, TTL + SKEW]
    assert PLAN.earliest_start(3, T0) == T0 + TTL + SKEW
    assert PLAN.earliest_start(2, T0) == T0
    assert OLD.hex() not in repr(PLAN) + repr(PLAN.phases)
    assert format_keys([OLD]) not in repr(PLAN) + repr(PLAN.phases)


def test_plan_from_key_ids_has_no_secrets_to_render() -> None:
    plan = RotationPlan.from_key_ids("A1B2C3D4", "e5f6a7b8", 300)
    assert plan.phase(3).key_ids == ("e5f6a7b8",)
    assert plan.phase(1).key_ids == ("a1b2c3d4", "e5f6a7b8")
    with pytest.raises(ConfigurationError, match="holds no keys"):
        plan.phase(1).env_value()


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda: RotationPlan(OLD, OLD, TTL), "same key"),
        (lambda: RotationPlan(b"short", NEW, TTL), "old key: is 5 bytes"),
        (lambda: RotationPlan(OLD, b"a" * 40, TTL), "new key: has fewer than"),
        (lambda: RotationPlan(OLD, NEW, 0), "ttl must be > 0"),
        (lambda: RotationPlan(OLD, NEW, float("nan")), "finite"),
        (lambda: RotationPlan.from_key_ids("zz", "aa", TTL), "hex"),
        (lambda: RotationPlan.from_key_ids("aa", "AA", TTL), "same key id"),
    ],
)
def test_plan_misconfiguration(build: Callable[[], object], fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=fragment):
        build()


def test_a_key_id_collision_is_not_called_the_same_key() -> None:
    old, new = COLLIDING_SECRETS
    with pytest.raises(ConfigurationError) as info:
        RotationPlan(old, new, TTL)
    message = str(info.value)
    assert "same key" not in message
    assert "the new key and the old key are different keys" in message
    assert "generate another key" in message
    assert format_keys([old]) not in message
    assert format_keys([new]) not in message


def test_plans_and_phases_hold_secrets_and_do_not_pickle_or_copy() -> None:
    for holder in (PLAN, *PLAN.phases, RotationPlan.from_key_ids("a1b2c3d4", "e5f6a7b8", TTL)):
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            with pytest.raises(TypeError, match="not picklable"):
                pickle.dumps(holder, protocol=protocol)
        with pytest.raises(TypeError):
            copy.deepcopy(holder)


def test_asdict_of_a_phase_never_yields_raw_secrets() -> None:
    # The keys are a KeyRing, which refuses to be copied out; a phase of key ids has nothing to hide.
    for phase in PLAN.phases:
        with pytest.raises(TypeError, match="not picklable"):
            dataclasses.asdict(phase)
    plain = dataclasses.asdict(RotationPlan.from_key_ids("a1b2c3d4", "e5f6a7b8", TTL).phase(1))
    assert plain["key_ids"] == ("a1b2c3d4", "e5f6a7b8")
    assert plain["keys"] is None


# --- check_fleet -------------------------------------------------------------------------------


def test_check_fleet_names_every_instance_that_could_mint_an_unverifiable_token() -> None:
    report = check_fleet({"a": ["01", "02"], "b": ["02", "01"], "c": ["02"], "d": ["01"]})
    assert not report.safe
    assert report.unsafe_instances == ("a", "b", "c", "d")
    by_instance = {f.instance: f.refused_by for f in report.findings}
    assert by_instance == {"a": ("c",), "b": ("d",), "c": ("d",), "d": ("c",)}
    assert "c cannot verify" in str(report)


def test_check_fleet_safe_phases_and_in_flight_keys() -> None:
    assert check_fleet({"a": ["01", "02"], "b": ["01"]}).safe  # phase 1 rolling out
    assert check_fleet({"a": ["02", "01"], "b": ["01", "02"]}).safe  # phase 2 rolling out
    retired_early = check_fleet({"a": ["02"], "b": ["02", "01"]}, in_flight=["01"])
    assert not retired_early.safe
    assert retired_early.unsafe_instances == ()  # nobody mints badly: the in-flight key is the problem
    assert [(f.key_id, f.refused_by, f.in_flight) for f in retired_early.findings] == [("01", ("a",), True)]


@pytest.mark.parametrize(
    "reports",
    [{}, {"a": []}, {"a": "01"}, {"a": ["01", "01"]}, {"a": ["xyz"]}, {"": ["01"]}, ["a"], {"a": [1]}],
)
def test_check_fleet_refuses_unreadable_reports(reports: Any) -> None:
    with pytest.raises(ConfigurationError):
        check_fleet(reports)


def test_parse_fleet_document() -> None:
    assert parse_fleet({"instances": {"a": ["01"]}}) == ({"a": ["01"]}, [])
    bad: object
    for bad in ([], {"instances": []}, {"instances": {}, "extra": 1}, {"instances": {}, "in_flight": "01"}):
        with pytest.raises(ConfigurationError):
            parse_fleet(bad)


# --- reseal ------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec_cls", [AESGCMCodec, XAESGCMCodec])
def test_reseal_moves_plain_tokens_to_the_new_primary(codec_cls: type[AESGCMCodec | XAESGCMCodec]) -> None:
    token = codec_cls([OLD]).seal(b"stored")
    moved = reseal(codec_cls([NEW, OLD]), token)
    assert codec_cls([NEW]).unseal(moved) == b"stored"
    with pytest.raises(InvalidToken):
        codec_cls([NEW]).unseal(token)


def test_reseal_keeps_bound_claims_and_expiry() -> None:
    clock = Clock()

    def bound(keys: list[bytes]) -> BoundCodec:
        return BoundCodec(AESGCMCodec(keys), audience="svc", binding_key=BINDING_KEY, ttl=TTL, clock=clock)

    token = bound([OLD]).seal(b"s", principal="p", context={"k": "v"})
    clock.now += TTL - 1
    moved = reseal(bound([NEW, OLD]), token)
    assert bound([NEW]).unseal(moved, principal="p", context={"k": "v"}) == b"s"
    clock.now += 1
    with pytest.raises(InvalidToken) as info:
        bound([NEW]).unseal(moved, principal="p", context={"k": "v"})
    assert info.value.reason.value == "expired"


# --- rolling-deploy simulation -----------------------------------------------------------------

RINGS: dict[str, list[bytes]] = {"old": [OLD], "p1": [OLD, NEW], "p2": [NEW, OLD], "p3": [NEW]}
CLOCK = Clock()
CODECS = {
    name: BoundCodec(AESGCMCodec(keys), audience="svc", binding_key=BINDING_KEY, ttl=TTL, future_skew=SKEW,
                     clock=CLOCK)
    for name, keys in RINGS.items()
}


@dataclass
class Minted:
    token: str
    key_id: str
    iat: int
    minter: int
    flagged_at_mint: bool


@dataclass
class Fleet:
    """N instances, each running one ring configuration, with real tokens passing between them."""

    configs: list[str]
    tokens: list[Minted] = field(default_factory=list)
    drops: list[Minted] = field(default_factory=list)
    checks: list[bool] = field(default_factory=list)

    def reports(self) -> dict[str, list[str]]:
        return {f"i{n}": list(CODECS[c].key_ids) for n, c in enumerate(self.configs)}

    def live_key_ids(self) -> list[str]:
        return sorted({t.key_id for t in self.tokens if CLOCK.now < t.iat + TTL})

    def check(self) -> Any:
        report = check_fleet(self.reports(), in_flight=self.live_key_ids())
        self.checks.append(report.safe)
        return report

    def mint(self, i: int) -> None:
        report = self.check()
        codec = CODECS[self.configs[i]]
        token = codec.seal(b"round-state", principal="user", context={"tool": "deploy"})
        self.tokens.append(Minted(token, codec.key_ids[0], int(CLOCK.now), i, f"i{i}" in report.unsafe_instances))

    def present(self, t: Minted, j: int) -> None:
        report = self.check()
        live = CLOCK.now < t.iat + TTL
        try:
            CODECS[self.configs[j]].unseal(t.token, principal="user", context={"tool": "deploy"})
            reason = None
        except InvalidToken as exc:
            reason = exc.reason.value
        if reason is None:
            assert live
        elif reason == "expired" or (reason == "unknown_key" and not live):
            assert not live  # refused, but it had lapsed anyway: not a dropped round
        else:
            assert reason == "unknown_key"
            # A live token was dropped: check_fleet must have said so before it happened.
            assert t.flagged_at_mint or not report.safe
            self.drops.append(t)


def _traffic(data: st.DataObject, fleet: Fleet) -> None:
    n = len(fleet.configs)
    for _ in range(data.draw(st.integers(0, 3), label="events")):
        kind = data.draw(st.sampled_from(["mint", "present", "tick"]), label="kind")
        if kind == "mint":
            fleet.mint(data.draw(st.integers(0, n - 1), label="minter"))
        elif kind == "present" and fleet.tokens:
            t = data.draw(st.sampled_from(fleet.tokens), label="token")
            fleet.present(t, data.draw(st.integers(0, n - 1), label="verifier"))
        elif kind == "tick":
            CLOCK.now += data.draw(st.integers(0, TTL // 3), label="seconds")


def _roll_out(data: st.DataObject, fleet: Fleet, config: str) -> None:
    for i in data.draw(st.permutations(range(len(fleet.configs))), label=f"order {config}"):
        fleet.configs[i] = config
        _traffic(data, fleet)


def _replay_all(fleet: Fleet) -> None:
    for t in list(fleet.tokens):
        for j in range(len(fleet.configs)):
            fleet.present(t, j)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 5), st.data())
def test_following_the_plan_never_drops_a_round_in_any_order(n: int, data: st.DataObject) -> None:
    CLOCK.now = T0
    fleet = Fleet(["old"] * n)
    _traffic(data, fleet)
    _roll_out(data, fleet, "p1")
    _roll_out(data, fleet, "p2")
    _replay_all(fleet)
    CLOCK.now += PLAN.phase(3).wait_after_previous
    _roll_out(data, fleet, "p3")
    _replay_all(fleet)
    assert fleet.drops == []
    assert all(fleet.checks)  # check_fleet agreed at every step that the fleet was safe


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 5), st.data())
def test_promoting_the_new_key_first_is_caught_before_it_drops_a_token(n: int, data: st.DataObject) -> None:
    CLOCK.now = T0
    fleet = Fleet(["old"] * n)
    order = data.draw(st.permutations(range(n)), label="promotion order")
    for step, i in enumerate(order):
        fleet.configs[i] = "p2"  # skipping phase 1
        report = fleet.check()
        if step < n - 1:
            # Caught the moment the first instance is promoted, naming exactly the promoted ones.
            promoted = {f"i{k}" for k, c in enumerate(fleet.configs) if c == "p2"}
            assert not report.safe
            assert set(report.unsafe_instances) == promoted
        fleet.mint(i)  # the promoted instance mints under the new key
        _traffic(data, fleet)
    _replay_all(fleet)
    # Only new-key tokens can drop, and check_fleet had named their minter before each was minted.
    assert all(t.key_id == CODECS["p2"].key_ids[0] and t.flagged_at_mint for t in fleet.drops)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 5), st.data())
def test_retiring_the_old_key_early_is_caught_by_the_in_flight_check(n: int, data: st.DataObject) -> None:
    CLOCK.now = T0
    fleet = Fleet(["p1"] * n)
    fleet.mint(0)  # an old-key token, live when phase 3 starts too early
    _roll_out(data, fleet, "p2")
    _roll_out(data, fleet, "p3")  # no wait after phase 2
    report = fleet.check()
    if CLOCK.now < fleet.tokens[0].iat + TTL:
        assert not report.safe
        assert any(f.in_flight for f in report.findings)
    _replay_all(fleet)


def test_promoting_first_drops_a_round_that_check_fleet_flagged() -> None:
    CLOCK.now = T0
    fleet = Fleet(["old", "old"])
    fleet.configs[0] = "p2"
    assert fleet.check().unsafe_instances == ("i0",)
    fleet.mint(0)
    fleet.present(fleet.tokens[0], 1)
    assert fleet.drops == fleet.tokens


# --- CLI ---------------------------------------------------------------------------------------


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_plan_renders_each_phase_and_warns_about_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", format_keys([OLD]))
    (tmp_path / "new.key").write_text(format_keys([NEW]) + "\n")
    code, out, err = _run(["rotate", "plan", "--new-file", str(tmp_path / "new.key"), "--ttl", "600"], capsys)
    assert code == 0
    assert "SECRET" in err
    values = [line.split("=", 1)[1] for line in out.splitlines() if "STATECODEC_KEYS=" in line]
    assert [parse_keys(v) for v in values] == [[OLD, NEW], [NEW, OLD], [NEW]]
    assert "660 s" in out


def test_cli_plan_ids_only_prints_no_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OLD_KEYS", format_keys([OLD]))
    monkeypatch.setenv("NEW_KEYS", format_keys([NEW]))
    code, out, err = _run(
        ["rotate", "plan", "--old-env", "OLD_KEYS", "--new-env", "NEW_KEYS", "--ids-only", "--json"], capsys
    )
    assert code == 0
    assert format_keys([OLD]) not in out + err
    assert format_keys([NEW]) not in out + err
    plan = json.loads(out)
    assert [p["key_ids"] for p in plan["phases"]] == [list(p.key_ids) for p in PLAN.phases]
    assert plan["phases"][2]["wait_after_previous_seconds"] == TTL + SKEW


def test_cli_plan_refuses_bad_input(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", format_keys([OLD, NEW]))
    code, _, err = _run(["rotate", "plan", "--generate-new"], capsys)
    assert code == 2
    assert "holds 2 keys" in err
    code, _, err = _run(["rotate", "plan", "--old-key", format_keys([OLD]), "--generate-new", "--ids-only"], capsys)
    assert code == 2
    assert "keygen" in err
    code, out, err = _run(["rotate", "plan", "--old-key", "not a key", "--new-key", format_keys([NEW])], capsys)
    assert code == 2
    assert "base64url" in err
    assert format_keys([NEW]) not in out + err


def test_cli_check_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    safe = tmp_path / "safe.json"
    safe.write_text(json.dumps({"instances": {"web-1": ["01", "02"], "web-2": ["01"]}}))
    unsafe = tmp_path / "unsafe.json"
    unsafe.write_text(json.dumps({"instances": {"web-1": ["02", "01"], "web-2": ["01"], "web-3": ["02"]}}))
    code, out, _ = _run(["rotate", "check", str(safe)], capsys)
    assert (code, out.startswith("safe")) == (0, True)
    code, out, _ = _run(["rotate", "check", str(unsafe)], capsys)
    assert code == 1
    assert "web-1 mints under 02, which web-2 cannot verify" in out
    assert "web-3 mints under 02" in out
    code, out, _ = _run(["rotate", "check", str(safe), "--in-flight", "03", "--json"], capsys)
    assert code == 1
    assert json.loads(out)["findings"][0]["in_flight"] is True
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert _run(["rotate", "check", str(bad)], capsys)[0] == 2
    assert _run(["rotate", "check", str(tmp_path / "missing.json")], capsys)[0] == 2


def test_envelope_ring_rotates_by_key_ids_with_reseal_through_bound_codec() -> None:
    wrapper = LocalWrapper()
    old_blob, new_blob = (wrapper.new_wrapped_key(default_context()) for _ in range(2))
    clock = Clock()

    def bound(blobs: list[bytes]) -> BoundCodec:
        return BoundCodec(EnvelopeCodec(wrapper, blobs), audience="svc", binding_key=BINDING_KEY, clock=clock)

    before, during, after = bound([old_blob]), bound([new_blob, old_blob]), bound([new_blob])
    plan = RotationPlan.from_key_ids(before.key_ids[0], after.key_ids[0], TTL)
    assert list(during.key_ids) == list(plan.phase(2).key_ids)
    assert check_fleet({"a": during.key_ids, "b": list(plan.phase(1).key_ids)}).safe
    assert check_fleet({"a": during.key_ids, "b": before.key_ids}).unsafe_instances == ("a",)
    moved = reseal(during, before.seal(b"s", principal="p"))
    assert after.unseal(moved, principal="p") == b"s"


def test_cli_plan_from_key_ids(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["rotate", "plan", "--old-id", "3d7ec38c", "--new-id", "9A41F0B2", "--json"], capsys)
    assert (code, err) == (0, "")  # no secrets, so no warning
    assert [p["key_ids"] for p in json.loads(out)["phases"]] == [
        ["3d7ec38c", "9a41f0b2"], ["9a41f0b2", "3d7ec38c"], ["9a41f0b2"]
    ]
    code, _, err = _run(["rotate", "plan", "--old-id", "3d7ec38c", "--generate-new"], capsys)
    assert code == 2
    assert "--old-id and --new-id go together" in err
