"""`statecodec bench` itself: what a run writes, what it skips, what it refuses. No timing is asserted."""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statecodec.cli import bench_single_use
from statecodec.cli.bench import CASES, PAYLOADS, paired, run
from statecodec.cli.main import main
from tests.plugins.aws import free_port


def test_a_quick_run_writes_ratios_the_round_figure_a_table_and_a_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, png = tmp_path / "run.json", tmp_path / "run.png"
    assert main(["bench", "--quick", "--output", str(path), "--plot", str(png)]) == 0
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    assert (doc["rounds"], doc["payloads"], doc["skipped"]) == (15, {k: len(v) for k, v in PAYLOADS.items()}, {})
    assert doc["environment"]["packages"]["cryptography"]
    assert [r["case"] for r in doc["results"]] == [case for case in CASES for _ in PAYLOADS]
    ratios = [r[k] for r in doc["results"] for k in ("seal_vs_floor", "unseal_vs_floor")]
    assert all(0 < ratio < math.inf for ratio in ratios)
    assert [r["token_overhead"] for r in doc["results"][::3][:2]] == [38, 44]  # nonce + tag; AESGCMCodec: header
    # An added cost is a difference of noisy timings: a finite number, of either sign on a busy machine.
    assert math.isfinite(doc["bound_vs_sdk_added"])
    assert set(doc["floor_seconds"]) == set(PAYLOADS)
    # Without --store-url, single use is timed over the in-process store only.
    single_use = doc["single_use"]
    assert math.isfinite(single_use["memory_added_vs_bound"])
    assert math.isfinite(single_use["memory_unseal_added_vs_bound_unseal"])
    assert set(single_use["loop_lag"]) == {"idle", "memory/thread", "memory/loop"}
    assert "round_trips_per_token" not in single_use
    captured = capsys.readouterr()
    assert "seal/floor" in captured.out
    assert "BoundCodec adds" in captured.out
    assert "the in-process store adds" in captured.out
    assert "bench: round 15/15" in captured.err  # not a terminal: plain progress lines, on stderr
    assert f"bench: wrote {path}" in captured.err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_json_goes_to_stdout_alone_and_only_selects_cases(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--quick", "--json", "--only", "aesgcmcodec"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # nothing but the JSON document
    # A whole name selects that case alone (not XAESGCMCodec); the floor always runs; no round was asked for.
    assert {r["case"] for r in doc["results"]} == {"floor", "AESGCMCodec"}
    assert doc["bound_vs_sdk_added"] is None
    assert "bench: round" in captured.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "nosuchcodec"], "--only 'nosuchcodec' matches no case; the cases are: floor, AESGCMCodec"),
        (["--output", "missing-folder/run.json"], "the folder 'missing-folder' does not exist"),
        (["--output", "run.txt"], "--output 'run.txt': the file name must end in .json"),
        (["--plot", "missing-folder/run.png"], "the folder 'missing-folder' does not exist"),
        (["--plot", "."], "the file name must end in .png"),
    ],
    ids=["only-matches-nothing", "output-folder", "output-suffix", "plot-folder", "plot-suffix"],
)
def test_bad_arguments_fail_with_exit_2_before_measuring(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--quick", *args]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert "bench: round" not in captured.err  # nothing was measured
    assert captured.out == ""
    assert list(tmp_path.iterdir()) == []


def test_a_stdout_that_cannot_encode_micro_gets_us(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from statecodec.cli.main import main; sys.exit(main())",
         "bench", "--quick", "--only", "AESGCMCodec"],
        capture_output=True, env=env, cwd=tmp_path, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert b" us, unseal " in result.stdout
    assert "µ".encode() not in result.stdout


def test_a_missing_package_is_skipped_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    # Loaded first, whatever ran before in this process: otherwise blocking mcp.server.context below would also
    # skip the SDK's codec, or not, depending on the order the tests ran in.
    importlib.import_module("mcp.server.request_state")
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


@pytest.mark.integration
def test_a_redis_store_costs_one_round_trip_per_consumed_token(redis_url: str) -> None:
    with bench_single_use.redis_store(redis_url) as store:
        doc = bench_single_use.run(2, store, lag_s=0.05)
    assert doc["round_trips_per_token"] == 1.0  # the claim script; the revocation view is read locally
    assert all(math.isfinite(doc[k]) for k in ("ping_us", "redis_added_vs_ping", "redis_unseal_added_vs_ping"))
    assert {"redis/thread", "redis/loop"} <= set(doc["loop_lag"])


@pytest.mark.parametrize(
    ("blocked", "url", "message"),
    [
        ("redis", "redis://127.0.0.1:6379/0", "--store-url needs the redis package: pip install 'statecodec[redis]'"),
        (None, "http://127.0.0.1:6379/0", "--store-url is not a Redis URL (redis://, rediss://, unix://)"),
        (None, "redis://127.0.0.1:{port}/0", "--store-url: the Redis server does not answer a PING"),
    ],
)
def test_a_store_that_cannot_be_used_is_refused_before_measuring(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], blocked: str | None, url: str, message: str
) -> None:
    if blocked:
        monkeypatch.setitem(sys.modules, blocked, None)  # import redis now raises ImportError
    assert main(["bench", "--quick", "--store-url", url.format(port=free_port())]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""  # nothing was measured
