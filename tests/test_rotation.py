"""Rotation: the plan never drops an in-flight round; check_fleet catches every ordering that would."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecodec import AESGCMCodec, BoundCodec, ConfigurationError, InvalidToken, KeyRing
from statecodec.keys import format_keys, parse_keys
from statecodec.rotation import FleetReport, Phase, RotationPlan, check_fleet, parse_fleet, reseal
from tests.plugins import Clock
from tests.secrecy import COLLIDING_SECRETS, refused

OLD = bytes(range(32))
NEW = bytes(range(64, 96))
BINDING_KEY = bytes(range(100, 132))
TTL = 600
SKEW = 60
T0 = 1_767_225_600
PLAN = RotationPlan(OLD, NEW, TTL, future_skew=SKEW)


RINGS: dict[str, list[bytes]] = {"old": [OLD], "p1": [OLD, NEW], "p2": [NEW, OLD], "p3": [NEW]}
CLOCK = Clock(T0)
CODECS = {
    name: BoundCodec(AESGCMCodec(keys), audience="svc", binding_key=BINDING_KEY, ttl=TTL, future_skew=SKEW,
                     clock=CLOCK)
    for name, keys in RINGS.items()
}  # fmt: skip


# --- RotationPlan ------------------------------------------------------------------------------


def test_plan_phases_and_configuration_values() -> None:
    old_id, new_id = KeyRing([OLD]).key_ids[0], KeyRing([NEW]).key_ids[0]
    assert [p.key_ids for p in PLAN.phases] == [(old_id, new_id), (new_id, old_id), (new_id,)]
    assert [parse_keys(p.env_value()) for p in PLAN.phases] == [[OLD, NEW], [NEW, OLD], [NEW]]
    assert [p.wait_after_previous for p in PLAN.phases] == [0, 0, TTL + SKEW]
    by_ids = RotationPlan.from_key_ids("A1B2C3D4", "e5f6a7b8", 300)
    assert [p.key_ids for p in by_ids.phases] == [("a1b2c3d4", "e5f6a7b8"), ("e5f6a7b8", "a1b2c3d4"), ("e5f6a7b8",)]
    with pytest.raises(ConfigurationError, match="holds no keys"):
        by_ids.phases[0].env_value()


@pytest.mark.parametrize(
    ("old", "new", "ttl", "fragment"),
    [
        (OLD, OLD, TTL, "the new key duplicates the old key"),
        (*COLLIDING_SECRETS, TTL, "the new key and the old key are different keys .* generate another key"),
        (b"short", NEW, TTL, "the old key is 5 bytes"),
        (OLD, b"a" * 40, TTL, "the new key has fewer than"),
        ("zz", "aa", TTL, "hex"),
        ("aa", "AA", TTL, "same key id"),
        (OLD, NEW, 0, "ttl must be a number of seconds more than 0"),
        (OLD, NEW, float("nan"), "ttl must be a number of seconds"),
        ("aa", "bb", True, "ttl must be a number of seconds"),
    ],
)
def test_plan_misconfiguration(old: Any, new: Any, ttl: float, fragment: str) -> None:
    plan = RotationPlan.from_key_ids if isinstance(old, str) else RotationPlan
    assert re.search(fragment, refused(lambda: plan(old, new, ttl), *[k for k in (old, new) if isinstance(k, bytes)]))


def test_plans_and_phases_never_yield_their_secrets() -> None:
    assert format_keys([OLD]) not in repr(PLAN) + repr(PLAN.phases)
    for holder in (PLAN, *PLAN.phases):
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            with pytest.raises(TypeError):
                pickle.dumps(holder, protocol=protocol)
        with pytest.raises(TypeError):
            copy.deepcopy(holder)
        if isinstance(holder, Phase):
            with pytest.raises(TypeError, match="not picklable"):
                dataclasses.asdict(holder)
    plain = dataclasses.asdict(RotationPlan.from_key_ids("a1b2c3d4", "e5f6a7b8", TTL).phases[0])
    assert (plain["key_ids"], plain["keys"]) == (("a1b2c3d4", "e5f6a7b8"), None)


# --- check_fleet, reseal -----------------------------------------------------------------------


def test_check_fleet_names_every_instance_that_could_mint_an_unverifiable_token() -> None:
    report = check_fleet({"a": ["01", "02"], "b": ["02", "01"], "c": ["02"], "d": ["01"]})
    assert report.unsafe_instances == ("a", "b", "c", "d")
    assert {f.instance: f.refused_by for f in report.findings} == {"a": ("c",), "b": ("d",), "c": ("d",), "d": ("c",)}
    assert "c cannot verify" in str(report)


@pytest.mark.parametrize(
    ("reports", "in_flight"),
    [({}, []), ({"a": []}, []), ({"a": "01"}, []), ({"a": ["xyz"]}, []), (["a"], []), ({"a": [1]}, []),
     ({"a": ["01"]}, "01"), ({"a": ["01"]}, ["xyz"])],
)  # fmt: skip
def test_check_fleet_refuses_unreadable_reports(reports: Any, in_flight: Any) -> None:
    with pytest.raises(ConfigurationError):
        check_fleet(reports, in_flight=in_flight)


def test_fleet_documents_are_read_strictly() -> None:
    def check(document: object) -> FleetReport:  # as `statecodec rotate check` reads a fleet file
        reports, in_flight = parse_fleet(document)
        return check_fleet(reports, in_flight=in_flight)

    assert check({"instances": {"a": ["01"]}, "in_flight": ["01"]}).safe
    bad: object
    for bad in ([], {}, {"instances": []}, {"instances": {"a": ["01"]}, "x": 1}, {"instances": {}, "in_flight": "01"}):
        with pytest.raises(ConfigurationError):
            check(bad)


def test_reseal_moves_a_token_to_the_new_primary_keeping_bound_claims() -> None:
    moved = reseal(AESGCMCodec([NEW, OLD]), AESGCMCodec([OLD]).seal(b"stored"))
    assert AESGCMCodec([NEW]).unseal(moved) == b"stored"
    CLOCK.now = T0
    token = CODECS["p1"].seal(b"s", principal="p")
    CLOCK.now += TTL - 1
    moved = reseal(CODECS["p2"], token)
    assert CODECS["p3"].unseal(moved, principal="p") == b"s"
    CLOCK.now += 1
    with pytest.raises(InvalidToken, match="expired"):  # the claims came along: the expiry did not restart
        CODECS["p3"].unseal(moved, principal="p")


# --- rolling-deploy simulation -----------------------------------------------------------------

@dataclass
class Minted:
    token: str
    key_id: str
    iat: int
    flagged_at_mint: bool


@dataclass
class Fleet:
    """N instances, each running one ring configuration, with real tokens passing between them."""

    configs: list[str]
    tokens: list[Minted] = field(default_factory=list)
    drops: list[Minted] = field(default_factory=list)
    checks: list[bool] = field(default_factory=list)

    def check(self) -> Any:
        reports = {f"i{n}": CODECS[c].key_ids for n, c in enumerate(self.configs)}
        live = sorted({t.key_id for t in self.tokens if CLOCK.now < t.iat + TTL})
        report = check_fleet(reports, in_flight=live)
        self.checks.append(report.safe)
        return report

    def mint(self, i: int) -> None:
        report = self.check()
        codec = CODECS[self.configs[i]]
        token = codec.seal(b"round-state", principal="user", context={"tool": "deploy"})
        self.tokens.append(Minted(token, codec.key_ids[0], int(CLOCK.now), f"i{i}" in report.unsafe_instances))

    def present(self, t: Minted, j: int) -> None:
        report = self.check()
        live = CLOCK.now < t.iat + TTL
        try:
            CODECS[self.configs[j]].unseal(t.token, principal="user", context={"tool": "deploy"})
            reason = None
        except InvalidToken as exc:
            reason = exc.reason.value
        assert reason in (None, "expired", "unknown_key")
        if reason is None:
            assert live
        elif live:  # a live token was dropped: check_fleet must have said so before
            assert reason == "unknown_key"
            assert t.flagged_at_mint or not report.safe
            self.drops.append(t)

    def traffic(self, data: st.DataObject) -> None:
        for _ in range(data.draw(st.integers(0, 3), label="events")):
            kind = data.draw(st.sampled_from(["mint", "present", "tick"]), label="kind")
            if kind == "mint":
                self.mint(data.draw(st.integers(0, len(self.configs) - 1), label="minter"))
            elif kind == "present" and self.tokens:
                t = data.draw(st.sampled_from(self.tokens), label="token")
                self.present(t, data.draw(st.integers(0, len(self.configs) - 1), label="verifier"))
            elif kind == "tick":
                CLOCK.now += data.draw(st.integers(0, TTL // 3), label="seconds")

    def roll_out(self, data: st.DataObject, config: str) -> None:
        for i in data.draw(st.permutations(range(len(self.configs))), label=f"order {config}"):
            self.configs[i] = config
            self.traffic(data)

    def replay_all(self) -> None:
        for t in list(self.tokens):
            for j in range(len(self.configs)):
                self.present(t, j)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 5), st.data())
def test_following_the_plan_never_drops_a_round_in_any_order(n: int, data: st.DataObject) -> None:
    CLOCK.now = T0
    fleet = Fleet(["old"] * n)
    fleet.traffic(data)
    fleet.roll_out(data, "p1")
    fleet.roll_out(data, "p2")
    fleet.replay_all()
    CLOCK.now += PLAN.phases[2].wait_after_previous
    fleet.roll_out(data, "p3")
    fleet.replay_all()
    assert fleet.drops == []
    assert all(fleet.checks)  # check_fleet agreed at every step that the fleet was safe


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 5), st.data())
def test_promoting_the_new_key_first_is_caught_before_it_drops_a_token(n: int, data: st.DataObject) -> None:
    CLOCK.now = T0
    fleet = Fleet(["old"] * n)
    for step, i in enumerate(data.draw(st.permutations(range(n)), label="promotion order")):
        fleet.configs[i] = "p2"  # skipping phase 1
        report = fleet.check()
        if step < n - 1:  # caught the moment the first instance is promoted, naming exactly the promoted ones
            assert set(report.unsafe_instances) == {f"i{k}" for k, c in enumerate(fleet.configs) if c == "p2"}
        fleet.mint(i)  # the promoted instance mints under the new key
        fleet.traffic(data)
    fleet.replay_all()
    # Only new-key tokens can drop, and check_fleet had named their minter before each was minted.
    assert all(t.key_id == CODECS["p2"].key_ids[0] and t.flagged_at_mint for t in fleet.drops)


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 5), st.data())
def test_retiring_the_old_key_early_is_caught_by_the_in_flight_check(n: int, data: st.DataObject) -> None:
    CLOCK.now = T0
    fleet = Fleet(["p1"] * n)
    fleet.mint(0)  # an old-key token, live when phase 3 starts too early
    fleet.roll_out(data, "p2")
    fleet.roll_out(data, "p3")  # no wait after phase 2
    report = fleet.check()
    if CLOCK.now < fleet.tokens[0].iat + TTL:
        assert any(f.in_flight for f in report.findings)
    fleet.replay_all()


def test_promoting_first_drops_a_round_that_check_fleet_flagged() -> None:
    CLOCK.now = T0
    fleet = Fleet(["p2", "old"])
    assert fleet.check().unsafe_instances == ("i0",)
    fleet.mint(0)
    fleet.present(fleet.tokens[0], 1)
    assert fleet.drops == fleet.tokens


def test_a_step_waits_for_every_live_key_the_next_phase_drops_whoever_accepts_it() -> None:
    from statecodec.rotation import Fleet, Member, next_step

    # Both instances accept z, whose tokens (minted by an instance that left) live 600 s more: retiring it now would
    # refuse them, though no live instance lacks it.
    members = tuple(Member(name, ("bb", "aa", "cc"), None) for name in ("web-1", "web-2"))
    fleet = Fleet(1_000_000, members, {"aa": 1_000_000, "cc": 1_600_000})
    blockers, wait = next_step(2, ("bb", "aa", "cc"), fleet)
    assert wait == 600.0, (blockers, wait)


def test_a_pulled_keys_tokens_block_no_step_and_are_waited_for_by_none() -> None:
    from statecodec.rotation import Fleet, Member, next_step

    # Every instance dropped aa at once (`statecodec rotate pull aa`): its tokens, which may live 600 s more, are
    # refused on purpose, so neither `rotate status` nor `advance` waits on them.
    members = tuple(Member(name, ("bb",), None) for name in ("web-1", "web-2"))
    fleet = Fleet(1_000_000, members, {"aa": 1_600_000, "bb": 1_600_000}, pulled={"aa": 999_000})
    assert next_step(0, ("bb",), fleet) == ([], 0.0)
    unpulled = Fleet(1_000_000, members, {"aa": 1_600_000, "bb": 1_600_000})
    assert next_step(0, ("bb",), unpulled)[0]  # the same fleet without the pull: aa's tokens would be dropped
