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

The MCP SDK is an optional dependency (``pip install 'statecodec[mcp]'``);
it is imported when these functions are called, not when this module is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from statecodec.config import Codec, codec_from_env

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.server.request_state import RequestStateSecurity

__all__ = ["MCP_EXTRA_HINT", "PrincipalBinding", "security", "security_from_env"]

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
