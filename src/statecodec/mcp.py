"""Protect an MCP server's ``requestState`` with a statecodec codec in one line.

Threat: a server fleet that keeps the SDK's default process-local key rejects
every retry that lands on another instance or survives a restart, and a
hand-rolled policy is where keys get hard-coded. `security_from_env` builds
the SDK's `RequestStateSecurity` around the codec the environment describes
(see `statecodec.config`), so keys stay in the deployment's secret store::

    from mcp.server.mcpserver import MCPServer
    from statecodec.mcp import security_from_env

    server = MCPServer("billing", request_state_security=security_from_env())

The SDK still stamps and checks expiry, request binding, audience and
principal around every codec; a token the codec refuses raises
`InvalidToken`, which the SDK catches as `InvalidRequestState`, answers with
its fixed -32602 error and logs with our reason code.

A lowlevel `Server` has no such boundary: `BoundStateMiddleware` gives it
one around a `BoundCodec` (``server.middleware.append(...)``), refusing with
the same frozen -32602 error as the SDK and logging the reason code only.

The MCP SDK is an optional dependency (``pip install 'statecodec[mcp]'``);
it is imported when these functions are called, not when this module is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NoReturn

from statecodec.binding import BoundCodec, mcp_request_context
from statecodec.config import Codec, codec_from_env
from statecodec.errors import InvalidToken

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.request_state import RequestStateSecurity

__all__ = [
    "MCP_EXTRA_HINT",
    "REJECTION_DATA",
    "REJECTION_MESSAGE",
    "BoundStateMiddleware",
    "PrincipalBinding",
    "security",
    "security_from_env",
]

REJECTION_MESSAGE = "Invalid or expired requestState"
"""The SDK's frozen wire message for every refused ``requestState`` (code -32602)."""
REJECTION_DATA: Mapping[str, str] = {"reason": "invalid_request_state"}
"""The SDK's frozen ``data`` member of that error; the real reason goes to the log only."""

logger = logging.getLogger(__name__)

MCP_EXTRA_HINT = "install the MCP SDK with: pip install 'statecodec[mcp]'"

PrincipalBinding = Callable[["ServerRequestContext[Any, Any]"], "str | None"]
"""The SDK's `bind_principal` callback type: the request's principal, or None."""


