"""Protect an MCP server's ``requestState`` with statecodec: any codec as it is, and single use.

Any statecodec codec is the SDK's request-state codec as it is, ``RequestStateSecurity(codec=AESGCMCodec.from_env())``:
its refusals are the SDK's own `InvalidRequestState` (see `statecodec.errors.InvalidToken`), logged with the
reason code and no traceback. `security_from_env()` builds that policy from the ``STATECODEC_*`` settings, with
the ``STATECODEC_TTL`` that single use reads too. The SDK is imported when called, never on import.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from statecodec._settings import seconds
from statecodec.config import codec_from_env, ttl_setting
from statecodec.errors import ConfigurationError, InvalidToken, Reason, StoreError, StoreUnreachable
from statecodec.single_use import SingleUse

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.request_state import RequestStateSecurity
    from mcp.shared.exceptions import MCPError

__all__ = ["SingleUseMiddleware", "security_from_env", "single_use_from_env"]

logger = logging.getLogger("statecodec.mcp")
T = TypeVar("T")
Scopes = Callable[["ServerRequestContext[Any, Any]"], Mapping[str, str]]

MCP_EXTRA_HINT = "install the MCP SDK with: pip install 'statecodec[mcp]'"
REJECTED = "requestState rejected on %s: %s"
"""The SDK boundary's own log line for a refusal; ours is the same, so one reader (`statecodec.otel`) counts both."""
_WARN_EVERY = 60.0  # seconds between two warnings that the store is not answering: a brown-out logs, not floods


def security_from_env(
    *,
    ttl: float | None = None,
    audience: str | None = None,
    environ: Mapping[str, str] | None = None,
    **options: Any,
) -> RequestStateSecurity:
    """The SDK's `RequestStateSecurity` around `statecodec.codec_from_env(environ)`, `ttl` defaulting to
    ``STATECODEC_TTL`` (600 s when unset), the lifetime `single_use_from_env` gives its stamps; unset `options`
    keep the SDK's defaults. Before any server starts: `ConfigurationError` (what to set) when the environment
    describes no codec, `ImportError` naming the extra without the SDK."""
    try:
        from mcp.server.request_state import RequestStateSecurity
    except ImportError as exc:
        raise ImportError(f"statecodec.mcp needs the MCP SDK (mcp>=2.3); {MCP_EXTRA_HINT}") from exc
    settings = os.environ if environ is None else environ
    ttl = ttl_setting(settings) if ttl is None else ttl
    return RequestStateSecurity(codec=codec_from_env(settings), ttl=ttl, audience=audience, **options)


