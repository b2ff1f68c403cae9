"""Bounded retries with capped, jittered exponential backoff for provider calls.

Threat: unbounded retries turn a KMS outage into a server that never starts and never says why; no retries turn
one throttled call into a failed deploy.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from statecodec._settings import seconds
from statecodec.errors import ConfigurationError

_T = TypeVar("_T")


@dataclass(frozen=True)
class RetryPolicy:
    """At most `attempts` calls; sleep ``uniform(0, min(max_delay, base_delay * 2**n))`` between them."""

    attempts: int = 4
    base_delay: float = 0.2
    max_delay: float = 2.0
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        if not (isinstance(self.attempts, int) and 1 <= self.attempts <= 10):
            raise ConfigurationError("retry attempts must be an int from 1 to 10")
        seconds("max_delay", self.max_delay, low=0, high=30)
        seconds("base_delay", self.base_delay, low=0, high=self.max_delay)


def call_with_retries(fn: Callable[[], _T], *, transient: Callable[[BaseException], bool], policy: RetryPolicy) -> _T:
    """`fn()`, called again while it raises a transient exception; the last exception when attempts run out."""
    for attempt in range(1, policy.attempts):
        try:
            return fn()
        except Exception as exc:
            if not transient(exc):
                raise
        # Full jitter: fleets restarting together do not retry in lockstep.
        policy.sleep(random.uniform(0, min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1))))
    return fn()
