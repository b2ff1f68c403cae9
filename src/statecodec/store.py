"""The single-use store seam: what `SingleUse` asks a store, and `MemoryStore`, the store of one process.

Threat: a store that decides by an instance's clock, lifetime or key reopens replays and loses revocations. Each
decision is one atomic step on the store's own clock; a failure is a `StoreError` (statecodec.errors says which).
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import hmac
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple, Protocol, TypeVar, runtime_checkable

from statecodec.errors import ConfigurationError, StoreBusy, StoreError, StoreUnreachable

__all__ = ["REDIS_SCHEMES", "Hello", "MemoryStore", "Outcome", "Store", "Verdict", "bounded", "check_owner"]

T = TypeVar("T")

REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")  # a server, TLS, a socket, a Cluster


class Outcome(enum.Enum):
    """What the store decided of a claim (`Verdict.outcome`), in the order it decides."""

    FOREIGN = "foreign"  # the store belongs to another store key or namespace
    FORGOTTEN = "forgotten"  # minted under another epoch: the store lost its memory since, or has none yet
    EXPIRED = "expired"  # past the token's own expiry, by the store's clock
    REVOKED = "revoked"  # one of its scopes was revoked at or after its issue time
    FIRST = "first"  # never claimed: accept; kept until the token expires
    USED = "used"  # claimed before: a replay
    SAME = "same"  # claimed before by the same retry (retry-safe mode): `Verdict.result` is what it kept


class Verdict(NamedTuple):
    outcome: Outcome
    epoch: bytes  # the store's epoch: the instance mints under it from then on
    now_ms: int  # the store's clock
    malformed: tuple[str, ...] = ()  # revocation entries (scope digests, hex) that could not be read: skipped
    result: bytes = b""  # SAME: the sealed result kept beside the claim; empty while the first run has none
    node: str = ""  # the node that answered (host:port), when the store has several
    started_ms: int = 0  # SAME without a result: when the claim was made, by the store's clock (0: not recorded)


class Hello(NamedTuple):
    owner: str  # "new" (this call began the store's memory), "ok" or "foreign"
    epoch: bytes
    now_ms: int


async def bounded(store: Store, call: Awaitable[T]) -> T:
    """`call` to `store` under its one deadline; past it `StoreUnreachable`, but `StoreBusy` when this instance's own
    loop read the outcome late (a flood of requests here is no outage of the store: never accepted through)."""
    if store.deadline is None:  # a store whose calls never wait
        return await call
    end = asyncio.get_running_loop().time() + store.deadline
    try:
        async with asyncio.timeout_at(end):
            return await call
    except TimeoutError:
        failure = StoreUnreachable(f"the store at {store.where} did not answer within {store.deadline:g} s")
    except StoreUnreachable as exc:
        failure = exc
    if asyncio.get_running_loop().time() > end + store.deadline / 8:  # outside the handlers: nothing chained to either
        raise StoreBusy(f"the store at {store.where}: this instance was too busy to read its answer")
    raise failure


def check_owner(owner: str, where: str) -> None:
    """The one message for a store that is not this configuration's, or that no server has used."""
    if owner == "foreign":
        raise ConfigurationError(f"the store at {where} belongs to another store key or namespace; set "
                                 "STATECODEC_STORE_KEY and STATECODEC_STORE_NAMESPACE to the values the servers use")
    if owner == "unused":
        raise ConfigurationError(f"no server has used the store at {where} under this store key and namespace: a "
                                 "revocation there would reach no one; check the settings, or start a server first")


@runtime_checkable
class Store(Protocol):
    """Shared state behind `SingleUse`, in milliseconds of the store's clock."""

    where: str  # host:port, for messages; never a credential
    namespace: str

    @property
    def deadline(self) -> float | None: ...  # the most one call may take (s), `bounded` holds each; None: none waits

    async def hello(self, *, fingerprint: bytes, lifetime_ms: int, skew_ms: int, forms: Sequence[str]) -> Hello: ...
    async def claim(self, *, fingerprint: bytes, key: bytes, epoch: bytes, issued_ms: int, expires_ms: int,
                    lifetime_ms: int, skew_ms: int, scopes: Sequence[bytes], retry: bytes = b"") -> Verdict: ...
    async def keep(self, *, key: bytes, retry: bytes, result: bytes, within_ms: int) -> bool: ...
    async def revoke(self, scope: bytes, *, fingerprint: bytes, skew_ms: int) -> int: ...
    async def lift(self, scope: bytes, *, fingerprint: bytes) -> bool: ...
    async def health(self, *, fingerprint: bytes) -> dict[str, object]: ...
    async def aclose(self) -> None: ...


