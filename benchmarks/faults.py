"""Single use through every fault: real Redis processes, concurrent flows and a replay attacker (not a unit test).

Each row starts what it needs on free loopback ports (a `redis-server`, a 3-master/3-replica Cluster, or
`MCPServer` processes built from `examples/fleet_server.py` with a slow two-round tool), drives two-round flows
(minted on one instance, presented on another) while an attacker presents tokens already consumed, injects one
fault, and counts what came of it: replays accepted, steps run twice, genuine flows refused (by reason), refused
tokens spent afterwards, `in_progress` answers, event-loop lag. Every process it starts is stopped by its PID, on
failure too. It prints one table: fault | required | measured | held?

Most rows drive the single-use guard in this process (each "instance" is a `SingleUse` over its own connection
pool, as `statecodec.mcp.guard_from_env` builds it), which is where every count above is decided; the rows about
the retry-safe mode's handler and the event loop go through whole servers over the 2026 streamable-HTTP wire.

A row whose guarantee needs a setting that does not exist yet sets it only when `statecodec.config.known_settings`
knows its name (each row names its own), so the row turns green, unchanged, once the feature lands; meanwhile it
runs without and prints what it measures today. Settings of the `STATECODEC_` family given in this process's
environment are not passed on: each row says what it sets.

Run: ``python benchmarks/faults.py [--short] [--only ROW ...]`` (``--list`` names the rows); ``--short`` is what
tests/integration/test_faults.py runs in CI: smaller counts and shorter faults.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the test helpers are imported from the checkout
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from mcp.server.mcpserver import Context  # noqa: E402
from tests.integration.fleet_harness import (  # noqa: E402
    KEEPALIVE_EXPIRY_S,
    PROTOCOL_VERSION,
    FleetServer,
    call_tool,
    ready,
    server_env,
)
from tests.plugins import free_port, free_port_with  # noqa: E402
from tests.plugins.redis import REDIS_CLI, RedisServer, shard  # noqa: E402

from statecodec import format_keys, generate_key  # noqa: E402
from statecodec.config import known_settings  # noqa: E402
from statecodec.errors import ConfigurationError, InvalidToken, StoreError  # noqa: E402
from statecodec.keys import KeyRing  # noqa: E402
from statecodec.mcp import guard_from_env  # noqa: E402
from statecodec.redis_store import RedisStore  # noqa: E402
from statecodec.single_use import SingleUse  # noqa: E402
from statecodec.store import Outcome  # noqa: E402

STORE_KEY, CODEC_KEYS = format_keys([generate_key()]), format_keys([generate_key()])
NAMESPACE = "statecodec"  # the default: the Cluster rows find the shard that holds it
ACCEPTED, SAME_KEPT, IN_PROGRESS = "accepted", "answered again", "in_progress"


# --- processes ---------------------------------------------------------------------------------------------------


class Node(RedisServer):
    """A `RedisServer` this suite can also kill (SIGKILL) and restart on the same port and directory."""

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def kill(self) -> None:
        if self._proc is not None:
            os.kill(self._proc.pid, signal.SIGCONT)
            self._proc.kill()
            self._proc.wait(timeout=10)
            self._proc = None

    def info(self, section: str) -> dict[str, str]:
        lines = self.cli("INFO", section).splitlines()
        return dict(line.split(":", 1) for line in lines if ":" in line)


@contextlib.contextmanager
def redis(*extra: str) -> Iterator[Node]:
    node = Node(extra=list(extra))
    try:
        node.start()
        yield node
    finally:
        node.close()


@contextlib.contextmanager
def cluster_with_replicas() -> Iterator[list[Node]]:
    """Three masters, each with one replica, on loopback (`redis-cli --cluster create --cluster-replicas 1`)."""
    flags = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"]
    nodes: list[Node] = []
    try:
        for _ in range(6):  # each started before the next port is chosen: no two alike
            nodes.append(Node(extra=flags, port=free_port_with(10000)))
            nodes[-1].start()
        create = [REDIS_CLI, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes), "--cluster-yes"]
        subprocess.run([*create, "--cluster-replicas", "1"], capture_output=True, timeout=60, check=True)
        until(lambda: all("cluster_state:ok" in n.cli("CLUSTER", "INFO") for n in nodes), 30, "cluster_state:ok")
        until(lambda: all(n.info("replication").get("master_link_status", "up") == "up" for n in nodes), 30,
              "every replica in sync")
        yield nodes
    finally:
        for node in nodes:
            node.close()


def until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if check():
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"not reached within {timeout:g} s: {what}")
        time.sleep(0.05)


# --- settings of features not there yet ----------------------------------------------------------------------------


def feature(name: str, value: str) -> dict[str, str]:
    """{`name`: `value`} once statecodec reads `name`, else nothing (an unknown STATECODEC_ name stops a server)."""
    return {name: value} if name in known_settings() else {}


def absent(*names: str) -> str:
    missing = [name for name in names if name not in known_settings()]
    return f" [{', '.join(missing)} not read yet]" if missing else ""


def store_env(url: str, **more: str) -> dict[str, str]:
    return {"STATECODEC_STORE_URL": url, "STATECODEC_STORE_KEY": STORE_KEY, **more}


# --- in-process instances, flows and the attacker ------------------------------------------------------------------


class Logs(logging.Handler):
    """statecodec's log records while a row runs, kept off the console."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((time.monotonic(), record.getMessage()))

    def matching(self, *words: str, since: float = 0.0) -> list[tuple[float, str]]:
        return [(t, m) for t, m in self.records if t >= since and any(w.lower() in m.lower() for w in words)]


