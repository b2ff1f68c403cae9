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

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from statecodec._types import Codec
from statecodec.config import codec_from_env
from statecodec.errors import InvalidToken

if TYPE_CHECKING:
    from mcp.server.request_state import InvalidRequestState, RequestStateSecurity

__all__ = ["SDKCodec", "security", "security_from_env"]

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
    *, ttl: float = 600.0, audience: str | None = None, environ: Mapping[str, str] | None = None, **options: Any
) -> RequestStateSecurity:
    """`security(statecodec.codec_from_env(environ), ...)`; before any server starts, `ConfigurationError`
    (what to set) when the environment describes no codec, `ImportError` naming the extra without the SDK."""
    _sdk()  # a missing SDK is reported before the configuration is read
    return security(codec_from_env(environ), ttl=ttl, audience=audience, **options)
