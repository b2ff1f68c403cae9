"""`statecodec bench` itself: what a run writes, what it skips, what it refuses. No timing is asserted."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from statecodec.bench.measure import SCHEMA, paired
from statecodec.cli.main import main

TINY = ["bench", "--quick", "--rounds", "3", "--payload", "state"]
ROW = {
    "case": str,
    "group": str,
    "payload": str,
    "bytes": int,
    "seal_us": float,
    "unseal_us": float,
    "seal_vs_floor": float,
    "unseal_vs_floor": float,
    "token_overhead": int,
}
BINDING = ("bare_round_us", "bound_added_us", "sdk_added_us", "bound_vs_sdk_added")


def _run(tmp_path: Path, *args: str) -> dict[str, Any]:
    path = tmp_path / "run.json"
    assert main([*TINY, *args, "--json", str(path)]) == 0
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


def test_a_tiny_run_writes_ratios_the_round_figure_a_table_and_a_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "run.png"
    doc = _run(tmp_path, "--only", "AESGCMCodec,Fernet", "--only", "binding", "--plot", str(png))
    assert doc["schema"] == SCHEMA
    assert doc["settings"] == {"rounds": 3, "batch_ms": 0.5, "payloads": {"state": 300}}
    assert doc["environment"]["packages"]["cryptography"]
    assert [r["case"] for r in doc["results"]] == ["floor", "AESGCMCodec", "XAESGCMCodec", "Fernet"]  # substrings
    for row in doc["results"]:
        assert {k: type(v) for k, v in row.items()} == ROW
        for key in ("seal_us", "unseal_us", "seal_vs_floor", "unseal_vs_floor"):
            assert math.isfinite(row[key]), (row["case"], key)
            assert row[key] > 0, (row["case"], key)
    assert doc["results"][1]["token_overhead"] == 44  # AESGCMCodec's documented overhead
    # Added costs are differences of noisy medians: finite numbers, of either sign on a busy machine.
    assert sorted(doc["binding"]) == sorted(BINDING)
    assert all(isinstance(doc["binding"][k], float) and math.isfinite(doc["binding"][k]) for k in BINDING)
    assert doc["skipped"] == []
    table = capsys.readouterr().out
    assert "seal/floor" in table
    assert "BoundCodec adds" in table
    assert "of what the SDK's RequestStateBoundary adds per MCP round" in table
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_peer_is_skipped_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jwcrypto", None)  # import jwcrypto now raises ImportError
    doc = _run(tmp_path, "--only", "jwcrypto,tink")
    assert [r["case"] for r in doc["results"]] == ["floor", "tink"]
    assert doc["skipped"] == [
        {"case": "jwcrypto", "reason": "jwcrypto is not installed (pip install 'statecodec[bench]')"}
    ]
    assert doc["binding"] is None


def test_without_the_sdk_the_round_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp.server.context", None)
    doc = _run(tmp_path, "--only", "binding")
    assert doc["binding"] is None
    assert [s["case"] for s in doc["skipped"]] == ["binding"]
    assert doc["skipped"][0]["reason"] == "mcp is not installed (pip install 'statecodec[bench]')"


def test_a_plot_without_matplotlib_is_refused_before_measuring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main([*TINY, "--plot", str(tmp_path / "run.png"), "--json", str(tmp_path / "run.json")]) == 2
    err = capsys.readouterr().err
    assert "--plot needs matplotlib: pip install 'statecodec[bench]'" in err
    assert " cases, " not in err  # no progress line: nothing was measured
    assert not (tmp_path / "run.json").exists()


def test_an_only_that_matches_nothing_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TINY, "--only", "no-such-codec"]) == 2
    assert "matches no case" in capsys.readouterr().err


def test_ratios_are_taken_round_by_round_then_the_median() -> None:
    # Per round the case costs 2, 3 and 1 times the floor: the median is 2, where the ratio of
    # the two medians (4 / 4) would say 1.
    assert paired([2.0, 30.0, 4.0], [1.0, 10.0, 4.0]) == 2.0