@contextlib.contextmanager
def captured() -> Iterator[Logs]:
    logger, logs = logging.getLogger("statecodec"), Logs()
    level, propagate = logger.level, logger.propagate
    logger.addHandler(logs)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield logs
    finally:
        logger.removeHandler(logs)
        logger.setLevel(level)
        logger.propagate = propagate


@contextlib.asynccontextmanager
async def instances(count: int, env: Mapping[str, str], heartbeat: float | None = None
                    ) -> AsyncIterator[list[SingleUse]]:
    """`count` guards as `guard_from_env(env)` builds them, each over its own connections, started; closed after.
    With `heartbeat`, each re-checks the store every `heartbeat` s, as a server's lifespan does (`SingleUse.check`)."""
    guards = [guard_from_env(env) for _ in range(count)]

    async def beat(guard: SingleUse) -> None:
        while True:
            await asyncio.sleep(guard.heartbeat)
            await guard.check()

    beats = []
    try:
        for guard in guards:
            await guard.start()
            if heartbeat is not None:
                guard.heartbeat = heartbeat
                beats.append(asyncio.create_task(beat(guard)))
        yield guards
    finally:
        for task in beats:
            task.cancel()
        await asyncio.gather(*beats, return_exceptions=True)
        for guard in guards:
            with contextlib.suppress(Exception):
                await guard.aclose()


@dataclass
class Tally:
    """What a row's traffic came to."""

    accepted: Counter[bytes] = field(default_factory=Counter)  # token -> times accepted (its step ran)
    refused: Counter[str] = field(default_factory=Counter)  # genuine presentations refused, by reason
    refused_tokens: list[bytes] = field(default_factory=list)
    consumed: list[bytes] = field(default_factory=list)
    replays_tried: int = 0
    replays_accepted: int = 0
    unchecked: list[float] = field(default_factory=list)  # when a token was accepted without the check
    mint_refused: int = 0
    slowest: float = 0.0

    @property
    def double_runs(self) -> int:
        return sum(1 for times in self.accepted.values() if times > 1)

    def reasons(self) -> str:
        return ", ".join(f"{n} {r}" for r, n in self.refused.most_common()) or "none"


async def present(tally: Tally, guard: SingleUse, token: bytes, retry: bytes = b"") -> str:
    """`token` presented to `guard` (with the retry-safe mode's `retry` digest when given): accepted, answered
    again, in_progress, or the refusal's reason."""
    began = time.perf_counter()
    try:
        _, _, verdict = await guard.claim(token, retry)
    except InvalidToken as exc:
        return str(exc.reason.value)
    finally:
        tally.slowest = max(tally.slowest, time.perf_counter() - began)
    if verdict is not None and verdict.outcome is Outcome.SAME:
        return SAME_KEPT if verdict.result else IN_PROGRESS
    tally.accepted[token] += 1
    if verdict is None:
        tally.unchecked.append(time.monotonic())
    return ACCEPTED


async def mint(guard: SingleUse) -> bytes:
    """A token as the middleware mints one: the guard started first if it is not."""
    if not guard.started:
        await guard.start()
    return guard.stamp(secrets.token_bytes(24))


async def flows(tally: Tally, guards: Sequence[SingleUse], stop: asyncio.Event, workers: int = 16) -> None:
    """Two-round flows until `stop`: minted on one instance, the retry presented once on the next."""

    async def worker(i: int) -> None:
        while not stop.is_set():
            minter, presenter = guards[i % len(guards)], guards[(i + 1) % len(guards)]
            i += workers
            try:
                token = await mint(minter)
            except (StoreError, ConfigurationError):
                tally.mint_refused += 1
                await asyncio.sleep(0.05)
                continue
            outcome = await present(tally, presenter, token)
            if outcome == ACCEPTED:
                tally.consumed.append(token)
            else:
                tally.refused[outcome] += 1
                tally.refused_tokens.append(token)
            await asyncio.sleep(0.005)

    await asyncio.gather(*(worker(i) for i in range(workers)))


async def attacker(tally: Tally, guards: Sequence[SingleUse], stop: asyncio.Event) -> None:
    """Presents tokens already consumed, to any instance, until `stop`."""
    while not stop.is_set():
        if tally.consumed:
            tally.replays_tried += 1
            if await present(tally, random.choice(guards), random.choice(tally.consumed)) == ACCEPTED:
                tally.replays_accepted += 1
        await asyncio.sleep(0.003)


