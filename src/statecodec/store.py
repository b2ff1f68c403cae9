"""The single-use store seam: what `SingleUse` asks a store, and `MemoryStore`, the store of one process.

Threat: a store that answers from a clock, a lifetime or a key other than the fleet's reopens replays and lifts
revocations. Every decision here is taken inside the store, in one atomic step, with the store's own clock: the
claim also answers revocation and expiry (docs/formats.md, "Single use"). A store records whose it is (a
fingerprint of the store key and namespace) and the longest token lifetime it has seen, so that a revocation lasts
as long as any token it covers. A store that cannot answer raises `StoreUnreachable`; a store that answers with an
error (full, out of memory, no permission) raises `StoreError`, which refuses in every mode.
"""

from __future__ import annotations

import enum
import heapq
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from statecodec.errors import ConfigurationError, StoreError

__all__ = ["REDIS_SCHEMES", "Claim", "Hello", "MemoryStore", "Store", "Verdict", "check_owner"]

# The URL schemes of a Redis store (statecodec.redis_store): a server, over TLS, a socket, a Cluster by any node.
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")


class Claim(enum.Enum):
    """The store's answer to a claim."""

    FIRST = "first"  # never claimed before: accept
    USED = "used"  # claimed before: a replay
    REVOKED = "revoked"  # one of its scopes was revoked at or after its issue time
    EXPIRED = "expired"  # past its own expiry (plus the clock skew), by the store's clock
    FORGOTTEN = "forgotten"  # minted under another store epoch: the store lost its memory since
    FOREIGN = "foreign"  # the store belongs to another store key or namespace


@dataclass(frozen=True, slots=True)
class Verdict:
    claim: Claim
    epoch: bytes  # the store's epoch now: the instance mints under it from then on
    now_ms: int  # the store's clock
    malformed: tuple[str, ...] = ()  # revocation entries (scope digests, hex) that could not be read: skipped


@dataclass(frozen=True, slots=True)
class Hello:
    owner: str  # "new" (this hello began the store's memory), "ok", or "foreign"
    epoch: bytes
    now_ms: int


def check_owner(owner: str, where: str) -> None:
    """The one message for a store that is not this configuration's (`owner` from the store's fingerprint check)."""
    if owner == "foreign":
        raise ConfigurationError(
            f"the store at {where} belongs to another store key or namespace; set STATECODEC_STORE_KEY and "
            "STATECODEC_STORE_NAMESPACE to the values the servers use"
        )
    if owner == "unused":
        raise ConfigurationError(
            f"no server has used the store at {where} under this store key and namespace: a revocation there would "
            "reach no one; check STATECODEC_STORE_URL and STATECODEC_STORE_NAMESPACE, or start a server first"
        )


@runtime_checkable
class Store(Protocol):
    """Shared state behind `SingleUse`; each method is one atomic step on the store's clock (milliseconds).

    - `hello`: begin the store's memory (a random epoch, the fingerprint) if it has none; raise the recorded
      longest lifetime and skew to `lifetime_ms` and `skew_ms`; answer whose the store is ("new", "ok",
      "foreign"), its epoch and its time. A Redis store also refuses an evicting memory policy here.
    - `claim`: in order, FOREIGN (another fingerprint) / FORGOTTEN (no memory, which it then begins, or another
      epoch) / EXPIRED (``expires_ms <= now``) / REVOKED (a scope revoked at an instant >= ``issued_ms``) / FIRST
      (the claim is kept until ``expires_ms``) / USED; it raises the recorded lifetime and skew as hello does.
    - `revoke`: revoke `scope` at ``now + skew`` until ``now + 2 skew + lifetime`` (the recorded longest, or the
      arguments' if longer), keeping the later of each for a scope revoked before; the instant (ms).
    - `lift`: delete the revocation of `scope`; whether there was one.
    """

    where: str
    namespace: str

    async def hello(self, *, fingerprint: bytes, lifetime_ms: int, skew_ms: int) -> Hello: ...

    async def claim(
        self, *, fingerprint: bytes, key: bytes, epoch: bytes, issued_ms: int, expires_ms: int, skew_ms: int,
        lifetime_ms: int, scopes: Sequence[bytes],
    ) -> Verdict: ...

    async def revoke(self, scope: bytes, *, fingerprint: bytes, skew_ms: int) -> int: ...

    async def lift(self, scope: bytes, *, fingerprint: bytes) -> bool: ...

    async def health(self, *, fingerprint: bytes) -> dict[str, object]: ...

    async def aclose(self) -> None: ...


