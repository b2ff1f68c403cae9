"""`RedisStore`: the single-use `Store` a fleet shares, on Redis 6.2+ or a Redis Cluster (``statecodec[redis]``).

Threat: a replay accepted by a second instance, a store that evicts or forgets, a store that stalls every request,
a credential in a log. Each claim is one Lua script on the server's clock (``TIME``), at most a round trip a token.
Unreachable or late is `StoreUnreachable`, an answered error `StoreError`; messages name host:port only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import secrets
import socket
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote

from statecodec import errors
from statecodec._settings import DEFAULT_STORE_TIMEOUT, REPLICAS_VAR, store_replicas
from statecodec._types import HoldsSecrets
from statecodec.errors import ConfigurationError, StoreError, StoreUnreachable, exception_chain, needs_extra
from statecodec.store import REDIS_SCHEMES, Hello, Outcome, Verdict, check_owner

with needs_extra("redis", "redis", "the Redis store"):  # exercised by tests/test_lean_import.py
    from redis import exceptions as rx
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

__all__ = ["RedisStore"]

_NAMESPACE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_ADDRESS = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+)(?::([0-9]{1,5}))?(?:/([0-9]*))?")
_OPTIONS = frozenset({"db", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname"})
_CONNECTIONS = 100  # the client's pool, per node; a burst beyond it waits its turn within the deadline
_DOWN = {socket.gaierror: "its host name does not resolve", ConnectionRefusedError: "connection refused",
         ConnectionResetError: "connection reset"}  # no connection can be made; this host's EMFILE is not one of them
_CODES = ("LOADING", "CROSSSLOT", "TRYAGAIN", "EXECABORT")  # an answered error named by its code, if no cause below
_PRELUDE = """local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function n(x) return string.format('%.0f', x) end
local function sweep(hash, expiry, limit)  -- drop (at most `limit` of) the fields of `hash` whose time has come
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', expiry, '-inf', n(now), 'LIMIT', 0, limit or -1)) do
    redis.call('HDEL', hash, gone)
    redis.call('ZREM', expiry, gone)
  end
