"""Protect an MCP server's ``requestState`` with a statecodec codec in one line.

Threat: a fleet that keeps the SDK's default process-local key rejects every retry that lands on another
instance or survives a restart, and a hand-rolled policy is where keys get hard-coded. `security_from_env`
builds the SDK's `RequestStateSecurity` around the codec the environment describes::

    server = MCPServer("billing", request_state_security=security_from_env())

`security(codec)` does the same for a codec built in code. The SDK stamps and checks expiry, request binding,
audience and principal around the codec, answers every refusal with its fixed -32602 error, and logs a reason
only for its own `InvalidRequestState`: hence `SDKCodec`. The SDK is imported when called, never on import.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from statecodec._types import Codec
from statecodec.config import codec_from_env, ttl_setting
from statecodec.errors import InvalidToken, Reason
from statecodec.single_use import Principal, SingleUse

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.request_state import InvalidRequestState, RequestStateSecurity

__all__ = ["SDKCodec", "SingleUseMiddleware", "security", "security_from_env", "single_use_from_env"]

logger = logging.getLogger("statecodec.mcp")

MCP_EXTRA_HINT = "install the MCP SDK with: pip install 'statecodec[mcp]'"


def _sdk() -> tuple[type[RequestStateSecurity], type[InvalidRequestState]]:
    """The SDK's policy and refusal types, or an ImportError that names the extra to install."""
    try:
        from mcp.server.request_state import InvalidRequestState, RequestStateSecurity
    except ImportError as exc:
        raise ImportError(f"statecodec.mcp needs the MCP SDK (mcp>=2.3); {MCP_EXTRA_HINT}") from exc
    return RequestStateSecurity, InvalidRequestState


class SDKCodec:
    """`codec` as the SDK's `RequestStateCodec`: each `InvalidToken` becomes `InvalidRequestState(reason)`, with
    no exception chain (any other exception the SDK would log as "codec error" with a traceback)."""

    __slots__ = ("_refusal", "codec")

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self._refusal = _sdk()[1]

    def seal(self, payload: bytes) -> str:
        return self.codec.seal(payload)

    def unseal(self, token: str) -> bytes:
        try:
            return self.codec.unseal(token)
        except InvalidToken as exc:
            reason = exc.reason.value
        # Raised outside the handler, so nothing chains back to the codec's frames.
        raise self._refusal(reason)

    def __repr__(self) -> str:
        return f"SDKCodec({self.codec!r})"


def security(codec: Codec, *, ttl: float = 600.0, audience: str | None = None, **options: Any) -> RequestStateSecurity:
    """`RequestStateSecurity(codec=SDKCodec(codec), ...)`; `audience=None` lets `MCPServer` stamp its server name,
    unset `options` keep the SDK's defaults (`bind_principal`: the authenticated principal)."""
    return _sdk()[0](codec=SDKCodec(codec), ttl=ttl, audience=audience, **options)


def security_from_env(
    *,
    ttl: float | None = None,
    audience: str | None = None,
    environ: Mapping[str, str] | None = None,
    **options: Any,
) -> RequestStateSecurity:
    """`security(statecodec.codec_from_env(environ), ...)`; before any server starts, `ConfigurationError`
    (what to set) when the environment describes no codec, `ImportError` naming the extra without the SDK.
    `ttl` defaults to ``STATECODEC_TTL`` (`statecodec.config.ttl_setting`, 600 s when unset), the same
    lifetime `single_use_from_env` gives its store entries."""
    _sdk()  # a missing SDK is reported before the configuration is read
    settings = os.environ if environ is None else environ
    codec = codec_from_env(settings)
    return security(codec, ttl=ttl_setting(settings) if ttl is None else ttl, audience=audience, **options)


def minting_principal() -> Principal | None:
    """The SDK's (client_id, issuer, subject) of the request being answered, as its boundary binds it."""
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.auth.provider import principal_components

    token = get_access_token()
    return None if token is None else principal_components(token)


class SingleUseMiddleware:
    """SDK server middleware: each ``requestState`` is accepted at most once across the fleet, and revocable.

    It must run inside the SDK's `RequestStateBoundary`, so that it sees a state only after the boundary verified
    the token, its expiry, request binding, audience and principal: a stolen token presented for another principal
    or another request is refused there and consumes nothing. `MCPServer` runs the middleware it is given inside
    its boundary::

        server = MCPServer("billing", request_state_security=security_from_env(), middleware=[single_use_from_env()])

    On a lowlevel `Server`, append it after the boundary. Outbound, it stamps each state (`SingleUse.stamp`) before
    the boundary seals it; inbound, it consumes the stamp (`SingleUse.consume`, in a worker thread, so a slow store
    never blocks the event loop) and refuses with the SDK's own -32602 answer, the reason code in the log only.
    """

    def __init__(self, guard: SingleUse) -> None:
        from mcp_types.methods import INPUT_REQUIRED_METHODS, is_input_required

        self.guard = guard
        self._methods, self._is_input_required = INPUT_REQUIRED_METHODS, is_input_required

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method not in self._methods:
            return await call_next(ctx)
        state = (ctx.params or {}).get("requestState")
        if state is not None:
            reason: Reason | None = None
            inner = ""
            try:
                stamped = state.encode("utf-8", "replace") if isinstance(state, str) else b""
                inner = (await self.guard.consume(stamped)).decode("utf-8")
            except InvalidToken as exc:
                reason = exc.reason
            if reason is not None:
                self._refuse(ctx.method, reason)
            ctx = replace(ctx, params={**(ctx.params or {}), "requestState": inner})
        result = await call_next(ctx)
        if not self._is_input_required(result):
            return result
        out = result.get("requestState") if isinstance(result, Mapping) else getattr(result, "request_state", None)
        if not isinstance(out, str):
            return result
        if not self.guard.started:
            await self.guard.start()
        sealed_in = self.guard.stamp(out.encode("utf-8"), principal=minting_principal()).decode("utf-8")
        if isinstance(result, Mapping):
            return {**result, "requestState": sealed_in}
        return result.model_copy(update={"request_state": sealed_in})

    @staticmethod
    def _refuse(method: str, reason: Reason) -> None:
        from mcp.shared.exceptions import MCPError
        from mcp_types import INVALID_PARAMS

        if reason is Reason.MALFORMED:
            reason_text = "malformed (no single-use stamp: is SingleUseMiddleware inside RequestStateBoundary?)"
        else:
            reason_text = reason.value
        logger.warning("requestState rejected on %s: %s", method, reason_text, extra={"statecodec_reason": reason})
        # The SDK boundary's own frozen answer, so a client cannot tell this refusal from any other.
        raise MCPError(
            code=INVALID_PARAMS, message="Invalid or expired requestState", data={"reason": "invalid_request_state"}
        )

    def __repr__(self) -> str:
        return f"SingleUseMiddleware({self.guard!r})"


def single_use_from_env(environ: Mapping[str, str] | None = None) -> SingleUseMiddleware:
    """`SingleUseMiddleware` around `SingleUse.from_env(environ)`: the store and its key from the environment."""
    return SingleUseMiddleware(SingleUse.from_env(environ))
