"""Single use and revocation: a token is accepted at most once, and an operator can kill every flow in flight.

Threat: integrity, expiry and binding do not stop an exact replay. A client (or whoever copied its traffic) can
present the same genuine state twice and run the same step twice, and without shared state an operator cannot end
the flows of an offboarded user short of rotating the key for everyone. `SingleUse` stamps each state with a random
token id and its issue time, inside the sealed payload, and at unseal, only after every other check has passed:

1. refuses a stamp past ``ttl`` (`expired`) so that no token outlives its store entry;
2. refuses a token issued at or before a revocation of the presenting principal, of another scope of the request
   (``tenant=acme``), or of everything (`revoked`), from a local view of revocations the store keeps current: no
   store round trip per token;
3. claims the token id in the shared store in one atomic operation: the first claim wins, every later one is
   `replayed`, on every instance sharing the store; a store that lost its memory since the token was issued
   (flushed, restarted without persistence) cannot prove it unused, so it is refused (`store_unavailable`).

A store that does not answer within its timeout fails closed (`store_unavailable`), unless the operator opted into
availability first (``on_store_error="accept"``), which accepts without the single-use check and logs an error for
every such token. The store holds keyed digests (HMAC-SHA256 under the store key) of token ids and scope values,
never a token, a state or a principal; each entry expires with its token.

Stamp, 56 ASCII bytes before the state: ``su1.`` base64url(id(16) || issued-at(6) || tag(16)) ``.``, where
issued-at is milliseconds since the Unix epoch, big-endian, and tag is HMAC-SHA256(Ks, ``su1.`` || id || issued-at)
truncated to 16 bytes, Ks being HKDF-SHA256 of the store key under ``statecodec/v1/single-use/stamp``. The stamp
travels inside the sealed payload; its own tag means that, in any composition, no one without the store key can
mint a fresh stamp (a wrong tag is `seal`).
"""

from __future__ import annotations

import enum
import heapq
import hmac
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from statecodec._encoding import b64u_decode, b64u_encode
from statecodec._settings import named_errors, setting, text_or_file
from statecodec._types import Codec, HoldsSecrets, WrapsCodec
from statecodec.config import check_names, ttl_setting
from statecodec.errors import ConfigurationError, InvalidToken, Reason, StoreError
from statecodec.keys import KeyRing, derive_key, parse_keys

__all__ = ["Claim", "MemoryStore", "SingleUse", "SingleUseCodec", "Store", "store_from_settings"]

logger = logging.getLogger("statecodec.single_use")

STAMP_PREFIX = b"su1."
STAMP_LENGTH = 56
_ID_LENGTH = 16
_DIGEST_LENGTH = 16
_CLAIM_INFO = b"statecodec/v1/single-use/claim"
_STAMP_INFO = b"statecodec/v1/single-use/stamp"
_SCOPE_INFO = b"statecodec/v1/single-use/scope"
# Revoking everything must hold whatever store key an instance runs with, so its scope digest needs no key.
ALL_SCOPE = b"\x00" * _DIGEST_LENGTH

STORE_URL_VAR = "STATECODEC_STORE_URL"
STORE_KEY_VAR = "STATECODEC_STORE_KEY"
# The URL schemes of a Redis store (statecodec.redis_store): a server, over TLS, a socket, a Cluster by any node.
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")
_STORE_SETTINGS = ("STATECODEC_STORE_TIMEOUT", "STATECODEC_STORE_NAMESPACE", "STATECODEC_REVOCATION_STALENESS")
_MAX_STORE_FILE_BYTES = 4096


class Claim(enum.Enum):
    """What the store says of a token id it was asked to claim."""

    FIRST = "first"  # no one claimed it before: accept
    USED = "used"  # claimed before: a replay
    FORGOTTEN = "forgotten"  # the store lost its memory after the token was issued: it cannot be proven unused


@runtime_checkable
class Store(Protocol):
    """Shared state behind `SingleUse`. Each method fails with `StoreError` (never a URL or credential in its
    message) when the store does not answer within the store's own timeout.

    - `claim(key, issued_at, expires_at)`: atomically record `key` until `expires_at` (epoch seconds); `FIRST` for
      the one call that recorded it, `USED` for every other, `FORGOTTEN` when the store's memory began after
      `issued_at` (it was flushed or restarted without persistence since then).
    - `revoke(scope, at, expires_at)`: every instance must treat tokens of `scope` issued at or before `at` as
      revoked, until `expires_at`, when every such token has expired anyway.
    - `revoked_at(scopes)`: the latest revocation instant among `scopes` (0.0 when none), from a local view no
      older than the store's staleness bound.
    - `health()`: what an operator needs to see (no secret, no URL credentials).
    """

    def claim(self, key: bytes, issued_at: float, expires_at: float) -> Claim: ...

    def revoke(self, scope: bytes, at: float, expires_at: float) -> None: ...

    def revoked_at(self, scopes: Sequence[bytes]) -> float: ...

    def health(self) -> dict[str, object]: ...

    def close(self) -> None: ...