async def sweep(tally: Tally, guards: Sequence[SingleUse], tokens: Sequence[bytes], passes: int = 3) -> Counter[str]:
    """Each of `tokens` presented once more, 50 at a time; those refused for a store error are tried again in up to
    `passes` passes, half a second apart (a token minted under a lost epoch stays `store_unavailable`)."""
    outcomes: dict[bytes, str] = {}
    pending = list(tokens)
    for attempt in range(passes):
        for start in range(0, len(pending), 50):
            batch = pending[start : start + 50]
            got = await asyncio.gather(*(present(tally, guards[(attempt + i) % len(guards)], t)
                                         for i, t in enumerate(batch)))
            outcomes.update(zip(batch, got, strict=True))
        pending = [t for t in pending if outcomes[t] in ("store_unavailable", "store_busy")]
        if not pending:
            break
        await asyncio.sleep(0.5)
    return Counter(outcomes.values())


@contextlib.asynccontextmanager
async def traffic(tally: Tally, guards: Sequence[SingleUse], *, workers: int = 16) -> AsyncIterator[None]:
    """Flows and the attacker running in the background for the block's duration."""
    stop = asyncio.Event()
    running = asyncio.gather(flows(tally, guards, stop, workers), attacker(tally, guards, stop))
    try:
        yield
    finally:
        stop.set()
        await running


# --- rows ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    fault: str
    required: str
    measured: str
    held: bool
    invariants: dict[str, bool] = field(default_factory=dict)  # what CI asserts: holds on main, never a timing


@dataclass(frozen=True)
class Scale:
    short: bool

    def __call__(self, full: float, short: float) -> float:
        return short if self.short else full

    def n(self, full: int, short: int) -> int:
        return short if self.short else full


async def failover(scale: Scale, durable: bool) -> Row:
    """A replica cut off from its master (SIGSTOP, its replication connection closed) while claims land, then the
    master killed and the replica promoted (`CLUSTER FAILOVER TAKEOVER`). Durability setting:
    STATECODEC_STORE_REPLICAS (claims acknowledged by that many replicas), set only once statecodec reads it."""
    durability = feature("STATECODEC_STORE_REPLICAS", "1") if durable else {}
    cut_s = scale(3.0, 1.0)
    with cluster_with_replicas() as nodes, captured() as logs:
        master, replica = shard(nodes, f"{{{NAMESPACE}}}:meta")  # as each node reports itself: gossip may lag
        env = store_env(f"redis+cluster://127.0.0.1:{nodes[0].port}", STATECODEC_STORE_TIMEOUT="1", **durability)
        tally = Tally()
        async with instances(3, env) as guards:
            async with traffic(tally, guards, workers=8):
                await asyncio.sleep(scale(1.0, 0.5))
                replica.pause()  # it reads what its socket already holds when it resumes: then the master drops it
                master.cli("CLIENT", "KILL", "TYPE", "replica")
                cut = time.monotonic()
                await asyncio.sleep(cut_s)
                master.kill()
                replica.resume()
                replica.cli("CLUSTER", "FAILOVER", "TAKEOVER")
                await asyncio.to_thread(until, lambda: replica.info("replication")["role"] == "master", 30, "promoted")
                promoted = time.monotonic()
                await asyncio.sleep(scale(3.0, 2.0))
            final = await sweep(tally, guards, list(tally.accepted))
        epochs = logs.matching("epoch", "lost its memory", "promoted", "replication id", since=cut)
        named = logs.matching("NOREPLICAS", "replica", since=cut)
    refused_after = tally.reasons()
    measured = (f"{tally.replays_accepted} of {tally.replays_tried} replays accepted, {tally.double_runs} steps run "
                f"twice ({final[ACCEPTED]} consumed tokens accepted again in the final pass); {len(epochs)} "
                f"new-epoch log lines for 3 instances; genuine refused: {refused_after}; promoted "
                f"{promoted - cut:.1f} s after the cut began")
    if durable:
        measured += f"; {len(named)} log lines naming the replicas" + absent("STATECODEC_STORE_REPLICAS")
        held = tally.replays_accepted == 0 and tally.double_runs == 0 and bool(durability) and bool(named)
        return Row("Cluster failover after a 3 s replication cut, durability setting",
                   "0 replays; genuine flows refused only while the shard has no replica, cause named", measured, held)
    held = tally.replays_accepted == 0 and tally.double_runs == 0 and len(epochs) == 3
    return Row("Cluster failover after a 3 s replication cut, default settings",
               "0 replays accepted, 0 double runs; the new epoch logged once per instance", measured, held)


