"""Retry-safe single use: a lost answer costs the client nothing, and the step still runs once.

Threat: at-most-once refuses the retry of a client whose answer was lost, so operators turn single use off. Here the
first accepted presentation records a keyed digest of the whole retry in its one atomic claim, and the handler's
answer is kept beside that claim, sealed (AES-256-GCM under a key derived from the store key, bound to the claim and
the digest), until the token expires. The same retry presented again, past every other check, gets that answer
without the handler running; another retry under the token is `replayed`; one while the first still runs is
`in_progress`. Exact bytes: docs/formats.md; when to choose it: docs/single-use.md.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from cryptography.exceptions import InvalidTag

from statecodec._settings import setting
from statecodec._types import HoldsSecrets
from statecodec.errors import ConfigurationError, InvalidToken, Reason, StoreError, missing_extra
from statecodec.single_use import Principal, SingleUse
from statecodec.store import Claim, Verdict

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

__all__ = ["RetrySafe", "retry_safe_settings"]

logger = logging.getLogger("statecodec.retry_safe")
MODE_VAR, RESULT_MAX_VAR = "STATECODEC_RETRY_SAFE", "STATECODEC_RETRY_RESULT_MAX"
DEFAULT_RESULT_MAX, _HIGHEST = 65_536, 1 << 24
_UNASKED = ("_meta", "requestState")  # a new progress token or trace each retry; the state, digested apart
_AAD, _NONCE = b"statecodec/su2/result\x00", 12
# Where a kept answer notes that it answered (statecodec.otel sets a list): the step did not run for that presentation.
answered_again: ContextVar[list[str] | None] = ContextVar("statecodec_answered_again", default=None)
T = TypeVar("T")


class Middleware(Protocol):
    """What the step asks of `statecodec.mcp.SingleUseMiddleware`, which raises its refusal for the mode's
    `InvalidToken`."""

    guard: SingleUse

    async def claim(self, method: str, state: str, retry: bytes = b"") -> tuple[str, bytes, Verdict | None]: ...
    async def answer(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult: ...
    async def bounded(self, call: Awaitable[T]) -> T: ...


def retry_safe_settings(settings: Mapping[str, str]) -> dict[str, Any]:
    """`SingleUseMiddleware`'s `retry_safe` and `max_result` from ``STATECODEC_RETRY_SAFE`` (``on`` or ``off``, the
    default) and ``STATECODEC_RETRY_RESULT_MAX`` (bytes); `ConfigurationError` naming the setting."""
    mode = setting(settings, MODE_VAR, required=False) or "off"
    if mode not in ("on", "off"):
        raise ConfigurationError(f"{MODE_VAR} must be on or off (the default)")
    cap = setting(settings, RESULT_MAX_VAR, required=False) or str(DEFAULT_RESULT_MAX)
    max_result = _checked_cap(int(cap) if cap.isascii() and cap.isdecimal() else None)
    if mode == "on":
        _jcs()  # the package every retry's digest needs: missing, `statecodec check` fails too
    return {"retry_safe": mode == "on", "max_result": max_result}


def _checked_cap(value: object) -> int:
    """The one check of the kept answer's cap, from its setting or from code (`max_result`)."""
    if type(value) is not int or not 0 < value <= _HIGHEST:
        raise ConfigurationError(f"{RESULT_MAX_VAR} must be a whole number of bytes from 1 to {_HIGHEST}, e.g. "
                                 f"{DEFAULT_RESULT_MAX} (the default; max_result in code)")
    return value


def _jcs() -> Callable[[Any], bytes]:
    """RFC 8785 canonical JSON, from ``rfc8785`` (``statecodec[mcp]``): missing, the mode fails at start-up, not at
    every retry."""
    try:
        import rfc8785
    except ImportError as exc:
        raise missing_extra("rfc8785", "mcp", "the retry-safe mode") from exc
    return rfc8785.dumps


