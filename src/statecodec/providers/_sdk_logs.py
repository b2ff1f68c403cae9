"""No record from a provider SDK's loggers reaches a handler while statecodec is inside a provider call.

Threat: the provider SDKs log what they send and receive. botocore logs the
request dict (``botocore.endpoint``) and the response body
(``botocore.parsers``) of every call at DEBUG; the Cloud KMS client logs
request and response payloads (its gRPC transport) when its logger is at
DEBUG, through a handler on ``google`` or Google's own switch
``GOOGLE_SDK_PYTHON_LOGGING_SCOPE``. ``Decrypt`` responses and ``Encrypt``
requests carry the data key, so a single
``logging.basicConfig(level=logging.DEBUG)`` would write every data key to
the log.

While `sdk_logs_withheld` is active in the calling context, every record
created on a logger in the named hierarchies (``botocore`` and
``botocore.parsers`` alike) is dropped before any handler sees it, wherever
the handlers are (root, the SDK's top logger, the emitting logger itself) and
whatever their formatters. It holds for loggers created at any time, even
during the call. Records on other loggers, and records from other threads or
contexts, pass untouched: the switch is a context variable.

How: Python runs a logger's filters only on records created on that logger,
not on records propagating from its children, so one filter on ``botocore``
would not stop ``botocore.parsers``. The record factory
(`logging.setLogRecordFactory`) is the one hook every record passes through,
whichever logger creates it. A factory cannot drop a record, so inside a
provider call it adds the drop filter to the emitting logger, whose filters
run next, before any handler. The filter decides from the context variable on
each record; nothing is remembered between calls.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["sdk_logs_withheld"]

_withheld: ContextVar[tuple[str, ...]] = ContextVar("statecodec_withheld_sdk_loggers", default=())
_install_lock = threading.Lock()


def _is_withheld(name: object) -> bool:
    # `logging.makeLogRecord` calls the factory with no logger name.
    if not isinstance(name, str):
        return False
    return any(name == top or name.startswith(top + ".") for top in _withheld.get())


class _DropWithheld(logging.Filter):
    """Refuses records from a withheld hierarchy, in a context inside a provider call."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _is_withheld(record.name)


_DROP = _DropWithheld()


class _WithholdingFactory:
    """The record factory found at install time, plus the drop filter on each withheld logger it meets."""

    def __init__(self, inner: Callable[..., logging.LogRecord]) -> None:
        self._inner = inner

    def __call__(self, name: Any, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self._inner(name, *args, **kwargs)
        if _is_withheld(name):
            logging.getLogger(name).addFilter(_DROP)  # a no-op once the logger has it
        return record


def _install() -> None:
    # Checked on every provider call, so a factory set later by the application
    # (wrapping ours or not) is wrapped in turn rather than switching this off.
    with _install_lock:
        current = logging.getLogRecordFactory()
        if not isinstance(current, _WithholdingFactory):
            logging.setLogRecordFactory(_WithholdingFactory(current))


@contextmanager
def sdk_logs_withheld(tops: tuple[str, ...]) -> Iterator[None]:
    """Drop every record created on a logger named in `tops`, or below one, in this context until exit."""
    _install()
    token = _withheld.set((*_withheld.get(), *tops))
    try:
        yield
    finally:
        _withheld.reset(token)
