"""Move a fleet from the MCP SDK's built-in keys (``RequestStateSecurity(keys=[...])``) to a statecodec codec, with
no flow in flight dropped.

Threat: switching codecs at once strands every flow with an old token outstanding, and a window that accepts the
old format for ever keeps retired keys alive. SDK tokens (``v1.`` prefix, which no statecodec token has) are opened
by the SDK's own public codec behind this module's length and ASCII checks, only until a fixed time. Runbook and
phases: docs/migrate-from-sdk-keys.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, check_cap, check_payload, check_token_text
from statecodec._settings import seconds
from statecodec._types import Codec, HoldsSecrets, require_codec
from statecodec.errors import ConfigurationError, InvalidToken, Reason, needs_extra

__all__ = ["SDK_FORMAT_PREFIX", "SDKKeysMigration"]

SDK_FORMAT_PREFIX = "v1."
_SDK_OVERHEAD = 4 + 12 + 16  # kid, nonce, tag
# The SDK's log-only reasons, as statecodec's closed set; anything else it might say is a failed seal.
_SDK_REASONS = {"malformed": Reason.MALFORMED, "unknown key": Reason.UNKNOWN_KEY, "seal": Reason.SEAL}


class SDKKeysMigration(HoldsSecrets):
    """A codec that opens the MCP SDK's built-in tokens beside `codec`'s, for one migration: ``seal_with_sdk=True``
    seals SDK tokens; then ``sdk_tokens_until=T`` (epoch seconds) seals with `codec` and opens SDK tokens only before
    ``T``, refusing them with ``unknown_key`` after. Phases: docs/migrate-from-sdk-keys.md."""

    __slots__ = ("_clock", "_max_length", "_max_payload", "_refusal", "_sdk", "_seal_with_sdk", "_until", "codec",
                 "sdk_tokens_until")

    def __init__(
        self, codec: Codec, sdk_keys: Sequence[bytes | bytearray | str], *, sdk_tokens_until: float | None = None,
        seal_with_sdk: bool = False, max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
        clock: Callable[[], float] = time.time,
    ) -> None:
        require_codec(codec)
        if seal_with_sdk and sdk_tokens_until is not None:
            raise ConfigurationError("seal_with_sdk=True still mints SDK tokens, so it takes no sdk_tokens_until; set "
                                     "the deadline in the second phase, which seals with the new codec")
        try:
            if not seal_with_sdk:
                seconds("sdk_tokens_until", sdk_tokens_until, low=0, high=2**40)
        except ConfigurationError:
            raise ConfigurationError("sdk_tokens_until must be the epoch second after which SDK tokens are refused: "
                                     "the end of this rollout plus the SDK ttl, e.g. time.time() + rollout_seconds "
                                     "+ 600") from None
        if not callable(clock):
            raise ConfigurationError("clock must be a callable returning epoch seconds (time.time)")
        with needs_extra("mcp", "mcp", "statecodec.sdk_migration"):
            from mcp.server.request_state import AESGCMRequestStateCodec, InvalidRequestState
        if isinstance(sdk_keys, (str, bytes, bytearray)) or not isinstance(sdk_keys, Sequence):
            raise ConfigurationError("sdk_keys must be the list given to RequestStateSecurity(keys=[...]), e.g. [key]")
        try:
            self._sdk, self._refusal = AESGCMRequestStateCodec(sdk_keys), InvalidRequestState
        except (TypeError, ValueError) as exc:  # the SDK's messages name the key's position, never its value
            message = str(exc).replace("request-state keys", "sdk_keys").replace("keys[", "sdk_keys[")
            raise ConfigurationError(message) from None
        self.codec, self.sdk_tokens_until = codec, sdk_tokens_until
        self._until = math.inf if sdk_tokens_until is None else float(sdk_tokens_until)
        self._seal_with_sdk, self._clock = seal_with_sdk, clock
        self._max_length, self._max_payload = check_cap(max_token_length, len(SDK_FORMAT_PREFIX), _SDK_OVERHEAD)

    @property
    def seal_with_sdk(self) -> bool:
        """True in the first phase: tokens are still the SDK's."""
        return self._seal_with_sdk

    def seal(self, payload: bytes) -> str:
        """A token of the current phase's format: the SDK's in the first phase, `codec`'s after."""
        if not self._seal_with_sdk:
            return self.codec.seal(payload)
        check_payload(payload, self._max_payload)
        return str(self._sdk.seal(bytes(payload)))

    def unseal(self, token: str) -> bytes:
        """The payload of an SDK token (before `sdk_tokens_until`) or of a `codec` token; `InvalidToken` otherwise."""
        if type(token) is not str or not token.startswith(SDK_FORMAT_PREFIX):
            return self.codec.unseal(token)
        check_token_text(token, self._max_length)
        if not token.isascii():  # the SDK's base64 would chain an error holding the whole token
            raise InvalidToken(Reason.MALFORMED)
        now = self._clock()
        # Positive check: a NaN or non-number clock refuses, like a clock past the deadline (inf in phase one).
        if not (isinstance(now, (int, float)) and now < self._until):
            raise InvalidToken(Reason.UNKNOWN_KEY)
        try:
            return self._sdk.unseal(token)
        except Exception as exc:  # InvalidRequestState, or anything else: deny on error
            reason = _SDK_REASONS.get(str(exc), Reason.SEAL) if isinstance(exc, self._refusal) else Reason.MALFORMED
        raise InvalidToken(reason)  # outside the handler: nothing chains back to the SDK's frames or the token

    def __repr__(self) -> str:
        phase = "seal_with_sdk=True" if self._seal_with_sdk else f"sdk_tokens_until={self.sdk_tokens_until!r}"
        return f"SDKKeysMigration({self.codec!r}, {phase})"

