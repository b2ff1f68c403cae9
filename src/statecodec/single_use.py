"""Single use and revocation: a token is accepted at most once, and an operator can end every flow of a principal.

Threat: integrity, expiry and binding do not stop an exact replay, and a stateless token cannot be taken back. At
unseal, last, one atomic claim on the store's clock (docs/single-use.md): it fails closed, but for availability first.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextvars import ContextVar
from typing import Any, Literal, TypedDict, TypeVar, Unpack

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from statecodec import _settings as cfg
from statecodec import errors
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec._types import Codec, HoldsSecrets, WrapsCodec
from statecodec.errors import ConfigurationError, InvalidToken, Reason, StoreError, StoreUnreachable, needs_extra
from statecodec.keys import KeyRing, derive_key, field, mac
from statecodec.store import MemoryStore, Outcome, Store, Verdict, bounded, check_owner
from statecodec.sync import LoopThread, finish

__all__ = ["Principal", "Selector", "SingleUse", "SingleUseCodec", "canonical_json"]

logger = logging.getLogger("statecodec.single_use")
T = TypeVar("T")
Principal = tuple[str | None, str | None, str | None]  # (client_id, issuer, subject), as the MCP SDK binds it
PREFIX = b"su2."
_HEADER, _DIGEST, _MAX_SCOPES = 36, 16, 16  # id 16, issued 6, expires 6, epoch 8; then a count and the digests
_VERDICTS = {Outcome.USED: Reason.REPLAYED, Outcome.REVOKED: Reason.REVOKED, Outcome.EXPIRED: Reason.EXPIRED}
_UNASKED = ("_meta", "requestState")  # a new progress token or trace each retry; the state, digested apart
_ANSWER_AAD, _NONCE = b"statecodec/su2/result\x00", 12
unchecked: ContextVar[list[str] | None] = ContextVar("statecodec_unchecked", default=None)  # statecodec.otel counts it
RESERVED = frozenset(("principal", "client", "issuer", "subject", "all"))  # what a stamp records itself: no scope names


def canonical_json() -> Callable[[Any], bytes]:
    """RFC 8785 canonical JSON for the retry digest, asked for at start-up: a missing package stops the start."""
    with needs_extra("rfc8785", "mcp", "the retry-safe mode"):
        import rfc8785
    return rfc8785.dumps


def checked(what: str, value: object) -> str:
    """An operator's scope name or value: non-empty text without surrounding whitespace, else ConfigurationError."""
    if type(value) is not str or not value or value != value.strip() or not value.isprintable():
        raise ConfigurationError(f"{what} must be non-empty text without leading or trailing whitespace")
    return value


class Selector(TypedDict, total=False):
    """What `revoke` and `lift` name, exactly one: `principal` or `client` (with `issuer`), `scope` or `everything`."""

    principal: str
    client: str
    issuer: str
    scope: tuple[str, str]
    everything: bool


