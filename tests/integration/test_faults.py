"""The fault suite's short run (`python benchmarks/faults.py --short`): real redis-server and server processes,
concurrent presentations and faults, asserting only what holds on main and never a time: each token accepted at
most once, and no refused token spent by a claim that came late."""

from __future__ import annotations

import asyncio

import pytest
from benchmarks import faults

# The rows short enough for every run of the suite; `python benchmarks/faults.py` runs all of them (docs/single-use.md).
HOLDING = ("burst-1000", "stall", "big-retry")


@pytest.fixture(scope="module")
def rows() -> dict[str, faults.Row]:
    return dict(zip(HOLDING, asyncio.run(faults.run(HOLDING, short=True)), strict=True))


@pytest.mark.parametrize("name", HOLDING)
def test_a_fault_row_keeps_its_invariants(rows: dict[str, faults.Row], name: str) -> None:
    row = rows[name]
    assert row.invariants, row
    assert all(row.invariants.values()), f"{row.fault}: {row.measured}"


def test_the_table_has_one_line_per_row(rows: dict[str, faults.Row]) -> None:
    shown = faults.table(list(rows.values())).splitlines()
    assert shown[0] == "| fault | required | measured | held? |"
    assert len(shown) == 2 + len(HOLDING)
    assert all(line.endswith(("| yes |", "| no |")) for line in shown[2:])
