"""Protect an MCP server's ``requestState``: the one place a server's settings become its parts.

Threat: parts built from settings read in several places disagree, and background work started by a constructor
outlives its owner or breaks in a forked worker. `from_env` reads the settings once; `Protection.lifespan` owns every
background task (docs/deployment.md). The SDK is imported when called, never on import.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from statecodec import _settings as cfg
from statecodec._types import Codec
from statecodec.config import check_names, codec_from_env
from statecodec.errors import ConfigurationError, needs_extra
from statecodec.keys import KeyRing
from statecodec.middleware import Scopes, SingleUseMiddleware, logger, sdk_server  # one logger: statecodec.mcp
from statecodec.reload import ReloadingCodec, Report
from statecodec.single_use import SingleUse
from statecodec.store import REDIS_SCHEMES, MemoryStore, Store

if TYPE_CHECKING:
    from mcp.server.request_state import RequestStateSecurity

__all__ = ["Protection", "SingleUseMiddleware", "from_env", "guard_from_env", "security_from_env",
           "single_use_from_env", "store_from_env"]


def store_from_env(environ: Mapping[str, str] | None = None) -> Store:
    """The store ``STATECODEC_STORE_URL`` names: ``memory`` for one process, or a Redis URL (docs/single-use.md)."""
    settings = os.environ if environ is None else environ
    url, source = cfg.store_url(settings)
    if url is None:
        raise ConfigurationError(f"{cfg.STORE_URL_VAR} is not set; set it to redis://host:6379/0 (a fleet) or memory")
    if url == "memory" and cfg.store_replicas(settings):
        raise ConfigurationError(f"{cfg.REPLICAS_VAR} is set but the in-process store has no replicas; unset it")
    if url == "memory":
        return MemoryStore(namespace=cfg.namespace(settings))
    if url.partition("://")[0] not in REDIS_SCHEMES:  # no part of it is echoed: it may hold a password
        schemes = ", ".join(f"{scheme}://" for scheme in REDIS_SCHEMES)
        raise ConfigurationError(f"{source} must be memory or a URL starting {schemes} (its text is not shown)")
    timeout = cfg.store_timeout(settings)
    from statecodec.redis_store import RedisStore  # needs the redis extra; imported only when configured

    return RedisStore.from_url(url, namespace=cfg.namespace(settings), timeout=timeout,
                               replicas=cfg.store_replicas(settings))


def guard_from_env(environ: Mapping[str, str] | None = None, *, store: Store | None = None) -> SingleUse:
    """The single-use guard the environment describes (settings: docs/single-use.md), over `store` if given."""
    settings = os.environ if environ is None else environ
    check_names(settings)
    ring = KeyRing.from_env(cfg.STORE_KEY_VAR, settings)
    if len(ring) != 1:
        raise ConfigurationError(f"{cfg.STORE_KEY_VAR} holds {len(ring)} keys; the store key is one key")
    return SingleUse(store or store_from_env(settings), key=ring, ttl=cfg.ttl(settings), **cfg.on_store_error(settings))


def single_use_from_env(environ: Mapping[str, str] | None = None, *, scopes: Scopes | None = None
                        ) -> SingleUseMiddleware:
    """`SingleUseMiddleware` around `guard_from_env(environ)`, in the retry-safe mode its settings ask for."""
    settings = os.environ if environ is None else environ
    return SingleUseMiddleware(guard_from_env(settings), scopes=scopes, **cfg.middleware(settings))


def security_from_env(*, ttl: float | None = None, audience: str | None = None,
                      environ: Mapping[str, str] | None = None, **options: Any) -> RequestStateSecurity:
    """The SDK's `RequestStateSecurity` around `codec_from_env(environ)`, `ttl` defaulting to ``STATECODEC_TTL``;
    a reloading codec, which needs the lifespan `from_env` gives, is refused."""
    settings = os.environ if environ is None else environ
    if cfg.reload_interval(settings) is not None:
        raise ConfigurationError(f"{cfg.RELOAD_VAR}: a reloading codec's watcher runs in the server's lifespan; build "
                                 "the server with statecodec.mcp.from_env() and pass its lifespan (docs/rotation.md)")
    return _security(codec_from_env(settings), settings, ttl, audience, options)


def _security(codec: Codec, settings: Mapping[str, str], ttl: float | None, audience: str | None,
              options: dict[str, Any]) -> RequestStateSecurity:
    with needs_extra("mcp", "mcp", "statecodec.mcp"):
        from mcp.server.request_state import RequestStateSecurity
    configured = cfg.ttl(settings)
    if ttl is not None and ttl > configured and isinstance(codec, ReloadingCodec):
        raise ConfigurationError(f"ttl={ttl:g} outlives {cfg.TTL_VAR} ({configured}), which a reloading codec waits "
                                 f"out before it drops a key: set {cfg.TTL_VAR}={ttl:g} and pass no ttl")
    return RequestStateSecurity(codec=codec, ttl=configured if ttl is None else ttl, audience=audience, **options)


class Protection:
    """What `from_env` builds: pass `security` as ``request_state_security=``, `middleware` as ``middleware=`` (a
    lowlevel `Server` appends it after its boundary; a `FastMCP` server takes none: its lifespan appends it) and
    `lifespan` as ``lifespan=``, which puts the metrics first."""

    def __init__(self, codec: Codec, security: RequestStateSecurity, single_use: SingleUseMiddleware | None = None,
                 report: Report | None = None, metrics: Any = None) -> None:
        self.codec, self.security, self.single_use, self.report = codec, security, single_use, report
        self.middleware: list[Any] = [] if single_use is None else [single_use]
        self.metrics, self._entries, self._stop = metrics, 0, asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None

    @asynccontextmanager
    async def lifespan(self, server: Any) -> AsyncIterator[dict[str, Any]]:
        """Start the store (checking the middleware order) and the watcher with its heartbeat; stop both at exit.
        The SDK enters a lowlevel `Server`'s lifespan once per connection: the first entry starts, the last stops."""
        if self.metrics is not None and self.metrics not in (chain := sdk_server(server).middleware):
            chain.insert(0, self.metrics)  # before the SDK's boundary: it counts that one's refusals
        async with nullcontext() if self.single_use is None else self.single_use.lifespan(server):
            if self._entries == 0 and isinstance(self.codec, ReloadingCodec):
                self._stop = asyncio.Event()
                self._watcher = asyncio.create_task(self.codec.watch(self.report, self._stop))
            self._entries += 1
            try:
                yield {}
            finally:
                self._entries -= 1
                if self._entries == 0 and self._watcher is not None:
                    self._stop.set()
                    await asyncio.wait([self._watcher])