class MemoryStore:
    """`Store` for one process, on its own clock: at most `max_entries` live claims and revocations, and
    `max_kept_bytes` of kept answers (a client can make them large); full is a `StoreError`, refused in every mode."""

    where, deadline = "memory", None  # no call waits

    def __init__(self, *, max_entries: int = 1_000_000, max_kept_bytes: int = 64 << 20, namespace: str = "statecodec",
                 clock: Callable[[], float] = time.time) -> None:
        for name, limit in (("max_entries", max_entries), ("max_kept_bytes", max_kept_bytes)):
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ConfigurationError(f"{name} must be a positive int")
        self.namespace, self._max, self._clock = namespace, max_entries, clock
        self._max_kept, self._kept = max_kept_bytes, 0  # bytes of retry digests and kept answers: the limit, held
        self._meta: tuple[bytes, bytes] | None = None  # (epoch, fingerprint), once the memory began
        self._lifetime = self._skew = self._seen = 0  # the longest lifetime, largest skew, latest time it saw
        self._forms: dict[str, int] = {}  # each form an instance minted under -> when first recorded
        self._live: dict[bytes, tuple[int, int]] = {}  # b"c" + claim key or b"r" + scope -> (revoked at, until)
        self._expiry: list[tuple[int, bytes]] = []  # heap of (until, key)
        self._retries: dict[bytes, bytes] = {}  # a claim key -> its retry digest, then the sealed result beside it
        self._lock = threading.Lock()  # a codec's loop thread and a server's loop may share one store

    def _now(self, fingerprint: bytes, lifetime_ms: int = 0, skew_ms: int = 0) -> Hello:
        """(whose the store is, its epoch, its clock), after dropping what expired and recording the lifetime."""
        now = self._expire()
        owner = "unused" if self._meta is None else "ok" if self._meta[1] == fingerprint else "foreign"
        if owner == "ok" and now + max(skew_ms, self._skew) < self._seen:  # the clock went back:
            self._meta, self._seen = (secrets.token_bytes(8), fingerprint), now  # what it dropped may live: forget
        self._seen = max(self._seen, now)
        if lifetime_ms and owner != "foreign":
            self._meta = self._meta or (secrets.token_bytes(8), fingerprint)
            self._lifetime, self._skew = max(self._lifetime, lifetime_ms), max(self._skew, skew_ms)
        owner = "new" if owner == "unused" and lifetime_ms else owner
        return Hello(owner, self._meta[0] if self._meta else b"", now)

    def _expire(self) -> int:
        """The store's clock (ms), after dropping every claim, revocation and kept answer that expired by it."""
        now = int(self._clock() * 1000)
        while self._expiry and self._expiry[0][0] <= now:
            until, key = heapq.heappop(self._expiry)
            if self._live.get(key, (0, 0))[1] == until:
                del self._live[key]
                self._kept -= len(self._retries.pop(key, b""))
        return now

    def _keep(self, key: bytes, at: int, until: int) -> None:
        if key not in self._live and len(self._live) >= self._max:
            raise StoreError(f"the in-process store holds {self._max} live entries, its max_entries")
        heapq.heappush(self._expiry, (until, key))
        self._live[key] = (at, until)

    async def hello(self, *, fingerprint: bytes, lifetime_ms: int, skew_ms: int, forms: Sequence[str] = ()) -> Hello:
        with self._lock:
            hello = self._now(fingerprint, max(lifetime_ms, 1), skew_ms)
            self._forms = {form: hello.now_ms for form in forms if hello.owner != "foreign"} | self._forms  # first kept
            return hello

    async def claim(self, *, fingerprint: bytes, key: bytes, epoch: bytes, issued_ms: int, expires_ms: int,
                    lifetime_ms: int, skew_ms: int, scopes: Sequence[bytes], retry: bytes = b"") -> Verdict:
        with self._lock:
            owner, current, now = self._now(fingerprint, max(lifetime_ms, expires_ms - issued_ms, 1), skew_ms)
            if owner == "foreign" or owner == "new" or epoch != current:
                return Verdict(Outcome.FOREIGN if owner == "foreign" else Outcome.FORGOTTEN, current, now)
            if expires_ms <= now:
                return Verdict(Outcome.EXPIRED, current, now)
            if any(self._live.get(b"r" + scope, (-1, 0))[0] >= issued_ms for scope in scopes):
                return Verdict(Outcome.REVOKED, current, now)
            if b"c" + key in self._live:
                held, started = self._retries.get(b"c" + key, b""), self._live[b"c" + key][0]
                if retry and hmac.compare_digest(held[: len(retry)], retry):
                    result = held[len(retry) :]
                    return Verdict(Outcome.SAME, current, now, result=result, started_ms=0 if result else started)
                return Verdict(Outcome.USED, current, now)
            self._keep(b"c" + key, now, expires_ms)  # when its step began
            if retry:
                self._retries[b"c" + key] = retry
                self._kept += len(retry)
            return Verdict(Outcome.FIRST, current, now)

    async def keep(self, *, key: bytes, retry: bytes, result: bytes, within_ms: int) -> bool:
        """Keep `result` by `retry`'s claim until the token expires; False if not its claim, or over `within_ms` old."""
        with self._lock:
            now = self._expire()  # a claim past its token's expiry keeps nothing, as in Redis
            if self._retries.get(b"c" + key) != retry or now > self._live[b"c" + key][0] + within_ms:
                return False
            if self._kept + len(result) > self._max_kept:
                raise StoreError(f"the in-process store holds {self._kept} bytes of kept answers; {len(result)} more "
                                 f"would pass its max_kept_bytes ({self._max_kept})")
            self._retries[b"c" + key] = retry + result
            self._kept += len(result)
            return True

    async def revoke(self, scope: bytes, *, fingerprint: bytes, skew_ms: int) -> int:
        with self._lock:
            owner, _, now = self._now(fingerprint)
            check_owner(owner, self.where)
            skew, old = max(skew_ms, self._skew), self._live.get(b"r" + scope, (0, 0))
            at = max(now + skew, old[0])
            self._keep(b"r" + scope, at, max(now + 2 * skew + self._lifetime, old[1]))
            return at

    async def lift(self, scope: bytes, *, fingerprint: bytes) -> bool:
        with self._lock:
            check_owner(self._now(fingerprint).owner, self.where)
            return self._live.pop(b"r" + scope, None) is not None

    async def health(self, *, fingerprint: bytes) -> dict[str, object]:
        with self._lock:
            owner, claims = self._now(fingerprint).owner, sum(key[:1] == b"c" for key in self._live)
            return {"store": "memory", "owner": owner, "claims": claims, "revocations": len(self._live) - claims,
                    "forms": dict(self._forms) if owner == "ok" else {}}

    async def aclose(self) -> None:
        pass  # nothing to release

    def __repr__(self) -> str:
        return f"MemoryStore(max_entries={self._max})"

