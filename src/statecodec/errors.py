"""One exception family; a rejected token never says more than a reason code.

Every way a token can be wrong is an attacker's probe. `InvalidToken` is the only exception `unseal` raises: its
message is a log-only code from the closed set `Reason`, never key material, payload or token text.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import sys
from collections.abc import Iterator

__all__ = ["ConfigurationError", "InvalidToken", "ProviderError", "Reason", "SealError", "StatecodecError",
           "StoreBusy", "StoreDown", "StoreError", "StoreUnreachable", "exception_chain", "needs_extra"]


class Reason(enum.StrEnum):
    """Closed set of log-only reason codes carried by `InvalidToken`."""

    MALFORMED = "malformed"  # not a token of this format: bad type, alphabet, encoding, length, layout
    OVERSIZED = "oversized"  # longer than the codec's cap; refused before any decoding
    FORMAT = "format"  # well-formed, but a format version this codec does not accept
    UNKNOWN_KEY = "unknown_key"  # key id not in the ring (retired, foreign, or never known)
    SEAL = "seal"  # authentication tag or signature did not verify
    ALG = "alg"  # JOSE: algorithm or encryption not the configured pair
    HEADER = "header"  # JOSE: forbidden, unknown or duplicated header member
    EXPIRED = "expired"  # binding: now is at or past the expiry claim
    NOT_YET_VALID = "not_yet_valid"  # binding: issued further in the future than the skew allows
    AUDIENCE = "audience"  # binding: minted for another service
    PRINCIPAL = "principal"  # binding: minted for another principal, or principal drift
    BINDING = "binding"  # binding: minted for another request context
    PURPOSE = "purpose"  # binding: minted for another purpose
    REPLAYED = "replayed"  # single use: this token was already accepted once
    REVOKED = "revoked"  # single use: minted at or before a revocation of its principal or scope
    STORE_UNAVAILABLE = "store_unavailable"  # single use: the shared store could not vouch for the token; fail closed
    IN_PROGRESS = "in_progress"  # retry-safe single use: the same retry, while the first has kept no answer: retry
    STORE_BUSY = "store_busy"  # single use: this instance had no free store connection within the deadline: retry
    STEP_LOST = "step_lost"  # retry-safe single use: the first run kept no answer within its step bound: start again


class StatecodecError(Exception):
    """Base of every exception this library raises on purpose."""


class InvalidToken(StatecodecError):
    """A token was refused; `reason` is a log-only code from `Reason`, and `str(exc)` is that code alone.

    Threat: the MCP SDK logs any other codec exception with a traceback, flooding the log under attack. Once the SDK's
    request-state module is loaded (never imported from here), every `InvalidToken` is also its `InvalidRequestState`.
    """

    __slots__ = ("reason",)

    def __new__(cls, reason: Reason) -> InvalidToken:
        if cls is InvalidToken and (sdk := sys.modules.get("mcp.server.request_state")) is not None:
            cls = _sdk_refusal(sdk.InvalidRequestState)
        return super().__new__(cls)

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason.value)
        self.reason = reason

    def __reduce__(self) -> tuple[type[InvalidToken], tuple[Reason]]:
        return (InvalidToken, (self.reason,))


@functools.cache
def _sdk_refusal(sdk_refusal: type[Exception]) -> type[InvalidToken]:
    """`InvalidToken` that the SDK's boundary also catches as its own refusal (made once per SDK type)."""
    return type("InvalidToken", (InvalidToken, sdk_refusal), {"__slots__": (), "__module__": __name__})


class ConfigurationError(StatecodecError, ValueError):
    """Construction arguments cannot make a safe codec; the message says how to fix them."""


class ProviderError(StatecodecError):
    """A key provider (KMS, Vault) call failed, at provisioning or start-up; names the key and the cause."""


class StoreError(StatecodecError):
    """The single-use store could not vouch for a token: refused. Names host:port, never a URL or credential."""

    reason = Reason.STORE_UNAVAILABLE  # the code of the refusal it causes


class StoreUnreachable(StoreError):
    """The store could not be reached, or did not answer within its deadline: refused in every mode, but `StoreDown`."""


class StoreDown(StoreUnreachable):
    """No connection (refused, reset, its name does not resolve): the one failure availability first accepts through."""


class StoreBusy(StoreError):
    """This instance, not the store, was saturated (no free connection, a late loop): refused in every mode; retry."""

    reason = Reason.STORE_BUSY


@contextlib.contextmanager
def needs_extra(package: str, extra: str, needed_by: str = "this key provider") -> Iterator[None]:
    """Imports of an optional package: an `ImportError` among them becomes one naming the package and its extra."""
    try:
        yield
    except ImportError as exc:
        message = f"{needed_by} needs the {package!r} package; install it with: pip install 'statecodec[{extra}]'"
        raise ImportError(message, name=package) from exc


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """`exc` and every exception chained to it, through `__cause__` and `__context__` both, each once."""
    pending, seen = [exc], set()
    while pending:
        if (cur := pending.pop()) is not None and id(cur) not in seen:
            seen.add(id(cur))
            yield cur
            pending += [cur.__cause__, cur.__context__]


class SealError(StatecodecError):
    """`seal` could not produce a token, for example a payload over the size cap."""