async def burst(scale: Scale, count: int) -> Row:
    """`count` presentations at once to one instance over a healthy Redis (its 100 pooled connections)."""
    count = scale.n(count, count // 5)
    with redis() as node:
        tally = Tally()
        async with instances(2, store_env(node.url)) as (minter, presenter):
            tokens = [await mint(minter) for _ in range(count)]
            outcomes = Counter(await asyncio.gather(*(present(tally, presenter, t) for t in tokens)))
            refused = [t for t in tokens if tally.accepted[t] == 0]
            later = await sweep(tally, [presenter], refused[:50])  # one at a time: a refused token is not spent
            taken = [t for t in tokens if tally.accepted[t]]
            again = await sweep(tally, [presenter], taken)  # each token accepted at most once
    share = outcomes[ACCEPTED] / count
    measured = (f"{outcomes[ACCEPTED]} of {count} accepted ({share:.0%}); refused: "
                f"{', '.join(f'{n} {r}' for r, n in outcomes.items() if r != ACCEPTED) or 'none'}; "
                f"{later[ACCEPTED]} of {len(refused[:50])} refused ones accepted when re-sent one at a time; "
                f"{again[ACCEPTED]} of the {len(taken)} accepted ones accepted when presented again")
    retryable = all(r in (ACCEPTED, "store_busy") for r in outcomes)
    held = (share == 1.0 if count <= 1000 else share >= 0.95 and retryable) and again[ACCEPTED] == 0
    once = max(tally.accepted.values()) == 1 and again[ACCEPTED] == 0
    return Row(f"{count:,} simultaneous presentations, healthy Redis",
               "1,000: all accepted; 2,000: at least 95% accepted, the rest refused with the retryable reason; "
               "each token accepted at most once", measured, held, {"each token accepted at most once": once})


async def stall(scale: Scale) -> Row:
    """SIGSTOP on the redis-server for 5 s while retries (plain and retry-safe) are presented; after SIGCONT, the
    same retries again: none may find its token spent, nor `in_progress` for a step that never ran."""
    count, stall_s = scale.n(200, 40), scale(5.0, 1.5)
    with redis() as node:
        tally = Tally()
        async with instances(2, store_env(node.url)) as (minter, presenter):
            plain = [await mint(minter) for _ in range(count)]
            safe = [await mint(minter) for _ in range(count)]
            digests = [secrets.token_bytes(32) for _ in safe]
            node.pause()
            try:
                await asyncio.sleep(0.2)
                during = Counter(await asyncio.gather(*(present(tally, presenter, t) for t in plain),
                                                      *(present(tally, presenter, t, d) for t, d in zip(safe, digests,
                                                                                                        strict=True))))
                await asyncio.sleep(max(0.0, stall_s - 0.2 - tally.slowest))
            finally:
                node.resume()
            await asyncio.sleep(0.5)
            refused = [t for t in plain if tally.accepted[t] == 0]
            after = await sweep(tally, [presenter], refused)
            refused_safe = [(t, d) for t, d in zip(safe, digests, strict=True) if tally.accepted[t] == 0]
            after_safe = Counter([await present(tally, presenter, t, d) for t, d in refused_safe])
    spent = after["replayed"]  # consumed by a claim that was refused
    measured = (f"during: {', '.join(f'{n} {r}' for r, n in during.items())}; after: {spent} of {len(refused)} "
                f"refused tokens found spent ({', '.join(f'{n} {r}' for r, n in after.items())}); retry-safe: "
                f"{after_safe[IN_PROGRESS]} of {len(refused_safe)} in_progress "
                f"({', '.join(f'{n} {r}' for r, n in after_safe.items())})")
    once = max(tally.accepted.values(), default=1) == 1
    return Row(f"{stall_s:g} s stall", "0 refused tokens spent afterwards; retry-safe: 0 in_progress after the stall",
               measured, spent == 0 and after_safe[IN_PROGRESS] == 0,
               {"each token accepted at most once": once, "0 refused tokens spent": spent == 0,
                "0 in_progress after the stall": after_safe[IN_PROGRESS] == 0})


async def outage(scale: Scale) -> Row:
    """Availability first: the redis-server (AOF, fsync always: its memory survives) killed for 5 s and restarted
    on the same port. Bounds, once read: STATECODEC_STORE_ACCEPT_MAX (unchecked acceptances per outage) and
    STATECODEC_STORE_ACCEPT_FOR (seconds); this row sets 50 and 2 s."""
    bounds = feature("STATECODEC_STORE_ACCEPT_MAX", "50") | feature("STATECODEC_STORE_ACCEPT_FOR", "2")
    outage_s = scale(5.0, 1.5)
    with redis("--appendonly", "yes", "--appendfsync", "always") as node, captured():
        tally = Tally()
        env = store_env(node.url, STATECODEC_STORE_ON_ERROR="accept", **bounds)
        async with instances(3, env) as guards:
            async with traffic(tally, guards, workers=8):
                await asyncio.sleep(0.5)
                node.kill()
                down = time.monotonic()
                await asyncio.sleep(outage_s)
                up = time.monotonic()
                await asyncio.to_thread(node.start)
                await asyncio.sleep(scale(2.0, 1.0))
            unchecked = [t for t in tally.unchecked if down <= t <= up]
            late = [t for t in unchecked if t > up - 1]
            during_replays = tally.replays_accepted
            again = await sweep(tally, guards, list(tally.accepted))
    measured = (f"{len(unchecked)} accepted unchecked during the outage, {len(late)} in its last second; "
                f"{during_replays} replays accepted by the attacker, {tally.double_runs} steps run twice in all (a "
                f"replay to another instance while the store is down cannot be checked: the mode's cost); after "
                f"recovery {again[ACCEPTED]} consumed tokens accepted again"
                + absent("STATECODEC_STORE_ACCEPT_MAX", "STATECODEC_STORE_ACCEPT_FOR"))
    held = again[ACCEPTED] == 0 and not late and len(unchecked) <= 3 * 50  # the bound is per instance
    return Row(f"{outage_s:g} s outage, availability first",
               "0 replays and 0 double runs after recovery; unchecked acceptances stop at the bound", measured, held)


async def flood(scale: Scale) -> Row:
    """A client's identical retries of its own flow, each answered with its 4 MB kept answer (retry-safe mode,
    STATECODEC_RETRY_RESULT_MAX raised), from another process, while other principals' retries are presented; in
    the refuse mode, then in availability first."""
    size, flood_s = scale.n(4 << 20, 1 << 20), scale(5.0, 1.5)
    measured, held = [], True
    with redis() as node:
        for mode in ("refuse", "accept"):
            tally = Tally()
            env = store_env(node.url, STATECODEC_STORE_ON_ERROR=mode)
            async with instances(2, env) as guards:
                cmd = [sys.executable, __file__, "--flood", str(size), str(flood_s)]
                flooder = subprocess.Popen(cmd, env=server_env(store_env(node.url)), stdout=subprocess.PIPE)
                try:
                    assert flooder.stdout is not None
                    await asyncio.to_thread(flooder.stdout.readline)  # its answer is kept: the flood begins
                    async with traffic(tally, guards, workers=8):
                        await asyncio.sleep(flood_s)
                    floods = (await asyncio.to_thread(flooder.communicate, timeout=60))[0].decode().strip()
                finally:
                    stop(flooder)
            bad = len(tally.unchecked) if mode == "accept" else sum(tally.refused.values())
            held = held and bad == 0
            what = "accepted unchecked" if mode == "accept" else "refused"
            measured.append(f"{mode}: {bad} of {len(tally.accepted) + sum(tally.refused.values())} other retries "
                            f"{what} ({tally.reasons()}), slowest claim {tally.slowest:.2f} s; flooder: {floods}")
    return Row("a client flooding large kept answers",
               "other principals' retries: 0 refused in refuse mode, 0 accepted unchecked in availability first",
               "; ".join(measured), held)


async def flood_main(size: int, seconds: float) -> None:
    """The flooding client's side (a process of its own): one flow, its answer kept, then the same retry again."""
    env = {**os.environ, "STATECODEC_STORE_TIMEOUT": "30"}
    async with instances(1, env) as (guard,):
        token, retry = await mint(guard), secrets.token_bytes(32)
        _, key, _ = await guard.claim(token, retry)
        await guard.keep(key, retry, secrets.token_bytes(size), 600)
        print("kept", flush=True)
        tally, end = Tally(), time.monotonic() + seconds

        async def again() -> None:
            while time.monotonic() < end:
                with contextlib.suppress(StoreError):
                    await present(tally, guard, token, retry)
                    await guard.keep(key, retry, secrets.token_bytes(size), 600)

        await asyncio.gather(*(again() for _ in range(4)))
        print(f"{tally.slowest:.2f} s slowest retry", flush=True)


async def operator(scale: Scale) -> Row:
    """`statecodec store check` and a `revoke` (which cleans up expired entries) run as an operator runs them, with
    100,000 revocations in the store, while flows run."""
    count = scale.n(100_000, 2_000)
    with redis() as node:
        env = store_env(node.url, STATECODEC_TTL="3")
        tally = Tally()
        async with instances(2, env) as guards:
            async with instances(1, env | {"STATECODEC_STORE_TIMEOUT": "30"}) as (filler,):  # setup, not the fault
                for start in range(0, count, 500):
                    await asyncio.gather(*(filler.revoke(principal=f"gone-{i}") for i in range(start, start + 500)))
            await asyncio.sleep(3.5)  # the revocations have expired: `revoke` has them to clean up
            cli_env = server_env(env | {"STATECODEC_STORE_TIMEOUT": "60"})
            took: dict[str, float] = {}
            async with traffic(tally, guards, workers=8):
                await asyncio.sleep(0.3)
                for name, args in (("store check", ["store", "check", "--json"]),
                                   ("revoke", ["revoke", "--principal", "leaver", "--force"])):
                    began = time.monotonic()
                    await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "statecodec", *args], env=cli_env,
                                            capture_output=True, timeout=300, check=False)
                    took[name] = time.monotonic() - began
                await asyncio.sleep(0.3)
            timeout = guards[0].store.deadline or 0.0
    unavailable = tally.refused["store_unavailable"] + tally.refused["store_busy"]
    measured = (f"{count:,} revocations; {unavailable} of {len(tally.accepted) + sum(tally.refused.values())} claims "
                f"refused store_unavailable/busy ({tally.reasons()}); slowest claim {tally.slowest:.3f} s (timeout "
                f"{timeout:g} s); " + ", ".join(f"{k} took {v:.1f} s" for k, v in took.items()))
    return Row(f"`store check` and `revoke` with {count:,} revocations, under load",
               "0 claims refused store_unavailable; slowest claim within the timeout", measured,
               unavailable == 0 and tally.slowest <= timeout)