class SingleUse(HoldsSecrets):
    """The single-use and revocation rules over any `Store`, from one event loop; `key` is the same on every instance,
    and beyond `clock_skew` from the store's clock this instance neither mints nor accepts."""

    __slots__ = ("_all", "_anchor", "_answers", "_checked", "_clock", "_down", "_epoch", "_fingerprint", "_macs",
                 "_noted", "_quiet", "_recording", "_skewed", "_unchecked", "accept_for", "accept_max", "clock_skew",
                 "heartbeat", "on_store_error", "store", "ttl", "unrecorded", "where")

    def __init__(self, store: Store, *, key: bytes | KeyRing, ttl: float, clock: Callable[[], float] = time.time,
                 clock_skew: float = 1.0, on_store_error: Literal["refuse", "accept"] = "refuse",
                 accept_for: float = cfg.DEFAULT_ACCEPT_FOR, accept_max: int = cfg.DEFAULT_ACCEPT_MAX,
                 heartbeat: float = cfg.HEARTBEAT) -> None:
        if not isinstance(store, Store):
            raise ConfigurationError("store must be a statecodec Store, e.g. MemoryStore() or RedisStore.from_url")
        if on_store_error not in ("refuse", "accept"):
            raise ConfigurationError("on_store_error (STATECODEC_STORE_ON_ERROR) must be refuse (the default) or "
                                     "accept")
        self.ttl = cfg.seconds("ttl", ttl, low=0.001, high=cfg.MAX_TTL)
        self.clock_skew = cfg.seconds("clock_skew", clock_skew, low=0, high=cfg.MAX_FUTURE_SKEW)
        self.accept_for = cfg.seconds(cfg.ACCEPT_FOR_VAR, accept_for, low=0, high=cfg.MAX_ACCEPT_FOR, low_open=True)
        if type(accept_max) is not int or not 0 < accept_max <= cfg.MAX_ACCEPT_MAX:
            raise ConfigurationError(f"{cfg.ACCEPT_MAX_VAR} (accept_max) must be 1 to {cfg.MAX_ACCEPT_MAX} tokens")
        self.heartbeat = cfg.seconds("heartbeat", heartbeat, low=0, high=3600)  # `check`'s interval
        with cfg.named_errors("the store key"):
            secret = (key if isinstance(key, KeyRing) else KeyRing([key]))[0]
        kinds = ("claim", "stamp", "scope", "fingerprint", "retry", "result")  # the last two: the retry-safe mode's
        keys = {k: derive_key(secret, b"statecodec/su2/" + k.encode()) for k in kinds}
        # Keyed once, copied per message (keys.mac), fed the prefix or scope kind inputs open with: -3% instructions.
        self._macs = {k: hmac.new(keys[k], PREFIX if k == "stamp" else b"", "sha256") for k in kinds[:-1]}
        scoped = ("all", "principal", "client", "scope", "form")
        self._macs |= {k: hmac.new(keys["scope"], field(k), "sha256") for k in scoped}
        self._fingerprint = mac(self._macs["fingerprint"], field(store.namespace))
        self._all = self._scope("all", None, None)  # the scope every token carries, for revoke(everything=True)
        self.store, self.on_store_error, self._clock, self.accept_max = store, on_store_error, clock, accept_max
        self.where = store.where  # the store's host:port (or ``memory``), for messages: never a credential
        self._answers = AESGCM(keys["result"])  # the retry-safe mode's kept answers
        self._epoch: bytes | None = None  # the store's epoch, once it answered: stamps carry it
        self._skewed: str | None = "the store has not answered yet"  # why this instance may neither mint nor accept
        self._quiet: dict[str, float] = {}  # each warning's text -> until when it is not repeated
        self._anchor = (0.0, 0.0)  # (store clock - monotonic, round trip) at the store's last answer
        self._checked = -float("inf")  # when `start` last asked the store (monotonic)
        self._noted: set[tuple[object, ...]] = set()  # the principal and scope shapes stamped in the store's epoch
        self.unrecorded: set[tuple[str, str | None]] = set()  # forms `start` records before their first token leaves
        self._unchecked: dict[bytes, bytes] = {}  # claim key -> `claim`'s `when`, accepted unchecked, until recorded
        self._down, self._recording = 0.0, asyncio.Lock()  # when this outage began (monotonic), until it answers
        if on_store_error == "accept":
            logger.warning("single use is availability first: tokens accepted unchecked while the store is unreachable")

    def retry_digest(self, method: str, params: Mapping[str, Any], state: str, principal: Principal | None) -> bytes:
        """The retry-safe mode's keyed digest of a retry (docs/formats.md); `malformed` without a canonical form.
        Threat: hostile params stall the loop in the (pure Python) canonical form: over `MAX_RETRY_INPUT`, b""."""
        asked = {name: value for name, value in params.items() if name not in _UNASKED}
        budget, items = cfg.MAX_RETRY_INPUT, list[Any]([asked])  # spent by a lower bound of the JSON's length
        while items and budget >= 0:  # tuples, not unions, for isinstance: the walk takes half the time
            item = items.pop()  # each value takes a character at least; a string its own, a container a separator each
            budget -= 1 + len(item) if isinstance(item, (str, dict, list)) else 1
            if budget >= 0 and isinstance(item, (dict, list)):
                items += [*item, *item.values()] if isinstance(item, dict) else item
        if budget < 0:
            return b""
        retry = {"method": method, "params": asked, "principal": list(principal or (None, None, None)), "state": state}
        try:
            canonical = canonical_json()(retry)
        except (ValueError, TypeError):
            raise InvalidToken(Reason.MALFORMED) from None
        return mac(self._macs["retry"], canonical)

    def seal_answer(self, key: bytes, retry: bytes, data: bytes) -> bytes:
        """An answer's JSON encrypted and authenticated for this claim and retry alone: nonce, ciphertext and tag."""
        nonce = os.urandom(_NONCE)
        return nonce + self._answers.encrypt(nonce, data, _ANSWER_AAD + key + retry)

    def open_answer(self, key: bytes, retry: bytes, sealed: bytes) -> dict[str, Any]:
        """What `seal_answer` kept for this claim and retry; `InvalidToken(SEAL)` for anything else (moved, altered)."""
        try:
            answer: dict[str, Any] = json.loads(self._answers.decrypt(sealed[:_NONCE], sealed[_NONCE:],
                                                                      _ANSWER_AAD + key + retry))
        except (InvalidTag, ValueError):
            raise InvalidToken(Reason.SEAL) from None
        return answer

    async def keep(self, key: bytes, retry: bytes, data: bytes, within: float) -> bool:
        """Keep `data`, sealed, beside the claim `retry` made; False: claim gone, or over `within` s old (its clock)."""
        sealed, within_ms = self.seal_answer(key, retry, data), round(within * 1000)
        return await bounded(self.store, self.store.keep(key=key, retry=retry, result=sealed, within_ms=within_ms))

    @property
    def started(self) -> bool:
        """Whether this instance may mint (else call `start` again)."""
        return self._epoch is not None and not self._skewed

    def _scope(self, kind: str, first: str | None, second: str | None) -> bytes:
        return mac(self._macs[kind], field(first) + field(second))

    def _skew(self, before: float, store_ms: int, trip: float, sure: bool = False) -> str | None:
        """Why this clock may be (`sure`: is) over `clock_skew` off the store's (the clock check); anchors `stamp`. A
        claim refuses only when `sure`: its round trip, widened by a burst's queue, proves nothing."""
        self._anchor, self._down = (store_ms / 1000 - time.monotonic(), trip), 0.0  # an answer ends an outage
        offset = before + trip / 2 - store_ms / 1000  # this clock minus the store's, within +- trip / 2
        if abs(offset) + (-trip if sure else trip) / 2 <= self.clock_skew:
            return None
        way = "ahead of" if offset > 0 else "behind"
        return f"this clock is {abs(offset):.3f} s (+- {trip / 2:.3f} s, half the round trip) {way} the store's"

    def form(self, kind: str, value: str | None) -> str:
        """How the store records a token minted for a principal or client at issuer `value`, or a scope `value`."""
        return f"{kind}:{self._scope('form', kind, value).hex()}"

    async def start(self) -> None:
        """The hello (docs/single-use.md), recording `unrecorded`; failed, neither mint nor accept until one passes."""
        forms = set(self.unrecorded)  # a form added meanwhile waits for the next call
        skew_ms, ttl_ms, named = round(self.clock_skew * 1000), round(self.ttl * 1000), [self.form(*f) for f in forms]
        try:
            for _ in range(3):  # the best of three: a round trip that connected first, or met a busy moment, is wider
                before, self._checked = self._clock(), time.monotonic()
                hello = await bounded(self.store, self.store.hello(fingerprint=self._fingerprint, lifetime_ms=ttl_ms,
                                                                   skew_ms=skew_ms, forms=named))
                if not (skewed := self._skew(before, hello.now_ms, time.monotonic() - self._checked)):
                    break
            check_owner(hello.owner, self.where)
            if skewed:
                raise ConfigurationError(f"{skewed} at {self.where}, beyond the clock skew ({self.clock_skew:g} s): "
                                         "synchronise this host's time")
        except ConfigurationError as exc:  # an evicting policy, a clock, another owner: refuse until it is fixed
            self._skewed = str(exc)
            raise
        self._begin(hello.epoch, self.where)
        self._skewed = None
        self.unrecorded -= forms
        await self._record()

    async def check(self, *, first: bool = False) -> None:
        """The heartbeat (docs/single-use.md): `start`, its refusal logged; raised at the `first` unless unreachable."""
        try:
            await self.start()
        except StoreUnreachable as exc:  # its message names the store and the cause, never a credential
            self.warn(f"{exc}; tokens are refused, and none minted, until it answers")
        except Exception as exc:  # a store's bug too: the heartbeat goes on
            if first:
                raise
            cause = exc if isinstance(exc, ConfigurationError | StoreError) else f"{self.where}: {type(exc).__name__}"
            self.warn(f"single use refuses every token until this is fixed: {cause}", logging.ERROR)

    @property
    def due(self) -> bool:
        """Whether `heartbeat` s passed since `start` last asked the store."""
        return time.monotonic() - self._checked >= self.heartbeat

    def stamp(self, state: bytes, *, principal: Principal | None = None, scopes: Mapping[str, str] | None = None
              ) -> bytes:
        """`state` behind a fresh stamp recording the minting principal and `scopes` (``{"tenant": "acme"}``)."""
        issued = round(self._clock() * 1000)  # a clock step since the store last answered would misdate it
        if abs(issued / 1000 - time.monotonic() - self._anchor[0]) > self.clock_skew + self._anchor[1]:
            self._skewed = self._skewed or "this clock stepped since the store last answered"
        if self._epoch is None or self._skewed:
            raise StoreError(f"single use cannot mint at {self.where}: {self._skewed}")
        if not isinstance(state, bytes):
            raise TypeError("state must be bytes")
        client, issuer, subject = principal or (None, None, None)
        digests = [self._scope("principal", issuer, subject)] if subject else []
        digests += [self._scope("client", issuer, client)] if client else []
        for name, value in (scopes or {}).items():
            digests.append(self._scope("scope", checked("a scope name", name), checked("a scope value", value)))
        if len(digests) > _MAX_SCOPES:
            raise ConfigurationError(f"a token carries at most {_MAX_SCOPES} revocable scopes")
        # One set lookup per token: listing each token's forms made a stamp cost 8.6 us, not 7.2 (CPU time, 5,000).
        if (shape := (issuer, not subject, not client, *(scopes or ()))) not in self._noted:
            if taken := RESERVED.intersection(scopes or ()):  # `revoke --principal` would never reach such a scope
                raise ConfigurationError(f"the scope name {min(taken)} is reserved: the stamp records the minting "
                                         "principal and client itself (principal=...); choose another name")
            self.unrecorded.update([("principal", issuer)] * bool(subject) + [("client", issuer)] * bool(client))
            self.unrecorded.update(("scope", name) for name in scopes or ())
            self._noted.add(shape)  # its forms recorded, or in `unrecorded` until they are
        body = b"".join((secrets.token_bytes(16), issued.to_bytes(6), (issued + round(self.ttl * 1000)).to_bytes(6),
                         self._epoch, bytes([len(digests)]), *digests))  # each part copied once: -0.7% instructions
        return b"".join((PREFIX, b64u_encode(body + mac(self._macs["stamp"], body + state)).encode(), b".", state))

    def _parse(self, stamped: bytes) -> tuple[bytes, list[bytes], bytes]:
        """(the body, its scope digests, the state) of a stamp this key made over this state; InvalidToken otherwise."""
        head, _, rest = stamped.partition(b".") if isinstance(stamped, bytes) else (b"", b"", b"")
        encoded, dot, state = rest.partition(b".")
        body = b64u_decode(encoded.decode("ascii", "replace")) if head == PREFIX[:-1] and dot else b""
        count = body[_HEADER] if len(body) > _HEADER else _MAX_SCOPES + 1
        if count > _MAX_SCOPES or len(body) != _HEADER + 1 + _DIGEST * (count + 1):
            raise InvalidToken(Reason.MALFORMED)
        if not hmac.compare_digest(body[-_DIGEST:], mac(self._macs["stamp"], body[:-_DIGEST] + state)):
            raise InvalidToken(Reason.SEAL)
        body = body[:-_DIGEST]
        return body, [body[i : i + _DIGEST] for i in range(_HEADER + 1, len(body), _DIGEST)], state

    async def consume(self, stamped: bytes) -> bytes:
        """The state behind a stamp accepted for the first time, else `InvalidToken`. One store round trip."""
        return (await self.claim(stamped))[0]

    async def claim(self, stamped: bytes, retry: bytes = b"") -> tuple[bytes, bytes, Verdict | None]:
        """`consume`, recording the `retry` digest: (state, claim key, the store's verdict or None if unchecked)."""
        body, scopes, state = self._parse(stamped)
        key, when = mac(self._macs["claim"], body[:16]), body[16:36]  # the claim's key; its issue, expiry and epoch
        if key in self._unchecked:  # accepted unchecked here, not yet recorded: refused as the store will refuse it
            raise InvalidToken(Reason.REPLAYED)
        refusal = Reason.STORE_UNAVAILABLE
        try:
            if not self.started:  # never answered, or refused since: checked again before a token is spent
                await self.start()
            before, sent = self._clock(), time.monotonic()
            verdict = await self._claim(key, when, [*scopes, self._all], retry)
            self._skewed = self._skew(before, verdict.now_ms, time.monotonic() - sent, sure=True) or self._skewed
        except StoreUnreachable as exc:
            self._down = self._down or time.monotonic()  # this outage's bounds run until the store answers
            down = self.on_store_error == "accept" and isinstance(exc, errors.StoreDown)
            if down and len(self._unchecked) < self.accept_max and time.monotonic() - self._down < self.accept_for:
                self._unchecked[key] = when
                self.warn(f"{exc}: tokens accepted UNCHECKED (on_store_error=accept), recorded once it answers")
                if (noted := unchecked.get()) is not None:
                    noted.append(self.where)
                return state, b"", None
            self.warn(f"{exc}: tokens refused until it answers{' (availability first ended: its bounds)' * down}")
        except (StoreError, ConfigurationError) as exc:  # answered, or this instance saturated: refused in every mode
            self.warn(f"{exc}: tokens refused")
            refusal = exc.reason if isinstance(exc, StoreError) else refusal
        except Exception as exc:  # a store's bug is never a reason to accept; its message may name a secret
            self.warn(f"the store at {self.where} failed ({type(exc).__name__}): tokens refused")
        else:  # answered: outside the handlers, so no store exception is chained to a refusal
            await self._record()
            if verdict.malformed:
                logger.error("the store at %s holds malformed revocations, skipped: %s", self.where, verdict.malformed)
            self._begin(verdict.epoch, verdict.node or self.where)
            if self._skewed or verdict.outcome is Outcome.FOREIGN:
                self.warn(f"the store at {self.where}: {self._skewed or 'another store key'}: tokens refused")
            elif verdict.outcome is Outcome.FIRST or verdict.outcome is Outcome.SAME:
                return state, key, verdict
            raise InvalidToken(_VERDICTS.get(verdict.outcome, Reason.STORE_UNAVAILABLE))
        raise InvalidToken(refusal)

    def _claim(self, key: bytes, when: bytes, scopes: list[bytes], retry: bytes) -> Awaitable[Verdict]:
        return bounded(self.store, self.store.claim(
            fingerprint=self._fingerprint, key=key, epoch=when[12:], issued_ms=int.from_bytes(when[:6]),
            expires_ms=int.from_bytes(when[6:12]), lifetime_ms=round(self.ttl * 1000),
            skew_ms=round(self.clock_skew * 1000), scopes=scopes, retry=retry))

    async def _record(self) -> None:
        """Claim, together, the tokens accepted unchecked before the answer that found the store back leaves."""
        if self._recording.locked() or not self._unchecked:
            return
        async with self._recording:  # once at a time: a second would count each token as a replay let through
            pending = list(self._unchecked.items())
            done = await asyncio.gather(*(self._claim(key, when, [self._all], b"") for key, when in pending),
                                        return_exceptions=True)
        answered = {key: v for (key, _), v in zip(pending, done, strict=True) if isinstance(v, Verdict)}
        self._unchecked = {key: when for key, when in self._unchecked.items() if key not in answered}
        used = sum(verdict.outcome is Outcome.USED for verdict in answered.values())  # replays let through
        logger.log(logging.ERROR if used else logging.WARNING, "the store at %s answers: %d tokens accepted unchecked "
                   "recorded, %d replays let through, %d left", self.where, len(answered), used, len(self._unchecked))

    def _begin(self, epoch: bytes, node: str) -> None:
        """Mint under the store's `epoch`; a new one (the store lost claims, or may have) logged once, naming `node`."""
        if self._epoch is not None and epoch != self._epoch:  # before the first, nothing was stamped (nor noted)
            logger.warning("the store at %s began a new epoch (flushed, restarted, or failed over: it may lack "
                           "claims): older tokens refused", node)
            self._noted.clear()  # a store that lost its memory lost the forms too
        self._epoch = epoch

    def warn(self, message: str, level: int = logging.WARNING) -> None:
        """One line per cause per 10 s: an outage cannot flood the log, nor one cause (a stall) hide the next. A cause
        is the text without its figures: a skewed clock's offset, measured anew by each token, is one cause."""
        now, cause = time.monotonic(), re.sub(r"[0-9]+", "#", message)
        if self._quiet.get(cause, 0.0) <= now:
            logger.log(level, message)
            self._quiet = {text: until for text, until in self._quiet.items() if until > now} | {cause: now + 10}

    def _selector(self, selector: Selector) -> bytes:
        kinds = [k for k in ("principal", "client", "scope", "everything") if selector.get(k) not in {None, False}]
        issuer = selector.get("issuer")
        if len(kinds) != 1 or (issuer is not None and kinds[0] not in ("principal", "client")):
            raise ConfigurationError("name exactly one of a principal, a client (each with an issuer), a scope or all")
        if kinds[0] == "everything":
            return self._all
        if kinds[0] == "scope":
            name, value = selector["scope"]
            return self._scope("scope", checked("the scope name", name), checked("the scope value", value))
        subject = checked(f"the {kinds[0]}", selector.get(kinds[0]))
        return self._scope(kinds[0], None if issuer is None else checked("the issuer", issuer), subject)

    async def revoke(self, **selector: Unpack[Selector]) -> float:
        """Refuse everywhere each token minted until now (+ `clock_skew`) with this scope; when, in store time (s)."""
        return await self.revoke_digest(self._selector(selector))

    async def revoke_digest(self, digest: bytes) -> float:
        """`revoke` of the scope a stamp records as `digest` (`minter`)."""
        skew_ms = round(self.clock_skew * 1000)
        at_ms = await bounded(self.store, self.store.revoke(digest, fingerprint=self._fingerprint, skew_ms=skew_ms))
        return at_ms / 1000

    def minter(self, stamped: bytes, principal: Principal | None) -> bytes | None:
        """The digest `revoke` selects `principal` by (its subject, else its client) when the stamp records it as its
        minter; else None. The frozen stamp does not label its digests: a candidate is checked, never trusted."""
        client, issuer, subject = principal or (None, None, None)
        digest = self._scope("principal", issuer, subject) if subject else self._scope("client", issuer, client)
        minted = any(hmac.compare_digest(digest, scope) for scope in self._parse(stamped)[1])
        return digest if minted and (subject or client) else None

    async def lift(self, **selector: Unpack[Selector]) -> bool:
        """Undo the revocation `revoke` made with the same selector; whether there was one."""
        return await bounded(self.store, self.store.lift(self._selector(selector), fingerprint=self._fingerprint))

    async def health(self) -> dict[str, object]:
        return await bounded(self.store, self.store.health(fingerprint=self._fingerprint))

    async def aclose(self) -> None:
        await self.store.aclose()

    def __repr__(self) -> str:
        return f"SingleUse({self.store!r}, ttl={self.ttl:g}, on_store_error={self.on_store_error!r})"