class MemoryStore:
    """`Store` for one process, on its own clock: at most `max_entries` live claims and revocations together,
    each dropped when it expires. Full is an answered error (`StoreError`): it refuses in every mode."""

    where = "memory"

    def __init__(
        self, *, max_entries: int = 1_000_000, namespace: str = "statecodec", clock: Callable[[], float] = time.time
    ) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ConfigurationError("max_entries must be a positive int")
        self.namespace, self._max, self._clock = namespace, max_entries, clock
        self._meta: tuple[bytes, bytes] | None = None  # (epoch, fingerprint): the memory began
        self._lifetime = self._skew = 0  # the longest token lifetime and clock skew seen
        self._claims: dict[bytes, int] = {}  # claim key -> until
        self._revoked: dict[bytes, tuple[int, int]] = {}  # scope -> (at, until)
        self._expiry: list[tuple[int, bool, bytes]] = []  # heap of (until, is a revocation, key)
        self._lock = threading.Lock()  # a guard's private loop thread and a server's loop may share one store

    def _now(self) -> int:
        """The store's clock, after dropping what expired by it."""
        now = int(self._clock() * 1000)
        while self._expiry and self._expiry[0][0] <= now:
            until, revocation, key = heapq.heappop(self._expiry)
            if revocation and self._revoked.get(key, (0, -1))[1] == until:
                del self._revoked[key]
            elif not revocation and self._claims.get(key) == until:
                del self._claims[key]
        return now

    def _keep(self, until: int, revocation: bool, key: bytes, new: bool) -> None:
        if new and len(self._claims) + len(self._revoked) >= self._max:
            raise StoreError(f"the in-process store holds {self._max} live entries, its max_entries")
        heapq.heappush(self._expiry, (until, revocation, key))

    def _owner(self, fingerprint: bytes) -> str:
        return "unused" if self._meta is None else "ok" if self._meta[1] == fingerprint else "foreign"

    def _record(self, fingerprint: bytes, lifetime_ms: int, skew_ms: int) -> str:
        owner = "new" if self._meta is None else self._owner(fingerprint)
        if self._meta is None:
            self._meta = (secrets.token_bytes(8), fingerprint)
        if owner != "foreign":
            self._lifetime, self._skew = max(self._lifetime, lifetime_ms), max(self._skew, skew_ms)
        return owner

    async def hello(self, *, fingerprint: bytes, lifetime_ms: int, skew_ms: int) -> Hello:
        with self._lock:
            now = self._now()
            owner = self._record(fingerprint, lifetime_ms, skew_ms)
            return Hello(owner, self._meta[0] if self._meta else b"", now)

    async def claim(
        self, *, fingerprint: bytes, key: bytes, epoch: bytes, issued_ms: int, expires_ms: int, skew_ms: int,
        lifetime_ms: int, scopes: Sequence[bytes],
    ) -> Verdict:
        with self._lock:
            now = self._now()
            owner = self._record(fingerprint, max(lifetime_ms, expires_ms - issued_ms), skew_ms)
            current = self._meta[0] if self._meta else b""
            if owner == "foreign":
                return Verdict(Claim.FOREIGN, current, now)
            if owner == "new" or epoch != current:
                return Verdict(Claim.FORGOTTEN, current, now)
            if expires_ms <= now:
                return Verdict(Claim.EXPIRED, current, now)
            if any(self._revoked.get(scope, (-1, 0))[0] >= issued_ms for scope in scopes):
                return Verdict(Claim.REVOKED, current, now)
            if key in self._claims:
                return Verdict(Claim.USED, current, now)
            self._keep(expires_ms, False, key, True)
            self._claims[key] = expires_ms
            return Verdict(Claim.FIRST, current, now)

    async def revoke(self, scope: bytes, *, fingerprint: bytes, skew_ms: int) -> int:
        with self._lock:
            check_owner(self._owner(fingerprint), self.where)
            now = self._now()
            skew = max(skew_ms, self._skew)
            old = self._revoked.get(scope, (0, 0))
            at, until = max(now + skew, old[0]), max(now + 2 * skew + self._lifetime, old[1])
            self._keep(until, True, scope, scope not in self._revoked)
            self._revoked[scope] = (at, until)
            return at

    async def lift(self, scope: bytes, *, fingerprint: bytes) -> bool:
        with self._lock:
            check_owner(self._owner(fingerprint), self.where)
            return self._revoked.pop(scope, None) is not None

    async def health(self, *, fingerprint: bytes) -> dict[str, object]:
        with self._lock:
            self._now()
            owner, count = self._owner(fingerprint), len(self._revoked)
            return {"store": "memory", "owner": owner, "claims": len(self._claims), "revocations": count}

    async def aclose(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"MemoryStore(max_entries={self._max})"
