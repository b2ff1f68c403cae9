"""SDK server middleware: each ``requestState`` is accepted at most once across the fleet, and revocable; in the
retry-safe mode, a lost answer costs the client nothing and the step still runs once.

Threat: an exact replay; and at-most-once refuses the retry of a client whose answer was lost. The retry-safe mode keeps
the first answer beside the claim, sealed, for the same retry alone (docs/single-use.md). A refusal is the SDK's own
-32602 answer, its reason code logged only. The SDK is imported when called, never on import.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from statecodec import _settings as cfg
from statecodec.errors import ConfigurationError, InvalidToken, Reason, StoreError
from statecodec.single_use import Principal, SingleUse, canonical_json
from statecodec.store import Outcome

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.shared.exceptions import MCPError

__all__ = ["REFUSED", "REJECTED", "SingleUseMiddleware", "answered_again", "refusal", "refused", "replays",
           "sdk_server"]

logger = logging.getLogger("statecodec.mcp")
Scopes = Callable[["ServerRequestContext[Any, Any]"], Mapping[str, str]]

REJECTED = "requestState rejected on %s: %s"  # the SDK boundary's log line too: `statecodec.otel` counts both
REFUSED = {"reason": "invalid_request_state"}  # the data of the SDK's frozen -32602 refusal
# What a presentation came to, for statecodec.otel whatever the logging set-up (it sets a list in each, read here).
answered_again: ContextVar[list[str] | None] = ContextVar("statecodec_answered_again", default=None)
refused: ContextVar[list[str] | None] = ContextVar("statecodec_refused", default=None)
replays: ContextVar[list[str] | None] = ContextVar("statecodec_replays", default=None)


class SingleUseMiddleware:
    """SDK server middleware after the SDK's `RequestStateBoundary` only (`lifespan` refuses any other order); the
    minting principal and `scopes(ctx)` go in the stamp; the other options are settings of docs/single-use.md."""

    def __init__(self, guard: SingleUse, *, scopes: Scopes | None = None, retry_safe: bool = False,
                 max_result: int = cfg.DEFAULT_RESULT_MAX, step_timeout: float = cfg.DEFAULT_STEP_TIMEOUT,
                 on_replay: str = "log", instance: str | None = None) -> None:
        from mcp_types.methods import INPUT_REQUIRED_METHODS, is_input_required

        if type(max_result) is not int or not 0 < max_result <= cfg.MAX_RESULT_MAX:  # from code or its setting
            raise ConfigurationError(f"{cfg.RESULT_MAX_VAR} must be a whole number of bytes from 1 to "
                                     f"{cfg.MAX_RESULT_MAX} (default {cfg.DEFAULT_RESULT_MAX}; max_result in code)")
        if on_replay not in ("log", "revoke"):
            raise ConfigurationError(f"{cfg.ON_REPLAY_VAR} must be log (the default) or revoke (on_replay in code)")
        self.guard, self.scopes, self.retry_safe, self.max_result = guard, scopes, retry_safe, max_result
        self.step_timeout = cfg.seconds(cfg.STEP_TIMEOUT_VAR, step_timeout, low=1, high=cfg.MAX_TTL)
        # The oldest claim (store clock) whose answer is kept, else its retry is step_lost: the step's bound, the
        # claim's answer read late, the keep's round trip, and a second of work in between (docs/single-use.md).
        self._lost_after = self.step_timeout + 2 * (guard.store.deadline or 0) + 1
        self.on_replay, self.instance = on_replay, instance or cfg.instance_name(os.environ)
        if retry_safe:
            canonical_json()  # the package every retry's digest needs: missing, the start fails
        self._methods, self._is_input_required = INPUT_REQUIRED_METHODS, is_input_required
        self._running = 0  # the lifespans entered and not yet left
        self._heartbeat: asyncio.Task[None] | None = None

    @asynccontextmanager
    async def lifespan(self, server: Any) -> AsyncIterator[dict[str, Any]]:
        """``lifespan=`` of `MCPServer`, `Server` or `FastMCP`: checks the middleware order (on FastMCP, appends
        itself after the SDK's boundary), starts the store, closes it after the last of the entries the SDK makes
        (one per connection on a lowlevel `Server`)."""
        from mcp.server.request_state import RequestStateBoundary

        chain = sdk_server(server).middleware
        if chain is not server.middleware and self not in server.middleware and self not in chain:
            chain.append(self)  # FastMCP's middleware= runs before the boundary: it would see sealed state
        mine = [i for i, middleware in enumerate(chain) if middleware is self]
        boundaries = [i for i, item in enumerate(chain) if isinstance(item, RequestStateBoundary)]
        if not mine or not boundaries or min(mine) < max(boundaries):
            raise ConfigurationError("SingleUseMiddleware must come after the SDK's RequestStateBoundary in "
                                     "server.middleware (it must see verified state only): pass it to "
                                     "MCPServer(middleware=[...]); on a lowlevel Server, append it last; on "
                                     "FastMCP, pass lifespan= alone")
        self._running += 1
        try:
            if self._running == 1:
                await self.guard.check(first=True)
                self._heartbeat = asyncio.create_task(self._beat())
            yield {}
        finally:
            self._running -= 1
            if not self._running:
                if beat := self._heartbeat:
                    self._heartbeat = None
                    beat.cancel()
                    await asyncio.wait([beat])
                await self.guard.aclose()

    async def _beat(self) -> None:
        """`check` every `guard.heartbeat` s; ends once not the lifespan's task: Redis can swallow a cancellation."""
        while self._heartbeat is asyncio.current_task():
            await asyncio.sleep(self.guard.heartbeat)
            await self.guard.check()

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method not in self._methods:
            return await call_next(ctx)
        if not self._running:  # no lifespan: nothing checked the order or started the store
            logger.error("SingleUseMiddleware on %s was never started: pass lifespan=single_use.lifespan", ctx.method)
            raise _mcp_error()
        state = (ctx.params or {}).get("requestState")
        if not isinstance(state, str):  # the boundary refused any other type, and turned null into absent
            return await self._answer(ctx, call_next)
        try:
            if self.retry_safe:
                return await self._retry_safe(ctx, state, call_next)
            plain = _text((await self.guard.claim(_bytes(state)))[0])
        except InvalidToken as exc:  # a refusal; a handler's exceptions reach the client as MCPErrors
            if exc.reason is Reason.REPLAYED:  # consumed by another presentation (the same retry is answered again)
                await self._replayed(ctx.method, state)
            raise refusal(ctx.method, exc.reason) from None
        return await self._answer(replace(ctx, params={**(ctx.params or {}), "requestState": plain}), call_next)

    async def _answer(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The handler's result, its outgoing state stamped."""
        result = await call_next(ctx)
        out = result.get("requestState") if isinstance(result, Mapping) else getattr(result, "request_state", None)
        if not self._is_input_required(result) or not isinstance(out, str):
            return result
        stamped = await self._stamp(ctx, out)
        if isinstance(result, Mapping):
            return {**result, "requestState": stamped}
        return result.model_copy(update={"request_state": stamped})

    async def _retry_safe(self, ctx: ServerRequestContext[Any, Any], state: str, call_next: CallNext) -> HandlerResult:
        """The handler's answer to this retry, run at most once per token, kept for the same retry. Threat: a client
        that goes makes the SDK cancel the step, whose retry waits for an answer no one keeps: shielded, bounded."""
        import anyio
        from mcp.shared.exceptions import MCPError
        from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
        from mcp.types import INTERNAL_ERROR, ErrorData
        from pydantic import BaseModel

        params = ctx.params or {}
        # the presenter's principal: with bind_principal=None, another presenter is another retry
        retry = self.guard.retry_digest(ctx.method, params, state, _principal())
        raw, key, verdict = await self.guard.claim(_bytes(state), retry)
        plain, keeps = _text(raw), verdict is not None and bool(retry)  # b"": over the input cap, at most once
        if verdict is None or verdict.outcome is not Outcome.SAME:  # the step runs, at most once
            with anyio.CancelScope(shield=True):
                try:
                    with anyio.fail_after(self.step_timeout) as bound:
                        result = await self._answer(replace(ctx, params={**params, "requestState": plain}), call_next)
                    if isinstance(result, BaseModel):  # as the SDK puts it on the wire: a replay is the same bytes
                        result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
                    answer = {"result": dict(result or {})}
                except Exception as exc:  # kept as the SDK answers it: an MCPError's own, else its internal error
                    error = handler_exception_to_error_data(exc)
                    if error is None:  # a step past its bound is cancelled there: TimeoutError
                        late = bound.cancel_called and f" past {cfg.STEP_TIMEOUT_VAR} ({self.step_timeout:g} s)"
                        logger.exception("the handler of %s raised%s", ctx.method, late or "")
                    error = error or ErrorData(code=INTERNAL_ERROR, message="Internal server error")
                    answer = {"error": error.model_dump(mode="json", exclude_none=True)}
                if keeps:
                    await self._keep(key, retry, answer)
        else:  # the same retry: answered with what its run kept
            if not (sealed := verdict.result):  # no answer kept yet: the first run goes on, or within its bound no more
                lost = verdict.started_ms and verdict.now_ms > verdict.started_ms + self._lost_after * 1000
                raise InvalidToken(Reason.STEP_LOST if lost else Reason.IN_PROGRESS)
            try:
                answer = self.guard.open_answer(key, retry, sealed)
            except InvalidToken:
                logger.error("a kept answer on %s did not open: altered or moved in the store", ctx.method)
                raise
            if "result" not in answer and "error" not in answer:  # over the cap when it ran: as without the mode,
                raise refusal(ctx.method, Reason.REPLAYED)  # at most once; but the same retry: no security event
            if (noted := answered_again.get()) is not None:
                noted.append(ctx.method)
        if "error" in answer:  # the first answer and its replays alike
            raise MCPError.from_error_data(ErrorData.model_validate(answer["error"]))
        kept: dict[str, Any] = answer["result"]
        return kept

    async def _replayed(self, method: str, state: str) -> None:
        """A consumed token presented again, stolen or reused against the spec: logged with the minter's keyed digest;
        with on_replay="revoke", the minter's other flows are revoked: thief and owner both lose them."""
        digest = self.guard.minter(_bytes(state), _principal())  # a candidate: named only if its keyed stamp says so
        action = "unidentified" if digest is None else "revoked" if self.on_replay == "revoke" else "off"
        try:
            if digest is not None and action == "revoked":
                await self.guard.revoke_digest(digest)
        except Exception as exc:  # the refusal stands; the owner's other flows live on, and the log says so
            action = f"failed ({exc if isinstance(exc, StoreError) else type(exc).__name__})"
        logger.warning("security event: a consumed requestState presented again on %s at instance %s (stolen, or a "
                       "client reusing it); minting principal %s; revoke: %s", method, self.instance,
                       digest.hex() if digest else "not identified", action, extra={"statecodec_event": "replay"})
        if (noted := replays.get()) is not None:
            noted.append(action.partition(" ")[0])

    async def _keep(self, key: bytes, retry: bytes, answer: dict[str, Any]) -> None:
        """One round trip; a failure is logged, never a second run: its retry is `in_progress`, then `step_lost`."""
        data = json.dumps(answer, separators=(",", ":")).encode()  # ASCII: its length in bytes is the cap's measure
        if len(data) > self.max_result:
            logger.warning("an answer over %s (%d bytes) is not kept: its retry is refused", cfg.RESULT_MAX_VAR,
                           self.max_result)
            data = b"{}"
        try:
            kept = await self.guard.keep(key, retry, data, self._lost_after)
            why = None if kept else ("the claim is gone (the store was flushed or restarted, or the token expired), or "
                                     f"older than {cfg.STEP_TIMEOUT_VAR} and the store's deadlines")
        except Exception as exc:  # the answer still goes to the client; only its retry cannot get it
            why = str(exc) if isinstance(exc, StoreError) else type(exc).__name__  # a StoreError names no secret
        if why:
            logger.error("an answer was not kept at %s (%s): its retry is refused as in progress, then step_lost after "
                         "%g s", self.guard.where, why, self._lost_after)

    async def _stamp(self, ctx: ServerRequestContext[Any, Any], state: str) -> str:
        if not self.guard.started:
            await self.guard.check()
        try:
            scopes = self.scopes(ctx) if self.scopes else None  # recorded at mint, never taken from a presenter
            stamped = self.guard.stamp(_bytes(state), principal=_principal(), scopes=scopes)  # bind_principal or not
            if self.guard.unrecorded:  # a principal form new to this process: recorded before its first token leaves
                await self.guard.start()
            return _text(stamped)
        except StoreError as exc:  # the store never answered, or its clock is too far: no token it cannot date
            logger.error("refusing to stamp requestState on %s: %s", ctx.method, exc)
            raise _mcp_error() from None


def sdk_server(server: Any) -> Any:
    """The SDK `Server` whose ``middleware`` wraps the handlers: a `FastMCP` server's own, else `server` (an
    `MCPServer`'s ``middleware`` is its lowlevel server's list). Imports no FastMCP."""
    fastmcp = sys.modules.get("fastmcp.server.server")
    if fastmcp is not None and isinstance(server, fastmcp.FastMCP):
        return server._mcp_server  # FastMCP 4 gives its lowlevel server no public name; its own transports use this
    return server


_TOLD = {Reason.IN_PROGRESS: "in progress: retry shortly", Reason.STORE_BUSY: "not checked, server busy: retry shortly",
         Reason.STEP_LOST: "step lost, no answer was kept: start the flow again"}


def refusal(method: str, reason: Reason) -> MCPError:
    """The SDK boundary's own log line and frozen answer: a client cannot tell this refusal from any other, but for
    the retryable `in_progress` and `store_busy`, and `step_lost`, which only a presenter past every check reaches."""
    logger.warning(REJECTED, method, reason.value, extra={"statecodec_reason": reason.value})
    if (noted := refused.get()) is not None:
        noted.append(reason.value)
    if reason in _TOLD:  # the same request shortly, or a new flow
        return _mcp_error(f"requestState {_TOLD[reason]}", {"reason": reason.value})
    return _mcp_error("Invalid or expired requestState", dict(REFUSED))


def _mcp_error(message: str = "Internal error", data: object = None) -> MCPError:
    from mcp.shared.exceptions import MCPError
    from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

    return MCPError(INTERNAL_ERROR if data is None else INVALID_PARAMS, message, data)


def _principal() -> Principal | None:
    """The principal of the request being served, as the SDK binds it (`principal_components`); None without a token."""
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.auth.provider import principal_components

    token = get_access_token()
    return None if token is None else principal_components(token)


def _bytes(state: str) -> bytes:
    return state.encode("utf-8", "surrogatepass")  # total: a lone surrogate in a handler's state round-trips


def _text(state: bytes) -> str:
    return state.decode("utf-8", "surrogatepass")
