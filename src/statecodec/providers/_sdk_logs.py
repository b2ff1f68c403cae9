"""No record from a provider SDK's loggers reaches a handler while statecodec is inside a provider call.

Threat: botocore and the Cloud KMS client log request and response bodies, data keys included (docs/threat-model.md).
A logger's filters see only records created on that very logger, and adding and removing them races other
threads; so the record factory puts one lasting filter on each SDK logger it sees emitting in a call, and the
filter decides from a context variable.
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
