"""Key rotation without dropped rounds: a three-phase plan, a fleet check, and re-sealing.

Threat: during a rolling deploy, the new key promoted before every instance verifies it, or the old key retired while
its tokens live, drops the client's next round. The plan orders the phases so neither happens; `judge` proves for
every step, from the key ids instances report (never keys), that none can mint what another would refuse.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from statecodec._settings import DEFAULT_FUTURE_SKEW, MAX_FUTURE_SKEW, MAX_TTL, seconds
from statecodec._types import Codec
from statecodec.errors import ConfigurationError
from statecodec.keys import KeyRing

__all__ = [
    "Fleet", "Member", "RotationPlan", "check_fleet", "early_drop", "judge", "key_file_phase", "next_step",
    "parse_fleet", "phase_ring", "pulled_ids", "reseal",
]

T = TypeVar("T")
_MAX_INSTANCES = 100_000
_SUMMARIES = ("every instance learns to verify the new key; old still mints",
              "the new key mints; tokens under the old key keep verifying",
              "the old key is retired; its tokens have all expired")


def phase_ring(phase: int, old: T, new: T) -> tuple[T, ...]:
    """The ring of `phase` (1 to 3) of a rotation from `old` to `new`, primary first: the one order of the phases."""
    return ((old, new), (new, old), (new,))[phase - 1]


@dataclass(frozen=True)
class Phase:
    """One configuration to roll out everywhere, `wait_after_previous` seconds at least after the previous one."""

    number: int
    key_ids: tuple[str, ...]
    wait_after_previous: float
    summary: str
    keys: KeyRing | None = field(default=None, repr=False)  # secret

    def env_value(self) -> str:
        """The exact ``STATECODEC_KEYS`` value for this phase. Secret."""
        if self.keys is None:
            raise ConfigurationError("this plan was built from key ids; it holds no keys to render")
        return self.keys.to_text()


class RotationPlan:
    """Rotate from `old` to `new` (secrets; `from_key_ids` for keys a KMS or Vault holds) in three phases, each fully
    rolled out before the next: ``[old, new]``, ``[new, old]``, then ``[new]`` (docs/rotation.md)."""

    __slots__ = ("future_skew", "phases", "ttl")

    def __init__(self, old: bytes, new: bytes, ttl: float, *, future_skew: float = DEFAULT_FUTURE_SKEW) -> None:
        try:
            ring = KeyRing([old, new])  # checks both keys; refuses the same key twice and colliding key ids
        except ConfigurationError as exc:  # KeyRing names the keys by position; here they have names
            message = str(exc).replace("key 0", "the old key").replace("key 1", "the new key")
            raise ConfigurationError(message) from None
        rings = (ring, *(KeyRing(phase_ring(phase, old, new)) for phase in (2, 3)))
        self._build(*ring.key_ids, ttl=ttl, future_skew=future_skew, rings=rings)

    @classmethod
    def from_key_ids(cls, old: str, new: str, ttl: float, *, future_skew: float = DEFAULT_FUTURE_SKEW) -> RotationPlan:
        """A plan over key ids only, for codecs whose key material is not in the process."""
        old, new = _check_key_id("old", old), _check_key_id("new", new)
        if old == new:
            raise ConfigurationError("old and new are the same key id; rotate to a new key")
        self = cls.__new__(cls)
        self._build(old, new, ttl=ttl, future_skew=future_skew, rings=(None, None, None))
        return self

    def _build(self, old: str, new: str, *, ttl: float, future_skew: float, rings: tuple[KeyRing | None, ...]) -> None:
        ttl = seconds("ttl", ttl, low=0, high=MAX_TTL, low_open=True)
        self.ttl, self.future_skew = ttl, seconds("future_skew", future_skew, low=0, high=MAX_FUTURE_SKEW)
        self.phases = tuple(Phase(n, phase_ring(n, old, new), ttl + future_skew if n == 3 else 0, summary, ring)
                            for n, summary, ring in zip((1, 2, 3), _SUMMARIES, rings, strict=True))


@dataclass(frozen=True)
class FleetFinding:
    """A key some instances cannot verify: an instance's primary, or (`instance` None) an in-flight key."""

    instance: str | None
    key_id: str
    refused_by: tuple[str, ...]
    in_flight: bool = False

    def __str__(self) -> str:
        others = ", ".join(self.refused_by)
        if self.in_flight:
            return f"tokens under in-flight key {self.key_id} would be refused by: {others}"
        return f"{self.instance} mints under {self.key_id}, which {others} cannot verify"


