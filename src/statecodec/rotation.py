"""Key rotation without dropped rounds: a three-phase plan, a fleet check, and re-sealing.

Threat: a token minted under a key that some instance cannot verify is
refused when the client's next round lands there. It happens in two ways
during a rolling deploy: promoting the new key to primary before every
instance has learned to verify it, and retiring the old key while tokens
minted under it are still live. The plan orders the phases so neither can
happen; `check_fleet` proves, from the key ids each instance reports (never
the keys), that the fleet as it stands cannot mint a token another instance
would refuse; `reseal` carries stored state over to the new primary key.

Everything here works for any codec with key ids (`.key_ids`, primary first):
key rings, envelopes, KMS and transit codecs alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from hmac import compare_digest

from statecodec._types import Codec
from statecodec.errors import ConfigurationError
from statecodec.keys import KeyRing, key_id_collision

__all__ = [
    "FleetFinding",
    "FleetReport",
    "Phase",
    "RotationPlan",
    "check_fleet",
    "parse_fleet",
    "reseal",
]

_KEY_ID = re.compile(r"[0-9a-f]{1,128}")
_MAX_INSTANCES = 100_000


@dataclass(frozen=True)
class Phase:
    """One configuration to roll out to every instance before the next phase starts.

    `wait_after_previous` is the least time, in seconds, between the moment
    the previous phase is fully rolled out and the start of this one. `keys`
    is the phase's `KeyRing` when the plan was built from keys (None when
    built from key ids): a ring never shows a secret in its `repr` and
    refuses to be copied, so `dataclasses.asdict` of such a phase raises
    `TypeError` instead of returning the secrets. A phase is never pickled.
    """

    number: int
    key_ids: tuple[str, ...]
    wait_after_previous: float
    summary: str
    keys: KeyRing | None = field(default=None, repr=False)

    @property
    def primary_key_id(self) -> str:
        return self.key_ids[0]

    def env_value(self) -> str:
        """The exact ``STATECODEC_KEYS`` value for this phase. Secret."""
        if self.keys is None:
            raise ConfigurationError("this plan was built from key ids; it holds no keys to render")
        return self.keys.to_text()

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("Phase holds secrets and is not picklable")


class RotationPlan:
    """Rotate from `old` to `new` in three phases, each fully rolled out before the next.

    1. ``[old, new]``: every instance learns to verify the new key; old still mints.
       Start any time.
    2. ``[new, old]``: new mints; tokens minted under old keep verifying.
       Start once every instance runs phase 1 (`check_fleet` confirms it).
    3. ``[new]``: old is retired. Start no sooner than `ttl` + `future_skew`
       seconds after the last instance runs phase 2, when every token minted
       under old has expired (the skew covers a minting clock running ahead).

    Stored state that must outlive phase 3 is re-sealed with `reseal` during
    phase 2. `old` and `new` are secrets (bytes) or, for codecs whose keys live
    elsewhere (KMS, Vault), their hex key ids via `RotationPlan.from_key_ids`.
    A plan holds those secrets in its phases, so it refuses pickling.
    """

    __slots__ = ("future_skew", "phases", "ttl")

    def __init__(self, old: bytes, new: bytes, ttl: float, *, future_skew: float = 60) -> None:
        old_ring, new_ring = _one_key("old", old), _one_key("new", new)
        if compare_digest(old_ring[0], new_ring[0]):
            raise ConfigurationError("old and new are the same key; rotate to a freshly generated key")
        if old_ring == new_ring:  # rings compare by key id
            raise ConfigurationError(key_id_collision("the new key", "the old key"))
        self._build(old_ring.key_ids[0], new_ring.key_ids[0], ttl, future_skew, (old_ring[0], new_ring[0]))

    @classmethod
    def from_key_ids(cls, old: str, new: str, ttl: float, *, future_skew: float = 60) -> RotationPlan:
        """A plan over key ids only, for codecs whose key material is not in the process."""
        old_id, new_id = _check_key_id("old", old), _check_key_id("new", new)
        if old_id == new_id:
            raise ConfigurationError("old and new are the same key id; rotate to a new key")
        self = cls.__new__(cls)
        self._build(old_id, new_id, ttl, future_skew, None)
        return self

    def _build(
        self, old: str, new: str, ttl: float, future_skew: float, keys: tuple[bytes, bytes] | None
    ) -> None:
        for name, value in (("ttl", ttl), ("future_skew", future_skew)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigurationError(f"{name} must be a finite number of seconds")
        if not (ttl > 0 and future_skew >= 0):
            raise ConfigurationError("ttl must be > 0 and future_skew >= 0 (seconds, as the codecs use)")
        self.ttl = ttl
        self.future_skew = future_skew
        rings = (KeyRing(keys), KeyRing(keys[::-1]), KeyRing(keys[1:])) if keys else (None, None, None)
        self.phases = (
            Phase(1, (old, new), 0, "every instance learns to verify the new key; old still mints", rings[0]),
            Phase(2, (new, old), 0, "the new key mints; tokens under the old key keep verifying", rings[1]),
            Phase(3, (new,), ttl + future_skew, "the old key is retired; its tokens have all expired", rings[2]),
        )

    def phase(self, number: int) -> Phase:
        if number not in (1, 2, 3):
            raise ValueError("phases are numbered 1, 2 and 3")
        return self.phases[number - 1]

    def earliest_start(self, number: int, previous_rolled_out_at: float) -> float:
        """The earliest safe start of phase `number`, given when the previous phase finished rolling out.

        Times are seconds since the epoch. Phase 1 has no predecessor: it may
        start at any time, and `previous_rolled_out_at` is returned as given.
        """
        return previous_rolled_out_at + self.phase(number).wait_after_previous

    def __repr__(self) -> str:
        ids = [p.key_ids for p in self.phases]
        return f"RotationPlan(phases={ids!r}, ttl={self.ttl}, future_skew={self.future_skew})"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("RotationPlan holds secrets and is not picklable")


@dataclass(frozen=True)
class FleetFinding:
    """An instance whose primary key some other instance cannot verify (or one that lacks an in-flight key)."""

    instance: str
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
    """`safe` when no instance can mint (or has minted) a token another instance would refuse."""

    instances: tuple[str, ...]
    findings: tuple[FleetFinding, ...]

    @property
    def safe(self) -> bool:
        return not self.findings

    @property
    def unsafe_instances(self) -> tuple[str, ...]:
        """Every instance that could mint a token another instance cannot verify, sorted."""
        return tuple(sorted({f.instance for f in self.findings if not f.in_flight}))

    def __str__(self) -> str:
        if self.safe:
            return f"safe: every one of {len(self.instances)} instances verifies every primary key"
        lines = [f"UNSAFE: {len(self.findings)} problem(s) across {len(self.instances)} instances"]
        lines.extend(f"  - {f}" for f in self.findings)
        return "\n".join(lines)


def _one_key(name: str, key: object) -> KeyRing:
    try:
        return KeyRing([key])  # type: ignore[list-item]
    except ConfigurationError as exc:
        # KeyRing names the key by position; here it has a name.
        raise ConfigurationError(f"{name} key: {str(exc).removeprefix('keys[0] ')}") from None


def _check_key_id(where: str, value: object) -> str:
    if type(value) is not str or not _KEY_ID.fullmatch(value.lower()):
        raise ConfigurationError(f"{where}: a key id is a hex string such as 'a1b2c3d4' (codec.key_ids)")
    return value.lower()


def check_fleet(
    reports: Mapping[str, Sequence[str]], *, in_flight: Iterable[str] = ()
) -> FleetReport:
    """Check the key ids every instance reports (primary first) for tokens that would be dropped.

    Each instance reports ``codec.key_ids``: the first id mints, every id
    verifies. The fleet is safe when every instance's primary is verifiable by
    every instance, and every key id in `in_flight` (keys that minted tokens
    still within their TTL, such as the old key during the TTL after phase 2)
    is verifiable by every instance. Only key ids are read, never keys.
    """
    if isinstance(reports, (str, bytes)) or not isinstance(reports, Mapping):
        raise ConfigurationError("reports must map each instance name to its key ids, primary first")
    if not reports:
        raise ConfigurationError("reports is empty: list every instance of the fleet")
    if len(reports) > _MAX_INSTANCES:
        raise ConfigurationError(f"more than {_MAX_INSTANCES} instances in one report")
    rings: dict[str, tuple[str, ...]] = {}
    for name, ids in reports.items():
        if type(name) is not str or not name:
            raise ConfigurationError("every instance needs a non-empty name")
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence) or not ids:
            raise ConfigurationError(f"instance {name!r}: key ids must be a non-empty list, primary first")
        ring = tuple(_check_key_id(f"instance {name!r}", i) for i in ids)
        if len(set(ring)) != len(ring):
            raise ConfigurationError(f"instance {name!r} lists a key id twice")
        rings[name] = ring
    verifiable = {name: frozenset(ring) for name, ring in rings.items()}
    findings: list[FleetFinding] = []
    for name, ring in rings.items():
        refused_by = tuple(other for other, ids in verifiable.items() if ring[0] not in ids)
        if refused_by:
            findings.append(FleetFinding(name, ring[0], refused_by))
    for kid in dict.fromkeys(_check_key_id("in_flight", k) for k in in_flight):
        refused_by = tuple(other for other, ids in verifiable.items() if kid not in ids)
        if refused_by:
            findings.append(FleetFinding("", kid, refused_by, in_flight=True))
    return FleetReport(tuple(rings), tuple(findings))


def parse_fleet(document: object) -> tuple[dict[str, list[str]], list[str]]:
    """Read the fleet JSON document: ``{"instances": {name: [key ids...]}, "in_flight": [ids]}``.

    ``in_flight`` is optional. Returns (reports, in_flight) for `check_fleet`.
    """
    if not isinstance(document, dict) or not isinstance(document.get("instances"), dict):
        raise ConfigurationError(
            'the fleet file must be a JSON object {"instances": {"web-1": ["a1b2c3d4", ...], ...}, '
            '"in_flight": [...]} with each instance\'s key ids, primary first'
        )
    unknown = set(document) - {"instances", "in_flight"}
    if unknown:
        raise ConfigurationError(f"unknown member(s) in the fleet file: {', '.join(sorted(unknown))}")
    in_flight = document.get("in_flight", [])
    if not isinstance(in_flight, list):
        raise ConfigurationError('"in_flight" must be a list of key ids')
    return document["instances"], in_flight


def reseal(codec: Codec, token: str) -> str:
    """Re-seal `token` under `codec`'s current primary key, keeping what it protects.

    A codec with a `reseal` method (`BoundCodec`) keeps its claims byte for
    byte, so the expiry does not restart; any other codec seals the same
    payload again. Raises `InvalidToken` when the token does not verify (or,
    for a `BoundCodec`, has expired or belongs to another audience or purpose).
    """
    own = getattr(codec, "reseal", None)
    if callable(own):
        result: str = own(token)
        return result
    return codec.seal(codec.unseal(token))