class SingleUseCodec(WrapsCodec, HoldsSecrets):
    """`codec` whose tokens are accepted at most once, for synchronous code: a store's coroutines run on one loop
    thread started on first use, ended by `close` (docs/single-use.md, "Any framework")."""

    __slots__ = ("_closed", "_loop", "codec", "guard")

    def __init__(self, codec: Codec, guard: SingleUse) -> None:
        self.codec, self.guard, self._closed = codec, guard, threading.Lock()
        self._loop = LoopThread("statecodec-single-use")  # started by its first coroutine, never here

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """`coroutine`'s result, run as the guard's are (e.g. ``codec.run(codec.guard.revoke(...))``)."""
        if self._closed.locked():  # a stopped loop would never answer: the caller would wait forever
            coroutine.close()
            raise StoreError("this SingleUseCodec is closed")
        return self._run(coroutine)

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        # MemoryStore does no I/O, so its coroutines never suspend: run to their end here, a token skips a hand-off to
        # a loop thread and back (9x a BoundCodec pair; benchmarks/single_use_cost.py). Its lock keeps it safe from any
        # thread. Only that exact class: a subclass may do I/O, and a started coroutine cannot move to a loop.
        if type(self.guard.store) is not MemoryStore:
            return self._loop.submit(coroutine).result()  # a store that does I/O binds its connections to this one loop
        return finish(coroutine)

    def seal(self, state: bytes, *, principal: str | Principal | None = None, scopes: Mapping[str, str] | None = None,
             **kwargs: Any) -> str:
        """A str `principal` is bound by the inner codec and recorded as the subject; a triple is recorded only."""
        if isinstance(principal, str):
            kwargs["principal"], principal = principal, (None, None, principal)
        if not self.guard.started or self.guard.due or self._closed.locked():  # no lifespan: its heartbeat, on use
            self.run(self.guard.start())
        stamped = self.guard.stamp(state, principal=principal, scopes=scopes)
        if self.guard.unrecorded:  # a form new to this process: recorded before its first token leaves
            self.run(self.guard.start())
        return self.codec.seal(stamped, **kwargs)

    def unseal(self, token: str, **kwargs: Any) -> bytes:
        if self.guard.due:
            self.run(self.guard.check())
        return self.run(self.guard.consume(self.codec.unseal(token, **kwargs)))

    def close(self) -> None:
        if self._closed.acquire(blocking=False):  # once, whichever thread calls first
            try:
                self._run(self.guard.aclose())
            finally:
                self._loop.close()

    def __repr__(self) -> str:
        return f"SingleUseCodec({self.codec!r}, {self.guard!r})"