end
local function late() return ARGV[#ARGV] ~= '0' and now > tonumber(ARGV[#ARGV]) end  -- its caller gave up
local function policy() return string.match(redis.call('INFO', 'memory'), 'maxmemory_policy:(%S+)') or '' end
local function record(life, skew)
  local m = redis.call('HMGET', KEYS[1], 'epoch', 'fp', 'life', 'skew', 'seen', 'rid')
  -- This node's replication id: a promoted replica, or a restart, gets a new one, and may lack the latest claims.
  local rid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') or ''
  if m[1] and m[2] ~= ARGV[1] then return 'foreign', m[1] end
  local epoch, seen = m[1] or ARGV[2], tonumber(m[5]) or 0  -- none yet: this call begins the store's memory
  if now + math.max(skew, tonumber(m[4]) or 0) < seen then epoch = ARGV[2] end  -- clock went back: a new epoch
  if m[6] and m[6] ~= rid then epoch = ARGV[2] end  -- another history: a new epoch (no `rid` yet: adopt this one)
  if epoch ~= m[1] or now > seen + 1000 or m[6] ~= rid then
    redis.call('HSET', KEYS[1], 'epoch', epoch, 'fp', ARGV[1], 'seen', n(now), 'rid', rid)
  end
  if life > (tonumber(m[3]) or 0) then redis.call('HSET', KEYS[1], 'life', n(life)) end
  if skew > (tonumber(m[4]) or -1) then redis.call('HSET', KEYS[1], 'skew', n(skew)) end  -- a new store: 0 too
  return m[1] and 'ok' or 'new', epoch
end
"""
_SCRIPTS = {
    # KEYS meta, forms. ARGV fingerprint, candidate epoch, lifetime, skew, forms...
    "hello": """local owner, epoch = record(tonumber(ARGV[3]), tonumber(ARGV[4]))
for i = 5, owner ~= 'foreign' and #ARGV or 0 do  -- each form, dated when first recorded
  if not redis.call('HGET', KEYS[2], ARGV[i]) then redis.call('HSET', KEYS[2], ARGV[i], n(now)) end
end
return {owner, epoch, now, policy()}""",
    # KEYS meta, revocations, claim. ARGV fingerprint, candidate epoch, token epoch, issued, expires, lifetime,
    # skew, the claim's value ('1', or the retry digest in retry-safe mode), scope digests..., deadline.
    "claim": """if late() then return {'late', '', now, {}, ''} end
local issued, expires = tonumber(ARGV[4]), tonumber(ARGV[5])
local owner, epoch = record(math.max(tonumber(ARGV[6]), expires - issued), tonumber(ARGV[7]))
if owner == 'foreign' then return {'foreign', epoch, now, {}, ''} end
if owner == 'new' or epoch ~= ARGV[3] then return {'forgotten', epoch, now, {}, ''} end
if expires <= now then return {'expired', epoch, now, {}, ''} end
local bad, verdict = {}, 'first'
for i, v in ipairs(redis.call('HMGET', KEYS[2], unpack(ARGV, 9, #ARGV - 1))) do
  if v then
    local at = string.match(v, '^(%d+):%d+$')
    if not at then table.insert(bad, ARGV[8 + i]) elseif tonumber(at) >= issued then verdict = 'revoked' end
  end
end
local value = ARGV[8] == '1' and '1' or ARGV[8] .. n(now)  -- retry-safe: the digest, then when its step began
if verdict == 'first' and not redis.call('SET', KEYS[3], value, 'NX', 'PX', n(expires - now)) then
  verdict = 'used'
  local held = ARGV[8] ~= '1' and redis.call('GET', KEYS[3]) or ''
  if string.sub(held, 1, #ARGV[8]) == ARGV[8] then return {'same', epoch, now, bad, string.sub(held, #ARGV[8] + 1)} end
end
return {verdict, epoch, now, bad, ''}""",
    # KEYS claim. ARGV digest, result, step bound, deadline: kept while the claim holds that digest alone, within bound.
    "keep": """if late() then return -1 end
local at = string.match(redis.call('GET', KEYS[1]) or '', '^' .. ARGV[1] .. '(%d*)$')
if not at or now > (tonumber(at) or now) + tonumber(ARGV[3]) then return 0 end
return redis.call('SET', KEYS[1], ARGV[1] .. ARGV[2], 'KEEPTTL') and 1 or 0""",
    # KEYS meta, revocations, their expiry. ARGV fingerprint, scope, skew.
    "revoke": """local m = redis.call('HMGET', KEYS[1], 'fp', 'life', 'skew')
if m[1] ~= ARGV[1] then return {m[1] and 'foreign' or 'unused'} end
sweep(KEYS[2], KEYS[3], 100)  -- in increments: a claim never waits behind a cleanup of every revocation
local skew = math.max(tonumber(ARGV[3]), tonumber(m[3]) or 0)
local at, stop = now + skew, now + 2 * skew + (tonumber(m[2]) or 0)
local a, s = string.match(redis.call('HGET', KEYS[2], ARGV[2]) or '', '^(%d+):(%d+)$')
if a then at, stop = math.max(at, tonumber(a)), math.max(stop, tonumber(s)) end
redis.call('HSET', KEYS[2], ARGV[2], n(at) .. ':' .. n(stop))
redis.call('ZADD', KEYS[3], n(stop), ARGV[2])
return {'ok', at}""",
    # KEYS meta, revocations, their expiry. ARGV fingerprint, scope.
    "lift": """local fp = redis.call('HGET', KEYS[1], 'fp')
if fp ~= ARGV[1] then return {fp and 'foreign' or 'unused'} end
redis.call('ZREM', KEYS[3], ARGV[2])
return {'ok', redis.call('HDEL', KEYS[2], ARGV[2])}""",
    # KEYS meta, revocations, (unused), forms. ARGV fingerprint. For `store check` and `revoke`, which then read the
    # revocations by HSCAN.
    "inspect": """local m = redis.call('HMGET', KEYS[1], 'fp', 'life', 'skew')
local owner = m[1] == ARGV[1] and 'ok' or (m[1] and 'foreign' or 'unused')
local forms = owner == 'ok' and redis.call('HGETALL', KEYS[4]) or {}
return {owner, redis.call('HLEN', KEYS[2]), now, m[2] or '0', m[3] or '0', policy(), forms}""",
}


# By code or client exception; each its own message (`SingleUse.warn` limits per message); subclasses first.
_CAUSES: tuple[tuple[str, tuple[type[Exception], ...], str], ...] = (
    ("NOPERM|can't run this command", (rx.NoPermissionError,),
     "refused a command: its ACL user lacks one the store needs (docs/single-use.md)"),
    ("OOM", (rx.OutOfMemoryError,), "is full (maxmemory): tokens are refused until it has room"),
    ("NOREPLICAS", (), "has fewer replicas than its min-replicas-to-write (NOREPLICAS): refused until they are back"),
    ("READONLY", (rx.ReadOnlyError,), "is a read-only replica; point STATECODEC_STORE_URL at the primary"),
    ("MASTERDOWN", (rx.MasterDownError,), "is a replica that lost its primary (MASTERDOWN)"),
    ("CLUSTERDOWN", (rx.ClusterDownError,), "is a cluster that cannot serve the namespace's slot (CLUSTERDOWN)"),
    ("MOVED", (rx.AskError, rx.ClusterError), "kept redirecting the call (MOVED/ASK): the cluster's slots are moving"),
    ("MISCONF", (), "refuses writes: it cannot persist (MISCONF)"),
    ("BUSY ", (), "is running a script that does not end (BUSY)"),
)


class Script(NamedTuple):
    """A Lua script after the shared prelude (`now`, `n`, `sweep`, `policy`, `record`), with its SHA-1 for EVALSHA."""

    source: str
    sha: str


def script(body: str) -> Script:
    return Script(_PRELUDE + body, hashlib.sha1((_PRELUDE + body).encode(), usedforsecurity=False).hexdigest())


_RUN = {name: script(body) for name, body in _SCRIPTS.items()}


def _shown(name: bytes) -> str:
    """A field name someone with write access put in the store, printable: its bytes as a bytes literal shows them
    (``\\xff``, ``\\x1b``), never decoded text that could fail or move the operator's terminal."""
    return ascii(name)[2:-1]


def _parse(url: str) -> tuple[str, dict[str, Any]]:
    """(host:port, the client's keyword arguments) of a store URL, parsed here: a password may hold / ? # @."""
    scheme, _, rest = url.partition("://")
    userinfo, _, rest = rest.rpartition("@")
    rest, _, query = rest.partition("#")[0].partition("?")
    options: dict[str, Any] = {name: values[-1] for name, values in parse_qs(query).items()}
    user, _, password = userinfo.partition(":")
    kwargs: dict[str, Any] = {"username": unquote(user) or None, "password": unquote(password) or None}
    match = _ADDRESS.fullmatch(rest)
    if scheme.startswith("unix") and scheme in REDIS_SCHEMES:
        where, kwargs["unix_socket_path"], db = f"unix:{rest}", rest, "0"
    elif scheme in REDIS_SCHEMES and match and 0 < int(match[2] or 6379) < 65536:
        where, db = f"{match[1]}:{int(match[2] or 6379)}", match[3] or "0"
        kwargs |= {"host": match[1].strip("[]"), "port": int(match[2] or 6379), "ssl": scheme.startswith("rediss")}
    else:
        raise ConfigurationError("STATECODEC_STORE_URL is not a valid Redis URL (its text is not shown)")
    db = options.pop("db", db)
    if set(options) - _OPTIONS or not db.isdecimal() or (scheme.endswith("+cluster") and db != "0"):
        raise ConfigurationError(f"STATECODEC_STORE_URL ({where}) may set only the database (0 on a cluster) and "
                                 f"{', '.join(sorted(_OPTIONS - {'db'}))}; timeouts come from STATECODEC_STORE_TIMEOUT")
    if "ssl_check_hostname" in options:
        options["ssl_check_hostname"] = options["ssl_check_hostname"].lower() in ("1", "true", "yes")
    return where, {**{name: value for name, value in kwargs.items() if value is not None}, **options, "db": int(db)}


class RedisStore(HoldsSecrets):
    """`Store` over Redis (module docstring); build it with `from_url`."""

    def __init__(self, client: Redis | RedisCluster, *, where: str, namespace: str, timeout: float,
                 replicas: int = 0) -> None:
        if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
            raise ConfigurationError("STATECODEC_STORE_NAMESPACE must be 1-64 letters, digits, '_', '.' or '-'")
        self._client, self.where, self.namespace, self.timeout = client, where, namespace, timeout
        self.replicas = store_replicas({REPLICAS_VAR: str(replicas)})  # a claim counts once this many hold it
        self.deadline = 2 * timeout  # a round trip, and one reconnect or script reload within it
        self._keys = [f"{{{namespace}}}:{name}" for name in ("meta", "r", "rx", "forms")]
        self._slots = asyncio.Semaphore(_CONNECTIONS)  # else the pool refuses a burst: a refusal storm from one client
        self._open: list[tuple[str, str, list[str], Sequence[str | int | bytes], int, asyncio.Future[Any]]] = []
        self._sending: set[asyncio.Task[None]] = set()  # `_send`s under way
        self._opener: asyncio.Task[None] | None = None  # the `_send` that will take `_open`
        self._alone = False  # a call sent alone is under way
        self._offset, self._learnt = float("-inf"), 0.0  # store clock minus monotonic, at most, and when: `_learn`

    @classmethod
    def from_url(cls, url: str, *, namespace: str = "statecodec", timeout: float = DEFAULT_STORE_TIMEOUT,
                 replicas: int = 0) -> RedisStore:
        """The store at a `REDIS_SCHEMES` URL, connected lazily; `timeout` bounds connecting and each answer."""
        where, kwargs = _parse(url)
        # No CLIENT SETINFO (the minimal ACL denies CLIENT); one immediate retry on a dropped pooled connection,
        # never on a timeout, which would double the bound.
        retry = Retry(NoBackoff(), 1, supported_errors=(rx.ConnectionError,))
        kwargs |= {"socket_timeout": timeout, "socket_connect_timeout": timeout, "protocol": 2, "driver_info": None,
                   "max_connections": _CONNECTIONS, "retry": retry}
        client = RedisCluster(**kwargs) if url.partition("://")[0].endswith("+cluster") else Redis(**kwargs)
        return cls(client, where=where, namespace=namespace, timeout=timeout, replicas=replicas)

    async def run(self, script: Script, keys: list[str], *args: str | int | bytes, deadline: bool = False,
                  acks: int = 0) -> Any:
        """One script (the store's or `statecodec.registry`'s); a failure names host:port and the cause only.
        `deadline`: last argument, when (store ms) it gives up: a token refused for time stays unspent (`late()`)."""
        started, queued = time.monotonic(), self._slots.locked()
        try:
            # A burst waits for a connection (inline: 3.11's `wait_for` acquires in a task of its own, which upsets
            # `queued`) within the one deadline, leaving half a timeout for its round trip. A call that waited is this
            # instance's load, not an outage: past its wait, or late, it is `StoreBusy`, before `bounded`'s end.
            async with asyncio.timeout(self.deadline - self.timeout / 2 if queued else None):  # free: no wait
                await self._slots.acquire()
            if deadline:
                by = min(started + self.deadline, time.monotonic() + self.timeout)  # lower bounds: see `_learn`
                args += ("0" if self._offset == float("-inf") else str(int((by + self._offset) * 1000)),)
            try:
                async with asyncio.timeout(self.deadline - self.timeout / 4 - (time.monotonic() - started)
                                           if queued else None):
                    try:
                        return await self._eval("EVALSHA", script.sha, keys, args, acks)
                    except rx.NoScriptError:
                        return await self._eval("EVAL", script.source, keys, args, acks)
            finally:
                self._slots.release()
        except (rx.RedisError, rx.RedisClusterException, OSError) as exc:  # OSError: TimeoutError too
            failure = self._failure(exc, waited=queued)
        raise failure  # outside the handler: the client's own text (which may quote the URL) is not chained

    async def _eval(self, verb: str, code: str, keys: list[str], args: Sequence[str | int | bytes], acks: int) -> Any:
        """EVALSHA or EVAL: sent at once when no other call is under way, else with the other calls of this turn of
        the event loop in one pipeline (`_send`): a lone call waits for no batch, a burst shares round trips."""
        if not (self._alone or self._sending or acks):
            self._alone = True
            try:
                return await self._client.execute_command(verb, code, len(keys), *keys, *args)
            finally:
                self._alone = False
        reply = asyncio.get_running_loop().create_future()
        self._open.append((verb, code, keys, args, acks, reply))
        if self._opener is None or self._opener.done():  # no task will send this batch (or one ended unstarted)
            self._opener = asyncio.create_task(self._send())  # next turn: this turn's other calls join first
            self._sending.add(self._opener)  # the loop holds tasks weakly
            self._opener.add_done_callback(self._sending.discard)
        return await reply

    async def _send(self) -> None:
        """The calls of a turn (at most `_CONNECTIONS`: each holds a slot) in one round trip on one connection: a
        burst costs the store one exchange per batch, not per token; then WAIT if one asks for acknowledgements:
        WAIT counts the replicas holding that connection's latest write, so it follows the scripts there."""
        batch, self._open, self._opener = self._open, [], None
        try:  # everything that may raise: each caller is answered, whatever happens here
            pipe = self._client.pipeline(transaction=False)
            for verb, code, keys, args, _, _ in batch:
                pipe.execute_command(verb, code, len(keys), *keys, *args)  # to the node of its slot, as WAIT below
            if acks := max(call[4] for call in batch):
                node = self._node(batch[0][2][0])  # the namespace's one slot: every key is `{namespace}:...`
                pipe.execute_command("WAIT", acks, max(1, int(self.timeout * 500)),
                                     **({"target_nodes": node} if node else {}))
            replies = await pipe.execute(raise_on_error=False)
            if acks and isinstance(replies[-1], Exception):
                raise replies[-1]  # WAIT refused: no claim of the batch counts
        except Exception as exc:  # each caller handles it as its own, in `run`
            replies = [exc] * (len(batch) + 1)
        for (*_, acked, reply), answer in zip(batch, replies, strict=False):
            if reply.done():  # its caller gave up
                pass
            elif isinstance(answer, Exception):
                reply.set_exception(answer)
            else:
                reply.set_result([answer, replies[-1]] if acked else answer)

    def _node(self, key: str) -> Any:
        """The cluster node of `key`'s slot (it answers that key's scripts and their WAIT); None on one server."""
        return self._client.get_node_from_key(key) if isinstance(self._client, RedisCluster) else None

    def _failure(self, exc: BaseException, *, waited: bool = False) -> StoreError:
        """What went wrong, naming host:port and the cause only; late after waiting for a connection: `StoreBusy`."""
        at, text, chain = f"the Redis store at {self.where}", str(exc), list(exception_chain(exc))
        if waited and isinstance(exc, TimeoutError | rx.TimeoutError):
            return errors.StoreBusy(f"{at}: all {_CONNECTIONS} connections here busy past the deadline (retryable)")
        if isinstance(exc, rx.AuthenticationError) or "WRONGPASS" in text or "NOAUTH" in text:
            return StoreError(f"{at} refused the user name or password in STATECODEC_STORE_URL")
        if "DB index is out of range" in text:
            return StoreError(f"{at} has no such database: set the /N of STATECODEC_STORE_URL to one it has")
        if isinstance(exc, rx.MaxClientsReachedError | rx.BusyLoadingError):
            return StoreError(f"{at} is busy ({type(exc).__name__}): tokens refused, in every mode, until it has room")
        if any(isinstance(e, rx.TimeoutError | TimeoutError) for e in chain):
            return StoreUnreachable(f"{at} did not answer within {self.timeout:g} s")
        if any(isinstance(e, ssl.SSLError) for e in chain) or "SSL" in text:
            return StoreUnreachable(f"{at} is unreachable: TLS failed (is its CA in ssl_ca_certs?)")
        if isinstance(exc, rx.ConnectionError | OSError | rx.RedisClusterException):
            down = next((what for e in chain for kind, what in _DOWN.items() if isinstance(e, kind)), None)
            return (errors.StoreDown if down else StoreUnreachable)(f"{at} is unreachable: {down or 'no connection'}")
        for codes, kinds, cause in _CAUSES:
            if isinstance(exc, kinds) or re.search(codes, text):
                return StoreError(f"{at} {cause}")
        return StoreError(f"{at} answered an error ({next((c for c in _CODES if c in text), type(exc).__name__)})")

    async def _scan(self, items: AsyncIterator[bytes]) -> list[bytes]:
        """A SCAN or HSCAN in batches, so a claim never waits behind a read of them all; a failure named as in `run`."""
        try:
            return [item async for item in items]
        except (rx.RedisError, rx.RedisClusterException, OSError) as exc:
            failure = self._failure(exc)
        raise failure  # outside the handler: the client's own text is not chained

    async def hello(self, *, fingerprint: bytes, lifetime_ms: int, skew_ms: int, forms: Sequence[str] = ()) -> Hello:
        args: tuple[str | int, ...] = (fingerprint.hex(), secrets.token_hex(8), lifetime_ms, skew_ms, *forms)
        owner, epoch, now, policy = await self.run(_RUN["hello"], self._keys[::3], *args)  # its node's policy
        self._learn(int(now))
        if (policy := policy.decode()) != "noeviction":
            raise ConfigurationError(f"the Redis store at {self.where} has maxmemory-policy {policy}: an evicted claim "
                                     "reopens a replay; set maxmemory-policy noeviction (a full store then refuses "
                                     "tokens instead)")
        return Hello(owner.decode(), bytes.fromhex(epoch.decode()), int(now))

    async def claim(self, *, fingerprint: bytes, key: bytes, epoch: bytes, issued_ms: int, expires_ms: int,
                    lifetime_ms: int, skew_ms: int, scopes: Sequence[bytes], retry: bytes = b"") -> Verdict:
        keys = [*self._keys[:2], self._claim(key)]
        args = (fingerprint.hex(), secrets.token_hex(8), epoch.hex(), issued_ms, expires_ms, lifetime_ms, skew_ms)
        reply = await self.run(_RUN["claim"], keys, *args, retry.hex() or "1", *(scope.hex() for scope in scopes),
                               deadline=True, acks=self.replicas)
        (outcome, current, now, bad, result), acked = reply if self.replicas else (reply, 0)
        self._learn(int(now))
        if outcome == b"late":
            raise StoreError(f"the Redis store at {self.where} ran a claim after its deadline: nothing recorded")
        if acked < self.replicas and outcome in (b"first", b"same"):  # a failover could lose it: not counted
            raise StoreError(f"the Redis store at {self.where}: claim not acknowledged by {self.replicas} replicas "
                             "(STATECODEC_STORE_REPLICAS) in time: refused, the token spent")
        node = self._node(keys[0])
        started = int(result) if result.isdigit() and len(result) < 28 else 0  # a sealed answer has 28 bytes at least
        return Verdict(Outcome(outcome.decode()), bytes.fromhex(current.decode()), int(now), tuple(map(_shown, bad)),
                       b"" if started else result, node.name if node else self.where, started)

    async def keep(self, *, key: bytes, retry: bytes, result: bytes, within_ms: int) -> bool:
        kept = int(await self.run(_RUN["keep"], [self._claim(key)], retry.hex(), result, within_ms, deadline=True))
        if kept < 0:
            raise StoreError(f"the Redis store at {self.where} ran a keep after its deadline: nothing recorded")
        return kept == 1

    def _learn(self, now_ms: int) -> None:
        """The store's clock, read at `now_ms` before this answer arrived: the offset is at least this. The best bound
        is kept, worn 1 ms a second (faster than clocks drift): an answer read late must not make deadlines early."""
        here = time.monotonic()
        self._offset, self._learnt = max(now_ms / 1000 - here, self._offset - (here - self._learnt) / 1000), here

    def _claim(self, key: bytes) -> str:
        return f"{{{self.namespace}}}:c:{key.hex()}"

    async def revoke(self, scope: bytes, *, fingerprint: bytes, skew_ms: int) -> int:
        reply = await self.run(_RUN["revoke"], self._keys, fingerprint.hex(), scope.hex(), skew_ms)
        check_owner(reply[0].decode(), self.where)
        return int(reply[1])

    async def lift(self, scope: bytes, *, fingerprint: bytes) -> bool:
        reply = await self.run(_RUN["lift"], self._keys, fingerprint.hex(), scope.hex())
        check_owner(reply[0].decode(), self.where)
        return int(reply[1]) > 0

    async def health(self, *, fingerprint: bytes) -> dict[str, object]:
        owner, count, now, life, skew, policy, forms = await self.run(_RUN["inspect"], self._keys, fingerprint.hex())
        pairs = zip(forms[::2], forms[1::2], strict=True)  # a time `hello` did not write reads as 0
        revocations = self._client.hscan_iter(self._keys[1], count=1000)
        bad = await self._scan(name async for name, value in revocations if not re.fullmatch(rb"[0-9]+:[0-9]+", value))
        return {"store": "redis", "server": self.where, "namespace": self.namespace, "owner": owner.decode(),
                "forms": {_shown(form): int(at) if at.isdigit() else 0 for form, at in pairs},
                "revocations": int(count), "malformed": [_shown(name) for name in bad], "store_time_ms": int(now),
                "longest_lifetime_ms": int(life), "clock_skew_ms": int(skew), "maxmemory_policy": policy.decode()}

    async def namespaces(self) -> list[str]:
        """The namespaces used on this store (`{ns}:meta`), for `statecodec revoke`: a SCAN, never per request."""
        keys = await self._scan(self._client.scan_iter(match="{*}:meta", count=1000))
        return sorted({_shown(key)[1:-6] for key in keys})

    async def aclose(self) -> None:
        await asyncio.gather(*self._sending, return_exceptions=True)  # the batches under way end first, each bounded
        with contextlib.suppress(rx.RedisError, OSError):  # a connection that will not close in time is dropped anyway
            await self._client.aclose()

    def __repr__(self) -> str:
        return f"RedisStore({self.where!r}, namespace={self.namespace!r})"