class SingleUseMiddleware:
    """SDK server middleware: each ``requestState`` is accepted at most once across the fleet, and revocable.

    Threats: a replay (each stamp is claimed once in the store); a stamp moved onto another state, or seen sealed,
    were it placed before the SDK's `RequestStateBoundary` (refused at start-up by `lifespan`); a stalled store
    holding requests or the threads a sync tool needs (one `deadline` over the whole wait, default twice the
    store's timeout, on the event loop); a revocation dodged by presenting another user's token (the stamp
    records the minting request's (client, issuer, subject), whatever ``bind_principal`` is)::

        MCPServer("billing", middleware=[single_use], lifespan=single_use.lifespan)  # single_use_from_env()

    `scopes(ctx)` names operator scopes of the minting request, e.g. ``{"tenant": "acme"}`` for ``statecodec revoke
    --scope tenant=acme``. A refusal is the SDK's own -32602 answer; the reason code goes to the log only.
    """

    def __init__(self, guard: SingleUse, *, deadline: float | None = None, scopes: Scopes | None = None) -> None:
        import mcp.shared.exceptions  # noqa: F401 - loaded here, never on the request path
        from mcp_types.methods import INPUT_REQUIRED_METHODS, is_input_required

        self.guard, self.scopes = guard, scopes
        timeout: float = getattr(guard.store, "timeout", 0.25)  # a network store's bound (0.25 s: the default)
        deadline = 2 * timeout if deadline is None else deadline  # 0 or a NaN is refused, never replaced
        self.deadline = seconds("deadline", deadline, low=0, high=60, low_open=True)
        self._methods, self._is_input_required = INPUT_REQUIRED_METHODS, is_input_required
        self._running, self._warned = False, -math.inf

    @asynccontextmanager
    async def lifespan(self, server: Any) -> AsyncIterator[dict[str, Any]]:
        """``lifespan=`` of `MCPServer` or `Server`: checks the middleware order, starts the store's memory (if the
        store is unreachable: one warning; no token minted or accepted until it answers), closes the store."""
        self.check_order(server.middleware)
        self._running = True
        try:
            await self._start()
            yield {}
        finally:
            self._running = False
            await self.guard.aclose()

    def check_order(self, chain: Sequence[object]) -> None:
        """`ConfigurationError` unless this middleware runs inside (after) every `RequestStateBoundary`."""
        from mcp.server.request_state import RequestStateBoundary

        mine = [i for i, middleware in enumerate(chain) if middleware is self]
        boundaries = [i for i, middleware in enumerate(chain) if isinstance(middleware, RequestStateBoundary)]
        if not mine or not boundaries or min(mine) < max(boundaries):
            raise ConfigurationError(
                "SingleUseMiddleware must come after the SDK's RequestStateBoundary in server.middleware (it must see "
                "verified state only): pass it to MCPServer(middleware=[...]); on a lowlevel Server, append it last"
            )

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method not in self._methods:
            return await call_next(ctx)
        state = (ctx.params or {}).get("requestState")
        if isinstance(state, str):  # the boundary refused any other type, and turned null into absent
            ctx = replace(ctx, params={**(ctx.params or {}), "requestState": await self._consume(ctx.method, state)})
        result = await call_next(ctx)
        out = result.get("requestState") if isinstance(result, Mapping) else getattr(result, "request_state", None)
        if not self._is_input_required(result) or not isinstance(out, str):
            return result
        stamped = await self._stamp(ctx, out)
        if isinstance(result, Mapping):
            return {**result, "requestState": stamped}
        return result.model_copy(update={"request_state": stamped})

    async def _consume(self, method: str, state: str) -> str:
        self._check_running(method)
        try:
            return (await self._bounded(self.guard.consume(_bytes(state)))).decode("utf-8", "surrogatepass")
        except InvalidToken as exc:
            reason = exc.reason
        except StoreUnreachable as exc:  # past the deadline
            reason = Reason.STORE_UNAVAILABLE
            self._warn(str(exc))
        raise _refusal(method, reason)

    async def _stamp(self, ctx: ServerRequestContext[Any, Any], state: str) -> str:
        from mcp.server.auth.middleware.auth_context import get_access_token
        from mcp.server.auth.provider import principal_components

        self._check_running(method := ctx.method)
        if not self.guard.started:
            await self._start()
        token = get_access_token()  # the minting request's principal, whatever bind_principal is
        try:
            principal = None if token is None else principal_components(token)
            scopes = self.scopes(ctx) if self.scopes else None  # recorded at mint, never taken from a presenter
            stamped = self.guard.stamp(_bytes(state), principal=principal, scopes=scopes)
        except StoreError as exc:  # the store never answered, or its clock is too far: no token it cannot date
            logger.error("refusing to stamp requestState on %s: %s", method, exc)
            raise _internal_error() from None
        return stamped.decode("utf-8", "surrogatepass")

    async def _start(self) -> None:
        """`guard.start()` under the deadline; a store that cannot be reached is a warning, rate-limited."""
        try:
            await self._bounded(self.guard.start())
        except StoreUnreachable as exc:  # its message names the store and the cause, never a credential
            self._warn(f"{exc}; tokens are refused, and none minted, until it answers")

    async def _bounded(self, call: Awaitable[T]) -> T:
        """`call` under the one deadline covering the whole wait, on this loop; past it, `StoreUnreachable`."""
        import anyio

        with anyio.move_on_after(self.deadline):
            return await call
        raise StoreUnreachable(f"the single-use store at {self.guard.where} did not answer within {self.deadline:g} s")

    def _warn(self, message: str) -> None:
        if time.monotonic() - self._warned >= _WARN_EVERY:
            self._warned = time.monotonic()
            logger.warning(message)

    def _check_running(self, method: str) -> None:
        if not self._running:
            logger.error("SingleUseMiddleware on %s was never started: pass lifespan=single_use.lifespan", method)
            raise _internal_error()


def _refusal(method: str, reason: Reason) -> MCPError:
    """The SDK boundary's frozen answer, so a client cannot tell this refusal from any other; the reason is logged."""
    logger.warning(REJECTED, method, reason.value, extra={"statecodec_reason": reason.value})
    return _internal_error("Invalid or expired requestState", {"reason": "invalid_request_state"})


def _internal_error(message: str = "Internal error", data: object = None) -> MCPError:
    from mcp.shared.exceptions import MCPError
    from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

    return MCPError(INTERNAL_ERROR if data is None else INVALID_PARAMS, message, data)


def _bytes(state: str) -> bytes:
    return state.encode("utf-8", "surrogatepass")  # total: a lone surrogate in a handler's state round-trips


def single_use_from_env(environ: Mapping[str, str] | None = None) -> SingleUseMiddleware:
    """`SingleUseMiddleware` around `SingleUse.from_env(environ)`: the store and its key from the environment."""
    return SingleUseMiddleware(SingleUse.from_env(environ))