class MemoryStore:
    """`Store` for one process: thread-safe, entries expire with their tokens, at most `max_entries` live claims.

    Its memory begins when it is created, so a token issued before then (by an earlier run of the process) is
    `FORGOTTEN`. A claim that would exceed `max_entries` live tokens fails with `StoreError` (fail closed).
    """

    def __init__(self, *, max_entries: int = 1_000_000, clock: Callable[[], float] = time.time) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ConfigurationError("max_entries must be a positive int")
        self._clock, self._max = clock, max_entries
        self._started = int(clock() * 1000) / 1000  # stamps count whole milliseconds
        self._claims: dict[bytes, float] = {}
        self._expiry: list[tuple[float, bytes]] = []  # a heap: the next claim to expire first
        self._revocations: dict[bytes, tuple[float, float]] = {}  # scope -> (at, expires_at)
        self._lock = threading.Lock()

    def claim(self, key: bytes, issued_at: float, expires_at: float) -> Claim:
        with self._lock:
            now = self._clock()
            while self._expiry and self._expiry[0][0] <= now:
                _, old = heapq.heappop(self._expiry)
                if self._claims.get(old, now + 1) <= now:
                    del self._claims[old]
            if issued_at < self._started:
                return Claim.FORGOTTEN
            if key in self._claims:
                return Claim.USED
            if len(self._claims) >= self._max:
                raise StoreError(f"the in-process store holds {self._max} live tokens, its max_entries")
            self._claims[key] = expires_at
            heapq.heappush(self._expiry, (expires_at, key))
            return Claim.FIRST

    def revoke(self, scope: bytes, at: float, expires_at: float) -> None:
        with self._lock:
            previous = self._revocations.get(scope, (0.0, 0.0))
            self._revocations[scope] = (max(at, previous[0]), max(expires_at, previous[1]))

    def revoked_at(self, scopes: Sequence[bytes]) -> float:
        now = self._clock()
        with self._lock:
            found = [self._revocations.get(scope) for scope in scopes]
        return max((at for at, until in filter(None, found) if now < until), default=0.0)

    def health(self) -> dict[str, object]:
        with self._lock:
            return {"store": "memory", "live_claims": len(self._claims), "revocations": len(self._revocations)}

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"MemoryStore(max_entries={self._max})"


def _check_scopes(scopes: Mapping[str, str | None] | None) -> list[tuple[str, str]]:
    pairs = [(name, value) for name, value in (scopes or {}).items() if value is not None]
    for name, value in pairs:
        if type(name) is not str or type(value) is not str or not name:
            raise TypeError("scopes must map non-empty str names to str values (or None for no scope)")
    return pairs


