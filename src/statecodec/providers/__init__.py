"""Key providers for `EnvelopeCodec` (`aws_kms`, `gcp_kms`, `vault`), each behind its own extra.

A provider module imports its SDK, or raises `ImportError` naming the extra; `import statecodec` imports none
of them. Here: what every provider shares (bounded retries, SDK logs withheld, its base class) and the settings every
envelope codec reads (``STATECODEC_WRAPPED_KEYS(_FILE)``, ``..._KMS_CONTEXT`` or ``..._KMS_AUDIENCE``).
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from statecodec._settings import max_token_length_setting, named_errors, seconds, setting, text_or_file
from statecodec._types import HoldsSecrets
from statecodec.envelope import EnvelopeCodec, KeyWrapper, _check_context, default_context, parse_wrapped_keys
from statecodec.errors import ConfigurationError, ProviderError

__all__ = ["RetryPolicy", "build_envelope_codec", "context_from_env", "parse_context", "sdk_logs_withheld",
           "wrapped_keys_from_env"]

_WRAPPED_KEYS_VAR = "STATECODEC_WRAPPED_KEYS"
_CONTEXT_VAR = "STATECODEC_KMS_CONTEXT"
_T = TypeVar("_T")


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries of provider calls: unbounded ones turn a KMS outage into a server that never starts and never
    says why; none turn one throttled call into a failed deploy. At most `attempts` calls; sleep
    ``uniform(0, min(max_delay, base_delay * 2**n))`` between them."""

    attempts: int = 4
    base_delay: float = 0.2
    max_delay: float = 2.0
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        if not (isinstance(self.attempts, int) and 1 <= self.attempts <= 10):
            raise ConfigurationError("retry attempts must be an int from 1 to 10")
        seconds("max_delay", self.max_delay, low=0, high=30)
        seconds("base_delay", self.base_delay, low=0, high=self.max_delay)


# No record from a provider SDK's loggers reaches a handler while statecodec is inside a provider call. Threat:
# botocore and the Cloud KMS client log request and response bodies, data keys included (docs/threat-model.md).
# A logger's filters see only records created on that very logger, and adding and removing them races other
# threads; so the record factory puts one lasting filter on each SDK logger it sees emitting in a call, and the
# filter decides from a context variable.
_withheld: ContextVar[tuple[str, ...]] = ContextVar("statecodec_withheld_sdk_loggers", default=())
_install_lock = threading.Lock()


def _is_withheld(name: object) -> bool:
    # `logging.makeLogRecord` calls the factory with no logger name.
    return isinstance(name, str) and any(name == top or name.startswith(top + ".") for top in _withheld.get())


def _drop_withheld(record: logging.LogRecord) -> bool:
    return not _is_withheld(record.name)


class _WithholdingFactory:
    """The record factory found at install time, which also puts `_drop_withheld` on each withheld logger it meets."""

    def __init__(self, inner: Callable[..., logging.LogRecord]) -> None:
        self._inner = inner

    def __call__(self, name: Any, *args: Any, **kwargs: Any) -> logging.LogRecord:
        if _is_withheld(name):
            logging.getLogger(name).addFilter(_drop_withheld)  # a no-op once the logger has it
        return self._inner(name, *args, **kwargs)


@contextmanager
def sdk_logs_withheld(tops: tuple[str, ...]) -> Iterator[None]:
    """Drop every record created in this context on a logger in `tops` (or below one) until exit."""
    with _install_lock:
        # Checked on every call, so a factory the application sets later is wrapped in turn.
        if not isinstance(logging.getLogRecordFactory(), _WithholdingFactory):
            logging.setLogRecordFactory(_WithholdingFactory(logging.getLogRecordFactory()))
    token = _withheld.set((*_withheld.get(), *tops))
    try:
        yield
    finally:
        _withheld.reset(token)