class RetrySafe(HoldsSecrets):
    """The mode's step inside `SingleUseMiddleware` (module docstring): digest, claim, run once, keep, replay."""

    __slots__ = ("_aead", "_guard", "_jcs", "max_result")

    def __init__(self, guard: SingleUse, *, max_result: int = DEFAULT_RESULT_MAX) -> None:
        self.max_result = _checked_cap(max_result)
        self._guard, self._aead, self._jcs = guard, guard.result_cipher(), _jcs()

    def digest(self, method: str, params: Mapping[str, Any], state: str, principal: Principal | None) -> bytes:
        """The retry's 16-byte digest: HMAC-SHA256 over its RFC 8785 canonical JSON; `malformed` when it has none."""
        asked = {name: value for name, value in params.items() if name not in _UNASKED}  # all a handler may read
        who = list(principal or (None, None, None))
        retry: dict[str, Any] = {"method": method, "params": asked, "principal": who, "state": state}
        try:
            canonical = self._jcs(retry)
        except (ValueError, TypeError):  # an integer beyond 2**53, a lone surrogate: no canonical form
            raise InvalidToken(Reason.MALFORMED) from None
        return self._guard.retry_digest(canonical)

    def seal(self, key: bytes, retry: bytes, data: bytes) -> bytes:
        """An answer's JSON encrypted and authenticated for this claim and retry alone: nonce, ciphertext and tag."""
        nonce = os.urandom(_NONCE)
        return nonce + self._aead.encrypt(nonce, data, _AAD + key + retry)

    def open(self, key: bytes, retry: bytes, sealed: bytes) -> dict[str, Any]:
        """What `seal` kept for this claim and retry; `InvalidToken(SEAL)` for anything else (moved, altered)."""
        try:
            data = self._aead.decrypt(sealed[:_NONCE], sealed[_NONCE:], _AAD + key + retry)
            answer: dict[str, Any] = json.loads(data)
        except (InvalidTag, ValueError):
            raise InvalidToken(Reason.SEAL) from None
        return answer

    async def step(self, middleware: Middleware, ctx: ServerRequestContext[Any, Any], state: str,
                   call_next: CallNext) -> HandlerResult:
        """The handler's answer to this retry, run at most once per token: kept for the same retry, and replayed;
        `InvalidToken` for the mode's refusals."""
        from mcp.server.auth.middleware.auth_context import get_access_token
        from mcp.server.auth.provider import principal_components

        token, params = get_access_token(), ctx.params or {}
        # the presenter's principal: with bind_principal=None, another presenter is another retry
        retry = self.digest(ctx.method, params, state, principal_components(token) if token else None)
        plain, key, verdict = await middleware.claim(ctx.method, state, retry)
        if verdict is not None and verdict.claim is Claim.SAME:
            return self._replay(ctx.method, key, retry, verdict.result)
        try:
            result = _dumped(await middleware.answer(replace(ctx, params={**params, "requestState": plain}), call_next))
        except Exception as exc:  # kept as the SDK answers it: an MCPError's own, else its internal error
            from mcp.shared.exceptions import MCPError
            from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
            from mcp.types import INTERNAL_ERROR, ErrorData

            error = handler_exception_to_error_data(exc)
            if error is None:
                logger.exception("the handler of %s raised", ctx.method)
            error = error or ErrorData(code=INTERNAL_ERROR, message="Internal server error")
            if verdict is not None:
                await self._keep(middleware, key, retry, {"error": error.model_dump(mode="json", exclude_none=True)})
            raise MCPError.from_error_data(error) from None
        if verdict is not None:
            await self._keep(middleware, key, retry, {"result": result})
        return result

    def _replay(self, method: str, key: bytes, retry: bytes, sealed: bytes) -> HandlerResult:
        from mcp.shared.exceptions import MCPError
        from mcp.types import ErrorData

        if not sealed:  # the first run has not kept its answer: still running, or its instance lost it
            raise InvalidToken(Reason.IN_PROGRESS)
        try:
            answer = self.open(key, retry, sealed)
        except InvalidToken:
            logger.error("a kept answer on %s did not open: altered or moved in the store", method)
            raise
        if "result" not in answer and "error" not in answer:  # over the cap when it ran: at most once, as without it
            raise InvalidToken(Reason.REPLAYED)
        if (noted := answered_again.get()) is not None:
            noted.append(method)
        if "error" in answer:
            raise MCPError.from_error_data(ErrorData.model_validate(answer["error"]))
        result: dict[str, Any] = answer["result"]
        return result

    async def _keep(self, middleware: Middleware, key: bytes, retry: bytes, answer: dict[str, Any]) -> None:
        """One round trip; a failure is logged, never a second run: the claim stays, and its retry is `in_progress`."""
        data = json.dumps(answer, separators=(",", ":")).encode()  # ASCII: its length in bytes is the cap's measure
        if len(data) > self.max_result:
            logger.warning("an answer over %s (%d bytes) is not kept: its retry is refused", RESULT_MAX_VAR,
                           self.max_result)
            data = b"{}"
        import anyio

        sealed = self.seal(key, retry, data)
        try:
            with anyio.CancelScope(shield=True):  # a client gone meanwhile: its retry needs it (under the deadline)
                kept = await middleware.bounded(middleware.guard.store.keep(key=key, retry=retry, result=sealed))
            why = None if kept else "the claim is gone: the store was flushed or restarted, or the token expired"
        except Exception as exc:  # the answer still goes to the client; only its retry cannot get it
            why = str(exc) if isinstance(exc, StoreError) else type(exc).__name__  # a StoreError names no secret
        if why:
            logger.error("an answer was not kept at %s (%s): its retry is refused as in progress until the token "
                         "expires", middleware.guard.where, why)


def _dumped(result: HandlerResult) -> dict[str, Any]:
    """`result` as the SDK's runner puts it on the wire (before its envelope), so the first answer and a replay are
    the same bytes."""
    from pydantic import BaseModel

    if isinstance(result, BaseModel):
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dict(result or {})
