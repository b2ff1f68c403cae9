"""Metrics and logs for any codec: refusals by reason code, and how long seal and unseal take.

Threat: refusals are an attacker's probes and a fleet's symptoms, and a server that only answers the client with
one fixed error is blind to both: a burst of ``seal`` refusals is someone forging tokens, ``unknown_key`` a rotation
that retired a key too early, ``expired`` a TTL shorter than the flows. `instrument` wraps a codec so each refusal
is counted (``statecodec.refusals``, attributes ``reason`` and ``codec``) and logged with the reason code as a
structured field, and each seal and unseal is timed (``statecodec.seal.duration``, ``statecodec.unseal.duration``,
in seconds). Only the reason code and the codec's name are ever recorded: never a token, payload, principal or key.

It speaks OpenTelemetry's API alone (``pip install 'statecodec[otel]'``): without an SDK configured the instruments
do nothing, and no exporter is chosen for the user. The core codecs are untouched; only wrapped codecs pay.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from statecodec import __version__
from statecodec._types import Codec, HoldsSecrets, WrapsCodec
from statecodec.errors import ConfigurationError, InvalidToken, Reason

try:
    from opentelemetry import metrics
except ImportError:  # pragma: no cover - exercised only without the extra
    raise ImportError("statecodec.otel needs the OpenTelemetry API: pip install 'statecodec[otel]'") from None

__all__ = ["REFUSALS", "SEAL_DURATION", "UNSEAL_DURATION", "InstrumentedCodec", "instrument"]

logger = logging.getLogger("statecodec.refusals")

REFUSALS = "statecodec.refusals"
SEAL_DURATION = "statecodec.seal.duration"
UNSEAL_DURATION = "statecodec.unseal.duration"
# Refusals that a healthy fleet sees every day (a flow left open too long, a key retired on schedule, a user
# offboarded) are INFO; every other reason means a token was altered, forged, replayed, or a store or provider
# could not answer: WARNING.
_ROUTINE = frozenset({Reason.EXPIRED, Reason.NOT_YET_VALID, Reason.UNKNOWN_KEY, Reason.REVOKED})

_clock = time.perf_counter


class InstrumentedCodec(WrapsCodec, HoldsSecrets):
    """`codec`, counted and timed: the same tokens, the same refusals, the same keyword arguments.

    `seal` and `unseal` pass their arguments (``principal=``, ``context=`` of a `BoundCodec`, ``scopes=`` of a
    `SingleUseCodec`) to the inner codec unchanged and return what it returns. A refusal is re-raised as a fresh
    `InvalidToken` with the same reason and no chain; any other exception (a caller's `TypeError`, a `SealError`)
    passes through untimed and uncounted, since it is no verdict on a token. Each call records, with attribute
    ``codec`` (`name`, by default the inner codec's class name):

    - ``statecodec.seal.duration`` (histogram, s) of every seal that returned a token;
    - ``statecodec.unseal.duration`` (histogram, s), attribute ``outcome``: ``accepted`` or ``refused``;
    - ``statecodec.refusals`` (counter), attribute ``reason``: the `Reason` code;
    - a record on the ``statecodec.refusals`` logger, INFO for routine reasons (``expired``, ``not_yet_valid``,
      ``unknown_key``, ``revoked``) and WARNING for the rest, with ``extra`` fields ``statecodec_reason`` and
      ``statecodec_codec``.
    """

    __slots__ = (
        "_accepted", "_inner_seal", "_inner_unseal", "_refusals", "_refused", "_seal_attrs", "_seal_time",
        "_unseal_time", "codec", "name",
    )

    def __init__(self, codec: Codec, *, meter: metrics.Meter | None = None, name: str | None = None) -> None:
        if not callable(getattr(codec, "seal", None)) or not callable(getattr(codec, "unseal", None)):
            raise ConfigurationError("codec must have seal(bytes) -> str and unseal(str) -> bytes")
        if name is not None and (type(name) is not str or not name):
            raise ConfigurationError("name must be a non-empty str naming the codec in metrics, e.g. 'billing-jwe'")
        self.codec, self.name = codec, name or type(codec).__name__
        self._inner_seal: Callable[..., str] = codec.seal
        self._inner_unseal: Callable[..., bytes] = codec.unseal
        if meter is None:
            meter = metrics.get_meter("statecodec", __version__)
        self._refusals = meter.create_counter(REFUSALS, unit="{refusal}", description="Tokens refused, by reason")
        self._seal_time = meter.create_histogram(SEAL_DURATION, unit="s", description="Time to seal one token")
        self._unseal_time = meter.create_histogram(UNSEAL_DURATION, unit="s", description="Time to unseal one token")
        # Attribute dicts built once: the instruments copy what they keep, and no call allocates a new one.
        self._seal_attrs = {"codec": self.name}
        self._accepted = {"codec": self.name, "outcome": "accepted"}
        self._refused = {"codec": self.name, "outcome": "refused"}

    def seal(self, payload: bytes, **kwargs: Any) -> str:
        """The inner codec's token for `payload`, timed."""
        start = _clock()
        token = self._inner_seal(payload, **kwargs)
        self._seal_time.record(_clock() - start, self._seal_attrs)
        return token

    def unseal(self, token: str, **kwargs: Any) -> bytes:
        """The inner codec's payload of `token`, timed; a refusal counted and logged by reason."""
        start = _clock()
        try:
            payload = self._inner_unseal(token, **kwargs)
        except InvalidToken as exc:
            reason = exc.reason
        else:
            self._unseal_time.record(_clock() - start, self._accepted)
            return payload
        self._unseal_time.record(_clock() - start, self._refused)
        self._refusals.add(1, {"reason": reason.value, "codec": self.name})
        logger.log(
            logging.INFO if reason in _ROUTINE else logging.WARNING,
            "token refused by %s: %s",
            self.name,
            reason.value,
            extra={"statecodec_reason": reason.value, "statecodec_codec": self.name},
        )
        # Raised outside the handler: nothing chains back to the inner codec's frames.
        raise InvalidToken(reason)

    def __repr__(self) -> str:
        return f"InstrumentedCodec({self.codec!r}, name={self.name!r})"


def instrument(codec: Codec, meter: metrics.Meter | None = None, name: str | None = None) -> InstrumentedCodec:
    """`codec` wrapped to count refusals and time seal and unseal; `meter` defaults to the global provider's
    ``statecodec`` meter, a no-op until the application configures an OpenTelemetry SDK."""
    return InstrumentedCodec(codec, meter=meter, name=name)
