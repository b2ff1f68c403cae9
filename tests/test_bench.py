"""`statecodec bench`: a run prints every codec and peer as ratios to the floor and writes JSON pyperf reads.

No timing is asserted: only that each figure exists, is a finite ratio, and that another tool reads the file.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pyperf
import pytest

from statecodec.cli.bench import CASES, PAYLOADS
from statecodec.cli.main import main

PEERS = ("SDK AESGCMRequestStateCodec", "PyJWT (JWS HS256)", "jwcrypto (JWE dir)", "joserfc (JWE dir)", "Fernet")


def test_a_tiny_run_prints_every_case_and_writes_pyperf_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.json"
    assert main(["bench", "--quick", "--rounds", "2", "--output", str(path)]) == 0
    table = capsys.readouterr().out
    assert set(PEERS) <= set(CASES)
    assert "skipped" not in table
    for name in CASES:  # every case, peers included, once per payload; the floor is the unit, not a row
        assert sum(line.startswith(f"  {name} ") for line in table.splitlines()) == (0 if name == "floor" else 2)
    suite = pyperf.BenchmarkSuite.load(str(path))
    names = {f"{case} {op} {size}" for case in CASES for op in ("seal", "unseal") for size in PAYLOADS}
    assert set(suite.get_benchmark_names()) == names
    for bench in suite.get_benchmarks():
        assert bench.get_nvalue() == 2
        assert 0 < bench.get_metadata()["ratio_to_floor"] < math.inf
    compare = [sys.executable, "-m", "pyperf", "compare_to", str(path), str(path)]
    compared = subprocess.run(compare, capture_output=True, text=True, check=False)
    assert compared.returncode == 0, compared.stderr
    # A value is the mean of a batch of `loops` calls: recorded, pyperf sees batches of 1 ms and more, not one call.
    shown = subprocess.run([sys.executable, "-m", "pyperf", "show", str(path)], capture_output=True, text=True,
                           check=True).stdout  # fmt: skip
    assert len(suite.get_benchmarks()) == shown.count("Mean +- std dev") == 40
    assert "shortest raw value" not in shown, shown
    assert all(bench.get_loops() > 1 for bench in suite.get_benchmarks())


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--rounds", "1"], "--rounds 1: give at least 2"), (["--output", "/no/such/dir/run.json"], "does not exist")],
)
def test_bad_arguments_fail_with_exit_2_before_measuring(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_peer_is_skipped_with_its_install_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "jwcrypto", None)  # import jwcrypto now raises ImportError
    assert main(["bench", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "skipped jwcrypto (JWE dir): jwcrypto is not installed (pip install 'statecodec[bench]')" in out