async def eviction(scale: Scale) -> Row:
    """`CONFIG SET maxmemory-policy allkeys-lru` (and a `maxmemory` just above what is used) while instances run,
    each re-checking the store on a heartbeat of 1 s (`SingleUse(heartbeat=...)`; a server's default is 5 s)."""
    with redis() as node, captured() as logs:
        tally = Tally()
        async with instances(3, store_env(node.url), heartbeat=1.0) as guards:
            async with traffic(tally, guards, workers=8):
                await asyncio.sleep(scale(2.0, 1.0))
                used = int(node.info("memory")["used_memory"])
                node.cli("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
                node.cli("CONFIG", "SET", "maxmemory", str(used + 200_000))
                switched = time.monotonic()
                await asyncio.sleep(scale(4.0, 2.0))
            evicted = int(node.info("stats")["evicted_keys"])
            node.cli("CONFIG", "SET", "maxmemory", "0")
            again = await sweep(tally, guards, list(tally.accepted))
        seen = logs.matching("maxmemory", "evict", "policy", since=switched)
    detected = f"first log naming it {seen[0][0] - switched:.1f} s after" if seen else "no log line naming it"
    measured = (f"{evicted} keys evicted; {detected}; {tally.replays_accepted} of {tally.replays_tried} replays "
                f"accepted during, {again[ACCEPTED]} consumed tokens accepted again after")
    held = bool(seen) and seen[0][0] - switched <= 1.5 and tally.replays_accepted + again[ACCEPTED] == 0
    return Row("eviction policy switched while running", "detected within one heartbeat; 0 replays accepted",
               measured, held)


async def flush_then_mint(scale: Scale) -> Row:
    """FLUSHALL, then tokens minted on an instance that has not been to the store since, presented on another; each
    re-checks the store on a heartbeat of 1 s (a server's default: 5 s), the window docs/single-use.md states."""
    window_s, beat = scale(3.0, 2.0), 1.0
    with redis() as node:
        tally = Tally()
        async with instances(2, store_env(node.url), heartbeat=beat) as (minter, presenter):
            node.flush()
            flushed, refused_at = time.monotonic(), []
            while (since := time.monotonic() - flushed) < window_s:
                if await present(tally, presenter, await mint(minter)) != ACCEPTED:
                    refused_at.append(since)
                await asyncio.sleep(0.1)
    tried = len(tally.accepted) + len(refused_at)
    last = f", the last minted {refused_at[-1]:.1f} s after the flush" if refused_at else ""
    measured = f"{len(refused_at)} of {tried} tokens minted after the flush refused{last} (heartbeat {beat:g} s)"
    return Row("flush, then mint", "the docs' window holds (docs/single-use.md: at most one heartbeat)", measured,
               all(at <= beat + 0.5 for at in refused_at))  # a heartbeat, and its one round trip


async def clock_ahead(scale: Scale) -> Row:
    """An instance whose clock is 1.35 s ahead (1 s allowed) starts while Redis answers 0.5 s late (SIGSTOP)."""
    with redis() as node:
        env = store_env(node.url, STATECODEC_STORE_TIMEOUT="2")
        async with instances(1, env) as (honest,):
            ahead = SingleUse(RedisStore.from_url(node.url, namespace=NAMESPACE, timeout=2), key=_store_key(),
                              ttl=honest.ttl, clock=lambda: time.time() + 1.35)
            node.pause()
            threading.Timer(0.5, node.resume).start()
            try:
                await ahead.start()
                started, why = True, ""
            except (ConfigurationError, StoreError) as exc:
                started, why = False, str(exc)
            node.resume()
            after = "not minted"
            if started:
                token = ahead.stamp(b"state")
                await honest.revoke(everything=True)
                after = await present(Tally(), honest, token)
            await ahead.aclose()
    measured = ("refused at start: " + why) if not started else (
        f"started; its token minted before `revoke --all` is {after} afterwards")
    return Row("instance 1.35 s ahead, store slow", "refused at start", measured, not started)


def _store_key() -> bytes:
    return KeyRing.from_env("STATECODEC_STORE_KEY", {"STATECODEC_STORE_KEY": STORE_KEY})[0]


# --- rows through whole servers -----------------------------------------------------------------------------------

SLOW_TOOL = "slow_provision"


def serve_main(port: int) -> None:
    """One server (`examples/fleet_server.py`'s, settings from the environment) with a two-round tool whose final
    round takes FAULTS_STEP_S; each run is a line in FAULTS_RUNS_FILE once it finished."""
    sys.path.insert(0, str(ROOT / "examples"))
    import anyio
    import fleet_server  # type: ignore[import-not-found]
    import uvicorn

    server = fleet_server.server_for("shared", True)
    step, runs = float(os.environ["FAULTS_STEP_S"]), Path(os.environ["FAULTS_RUNS_FILE"])

    @server.tool(name=SLOW_TOOL)  # type: ignore[untyped-decorator]  # fleet_server is not typed here
    async def slow(name: str, ctx: Context[Any, Any]) -> Any:
        result = fleet_server.provisioned(name, ctx.input_responses, ctx.request_state)
        if isinstance(result, fleet_server.Provisioned):
            await anyio.sleep(step)
            with runs.open("a", encoding="utf-8") as out:
                out.write(f"{name}\n")
        return result

    os.environ["FLEET_PORT"] = str(port)
    app = fleet_server.app_for(server, "127.0.0.1")
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    sock = config.bind_socket()
    uvicorn.Server(config).run(sockets=[sock])


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL to its whole process group: by its PID, nothing else."""
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@contextlib.contextmanager
def servers(count: int, settings: Mapping[str, str], log_dir: Path) -> Iterator[list[FleetServer]]:
    processes: list[subprocess.Popen[bytes]] = []
    started: list[FleetServer] = []
    try:
        for index in range(count):
            port = free_port()
            log = log_dir / f"server-{index}-{port}.log"
            with log.open("wb") as out:
                process = subprocess.Popen([sys.executable, __file__, "--serve", str(port)], env=server_env(settings),
                                           stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                           start_new_session=True)  # fmt: skip
            processes.append(process)
            started.append(FleetServer(port, process, log))
        yield [ready(server) for server in started]
    finally:
        for process in processes:
            stop(process)


def server_settings(url: str, runs: Path, step_s: float) -> dict[str, str]:
    return store_env(url) | {
        "STATECODEC_CODEC": "aesgcm", "STATECODEC_KEYS": CODEC_KEYS,
        "STATECODEC_RETRY_SAFE": "on", "STATECODEC_STORE_TIMEOUT": "0.25", "FLEET_DEMO_AUTH": "1",
        "FAULTS_STEP_S": str(step_s), "FAULTS_RUNS_FILE": str(runs),
    }


def answers(region: str = "eu-west-1", padding: int = 0) -> dict[str, Any]:
    found: dict[str, Any] = {"region": {"action": "accept", "content": {"region": region}}}
    for i in range(padding):  # many small members: canonicalisation's cost grows with them
        found[f"pad{i}"] = {"action": "accept", "content": {"note": "x" * 40, "n": i, "more": [1, 2, 3]}}
    return found


async def slow_round_one(client: httpx.AsyncClient, server: FleetServer, subject: str, name: str) -> str:
    answer = await call_tool(client, server, SLOW_TOOL, {"name": name}, subject=subject)
    state = answer["result"]["requestState"]
    assert isinstance(state, str), answer
    return state


async def final(client: httpx.AsyncClient, server: FleetServer, state: str, subject: str, name: str,
                padding: int = 0, timeout: float | None = None) -> str:
    """The final round: complete, or the error's message."""
    call = call_tool(client, server, SLOW_TOOL, {"name": name}, subject=subject, request_state=state,
                     input_responses=answers(padding=padding))
    answer = await (asyncio.wait_for(call, timeout) if timeout else call)
    if "error" in answer:
        return str(answer["error"].get("message", answer["error"]))
    return "complete" if answer["result"].get("resultType") == "complete" else json.dumps(answer)[:80]


async def dropped_client(scale: Scale) -> Row:
    """Retry-safe: the client gives up on its final round after a quarter of the step's time, then retries the
    same on another instance every quarter step until it gets an answer."""
    step_s = scale(2.0, 1.0)
    with tempfile.TemporaryDirectory(prefix="statecodec-faults-") as tmp, redis() as node:
        runs = Path(tmp) / "runs"
        async with http_client() as client:
            with servers(2, server_settings(node.url, runs, step_s), Path(tmp)) as (first, second):
                state = await slow_round_one(client, first, "alice", "drop")
                began = time.monotonic()
                with contextlib.suppress(TimeoutError, httpx.HTTPError):
                    await final(client, first, state, "alice", "drop", timeout=step_s / 4)
                seen: Counter[str] = Counter()
                while time.monotonic() - began < 4 * step_s:
                    await asyncio.sleep(step_s / 4)
                    outcome = await final(client, second, state, "alice", "drop")
                    seen[outcome] += 1
                    if outcome == "complete":
                        break
                took = time.monotonic() - began
                await asyncio.sleep(step_s)  # a step still running may finish and be counted
                ran = runs.read_text().count("drop\n") if runs.exists() else 0
    got = seen["complete"] == 1
    measured = (f"retries answered: {', '.join(f'{n} x {o!r}' for o, n in seen.items())}; step ran {ran} time(s); "
                f"{'the answer' if got else 'no answer'} {took:.1f} s after the first try (step {step_s:g} s)")
    return Row("retry-safe, client times out mid-step, retry on another instance",
               "the kept answer, step ran once, within one step's time", measured,
               got and ran == 1 and took <= 2 * step_s)


async def big_retry(scale: Scale) -> Row:
    """Retry-safe: a consumed token's retry carrying 3.3 MB of input responses, while another client's requests
    measure how long the server's event loop is held (the health route, every 20 ms)."""
    padding = 25_300  # 3.3 MB: the size is the fault, kept in --short
    with tempfile.TemporaryDirectory(prefix="statecodec-faults-") as tmp, redis() as node:
        async with http_client() as client:
            settings = server_settings(node.url, Path(tmp) / "runs", 0.0)
            with servers(1, settings, Path(tmp)) as (server,):
                state = await slow_round_one(client, server, "mallory", "big")
                assert await final(client, server, state, "mallory", "big") == "complete"
                size = len(json.dumps(answers(padding=padding)))
                lags: list[float] = []
                done = asyncio.Event()

                async def probe() -> None:
                    async with httpx.AsyncClient(timeout=60) as prober:
                        while not done.is_set():
                            began = time.monotonic()
                            await prober.get(f"http://127.0.0.1:{server.port}/healthz")
                            lags.append(time.monotonic() - began)
                            await asyncio.sleep(0.02)

                probing = asyncio.create_task(probe())
                await asyncio.sleep(0.2)
                began = time.monotonic()
                outcome = await final(client, server, state, "mallory", "big", padding=padding)
                took = time.monotonic() - began
                done.set()
                await probing
    deadline = 2 * 0.25  # the middleware's deadline: twice STATECODEC_STORE_TIMEOUT
    lag = max(lags, default=0.0)
    measured = (f"{size / 1e6:.1f} MB retry answered {outcome[:60]!r} in {took:.2f} s; other requests' worst wait "
                f"{lag:.2f} s (deadline {deadline:g} s)")
    return Row("retry-safe, a spent token's retry with 3.3 MB of input responses",
               "refused without stalling other requests (event-loop lag within the deadline)", measured,
               outcome != "complete" and lag <= deadline, {"the spent token is refused": outcome != "complete"})


@contextlib.asynccontextmanager
async def http_client() -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=50, keepalive_expiry=KEEPALIVE_EXPIRY_S)
    headers = {"MCP-Protocol-Version": PROTOCOL_VERSION}
    async with httpx.AsyncClient(timeout=120, limits=limits, headers=headers) as client:
        yield client


