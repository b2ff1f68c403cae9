"""Metrics where the wire is answered: every ``requestState`` an MCP server accepts or refuses, by reason.

Threat: counted anywhere but at the answer, a replayed or revoked token (refused after the codec accepted it) would
look accepted. OpenTelemetry's API alone (``statecodec[otel]``); attributes and alerts: docs/observability.md.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from statecodec import __version__
from statecodec.errors import Reason, needs_extra
from statecodec.middleware import REFUSED, REJECTED, answered_again, refused, replays, sdk_server
from statecodec.single_use import unchecked

with needs_extra("opentelemetry-api", "otel", "statecodec.otel"):
    from opentelemetry import metrics

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

__all__ = ["REPLAY", "REQUEST_STATE", "RequestStateMetrics", "instrument"]

REQUEST_STATE, REPLAY = "statecodec.request_state", "statecodec.replay"
# The closed set of reason codes: ours, and the SDK boundary's free-text reasons mapped onto them ("other" else).
_CODES: dict[str, str] = {reason.value: reason.value for reason in Reason} | {
    "request binding": Reason.BINDING, "principal drift": Reason.PRINCIPAL, "principal binding error": Reason.PRINCIPAL,
    "minted in the future": Reason.NOT_YET_VALID, "unknown key": Reason.UNKNOWN_KEY,
    "non-string requestState": Reason.MALFORMED, "codec error": "codec_error",
}


class _Noting(logging.LoggerAdapter[logging.Logger]):
    """The SDK boundary's logger, noting each refusal's reason (given nowhere else) before it logs as configured: a
    logging set-up, such as a `dictConfig` that disables it, never changes what is counted (docs/observability.md)."""

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if msg == REJECTED and len(args) == 2 and (seen := refused.get()) is not None:
            seen.append(_CODES.get(str(args[1]), "other"))
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1  # the line is the SDK's, not this method's
        self.logger.log(level, msg, *args, **kwargs)


class RequestStateMetrics:
    """SDK server middleware, first in the chain: one count per presented ``requestState``, by outcome and reason."""

    def __init__(self, meter: metrics.Meter | None = None) -> None:
        from mcp.server import request_state
        from mcp_types.methods import INPUT_REQUIRED_METHODS

        meter = meter or metrics.get_meter("statecodec", __version__)
        self._counter = meter.create_counter(REQUEST_STATE, unit="{token}", description="requestState answered")
        self._replays = meter.create_counter(REPLAY, unit="{token}", description="consumed requestState replayed")
        self._methods = INPUT_REQUIRED_METHODS
        if not isinstance(request_state.logger, _Noting):  # once per process, whatever the number of servers
            request_state.logger = _Noting(request_state.logger)  # type: ignore[assignment]  # it takes the same calls

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method not in self._methods or (ctx.params or {}).get("requestState") is None:
            return await call_next(ctx)
        seen, again, replayed, blind = list[str](), list[str](), list[str](), list[str]()
        noted = {refused: seen, answered_again: again, replays: replayed, unchecked: blind}
        resets = [(var, var.set(value)) for var, value in noted.items()]
        try:
            result = await call_next(ctx)
        except Exception as exc:  # refused (the frozen answer), a kept error, else an error: never accepted
            self._count(ctx.method, "refused" if getattr(exc, "data", None) == REFUSED else "error", seen, again)
            raise
        finally:
            for var, token in resets:
                var.reset(token)
            for action in replayed:
                self._replays.add(1, {"method": ctx.method, "action": action})
        self._count(ctx.method, "accepted_unchecked" if blind else "accepted", seen, again)
        return result

    def _count(self, method: str, outcome: str, seen: list[str], again: list[str]) -> None:
        outcome = "refused" if seen or outcome == "refused" else "answered_again" if again else outcome
        reason = {"reason": (seen or ["unknown"])[0]} if outcome == "refused" else {}
        self._counter.add(1, {"method": method, "outcome": outcome, **reason})


def instrument(server: Any, meter: metrics.Meter | None = None) -> RequestStateMetrics:
    """Put `RequestStateMetrics` first in `server`'s middleware (`MCPServer`, lowlevel `Server` or `FastMCP`)."""
    middleware = RequestStateMetrics(meter)
    sdk_server(server).middleware.insert(0, middleware)
    return middleware
