"""Protect an MCP server's ``requestState`` with statecodec: any codec as it is, and single use.

Any codec goes to the SDK as it is (docs/deployment.md); the SDK is imported when called, never on import.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from statecodec._settings import seconds, setting
from statecodec.config import RELOAD_VAR, TTL_VAR, codec_from_env, ttl_setting
from statecodec.errors import ConfigurationError, InvalidToken, Reason, StoreError, StoreUnreachable, missing_extra
from statecodec.retry_safe import DEFAULT_RESULT_MAX, RetrySafe, retry_safe_settings
from statecodec.single_use import SingleUse
from statecodec.store import Verdict

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.request_state import RequestStateSecurity
    from mcp.shared.exceptions import MCPError

__all__ = ["SingleUseMiddleware", "security_from_env", "single_use_from_env"]

logger = logging.getLogger("statecodec.mcp")
T = TypeVar("T")
Scopes = Callable[["ServerRequestContext[Any, Any]"], Mapping[str, str]]

REJECTED = "requestState rejected on %s: %s"  # the SDK boundary's log line too: `statecodec.otel` counts both
REFUSED = {"reason": "invalid_request_state"}  # the data of the SDK's frozen -32602 refusal


def security_from_env(*, ttl: float | None = None, audience: str | None = None,
                      environ: Mapping[str, str] | None = None, **options: Any) -> RequestStateSecurity:
    """The SDK's `RequestStateSecurity` around `codec_from_env(environ)`, `ttl` defaulting to ``STATECODEC_TTL`` (as
    single use does); `ConfigurationError` naming what to set, or `ImportError` naming the extra, before any start."""
    try:
        from mcp.server.request_state import RequestStateSecurity
    except ImportError as exc:
        raise missing_extra("mcp", "mcp", "statecodec.mcp") from exc
    settings = os.environ if environ is None else environ
    configured = ttl_setting(settings)
    if ttl is not None and ttl > configured and setting(settings, RELOAD_VAR, required=False) is not None:
        raise ConfigurationError(f"ttl={ttl:g} outlives {TTL_VAR} ({configured}), which a reloading codec waits out "
                                 f"before it drops a key: set {TTL_VAR}={ttl:g} and pass no ttl")
    return RequestStateSecurity(codec=codec_from_env(settings), ttl=configured if ttl is None else ttl,
                                audience=audience, **options)


class SingleUseMiddleware:
    """SDK server middleware: each ``requestState`` is accepted at most once across the fleet, and revocable.

    It runs after the SDK's `RequestStateBoundary` only (`lifespan` refuses any other order), waits for the store on the
    event loop under one `deadline`, and records the minting principal and `scopes(ctx)` in the stamp. A refusal is the
    SDK's own -32602 answer, its reason code logged only. Threats and set-up: docs/single-use.md.
    """

    def __init__(self, guard: SingleUse, *, deadline: float | None = None, scopes: Scopes | None = None,
                 retry_safe: bool = False, max_result: int = DEFAULT_RESULT_MAX) -> None:
        from mcp_types.methods import INPUT_REQUIRED_METHODS, is_input_required

        self.guard, self.scopes = guard, scopes
        self.retry_safe = RetrySafe(guard, max_result=max_result) if retry_safe else None  # docs/single-use.md
        if deadline is None:  # twice a network store's bound (0.25 s: its default); a 0 or NaN is refused, not replaced
            deadline = 2 * getattr(guard.store, "timeout", 0.25)
        self.deadline = seconds("deadline", deadline, low=0, high=60, low_open=True)
        self._methods, self._is_input_required = INPUT_REQUIRED_METHODS, is_input_required
        self._running = False

    @asynccontextmanager
    async def lifespan(self, server: Any) -> AsyncIterator[dict[str, Any]]:
        """``lifespan=`` of `MCPServer` or `Server`: checks the middleware order, starts the store, closes it."""
        from mcp.server.request_state import RequestStateBoundary

        mine = [i for i, middleware in enumerate(server.middleware) if middleware is self]
        boundaries = [i for i, item in enumerate(server.middleware) if isinstance(item, RequestStateBoundary)]
        if not mine or not boundaries or min(mine) < max(boundaries):
            raise ConfigurationError("SingleUseMiddleware must come after the SDK's RequestStateBoundary in "
                                     "server.middleware (it must see verified state only): pass it to "
                                     "MCPServer(middleware=[...]); on a lowlevel Server, append it last")
        self._running = True
        try:
            await self._start()
            yield {}
        finally:
            self._running = False
            await self.guard.aclose()

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method not in self._methods:
            return await call_next(ctx)
        if not self._running:  # no lifespan: nothing checked the order or started the store
            logger.error("SingleUseMiddleware on %s was never started: pass lifespan=single_use.lifespan", ctx.method)
            raise _mcp_error()
        state = (ctx.params or {}).get("requestState")
        if isinstance(state, str) and self.retry_safe:
            try:
                return await self.retry_safe.step(self, ctx, state, call_next)
            except InvalidToken as exc:  # the mode's own refusals; a handler's exceptions reach the client as MCPErrors
                raise refusal(ctx.method, exc.reason) from None
        if isinstance(state, str):  # the boundary refused any other type, and turned null into absent
            ctx = replace(ctx, params={**(ctx.params or {}), "requestState": (await self.claim(ctx.method, state))[0]})
        return await self.answer(ctx, call_next)

    async def answer(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The handler's result, its outgoing state stamped."""
        result = await call_next(ctx)
        out = result.get("requestState") if isinstance(result, Mapping) else getattr(result, "request_state", None)
        if not self._is_input_required(result) or not isinstance(out, str):
            return result
        stamped = await self._stamp(ctx, out)
        if isinstance(result, Mapping):
            return {**result, "requestState": stamped}
        return result.model_copy(update={"request_state": stamped})

    async def claim(self, method: str, state: str, retry: bytes = b"") -> tuple[str, bytes, Verdict | None]:
        """`SingleUse.claim` of `state` under the deadline, or the frozen refusal."""
        try:
            plain, key, verdict = await self.bounded(self.guard.claim(_bytes(state), retry))
            return plain.decode("utf-8", "surrogatepass"), key, verdict
        except InvalidToken as exc:
            reason = exc.reason
        except StoreUnreachable as exc:  # past the deadline
            reason = Reason.STORE_UNAVAILABLE
            self.guard.warn(str(exc))
        raise refusal(method, reason)

    async def _stamp(self, ctx: ServerRequestContext[Any, Any], state: str) -> str:
        from mcp.server.auth.middleware.auth_context import get_access_token
        from mcp.server.auth.provider import principal_components

        if not self.guard.started:
            await self._start()
        token = get_access_token()  # the minting request's principal, whatever bind_principal is
        try:
            principal = None if token is None else principal_components(token)
            scopes = self.scopes(ctx) if self.scopes else None  # recorded at mint, never taken from a presenter
            return self.guard.stamp(_bytes(state), principal=principal, scopes=scopes).decode("utf-8", "surrogatepass")
        except StoreError as exc:  # the store never answered, or its clock is too far: no token it cannot date
            logger.error("refusing to stamp requestState on %s: %s", ctx.method, exc)
            raise _mcp_error() from None

    async def _start(self) -> None:
        try:
            await self.bounded(self.guard.start())
        except StoreUnreachable as exc:  # its message names the store and the cause, never a credential
            self.guard.warn(f"{exc}; tokens are refused, and none minted, until it answers")

    async def bounded(self, call: Awaitable[T]) -> T:
        """`call` under the one deadline covering the whole wait, on this loop; past it, `StoreUnreachable`."""
        import anyio

        with anyio.move_on_after(self.deadline):
            return await call
        raise StoreUnreachable(f"the single-use store at {self.guard.where} did not answer within {self.deadline:g} s")