class _ClientHolder(HoldsSecrets):
    """The base of every provider object: repr names the key only; `close()` closes a client the object built (an
    injected one belongs to the caller); no pickle or copy, since the client holds credentials. `_call_provider`
    is the one way to the provider: retried, the SDK's logs withheld, a failure a `ProviderError` naming the key."""

    __slots__ = ("_client", "_close_owned", "_retry")
    _client: Any
    _close_owned: Callable[[], None] | None  # how to close the client, when this object built it
    _SDK_LOGGERS: tuple[str, ...] = ()  # the SDK's loggers, which log request and response bodies (data keys)
    _FAILURES: tuple[type[Exception], ...] = ()  # what the SDK raises when the provider fails

    def __init__(self, retry: RetryPolicy | None, default: RetryPolicy) -> None:
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigurationError("retry must be a statecodec.providers.RetryPolicy, or None for the default")
        self._retry, self._close_owned = retry or default, None

    def describe(self) -> str:
        raise NotImplementedError

    def _cause(self, exc: Exception, operation: str) -> str:
        """What `exc`, one of `_FAILURES` raised by `operation`, means, in fixed words and the provider's own."""
        raise NotImplementedError

    def _call_provider(self, fn: Callable[[], _T], operation: str, transient: Callable[[BaseException], bool]) -> _T:
        """`fn()`, called again while it raises a transient exception, until the policy's attempts run out."""
        policy = self._retry
        try:
            with sdk_logs_withheld(self._SDK_LOGGERS):
                for attempt in range(1, policy.attempts):
                    try:
                        return fn()
                    except Exception as exc:
                        if not transient(exc):
                            raise
                    # Full jitter: fleets restarting together do not retry in lockstep.
                    policy.sleep(random.uniform(0, min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1))))
                return fn()
        except self._FAILURES as exc:
            why = self._cause(exc, operation)
        # Raised out here: `from None` would still keep the SDK's error as the context, and such an error may hold
        # the request with its credentials (a `requests` error keeps the X-Vault-Token header).
        raise ProviderError(f"{self.describe()}: {why}")

    def close(self) -> None:
        if self._close_owned is not None:
            self._close_owned()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()!r})"


def wrapped_keys_from_env(environ: Mapping[str, str] | None = None) -> list[bytes]:
    """Wrapped blobs from exactly one of ``STATECODEC_WRAPPED_KEYS`` or ``..._FILE``."""
    settings = os.environ if environ is None else environ
    text, source = text_or_file(settings, _WRAPPED_KEYS_VAR, 256 * 1024, "is it a wrapped-key file?")
    if text is None:
        raise ConfigurationError(f"no wrapped data keys configured: set {_WRAPPED_KEYS_VAR} to the output of "
                                 f"`statecodec kms new-data-key`, or {_WRAPPED_KEYS_VAR}_FILE to a file holding it")
    with named_errors(source):
        return parse_wrapped_keys(text)


def parse_context(text: str) -> dict[str, str]:
    """A context from ``k=v,k=v`` or a JSON object of strings, checked as a codec will check it."""
    text = text.strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            raise ConfigurationError("context is not valid JSON; write k=v,k=v or a JSON object") from None
    else:
        doc = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ConfigurationError("context must be comma-separated key=value pairs, e.g. purpose=x,audience=y")
            if key in doc:
                raise ConfigurationError(f"context names {key!r} twice")
            doc[key] = value.strip()
    return dict(_check_context(doc))


def context_from_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``STATECODEC_KMS_CONTEXT`` (see `parse_context`), checked as a codec will check it so that a bad context is
    named by its setting, or the default context with ``STATECODEC_KMS_AUDIENCE``."""
    settings = os.environ if environ is None else environ
    text = setting(settings, _CONTEXT_VAR, required=False)
    if text is None:
        return default_context(setting(settings, "STATECODEC_KMS_AUDIENCE", required=False))
    with named_errors(_CONTEXT_VAR):
        return parse_context(text)


def build_envelope_codec(
    settings: Mapping[str, str],
    wrapper_from_env: Callable[[Mapping[str, str]], AbstractContextManager[KeyWrapper]],
) -> EnvelopeCodec:
    """The envelope codec the settings describe: every setting checked before the provider is contacted,
    the ring unwrapped once, the wrapper's client closed on return (after start-up no provider is needed)."""
    blobs = wrapped_keys_from_env(settings)
    context = context_from_env(settings)
    max_length = max_token_length_setting(settings)
    with wrapper_from_env(settings) as wrapper:
        return EnvelopeCodec(wrapper, blobs, context=context, max_token_length=max_length)