class _SDKDefault:
    """Marker for "leave the SDK's own default in place"."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<SDK default>"


_SDK_DEFAULT = _SDKDefault()


def _security_class() -> type[RequestStateSecurity]:
    try:
        from mcp.server.request_state import RequestStateSecurity
    except ImportError as exc:
        raise ImportError(f"statecodec.mcp needs the MCP SDK (mcp>=2.3); {MCP_EXTRA_HINT}") from exc
    return RequestStateSecurity


def security(
    codec: Codec,
    *,
    ttl: float = 600.0,
    audience: str | None = None,
    bind_principal: PrincipalBinding | _SDKDefault | None = _SDK_DEFAULT,
) -> RequestStateSecurity:
    """`RequestStateSecurity(codec=codec, ...)`, leaving unset options at the SDK's defaults.

    `audience=None` lets `MCPServer` stamp its server name; set it when
    several services deliberately accept each other's state. `bind_principal`
    defaults to the SDK's authenticated-principal binding; `None` disables it.
    """
    cls = _security_class()
    if isinstance(bind_principal, _SDKDefault):
        return cls(codec=codec, ttl=ttl, audience=audience)
    return cls(codec=codec, ttl=ttl, audience=audience, bind_principal=bind_principal)


def security_from_env(
    *,
    ttl: float = 600.0,
    audience: str | None = None,
    environ: Mapping[str, str] | None = None,
    bind_principal: PrincipalBinding | _SDKDefault | None = _SDK_DEFAULT,
) -> RequestStateSecurity:
    """`RequestStateSecurity` around `statecodec.config.codec_from_env(environ)`.

    Raises `ConfigurationError` (what to set) when the environment does not
    describe a codec, and `ImportError` naming the extra when the MCP SDK is
    missing; both before any server starts.
    """
    _security_class()  # a missing SDK is reported before the configuration is read
    return security(codec_from_env(environ), ttl=ttl, audience=audience, bind_principal=bind_principal)


class BoundStateMiddleware:
    """Server middleware that seals outgoing ``requestState`` with a `BoundCodec` and verifies every echo.

    Threat: a lowlevel MCP `Server` puts ``requestState`` on the wire exactly
    as the handler wrote it, so a client can read it, edit it, replay it
    against other arguments or hand it to another user. Appended to
    ``server.middleware``, this gives it what `MCPServer`'s boundary gives:
    on ``tools/call``, ``prompts/get`` and ``resources/read``, an echoed state
    is unsealed before the handler runs, bound to the principal and to the
    request (`statecodec.binding.mcp_request_context`: method, target and the
    canonical JSON of the arguments), and the plaintext state of an
    input-required result is sealed on the way out. Handlers read and write
    plaintext.

    Every refusal (a non-string state, or any `InvalidToken`) is the SDK's
    frozen error: code -32602, message ``Invalid or expired requestState``,
    data ``{"reason": "invalid_request_state"}``; the reason code is logged at
    WARNING on the ``statecodec.mcp`` logger as ``requestState rejected on
    <method>: <reason>``, the SDK's wording.

    `principal` returns the request's authenticated principal, or None to
    bind none (the SDK's `bind_principal` callback type). As in the SDK, it
    runs deny-on-error: a callback that raises or returns anything but a
    `str` or None refuses the echo (-32602) or, for a first round, answers a
    sanitized internal error instead of sealing an unbound token; so does a
    seal that fails (the cause goes to the log only).
    """

    __slots__ = ("_code", "_codec", "_error", "_internal_code", "_is_input_required", "_methods", "_principal")

    def __init__(self, codec: BoundCodec, *, principal: PrincipalBinding) -> None:
        try:
            from mcp.shared.exceptions import MCPError
            from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
            from mcp_types.methods import INPUT_REQUIRED_METHODS, is_input_required
        except ImportError as exc:
            raise ImportError(f"BoundStateMiddleware needs the MCP SDK (mcp>=2.3); {MCP_EXTRA_HINT}") from exc
        self._codec = codec
        self._principal = principal
        self._methods = INPUT_REQUIRED_METHODS
        self._is_input_required = is_input_required
        self._error = MCPError
        self._code = INVALID_PARAMS
        self._internal_code = INTERNAL_ERROR

    def _reject(self, method: str, reason: str) -> NoReturn:
        """The frozen refusal on the wire; the reason code in the server log only."""
        logger.warning("requestState rejected on %s: %s", method, reason)
        raise self._error(code=self._code, message=REJECTION_MESSAGE, data=dict(REJECTION_DATA))

    def _internal(self, method: str, reason: str) -> NoReturn:
        """Refuse to seal: a sanitized internal error on the wire, the cause in the log."""
        logger.error("refusing to seal requestState on %s: %s", method, reason)
        raise self._error(code=self._internal_code, message="Internal error")

    def _bound_principal(self, ctx: ServerRequestContext[Any, Any], fail: Callable[[str, str], NoReturn]) -> str | None:
        """The principal callback under deny-on-error: a raising or ill-typed callback fails closed."""
        try:
            principal = self._principal(ctx)
        except Exception:
            logger.exception("principal binding raised while processing requestState on %s", ctx.method)
            fail(ctx.method, "principal binding error")
        if principal is not None and not isinstance(principal, str):
            fail(ctx.method, f"principal binding returned {type(principal).__name__}, expected str or None")
        return principal

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method not in self._methods:
            return await call_next(ctx)
        context = mcp_request_context(ctx.method, ctx.params)
        principal: str | None = None
        verified = False
        wire = (ctx.params or {}).get("requestState")
        if wire is not None:
            if not isinstance(wire, str):
                self._reject(ctx.method, "malformed")
            principal = self._bound_principal(ctx, self._reject)
            verified = True
            try:
                state = self._codec.unseal(wire, principal=principal, context=context)
            except InvalidToken as exc:
                self._reject(ctx.method, exc.reason.value)
            plain_state = state.decode("utf-8", "surrogatepass")
            ctx = replace(ctx, params={**(ctx.params or {}), "requestState": plain_state})
        result = await call_next(ctx)
        if not self._is_input_required(result):
            return result
        plain = result.get("requestState") if isinstance(result, dict) else result.request_state
        if not isinstance(plain, str):
            return result
        if not verified:
            principal = self._bound_principal(ctx, self._internal)
        try:
            token = self._codec.seal(plain.encode("utf-8", "surrogatepass"), principal=principal, context=context)
        except Exception:  # deny on error: a failing seal must not leak its cause to the client
            logger.exception("requestState codec raised during seal on %s", ctx.method)
            self._internal(ctx.method, "codec error")
        if isinstance(result, dict):
            return {**result, "requestState": token}
        return result.model_copy(update={"request_state": token})
