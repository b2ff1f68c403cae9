"""`RedisStore`: the single-use `Store` a fleet shares, on Redis 6.2 or later (``pip install 'statecodec[redis]'``).

Threat: a replayed token accepted by a second instance, a revocation one instance never hears of, a flushed store
that forgets what it saw, and a slow store that stalls every request. Here: each claim is one atomic Lua script
(first claim wins on every instance); the store notes the server time its memory began (its epoch), so a token
issued before a flush or a restart without persistence is `FORGOTTEN`, never claimed afresh; revocations are kept
in a local view, pushed by pub/sub and reloaded in full every half staleness bound, and a view that could not be
reloaded within the bound raises `StoreError` (a stale view could miss a revocation); every call is bounded by the
socket timeout, and every failure is a `StoreError` that names host:port only, never the URL or its credentials.

Key layout, every key under one hash tag so that Redis Cluster keeps a namespace in one slot (``ns`` is the
namespace, ``statecodec`` by default):

- ``{ns}:epoch``: string, the server time (ms since the Unix epoch) when this store's memory began; set by the
  first script that finds it missing. A token issued before it (plus `clock_allowance`) is `FORGOTTEN`.
- ``{ns}:claim:<hex>``: string ``1``, one per claimed token, <hex> being the 16-byte keyed digest `SingleUse`
  passes (never a token id); it expires with its token (``PX``).
- ``{ns}:revoked``: hash, scope digest (hex) -> ``<at ms>:<expires ms>``, the latest revocation of that scope.
- ``{ns}:revoked:expiry``: sorted set, scope digest (hex) scored by its expiry, to prune the hash.
- ``{ns}:revocations``: the pub/sub channel each revocation is published on, as ``<hex>=<at ms>:<expires ms>``.

Commands, for an ACL user (`docs/single-use.md`): ``evalsha eval subscribe ping info`` called by the client, and
``get set time hget hset hdel hgetall zadd zrangebyscore zremrangebyscore publish`` called by the scripts, on keys
``~{ns}:*`` and channel ``&{ns}:revocations``; on a Redis Cluster (``redis+cluster://``) also ``cluster|slots
command``, which the cluster client reads when it is built.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from statecodec._types import HoldsSecrets
from statecodec.errors import ConfigurationError, StoreError
from statecodec.providers import missing_extra
from statecodec.single_use import REDIS_SCHEMES, Claim

try:
    import redis
    from redis.backoff import NoBackoff
    from redis.cluster import RedisCluster
    from redis.exceptions import (
        AuthenticationError,
        NoPermissionError,
        NoScriptError,
        OutOfMemoryError,
        ReadOnlyError,
        RedisClusterException,
        RedisError,
        ResponseError,
    )
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError
    from redis.retry import Retry
except ImportError as _exc:  # pragma: no cover - exercised by tests/test_lean_import.py
    raise missing_extra("redis", "redis", "the Redis store") from _exc

__all__ = ["RedisStore"]

logger = logging.getLogger("statecodec.redis_store")

_NAMESPACE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
# URL query parameters a store URL may carry: TLS material and the database. Anything else (a socket timeout,
# retries, the protocol) would override the bounds this store sets, so it is refused.
_ERROR_CODE = re.compile(r"\b(NOPERM|OOM|READONLY|MISCONF|BUSY|LOADING|CROSSSLOT|MOVED|ASK|CLUSTERDOWN|NOAUTH)\b")
# How often the view's thread wakes to see whether the store is closing.
_WAKE = 0.1
_URL_OPTIONS = frozenset({"db", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname"})

# Shared by the scripts: the store's epoch, set from the server's clock when missing (a new or flushed store).
_EPOCH = """
local function epoch()
  local e = redis.call('GET', KEYS[1])
  if e then return tonumber(e) end
  local t = redis.call('TIME')
  e = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('SET', KEYS[1], string.format('%.0f', e))
  return e
end
"""
# KEYS: epoch, claim key. ARGV: issued at (ms), expires at (ms), clock allowance (ms).
# Returns {0 forgotten | 1 first | 2 used, epoch}.
_CLAIM = (
    _EPOCH
    + """