@dataclass(frozen=True)
class FleetReport:
    """`safe` when no instance can mint (or has minted) a token another would refuse."""

    instances: tuple[str, ...]
    findings: tuple[FleetFinding, ...]

    @property
    def safe(self) -> bool:
        return not self.findings

    @property
    def unsafe_instances(self) -> tuple[str, ...]:
        return tuple(sorted({f.instance for f in self.findings if f.instance is not None}))

    def __str__(self) -> str:
        if self.safe:
            return f"safe: every one of {len(self.instances)} instances verifies every primary key"
        lines = [f"UNSAFE: {len(self.findings)} problem(s) across {len(self.instances)} instances"]
        return "\n".join(lines + [f"  - {f}" for f in self.findings])


def _check_key_id(where: str, value: object) -> str:
    if type(value) is not str or not re.fullmatch(r"[0-9a-f]{1,128}", value.lower()):
        raise ConfigurationError(f"{where}: a key id is a hex string such as 'a1b2c3d4' (codec.key_ids)")
    return value.lower()


def judge(members: Sequence[Member], in_flight: Iterable[str] = ()) -> FleetReport:
    """The one rule of every rotation step: each member verifies every member's primary and `in_flight` key id."""
    keys = [(m.name, m.accepts[0]) for m in members] + [(None, kid) for kid in dict.fromkeys(in_flight)]
    findings = tuple(FleetFinding(minter, kid, refused_by, in_flight=minter is None) for minter, kid in keys
                     if (refused_by := tuple(m.name for m in members if kid not in m.accepts)))
    return FleetReport(tuple(m.name for m in members), findings)


def check_fleet(reports: Mapping[str, Sequence[str]], *, in_flight: Iterable[str] = ()) -> FleetReport:
    """`judge` over each instance's ``codec.key_ids`` (never keys), primary first, and `in_flight` key ids, checked."""
    if not isinstance(reports, Mapping) or not 0 < len(reports) <= _MAX_INSTANCES:
        raise ConfigurationError(f"reports must map 1..{_MAX_INSTANCES} instance names to their key ids, primary first")
    rings: dict[str, tuple[str, ...]] = {}
    for name, ids in reports.items():
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence) or not ids:
            raise ConfigurationError(f"instance {name!r}: key ids must be a non-empty list, primary first")
        rings[name] = tuple(_check_key_id(f"instance {name!r}", i) for i in ids)
    if isinstance(in_flight, (str, bytes)):  # a lone id would be read as one key id per character
        raise ConfigurationError("in_flight must be a list of key ids")
    flying = [_check_key_id("in_flight", kid) for kid in in_flight]
    return judge([Member(name, ring, None) for name, ring in rings.items()], flying)


def parse_fleet(document: object) -> tuple[dict[str, list[str]], list[str]]:
    """(reports, in_flight) for `check_fleet`, which checks them, from the fleet JSON document."""
    if not (isinstance(document, dict) and set(document) <= {"instances", "in_flight"}
            and isinstance(document.get("instances", {}), dict) and isinstance(document.get("in_flight", []), list)):
        raise ConfigurationError('the fleet file must be {"instances": {"web-1": ["a1b2c3d4", ...], ...}, "in_flight": '
                                 "[...]}: each instance's key ids, primary first, and optional in-flight key ids")
    return document.get("instances", {}), document.get("in_flight", [])


def early_drop(
    current: Sequence[str], new: Sequence[str], demoted: Mapping[str, float], now: float, wait: float
) -> tuple[str, float] | None:
    """The one rule for dropping a key: (the first key id of `current` that `new` drops while its tokens may live,
    seconds still to wait), else None. The primary is never dropped (``inf``); another key only `wait` seconds after
    it stopped being primary, at `demoted[key id]` (absent: never primary), on the clock `now` is read from."""
    for kid in current:
        if kid in new:
            continue
        left = math.inf if kid == current[0] else demoted.get(kid, -math.inf) + wait - now
        if not left <= 0:  # written positively: a NaN waits
            return kid, left
    return None


def pulled_ids(text: str) -> frozenset[str]:
    """The key ids a key file's pull line names (`statecodec rotate pull`): the one override of `early_drop`."""
    lines = re.findall(r"^# statecodec pulled: ([0-9a-f]{8}(?: [0-9a-f]{8})*)$", text, re.MULTILINE)
    return frozenset(kid for line in lines for kid in line.split())


