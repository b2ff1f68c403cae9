"""The per-token transit outage window, driven by a hand-moved clock (a paused OpenBao: test_vault_faults.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("hvac")

from statecodec.providers._vault_api import Failure, FailureKind
from statecodec.providers.vault import _MAX_OUTAGE_BACKOFF, _OutageWindow
from tests.plugins.vault import Clock

DOWN = Failure(FailureKind.OUTAGE, "Vault did not answer")


def open_until(window: _OutageWindow, clock: Clock) -> float:
    """The first moment, from now, at which the window lets a call through (the clock is put back)."""
    saved = clock.now
    while window.start()[1] is not None:
        clock.now += 0.125
    opened, clock.now = clock.now, saved
    return opened


def test_an_answer_closes_the_window_and_resets_its_length() -> None:
    clock = Clock()
    window = _OutageWindow(2.0, clock)
    for _ in range(4):
        window.failed(window.start()[0], DOWN)
        clock.now = open_until(window, clock)
    stale = window.start()[0] - 100.0  # a call in flight before the last window was set
    window.answered()
    assert window.start()[1] is None
    window.failed(stale, DOWN)  # an old timeout reported after the answer does not reopen it
    assert window.start()[1] is None
    window.failed(window.start()[0], DOWN)
    assert open_until(window, clock) == clock.now + 2.0


def test_the_window_is_capped_never_overflows_and_a_zero_base_never_refuses() -> None:
    clock = Clock()
    window = _OutageWindow(1.0, clock)
    for _ in range(2000):  # far past 2**1024, where a float product of 2**n overflows
        started, down = window.start()
        assert down is None
        window.failed(started, DOWN)
        clock.now += _MAX_OUTAGE_BACKOFF
    window.failed(window.start()[0], DOWN)
    assert open_until(window, clock) == clock.now + _MAX_OUTAGE_BACKOFF
    big, zero = _OutageWindow(60.0, clock), _OutageWindow(0.0, clock)  # a base above the cap is capped at once
    big.failed(big.start()[0], DOWN)
    assert open_until(big, clock) == clock.now + _MAX_OUTAGE_BACKOFF
    zero.failed(zero.start()[0], DOWN)
    assert zero.start()[1] is None


@given(
    # (start, failure delay) of each call: every call started before the first failure at t=1.
    calls=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.floats(0, 0.99)), min_size=1, max_size=20),
    base=st.sampled_from([0.5, 1.0, 4.0]),
)
def test_concurrent_failures_open_one_base_window(calls: list[tuple[float, float]], base: float) -> None:
    """However many calls started before the first failure, and whenever they fail, one base window."""
    clock = Clock()
    window = _OutageWindow(base, clock)
    clock.now = 1.0
    window.failed(min(start for start, _ in calls), DOWN)
    for started, delay in calls:
        clock.now = 1.0 + delay * base  # later failures, inside the window
        window.failed(started, DOWN)
    clock.now = 1.0
    assert window.start()[1] is not None
    clock.now = 1.0 + base
    assert window.start()[1] is None
