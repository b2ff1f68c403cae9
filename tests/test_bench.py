"""`statecodec bench` itself: what a run writes, what it skips, what it refuses. No timing is asserted."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from statecodec.cli.bench import CASES, PAYLOADS, paired, run
from statecodec.cli.main import main


def test_a_quick_run_writes_ratios_the_round_figure_a_table_and_a_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, png = tmp_path / "run.json", tmp_path / "run.png"
    assert main(["bench", "--quick", "--json", str(path), "--plot", str(png)]) == 0
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    assert (doc["rounds"], doc["payloads"], doc["skipped"]) == (15, {k: len(v) for k, v in PAYLOADS.items()}, {})
    assert doc["environment"]["packages"]["cryptography"]
    assert [r["case"] for r in doc["results"]] == [case for case in CASES for _ in PAYLOADS]
    ratios = [r[k] for r in doc["results"] for k in ("seal_vs_floor", "unseal_vs_floor")]
    assert all(0 < ratio < math.inf for ratio in ratios)
    assert [r["token_overhead"] for r in doc["results"][::3][:2]] == [38, 44]  # nonce + tag; AESGCMCodec: header
    # An added cost is a difference of noisy timings: a finite number, of either sign on a busy machine.
    assert math.isfinite(doc["bound_vs_sdk_added"])
    table = capsys.readouterr().out
    assert "seal/floor" in table
    assert "BoundCodec adds" in table
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_package_is_skipped_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "joserfc", None)  # import joserfc now raises ImportError
    monkeypatch.setitem(sys.modules, "mcp.server.context", None)
    doc = run(CASES, rounds=2)
    assert "joserfc" not in {r["case"] for r in doc["results"]}
    assert doc["skipped"] == {
        "joserfc": "joserfc is not installed (pip install 'statecodec[bench]')",
        "MCP round": "mcp is not installed (pip install 'statecodec[bench]')",
    }
    assert doc["bound_vs_sdk_added"] is None


def test_plot_without_matplotlib_is_refused_before_measuring(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["bench", "--quick", "--plot", "run.png"]) == 2
    captured = capsys.readouterr()
    assert "--plot needs matplotlib: pip install 'statecodec[bench]'" in captured.err
    assert captured.out == ""  # nothing was measured


def test_ratios_are_taken_round_by_round_then_the_median() -> None:
    # Per round the case costs 2, 3 and 1 times the floor: median 2, where the medians' ratio (4 / 4) says 1.
    assert paired([2.0, 30.0, 4.0], [1.0, 10.0, 4.0]) == 2.0