_MARKER = re.compile(r"^# statecodec rotation phase ([123]): ([0-9a-f]+) -> ([0-9a-f]+)$", re.MULTILINE)


def key_file_phase(text: str, ring: KeyRing) -> tuple[int, str, str]:
    """(phase, old key id, new key id) of a key file's marker line, or (0, the key id, "") for one key; a marker its
    keys do not match is refused."""
    ids, found = ring.key_ids, _MARKER.search(text)
    if found is None:
        if len(ids) != 1:
            raise ConfigurationError(f"it holds {len(ids)} keys and no rotation marker, so its phase is unknown: "
                                     "finish that rotation by hand (docs/rotation.md), then begin from one key")
        return 0, ids[0], ""
    phase, old, new = int(found[1]), found[2], found[3]
    if ids != phase_ring(phase, old, new):
        raise ConfigurationError(f"its keys [{', '.join(ids)}] are not those of its marker (phase {phase} of {old} -> "
                                 f"{new}): it was edited by hand; restore it, or rewrite it with one key")
    return phase, old, new


@dataclass(frozen=True)
class Member:
    """One instance: key ids primary first, its last refused reload, store times (of a registry entry)."""

    name: str
    accepts: tuple[str, ...]
    error: str | None
    loaded_ms: int = 0
    expires_ms: int = 0
    pulled: tuple[str, ...] = ()  # key ids it dropped for `statecodec rotate pull`


@dataclass(frozen=True)
class Fleet:
    now_ms: int  # the store's clock
    members: tuple[Member, ...]
    tokens_until_ms: Mapping[str, int]  # key id -> until when tokens under it may live
    pulled: Mapping[str, int] = field(default_factory=dict)  # key id -> when `statecodec rotate pull` recorded it


def marked(phase: int, old: str, new: str) -> str:
    """The marker line of `phase`, which `key_file_phase` reads back."""
    return f"# statecodec rotation phase {phase}: {old} -> {new}"


def next_step(phase: int, ids: Sequence[str], fleet: Fleet) -> tuple[list[str], float]:
    """(why the fleet may not leave `phase`, whose ring is `ids`, for the next; seconds to wait after that): a refused
    reload, and `judge` over the others and one on the next ring; a key the next ring drops waits, by the store's
    clock, until the tokens any instance (live or gone) sealed under it expired; a pulled key's never (refused)."""
    after = Member("the next phase", {1: tuple(ids[::-1]), 2: tuple(ids[:1])}.get(phase, tuple(ids)), None)
    live = [kid for kid, until in fleet.tokens_until_ms.items() if until > fleet.now_ms and kid not in fleet.pulled]
    ready = [member for member in fleet.members if member.error is None]
    report = judge([*ready, after], live)  # a token of `live` only `after` refuses: the wait below
    nobody = "no live instance reports to the fleet registry: set STATECODEC_RELOAD_INTERVAL, this store and namespace"
    blockers = [] if fleet.members else [f"{nobody} on the servers"]
    for member in fleet.members:
        problems = "; ".join(str(f) for f in report.findings if member.name in (f.instance, *f.refused_by))
        if member.error is not None:
            blockers.append(f"{member.name}: its last reload was refused: {member.error}")
        elif problems:
            blockers.append(f"{member.name} runs key ids [{', '.join(member.accepts)}] ({problems}): its key source "
                            "is not updated yet, or it has not reloaded it")
    # Every key the next phase drops waits, by the store's clock, for the tokens under it (an old key absent from the
    # registry: wiped, so it waits without end), whoever still accepts it: dropping it refuses them.
    until = {**dict.fromkeys(ids, math.inf), **fleet.tokens_until_ms}
    dropped = [kid for kid in dict.fromkeys([*ids, *live]) if kid not in after.accepts]
    return blockers, max([0.0, *((until[kid] - fleet.now_ms) / 1000 for kid in dropped)])


def reseal(codec: Codec, token: str) -> str:
    """Re-seal `token` under `codec`'s current primary key (`BoundCodec` keeps its claims); `InvalidToken` if it does
    not verify."""
    own = getattr(codec, "reseal", None)
    return str(own(token) if callable(own) else codec.seal(codec.unseal(token)))