def from_env(environ: Mapping[str, str] | None = None, *, ttl: float | None = None, audience: str | None = None,
             scopes: Scopes | None = None, metrics: bool = False, meter: Any = None, **options: Any) -> Protection:
    """Everything a server's environment describes, checked before anything starts: the codec, single use when its
    settings ask for it, and with `metrics` the OpenTelemetry counter (docs/deployment.md)."""
    settings = cfg.Settings(os.environ if environ is None else environ)
    codec = codec_from_env(settings)
    security = _security(codec, settings, ttl, audience, options)
    single_use = single_use_from_env(settings, scopes=scopes) if cfg.single_use_wanted(settings) else None
    report = None
    if isinstance(codec, ReloadingCodec) and codec.interval and cfg.store_url(settings)[0] is not None:
        from statecodec.registry import Reporter, registry_for

        # A connection of its own, so the heartbeat never waits behind claims; none beside the in-process store, which
        # no other process reads.
        registry = registry_for(store_from_env(settings))
        if registry is not None:
            report = Reporter(registry, cfg.instance_name(settings), lifetime=3 * codec.interval + 1)  # gone: 3 polls
        if single_use is None:  # a store key whose secret did not mount must not pass unnoticed
            logger.warning("single use is off: %s is not set; %s serves the fleet registry only", cfg.STORE_KEY_VAR,
                           cfg.STORE_URL_VAR)
    counter = None
    if metrics:
        from statecodec.otel import RequestStateMetrics

        counter = RequestStateMetrics(meter)
    return Protection(codec, security, single_use, report, counter)