local e = epoch()
if tonumber(ARGV[1]) < e + tonumber(ARGV[3]) then return {0, e} end
local t = redis.call('TIME')
local ttl = tonumber(ARGV[2]) - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if ttl < 1 then ttl = 1 end
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', string.format('%.0f', ttl)) then return {1, e} end
return {2, e}
"""
)
# KEYS: revoked hash, expiry zset. ARGV: scope (hex), at (ms), expires at (ms), channel. Keeps the later of each.
_REVOKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do redis.call('HDEL', KEYS[1], gone) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local at, exp = tonumber(ARGV[2]), tonumber(ARGV[3])
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  local a, x = string.match(old, '^(%d+):(%d+)$')
  if a then at, exp = math.max(at, tonumber(a)), math.max(exp, tonumber(x)) end
end
local value = string.format('%.0f:%.0f', at, exp)
redis.call('HSET', KEYS[1], ARGV[1], value)
redis.call('ZADD', KEYS[2], exp, ARGV[1])
redis.call('PUBLISH', ARGV[4], ARGV[1] .. '=' .. value)
return value
"""
# KEYS: epoch, revoked hash. Returns {epoch, {scope, value, ...}}.
_VIEW = _EPOCH + "\nreturn {epoch(), redis.call('HGETALL', KEYS[2])}\n"