class SingleUse(HoldsSecrets):
    """The single-use and revocation rules (module docstring), over any `Store`.

    `key` (32 bytes or more, e.g. from `statecodec keygen`, the same on every instance) keys the digests the store
    holds; `ttl` is the longest a stamped token may live, and should equal the lifetime the codec around it
    enforces; `clock_skew` is how far apart the fleet's clocks may be: a revocation also covers tokens stamped up
    to that many seconds after it, so a fast clock cannot carry an older token past it.
    """

    __slots__ = ("_claim_key", "_clock", "_scope_key", "_stamp_key", "clock_skew", "on_store_error", "store", "ttl")

    def __init__(
        self,
        store: Store,
        *,
        key: bytes | KeyRing,
        ttl: float = 600,
        clock_skew: float = 1.0,
        on_store_error: str = "refuse",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(store, Store):
            raise ConfigurationError("store must be a statecodec Store, e.g. MemoryStore() or RedisStore.from_url")
        if on_store_error not in ("refuse", "accept"):
            raise ConfigurationError("on_store_error must be 'refuse' (fail closed) or 'accept' (availability first)")
        for name, value in (("ttl", ttl), ("clock_skew", clock_skew)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e7:
                raise ConfigurationError(f"{name} must be a number of seconds in 0..10,000,000")
        if ttl <= 0:
            raise ConfigurationError("ttl must be more than 0 seconds")
        try:
            secret = (key if isinstance(key, KeyRing) else KeyRing([key]))[0]
        except ConfigurationError as exc:
            raise ConfigurationError(f"the store key {str(exc).removeprefix('keys[0] ')}") from None
        self._claim_key = derive_key(secret, _CLAIM_INFO)
        self._scope_key = derive_key(secret, _SCOPE_INFO)
        self._stamp_key = derive_key(secret, _STAMP_INFO)
        self.store, self.ttl, self.clock_skew, self.on_store_error = store, ttl, clock_skew, on_store_error
        self._clock = clock
        if on_store_error == "accept":
            logger.warning("single use is availability first: a token is accepted unchecked while the store is down")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, store: Store | None = None) -> SingleUse:
        """The `SingleUse` guard the environment describes: the store (`store_from_settings`), ``STATECODEC_STORE_KEY``
        (or ``_FILE``; a key from `statecodec keygen`, the same on every instance), ``STATECODEC_TTL``
        (`statecodec.config.ttl_setting`, which `security_from_env` reads too) and ``STATECODEC_STORE_ON_ERROR``
        (``refuse``, the default, or ``accept``). A misspelt ``STATECODEC_*`` name is refused, naming the closest."""
        settings = os.environ if environ is None else environ
        check_names(settings)
        text, source = text_or_file(settings, STORE_KEY_VAR, _MAX_STORE_FILE_BYTES, "it holds one key")
        if text is None:
            raise ConfigurationError(f"{STORE_KEY_VAR} is not set; set it to a key from `statecodec keygen`")
        with named_errors(source):
            keys = parse_keys(text)
            if len(keys) != 1:
                raise ConfigurationError(f"holds {len(keys)} keys; the store key is one key")
        on_error = setting(settings, "STATECODEC_STORE_ON_ERROR", required=False) or "refuse"
        if on_error not in ("refuse", "accept"):
            raise ConfigurationError(
                "STATECODEC_STORE_ON_ERROR must be refuse (fail closed, the default) or accept (availability first)"
            )
        ttl = ttl_setting(settings)
        return cls(store or store_from_settings(settings), key=keys[0], ttl=ttl, on_store_error=on_error)

    def stamp(self, state: bytes) -> bytes:
        """`state` behind a fresh stamp: a random token id and the issue time."""
        issued_ms = int(self._clock() * 1000)
        body = secrets.token_bytes(_ID_LENGTH) + issued_ms.to_bytes(6, "big")
        body += self._digest(self._stamp_key, STAMP_PREFIX + body)
        return STAMP_PREFIX + b64u_encode(body).encode("ascii") + b"." + state

    def consume(self, stamped: bytes, scopes: Mapping[str, str | None] | None = None) -> bytes:
        """The state behind a stamp this guard may accept once (checks: module docstring); `scopes` are the
        presenting request's revocable scopes, e.g. ``{"principal": user, "tenant": org}``."""
        pairs = _check_scopes(scopes)
        token_id, issued_at = self._parse(stamped)
        # No lower bound: only a holder of the store key can stamp, and the codec around checks its own claims.
        if not self._clock() < issued_at + self.ttl:
            raise InvalidToken(Reason.EXPIRED)
        scope_keys = [ALL_SCOPE, *(self._scope_digest(name, value) for name, value in pairs)]
        claim_key = self._digest(self._claim_key, token_id)
        try:
            revoked = issued_at <= self.store.revoked_at(scope_keys)
            claim = None if revoked else self.store.claim(claim_key, issued_at, issued_at + self.ttl + self.clock_skew)
        except Exception:  # deny on error: a store that raised anything cannot vouch for the token
            claim = revoked = None
        if revoked:
            raise InvalidToken(Reason.REVOKED)
        if claim is Claim.FIRST:
            return stamped[STAMP_LENGTH:]
        if claim is Claim.USED:
            raise InvalidToken(Reason.REPLAYED)
        if claim is None and self.on_store_error == "accept":
            logger.error("single-use store unavailable: token accepted WITHOUT the single-use check (on_store_error)")
            return stamped[STAMP_LENGTH:]
        if claim is Claim.FORGOTTEN:
            logger.warning("single-use store lost its memory since this token was issued (flush or restart)")
        raise InvalidToken(Reason.STORE_UNAVAILABLE)

    def revoke(self, scope: str | None = None, value: str | None = None) -> float:
        """Refuse, on every instance, each token issued until now (plus `clock_skew`) for ``scope=value``
        (``revoke("principal", "alice")``), or every token when both are None; returns the revocation instant."""
        if (scope is None) != (value is None):
            raise ConfigurationError("revoke takes a scope name and value, or neither to revoke everything")
        at = self._clock() + self.clock_skew
        digest = ALL_SCOPE
        if scope is not None and value is not None:
            _check_scopes({scope: value})
            digest = self._scope_digest(scope, value)
        self.store.revoke(digest, at, at + self.ttl + self.clock_skew)
        return at

    @staticmethod
    def _digest(key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, "sha256").digest()[:_DIGEST_LENGTH]

    def _scope_digest(self, name: str, value: str) -> bytes:
        # JSON keeps (name, value) pairs unambiguous and escapes what UTF-8 cannot encode.
        return self._digest(self._scope_key, json.dumps([name, value]).encode("ascii"))

    def _parse(self, stamped: bytes) -> tuple[bytes, float]:
        end = STAMP_LENGTH - 1
        if not (isinstance(stamped, bytes) and stamped[:4] == STAMP_PREFIX and stamped[end : end + 1] == b"."):
            raise InvalidToken(Reason.MALFORMED)
        body = b64u_decode(stamped[4:end].decode("ascii", "replace"))
        if not hmac.compare_digest(body[22:], self._digest(self._stamp_key, STAMP_PREFIX + body[:22])):
            raise InvalidToken(Reason.SEAL)
        return body[:_ID_LENGTH], int.from_bytes(body[_ID_LENGTH:22], "big") / 1000

    def __repr__(self) -> str:
        return f"SingleUse({self.store!r}, ttl={self.ttl}, on_store_error={self.on_store_error!r})"


class SingleUseCodec(WrapsCodec):
    """`codec` whose tokens are accepted at most once: seal stamps the state, unseal consumes the stamp only after
    the inner unseal (with its principal and context checks) passed. Keyword arguments go to the inner codec
    (`BoundCodec`'s ``principal=`` and ``context=``); the presenting principal is a revocable scope, and `scopes`
    adds others (``scopes={"tenant": org}``)."""

    __slots__ = ("codec", "guard")

    def __init__(self, codec: Codec, guard: SingleUse) -> None:
        self.codec, self.guard = codec, guard

    def seal(self, state: bytes, **kwargs: object) -> str:
        return self.codec.seal(self.guard.stamp(state), **kwargs)

    def unseal(self, token: str, *, scopes: Mapping[str, str | None] | None = None, **kwargs: object) -> bytes:
        _check_scopes(scopes)  # a caller's bug is reported before anything is consumed
        stamped = self.codec.unseal(token, **kwargs)
        principal = kwargs.get("principal")
        scopes = {**(scopes or {}), "principal": principal if isinstance(principal, str) else None}
        return self.guard.consume(stamped, scopes)

    def __repr__(self) -> str:
        return f"SingleUseCodec({self.codec!r}, {self.guard!r})"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("SingleUseCodec holds keys and is not picklable")


def _seconds(settings: Mapping[str, str], name: str, default: float) -> float:
    text = setting(settings, name, required=False)
    try:
        value = default if text is None else float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1e7:  # positive, and a NaN fails too
        raise ConfigurationError(f"{name} must be a positive number of seconds, e.g. {default:g}")
    return value


def store_from_settings(settings: Mapping[str, str], *, listen: bool = True) -> Store:
    """The store ``STATECODEC_STORE_URL`` (or ``_FILE``, since a URL may hold a password) names: ``memory`` for
    one process, ``redis://``, ``rediss://`` or ``redis+cluster://`` for a fleet (needs ``statecodec[redis]``).
    ``listen=False`` is for a one-shot command: a Redis store then reads revocations at each call instead of
    keeping a view current."""
    url, source = text_or_file(settings, STORE_URL_VAR, _MAX_STORE_FILE_BYTES, "it holds one store URL")
    if url is None:
        raise ConfigurationError(f"{STORE_URL_VAR} is not set; set it to redis://host:6379/0 (a fleet) or memory")
    url = url.strip()
    if url == "memory":
        return MemoryStore()
    if url.partition("://")[0] not in REDIS_SCHEMES:
        # Only the scheme is echoed: the rest of a URL may hold credentials.
        schemes = ", ".join(f"{scheme}://" for scheme in REDIS_SCHEMES)
        raise ConfigurationError(f"{source} must be memory or a URL of {schemes}, not {url.split(':')[0]}:")
    from statecodec.redis_store import RedisStore  # needs the redis extra; imported only when configured

    timeout = _seconds(settings, _STORE_SETTINGS[0], 0.25)
    staleness = _seconds(settings, _STORE_SETTINGS[2], 1.0)
    namespace = setting(settings, _STORE_SETTINGS[1], required=False) or "statecodec"
    return RedisStore.from_url(url, namespace=namespace, timeout=timeout, staleness=staleness, listen=listen)
