"""Shared test configuration. Service fixtures live in tests/plugins/, one module per service."""

import threading
from collections.abc import Iterator

import pytest

pytest_plugins = ["tests.plugins.aws", "tests.plugins.gcp", "tests.plugins.redis", "tests.plugins.vault"]

# Threads a statecodec object owns until it is closed: one left running outlives its test, and whatever it writes
# lands in a later test's captured output.
_OWNED = ("statecodec-single-use", "statecodec-reload", "statecodec-sync")


@pytest.fixture(autouse=True)
def _no_statecodec_thread_left() -> Iterator[None]:
    before = {thread for thread in threading.enumerate() if thread.name in _OWNED}
    yield
    left = [t.name for t in threading.enumerate() if t.name in _OWNED and t not in before and t.is_alive()]
    assert not left, f"the test left running: {left} (close what it started)"