def refusal(method: str, reason: Reason) -> MCPError:
    """The SDK boundary's own log line and frozen answer: a client cannot tell this refusal from any other. But
    `in_progress`, retryable, says so: only a presenter who passed every check reaches it."""
    logger.warning(REJECTED, method, reason.value, extra={"statecodec_reason": reason.value})
    if reason is Reason.IN_PROGRESS:
        return _mcp_error("requestState in progress: retry shortly", {"reason": reason.value})
    return _mcp_error("Invalid or expired requestState", dict(REFUSED))


def _mcp_error(message: str = "Internal error", data: object = None) -> MCPError:
    from mcp.shared.exceptions import MCPError
    from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

    return MCPError(INTERNAL_ERROR if data is None else INVALID_PARAMS, message, data)


def _bytes(state: str) -> bytes:
    return state.encode("utf-8", "surrogatepass")  # total: a lone surrogate in a handler's state round-trips


def single_use_from_env(environ: Mapping[str, str] | None = None) -> SingleUseMiddleware:
    """`SingleUseMiddleware` around `SingleUse.from_env(environ)`: the store and its key from the environment, and
    the retry-safe mode's settings."""
    settings = os.environ if environ is None else environ
    return SingleUseMiddleware(SingleUse.from_env(settings), **retry_safe_settings(settings))