class _Script:
    __slots__ = ("sha", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()


_SCRIPTS = {name: _Script(source) for name, source in (("claim", _CLAIM), ("revoke", _REVOKE), ("view", _VIEW))}


def _ms(seconds: float) -> int:
    """Whole milliseconds, rounded up: a revocation or an expiry rounded up covers more, never less."""
    return math.ceil(seconds * 1000)


def _where(kwargs: dict[str, Any]) -> str:
    """host:port (or the socket path) of a client's pool: what a message may name."""
    if kwargs.get("path"):
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


class RedisStore(HoldsSecrets):
    """`Store` over Redis (module docstring: key layout, commands), shared by every instance of a fleet.

    Build it with `from_url`, or inject a `redis.Redis` client (its socket timeouts are the store's bound; a
    client built by `from_url` has them set to `timeout`, protocol RESP2, and at most one retry, on a refused
    or dropped connection). `staleness` bounds the age of the revocation view: with `listen` (the default) a
    daemon thread keeps it current, and `revoked_at` reloads it itself, or raises `StoreError`, once it is
    older; without `listen` (a command-line tool), `revoked_at` reads the store each time. `clock_allowance`
    is how far ahead of the server's clock an instance's may run: a token stamped that soon after the store's
    memory began is `FORGOTTEN` too, since it may have been issued before.
    """

    __slots__ = (
        "_channel",
        "_client",
        "_epoch",
        "_keys",
        "_listen",
        "_loaded",
        "_lock",
        "_owned",
        "_reload_lock",
        "_stop",
        "_thread",
        "_view",
        "_wall",
        "clock_allowance",
        "namespace",
        "staleness",
        "timeout",
        "where",
    )

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        *,
        namespace: str = "statecodec",
        staleness: float = 1.0,
        listen: bool = True,
        clock_allowance: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(client, redis.Redis | RedisCluster):
            raise ConfigurationError(
                "client must be a redis.Redis or redis.cluster.RedisCluster client, e.g. redis.Redis.from_url(url)"
            )
        if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
            raise ConfigurationError(
                "the store namespace (STATECODEC_STORE_NAMESPACE) must be 1-64 letters, digits, '_', '.' or '-'"
            )
        if isinstance(client, RedisCluster):  # the connection settings every node's pool shares
            kwargs = dict(client.nodes_manager.connection_kwargs)
            node = client.get_default_node()  # type: ignore[no-untyped-call]
            kwargs |= {"host": node.host, "port": node.port}
        else:
            kwargs = client.connection_pool.connection_kwargs
        timeout = kwargs.get("socket_timeout")
        if not isinstance(timeout, (int, float)) or not 0 < timeout <= 60:
            raise ConfigurationError("the Redis client needs a socket_timeout (seconds) so that no call can hang")
        for name, value in (("staleness", staleness), ("clock_allowance", clock_allowance)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1e6:
                raise ConfigurationError(f"{name} must be a number of seconds in 0..1,000,000")
        if not staleness >= 2 * timeout:
            raise ConfigurationError(
                "the revocation staleness bound (STATECODEC_REVOCATION_STALENESS) must be at least twice the store "
                "timeout (STATECODEC_STORE_TIMEOUT), so that the view can be reloaded in time"
            )
        self._client, self._wall = client, clock
        self._owned = False  # an injected client belongs to the caller
        self.namespace, self.staleness, self.timeout = namespace, float(staleness), float(timeout)
        self.clock_allowance = float(clock_allowance)
        self.where = _where(kwargs)
        tag = "{" + namespace + "}:"
        self._keys = {"epoch": tag + "epoch", "revoked": tag + "revoked", "expiry": tag + "revoked:expiry"}
        self._channel = tag + "revocations"
        self._view: dict[str, tuple[int, int]] = {}  # scope hex -> (at ms, expires ms); only ever raised
        self._epoch: int | None = None
        self._loaded = -math.inf  # monotonic time the last full reload was sent
        self._lock, self._reload_lock, self._stop = threading.Lock(), threading.Lock(), threading.Event()
        self._listen = listen
        self._thread: threading.Thread | None = None
        if listen:
            self._thread = threading.Thread(target=self._keep_view, name="statecodec-revocations", daemon=True)
            self._thread.start()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        namespace: str = "statecodec",
        timeout: float = 0.25,
        staleness: float = 1.0,
        listen: bool = True,
        clock_allowance: float = 1.0,
    ) -> RedisStore:
        """The store at ``redis://[user:password@]host:port/db``, ``rediss://`` (TLS; ``?ssl_ca_certs=/path`` for a
        private CA) or ``unix:///path``; `timeout` bounds each call (connect and read). Connects lazily: an
        unreachable server fails the first call, and a store recovers by itself when the server is back.

        ``redis+cluster://host:port`` (``rediss+cluster://`` with TLS) names a Redis Cluster by any of its nodes.
        A cluster client learns the cluster's slots when it is built, so that node must answer then."""
        try:
            parts = urlsplit(url)
            host = f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
            where = f"unix:{parts.path}" if parts.scheme == "unix" else host
            options = parse_qs(parts.query)
        except (TypeError, ValueError, AttributeError):
            where, options = "", {}
        if not where or parts.scheme not in REDIS_SCHEMES:
            raise ConfigurationError(f"STATECODEC_STORE_URL must be a URL of a scheme in: {', '.join(REDIS_SCHEMES)}")
        unknown = sorted(set(options) - _URL_OPTIONS)
        if unknown:
            raise ConfigurationError(
                f"STATECODEC_STORE_URL ({where}) sets {', '.join(unknown)}; a store URL may set only "
                f"{', '.join(sorted(_URL_OPTIONS))} (timeouts come from STATECODEC_STORE_TIMEOUT)"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 60:
            raise ConfigurationError("the store timeout (STATECODEC_STORE_TIMEOUT) must be in 0..60 seconds")
        # No CLIENT SETINFO on connect: the minimal ACL (docs/single-use.md) denies CLIENT, so every connection
        # would add a denial to the server's ACL LOG, burying the ones that matter. redis-py spells it
        # driver_info=None since it has DriverInfo, lib_name=lib_version=None before.
        if hasattr(redis, "DriverInfo"):
            no_setinfo: dict[str, None] = {"driver_info": None}
        else:
            no_setinfo = {"lib_name": None, "lib_version": None}
        settings: dict[str, Any] = {
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "protocol": 2,
            # One immediate retry on a refused or dropped connection (a pooled socket the server closed); never on
            # a timeout, which would double the bound.
            "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
            "health_check_interval": 0,
            **no_setinfo,
        }
        client: redis.Redis | RedisCluster | None = None
        unreachable = False
        try:
            if parts.scheme.endswith("+cluster"):
                cluster_url = parts.scheme.removesuffix("+cluster") + url[len(parts.scheme) :]
                client = RedisCluster.from_url(cluster_url, **settings)
            else:
                client = redis.Redis.from_url(url, **settings)
        except (RedisError, RedisClusterException, OSError):  # a cluster client asks for its slots when built
            unreachable = True
        except Exception:  # a malformed URL: the client's message may quote it, so it is not chained (below)
            client = None
        if unreachable:
            raise StoreError(f"the Redis cluster at {where} gave no slots: unreachable, or it refused the credentials")
        if client is None:
            raise ConfigurationError(f"STATECODEC_STORE_URL ({where}) is not a valid Redis URL")
        try:
            store = cls(
                client, namespace=namespace, staleness=staleness, listen=listen, clock_allowance=clock_allowance
            )
        except BaseException:
            client.close()
            raise
        store._owned = True
        return store

    # --- the Store protocol -------------------------------------------------------------------------------------

    def claim(self, key: bytes, issued_at: float, expires_at: float) -> Claim:
        keys = [self._keys["epoch"], "{" + self.namespace + "}:claim:" + bytes(key).hex()]
        args = [round(issued_at * 1000), _ms(expires_at), _ms(self.clock_allowance)]
        code, epoch = self._run("claim", keys, args)
        self._epoch = int(epoch)
        return (Claim.FORGOTTEN, Claim.FIRST, Claim.USED)[int(code)]

    def revoke(self, scope: bytes, at: float, expires_at: float) -> None:
        value = self._run(
            "revoke", [self._keys["revoked"], self._keys["expiry"]], [bytes(scope).hex(), _ms(at), _ms(expires_at)]
        )
        self._merge(bytes(scope).hex(), value)  # this instance sees its own revocation at once

    def revoked_at(self, scopes: Sequence[bytes]) -> float:
        if not self._listen:
            self._reload()
        elif time.monotonic() - self._loaded > self.staleness:
            self._reload_now()
        now = _ms(self._wall())
        with self._lock:
            found = [self._view.get(bytes(scope).hex()) for scope in scopes]
        return max((at / 1000 for at, until in filter(None, found) if now < until), default=0.0)

    def health(self) -> dict[str, object]:
        """Reachability, round trip, server version, persistence, eviction policy, epoch and view age; raises
        `StoreError` when the server does not answer."""
        # On a cluster, the node that holds this namespace's slot: the one whose persistence and eviction matter.
        node: dict[str, Any] = {}
        cluster = self._client
        if isinstance(cluster, RedisCluster):
            key = self._keys["epoch"]
            node = {"target_nodes": self._call(lambda: cluster.get_node_from_key(key))}  # type: ignore[no-untyped-call]
        started = time.perf_counter()
        self._call(lambda: self._client.ping(**node))
        round_trip = time.perf_counter() - started
        info: dict[str, Any] = self._call(lambda: self._client.info(**node))  # server, persistence, memory
        self._reload()
        policy = str(info.get("maxmemory_policy", ""))
        warnings = []
        if policy != "noeviction":
            warnings.append(f"maxmemory-policy is {policy}: an evicted claim reopens a replay")
        if not info.get("aof_enabled"):
            warnings.append("appendonly is off: a restart forgets every claim (such tokens are refused, not replayed)")
        return {
            "store": "redis",
            "reachable": True,
            "server": self.where,
            "version": str(info.get("redis_version", "")),
            "namespace": self.namespace,
            "round_trip_ms": round(round_trip * 1000, 3),
            "epoch": (self._epoch or 0) / 1000,
            "persistence": "aof" if info.get("aof_enabled") else "none",
            "maxmemory_policy": policy,
            "revocations": len(self._view),
            "view_age": round(time.monotonic() - self._loaded, 3),
            "staleness": self.staleness,
            "timeout": self.timeout,
            "listening": self._thread is not None and self._thread.is_alive(),
            "warnings": warnings,
        }

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(_WAKE + 3 * self.timeout + 1)  # a subscribe, a reload, a read: each bounded
        if self._owned:
            self._client.close()

    def __repr__(self) -> str:
        return f"RedisStore({self.where!r}, namespace={self.namespace!r})"

    # --- the revocation view ------------------------------------------------------------------------------------

    def _keep_view(self) -> None:
        """Background: subscribe, reload in full every half staleness bound, merge what is published between."""
        pubsub: Any = None
        client: Any = self._client  # redis-py types pubsub() in some releases only
        next_reload = 0.0
        while not self._stop.is_set():
            try:
                if pubsub is None:
                    pubsub = client.pubsub(ignore_subscribe_messages=True)
                    pubsub.subscribe(self._channel)
                    next_reload = 0.0  # subscribed before reloading: nothing published between is lost
                if time.monotonic() >= next_reload:
                    self._reload()
                    next_reload = self._loaded + self.staleness / 2
                message = pubsub.get_message(timeout=min(_WAKE, max(0.0, next_reload - time.monotonic())))
                if message is not None and message.get("type") == "message":
                    scope, _, value = bytes(message["data"]).decode("ascii").partition("=")
                    self._merge(scope, value)
            except (RedisError, StoreError, OSError, ValueError) as exc:
                logger.debug("revocation view not refreshed: %s", type(exc).__name__)
                if pubsub is not None:
                    pubsub.close()
                    pubsub = None
                self._stop.wait(self.staleness / 4)
        if pubsub is not None:
            pubsub.close()

    def _reload_now(self) -> None:
        """Reload a view past its staleness bound before answering from it, or raise: a stale view is no answer."""
        if not self._reload_lock.acquire(timeout=self.timeout):
            raise StoreError(f"the Redis store at {self.where}: the revocation view is stale and being reloaded")
        try:
            if time.monotonic() - self._loaded > self.staleness:
                self._reload()
        finally:
            self._reload_lock.release()

    def _reload(self) -> None:
        sent = time.monotonic()
        epoch, flat = self._run("view", [self._keys["epoch"], self._keys["revoked"]], [])
        for scope, value in zip(flat[::2], flat[1::2], strict=True):
            self._merge(bytes(scope).decode("ascii"), value)
        now = _ms(self._wall())
        with self._lock:
            for scope in [scope for scope, (_, until) in self._view.items() if until <= now]:
                del self._view[scope]
            self._epoch = int(epoch)
            self._loaded = max(self._loaded, sent)

    def _merge(self, scope: str, value: bytes | str) -> None:
        text = value.decode("ascii") if isinstance(value, bytes) else value
        at, _, until = text.partition(":")
        new = (int(at), int(until))
        with self._lock:
            old = self._view.get(scope, (0, 0))
            self._view[scope] = (max(old[0], new[0]), max(old[1], new[1]))

    # --- calls ----------------------------------------------------------------------------------------------------

    def _run(self, name: str, keys: list[str], args: Sequence[str | int]) -> Any:
        """One script call: EVALSHA, and EVAL (which caches it again) when the server lost its script cache."""
        script = _SCRIPTS[name]
        if name == "revoke":
            args = [*args, self._channel]

        def call() -> Any:
            try:
                return self._client.evalsha(script.sha, len(keys), *keys, *args)
            except NoScriptError:
                return self._client.eval(script.source, len(keys), *keys, *args)

        return self._call(call)

    def _call(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except (RedisError, OSError) as exc:
            message = self._failure(exc)
        # Raised outside the handler, so that no context (the client's own message, which may quote the URL)
        # travels with the error.
        raise StoreError(message)

    def _failure(self, exc: BaseException) -> str:
        """What went wrong, in words that name host:port only: a client's own message may quote the URL."""
        at = f"the Redis store at {self.where}"
        if isinstance(exc, RedisTimeoutError | TimeoutError):
            return f"{at} did not answer within {self.timeout:g} s"
        if isinstance(exc, AuthenticationError):
            return f"{at} refused the user name or password in STATECODEC_STORE_URL"
        if isinstance(exc, RedisConnectionError | OSError):
            return f"{at} is unreachable (connection refused, dropped or failed TLS)"
        # A script's error carries the server's code inside its text: report the code, never the text.
        codes = _ERROR_CODE.findall(str(exc)) if isinstance(exc, ResponseError) else []
        # Redis 7.0 words an ACL refusal inside a script without the NOPERM code.
        if isinstance(exc, NoPermissionError) or "NOPERM" in codes or "can't run this command" in str(exc):
            return f"{at} refused a command: its ACL user lacks one the store needs (docs/single-use.md)"
        if isinstance(exc, OutOfMemoryError) or "OOM" in codes:
            return f"{at} is out of memory (set maxmemory-policy noeviction and enough maxmemory)"
        if isinstance(exc, ReadOnlyError) or "READONLY" in codes:
            return f"{at} is a read-only replica; point STATECODEC_STORE_URL at the primary"
        if isinstance(exc, ResponseError):
            return f"{at} answered an error ({codes[0] if codes else type(exc).__name__})"
        return f"{at} failed ({type(exc).__name__})"
