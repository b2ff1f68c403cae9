"""`statecodec bench` itself: what a run writes, what it skips, what it refuses. No timing is asserted."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from statecodec.cli.bench import paired
from statecodec.cli.main import main

TINY = ["bench", "--rounds", "3", "--payload", "state"]


def _run(tmp_path: Path, *args: str) -> dict[str, Any]:
    path = tmp_path / "run.json"
    assert main([*TINY, *args, "--json", str(path)]) == 0
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


def test_a_tiny_run_writes_ratios_the_round_figure_a_table_and_a_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "run.png"
    doc = _run(tmp_path, "--only", "AESGCMCodec,Fernet,binding", "--plot", str(png))
    assert (doc["rounds"], doc["payloads"], doc["skipped"]) == (3, {"state": 300}, {})
    assert doc["environment"]["packages"]["cryptography"]
    assert [r["case"] for r in doc["results"]] == ["floor", "AESGCMCodec", "XAESGCMCodec", "Fernet"]  # substrings
    ratios = [r[k] for r in doc["results"] for k in ("seal_vs_floor", "unseal_vs_floor")]
    assert all(0 < ratio < math.inf for ratio in ratios)
    assert [r["token_overhead"] for r in doc["results"][:2]] == [38, 44]  # nonce + tag; AESGCMCodec adds its header
    # An added cost is a difference of noisy timings: a finite number, of either sign on a busy machine.
    assert math.isfinite(doc["bound_vs_sdk_added"])
    table = capsys.readouterr().out
    assert "seal/floor" in table
    assert "BoundCodec adds" in table
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_package_is_skipped_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jwcrypto", None)  # import jwcrypto now raises ImportError
    monkeypatch.setitem(sys.modules, "mcp.server.context", None)
    doc = _run(tmp_path, "--only", "jwcrypto,tink,binding")
    assert [r["case"] for r in doc["results"]] == ["floor", "tink"]
    assert doc["skipped"] == {
        "jwcrypto": "jwcrypto is not installed (pip install 'statecodec[bench]')",
        "MCP round": "mcp is not installed (pip install 'statecodec[bench]')",
    }
    assert doc["bound_vs_sdk_added"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--plot", "run.png"], "--plot needs matplotlib: pip install 'statecodec[bench]'"),
        (["--only", "no-such-codec"], "--only no-such-codec names no case"),
        (["--rounds", "0"], "--rounds must be at least 1"),
    ],
)
def test_bad_options_are_refused_before_measuring(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main([*TINY, *args]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""  # nothing was measured


def test_ratios_are_taken_round_by_round_then_the_median() -> None:
    # Per round the case costs 2, 3 and 1 times the floor: the median is 2, where the ratio of
    # the two medians (4 / 4) would say 1.
    assert paired([2.0, 30.0, 4.0], [1.0, 10.0, 4.0]) == 2.0