# --- the table -----------------------------------------------------------------------------------------------------

ROWS: dict[str, Callable[[Scale], Awaitable[Row]]] = {
    "failover": lambda s: failover(s, durable=False),
    "failover-durable": lambda s: failover(s, durable=True),
    "burst-1000": lambda s: burst(s, 1000),
    "burst-2000": lambda s: burst(s, 2000),
    "stall": stall,
    "outage-accept": outage,
    "flood": flood,
    "operator": operator,
    "eviction": eviction,
    "flush": flush_then_mint,
    "clock-ahead": clock_ahead,
    "dropped-client": dropped_client,
    "big-retry": big_retry,
}


async def run(names: Sequence[str], short: bool) -> list[Row]:
    rows = []
    for name in names:
        try:
            with captured():  # statecodec's log lines are what rows count, not console output
                rows.append(await ROWS[name](Scale(short)))
        except Exception as exc:  # one row's failure is a row of the table, not the end of the suite
            failure = f"the row failed: {type(exc).__name__}: {exc}"[:300]
            rows.append(Row(name, "", failure, False, {"the row ran": False}))
    return rows


def table(rows: Sequence[Row]) -> str:
    lines = ["| fault | required | measured | held? |", "| --- | --- | --- | --- |"]
    lines += [f"| {r.fault} | {r.required} | {r.measured} | {'yes' if r.held else 'no'} |" for r in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--short", action="store_true", help="small counts and short faults (what CI runs)")
    parser.add_argument("--only", nargs="+", choices=list(ROWS), metavar="ROW", help="these rows only")
    parser.add_argument("--list", action="store_true", help="name the rows")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--flood", nargs=2, metavar=("BYTES", "SECONDS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve_main(args.serve)
        return 0
    if args.flood:
        asyncio.run(flood_main(int(args.flood[0]), float(args.flood[1])))
        return 0
    if args.list:
        print("\n".join(ROWS))
        return 0
    print(table(asyncio.run(run(args.only or list(ROWS), args.short))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
