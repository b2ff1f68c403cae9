"""Metrics where the wire is answered: every ``requestState`` an MCP server accepts or refuses, by reason.

Threat: counted anywhere but at the answer, a replayed or revoked token (refused after the codec accepted it) would
look accepted. OpenTelemetry's API alone (``statecodec[otel]``); attributes and alerts: docs/observability.md.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from statecodec import __version__
from statecodec.errors import Reason, missing_extra
from statecodec.middleware import REFUSED, REJECTED, answered_again, sdk_server

try:
    from opentelemetry import metrics
except ImportError:  # pragma: no cover - exercised only without the extra
    raise missing_extra("opentelemetry-api", "otel", "statecodec.otel") from None

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

__all__ = ["REQUEST_STATE", "RequestStateMetrics", "instrument"]

REQUEST_STATE = "statecodec.request_state"
# The closed set of reason codes: ours, and the SDK boundary's free-text reasons mapped onto them ("other" else).
_CODES: dict[str, str] = {reason.value: reason.value for reason in Reason} | {
    "request binding": Reason.BINDING, "principal drift": Reason.PRINCIPAL, "principal binding error": Reason.PRINCIPAL,
    "minted in the future": Reason.NOT_YET_VALID, "unknown key": Reason.UNKNOWN_KEY,
    "non-string requestState": Reason.MALFORMED, "codec error": "codec_error",
}
_refusal: ContextVar[list[str] | None] = ContextVar("statecodec_refusal", default=None)


def _note_reason(record: logging.LogRecord) -> bool:
    """A logging filter keeping the reason of a refusal logged inside `RequestStateMetrics` (where the SDK gives it)."""
    seen = _refusal.get()
    if seen is not None and record.msg == REJECTED and isinstance(record.args, tuple) and len(record.args) == 2:
        seen.append(str(_CODES.get(str(record.args[1]), "other")))
    return True


logging.getLogger("mcp.server.request_state").addFilter(_note_reason)
logging.getLogger("statecodec.mcp").addFilter(_note_reason)


class RequestStateMetrics:
    """SDK server middleware, first in the chain: one count per presented ``requestState``, by outcome and reason."""

    def __init__(self, meter: metrics.Meter | None = None) -> None:
        from mcp_types.methods import INPUT_REQUIRED_METHODS

        meter = meter or metrics.get_meter("statecodec", __version__)
        self._counter = meter.create_counter(REQUEST_STATE, unit="{token}", description="requestState answered")
        self._methods = INPUT_REQUIRED_METHODS

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method not in self._methods or (ctx.params or {}).get("requestState") is None:
            return await call_next(ctx)
        seen, again = list[str](), list[str]()
        reset, reset_again = _refusal.set(seen), answered_again.set(again)
        try:
            result = await call_next(ctx)
        except Exception as exc:  # refused (the frozen answer), a kept error, else an error: never accepted
            refused = seen or getattr(exc, "data", None) == REFUSED
            self._count(ctx.method, "refused" if refused else "answered_again" if again else "error", seen)
            raise
        finally:
            _refusal.reset(reset)
            answered_again.reset(reset_again)
        self._count(ctx.method, "refused" if seen else "answered_again" if again else "accepted", seen)
        return result

    def _count(self, method: str, outcome: str, seen: list[str]) -> None:
        reason = {"reason": (seen or ["unknown"])[0]} if outcome == "refused" else {}
        self._counter.add(1, {"method": method, "outcome": outcome, **reason})


def instrument(server: Any, meter: metrics.Meter | None = None) -> RequestStateMetrics:
    """Put `RequestStateMetrics` first in the middleware of `server` (an `MCPServer`, a lowlevel `Server` or a
    `FastMCP`); return it."""
    middleware = RequestStateMetrics(meter)
    sdk_server(server).middleware.insert(0, middleware)
    return middleware
