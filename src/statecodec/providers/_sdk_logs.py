"""No record from a provider SDK's loggers reaches a handler while statecodec is inside a provider call.

Threat: botocore logs request and response bodies at DEBUG; the Cloud KMS
client logs its payloads (a handler on ``google``, or
``GOOGLE_SDK_PYTHON_LOGGING_SCOPE``). ``Decrypt`` responses and ``Encrypt``
requests carry the data key, so ``logging.basicConfig(level=logging.DEBUG)``
alone would write every data key to the log.

Inside `sdk_logs_withheld(tops)`, every record created in this context on a
logger in `tops` or below one is dropped before any handler sees it, whatever
the handlers and levels, even on a logger created during the call; other
loggers, threads and contexts are untouched. Not a filter on ``botocore`` for
the call's duration: a logger's filters see only the records created on that
very logger (not ``botocore.parsers``), loggers appear during calls, and
adding and removing filters would cut other threads' records or re-open the
log in the middle of an overlapping call. So the record factory, which every
record passes through, adds one filter to each SDK logger it sees emitting in
a call (a factory cannot drop a record itself); the filter stays, and decides
from a context variable on each record.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_withheld: ContextVar[tuple[str, ...]] = ContextVar("statecodec_withheld_sdk_loggers", default=())
_install_lock = threading.Lock()


def _is_withheld(name: object) -> bool:
    # `logging.makeLogRecord` calls the factory with no logger name.
    return isinstance(name, str) and any(name == top or name.startswith(top + ".") for top in _withheld.get())


class _DropWithheld(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _is_withheld(record.name)


_DROP = _DropWithheld()


class _WithholdingFactory:
    """The record factory found at install time, which also puts `_DROP` on each withheld logger it meets."""

    def __init__(self, inner: Callable[..., logging.LogRecord]) -> None:
        self._inner = inner

    def __call__(self, name: Any, *args: Any, **kwargs: Any) -> logging.LogRecord:
        if _is_withheld(name):
            logging.getLogger(name).addFilter(_DROP)  # a no-op once the logger has it
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
