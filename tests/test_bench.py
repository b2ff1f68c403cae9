"""The benchmark harness itself: guard, registry, skipping, JSON schema, compare, a quick run.

Nothing here asserts a timing: the numbers depend on the machine. What is
checked is that the harness refuses broken cases, classifies missing ones,
writes the documented layout and flags only changes beyond the noise.
"""

from __future__ import annotations

import base64
import copy
import http.server
import json
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import statecodec.bench.runner as runner
from statecodec import AESGCMCodec
from statecodec.bench import (
    PAYLOADS,
    Built,
    Case,
    Plan,
    Settings,
    Skip,
    compare,
    discover,
    format_compare,
    format_table,
    run,
    select,
    validate,
)
from statecodec.bench.cases import BUILTIN_MODULES, GROUPS, MODULES_ENV
from statecodec.bench.measure import RoundTripError, check_round_trip, count_remote_calls, measure, percentile
from statecodec.bench.payloads import payloads
from statecodec.bench.report import SCHEMA, format_scale, paired_ratio, ratio_to_floor
from statecodec.bench.scale import LoopSettings
from statecodec.cli.main import main

TINY = Settings(rounds=2, batch_seconds=0.0002, warmup_seconds=0.0, tail_per_round=2)
TINY_PLAN = Plan(
    TINY, thread_seconds=0.01, thread_rounds=1, loop=LoopSettings(concurrency=2, rounds=1, slice_seconds=0.05)
)
SMALL = [PAYLOADS["state"]]


class _Identity:
    """Not a codec worth the name: accepts anything that decodes, so a changed token passes."""

    def seal(self, payload: bytes) -> str:
        return base64.urlsafe_b64encode(payload).decode()

    def unseal(self, token: str) -> bytes:
        return base64.urlsafe_b64decode(token)


class _Lossy:
    """Returns something other than what was sealed."""

    def __init__(self) -> None:
        self._inner = AESGCMCodec.ephemeral()

    def seal(self, payload: bytes) -> str:
        return self._inner.seal(payload)

    def unseal(self, token: str) -> bytes:
        return self._inner.unseal(token)[:-1]


def _case(name: str, factory: Any, **kw: Any) -> Case:
    return Case(name, kw.pop("group", "statecodec"), factory, "test case", **kw)


def _floor() -> Case:
    from statecodec.bench.cases_baselines import FloorCodec

    return Case("floor", "floor", lambda: FloorCodec(bytes(32)), "floor")


# --- round-trip guard ---------------------------------------------------------------------------


def test_guard_accepts_a_real_codec_and_reports_sizes() -> None:
    data = PAYLOADS["state"].data
    codec = AESGCMCodec.ephemeral()
    token, calls = check_round_trip(Built(codec.seal, codec.unseal), data)
    assert isinstance(token, str)
    assert calls == {"seal": 0, "unseal": 0}


def test_guard_rejects_a_codec_that_accepts_a_changed_token() -> None:
    codec = _Identity()
    with pytest.raises(RoundTripError, match="one character changed"):
        check_round_trip(Built(codec.seal, codec.unseal), b"payload bytes of some length")


def test_guard_rejects_a_codec_that_returns_other_bytes() -> None:
    codec = _Lossy()
    with pytest.raises(RoundTripError, match="did not return the payload"):
        check_round_trip(Built(codec.seal, codec.unseal), b"abc")


def test_guard_rejects_a_non_str_token() -> None:
    with pytest.raises(RoundTripError, match="not str"):
        check_round_trip(Built(lambda p: p, lambda t: t), b"abc")  # type: ignore[arg-type,return-value]


def test_broken_cases_are_reported_and_never_timed() -> None:
    cases = [_floor(), _case("identity", _Identity), _case("lossy", _Lossy), _case("good", AESGCMCodec.ephemeral)]
    results = {r.name: r for r in measure(cases, SMALL, TINY)}
    for name in ("identity", "lossy"):
        cell = results[name].cells["state"]
        assert cell.status == "error"
        assert cell.reason.startswith("broken:")
        assert cell.ops == {}
        assert results[name].status == "error"
    good = results["good"].cells["state"]
    assert good.status == "ok"
    assert set(good.ops) == {"seal", "unseal"}
    assert len(good.ops["seal"].samples) == TINY.rounds
    assert good.ops["seal"].tail_count == TINY.rounds * TINY.tail_per_round
    assert good.overhead_chars == 44  # AESGCMCodec's documented overhead


def test_a_codec_refusing_a_payload_is_an_error_on_that_payload_only() -> None:
    small = AESGCMCodec.ephemeral(max_token_length=1000)
    results = measure([_case("capped", lambda: small)], payloads(["state", "4k"]), TINY)
    cells = results[0].cells
    assert cells["state"].status == "ok"
    assert cells["4k"].status == "error"
    assert cells["4k"].reason.startswith("refused: SealError")
    assert results[0].status == "ok"


# --- skipping and the registry ------------------------------------------------------------------


def test_missing_package_is_skipped_with_its_install_hint() -> None:
    case = _case("ghost", _Identity, requires=("statecodec_no_such_module",), install_hint="pip install ghost")
    (res,) = measure([case], SMALL, TINY)
    assert res.status == "skipped"
    assert "statecodec_no_such_module" in res.reason
    assert "pip install ghost" in res.reason
    assert res.cells == {}


def test_missing_module_at_build_time_is_skipped_not_an_error() -> None:
    def factory() -> Any:
        import statecodec.no_such_codec  # type: ignore[import-not-found]  # noqa: F401

        raise AssertionError("unreachable")

    (res,) = measure([_case("later", factory, install_hint="pip install -U statecodec")], SMALL, TINY)
    assert res.status == "skipped"
    assert "statecodec.no_such_codec" in res.reason
    assert "pip install -U statecodec" in res.reason


def test_skip_signal_and_build_failure_are_classified() -> None:
    def not_configured() -> Any:
        raise Skip("set SOMETHING to measure this")

    def wrong_api() -> Any:
        raise TypeError("unexpected keyword argument 'x'")

    results = {r.name: r for r in measure([_case("a", not_configured), _case("b", wrong_api)], SMALL, TINY)}
    assert (results["a"].status, results["a"].reason) == ("skipped", "set SOMETHING to measure this")
    assert results["b"].status == "error"
    assert results["b"].reason == "build failed: TypeError: unexpected keyword argument 'x'"


def test_builtin_cases_are_declared_once_with_group_and_hint() -> None:
    cases, problems = discover()
    assert problems == []
    names = [c.name for c in cases]
    assert len(names) == len(set(names))
    for c in cases:
        assert c.group in GROUPS
        assert c.install_hint
    expected = {
        "floor",
        "AESGCMCodec",
        "XAESGCMCodec",
        "BoundCodec(AESGCMCodec)",
        "EnvelopeCodec",
        "JWECodec(dir)",
        "JWSCodec(HS256)",
        "VaultTransitCodec",
        "sdk.AESGCMRequestStateCodec",
        "sdk.RequestStateBoundary",
        "Fernet",
        "MultiFernet",
        "itsdangerous",
        "PyJWT",
        "jwcrypto",
        "joserfc",
        "pyseto",
        "tink",
    }
    assert expected <= set(names)
    assert len(BUILTIN_MODULES) == 2


def test_every_builtin_case_builds_or_skips_here() -> None:
    cases, _ = discover()
    results = {r.name: r for r in measure(cases, SMALL, TINY)}
    broken = {n: r.reason for n, r in results.items() if r.status == "error"}
    assert broken == {}
    # Without a configured Vault the remote cases say how to enable them.
    assert results["VaultTransitCodec"].status == "skipped"
    assert "STATECODEC_BENCH_VAULT_ADDR" in results["VaultTransitCodec"].reason
    assert results["EnvelopeCodec"].cells["state"].remote_calls == {"seal": 0, "unseal": 0}
    assert results["sdk.RequestStateBoundary"].kind == "boundary"


def test_modules_named_in_the_environment_are_discovered(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = types.ModuleType("statecodec_test_bench_plugin")
    plugin.CASES = (_case("plugin codec", AESGCMCodec.ephemeral),)  # type: ignore[attr-defined]
    broken = types.ModuleType("statecodec_test_bench_broken")
    monkeypatch.setitem(sys.modules, plugin.__name__, plugin)
    monkeypatch.setitem(sys.modules, broken.__name__, broken)
    monkeypatch.setenv(MODULES_ENV, f"{plugin.__name__}, {broken.__name__}")
    cases, problems = discover()
    assert "plugin codec" in [c.name for c in cases]
    assert len(problems) == 1
    assert broken.__name__ in problems[0]
    assert "no CASES" in problems[0]


def test_entry_points_add_cases_from_modules_and_callables(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    plugin = types.ModuleType("statecodec_test_bench_ep")
    plugin.CASES = (_case("from module", AESGCMCodec.ephemeral),)  # type: ignore[attr-defined]
    plugin.more = lambda: [_case("from callable", AESGCMCodec.ephemeral)]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, plugin.__name__, plugin)
    group = "statecodec.bench"
    points = [
        importlib.metadata.EntryPoint("mod", plugin.__name__, group),
        importlib.metadata.EntryPoint("fn", f"{plugin.__name__}:more", group),
        importlib.metadata.EntryPoint("bad", "statecodec_no_such_plugin:CASES", group),
    ]

    def entry_points(*, group: str) -> list[importlib.metadata.EntryPoint]:
        return [p for p in points if p.group == group]

    monkeypatch.setattr("statecodec.bench.cases.importlib.metadata.entry_points", entry_points)
    cases, problems = discover()
    names = [c.name for c in cases]
    assert "from module" in names
    assert "from callable" in names
    assert len(problems) == 1
    assert "entry point bad" in problems[0]


def test_duplicate_names_keep_the_first_and_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = types.ModuleType("statecodec_test_bench_dup")
    plugin.CASES = (_case("AESGCMCodec", _Identity),)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, plugin.__name__, plugin)
    cases, problems = discover([plugin.__name__])
    assert next(c.factory for c in cases if c.name == "AESGCMCodec") is not _Identity
    assert any("declared twice" in p for p in problems)


def test_select_filters_by_name_group_or_tag_and_keeps_the_floor() -> None:
    cases, _ = discover()
    chosen = [c.name for c in select(cases, ["jwe"])]
    assert "floor" in chosen
    assert "JWECodec(dir)" in chosen
    assert "joserfc" in chosen  # by tag
    assert "Fernet" not in chosen
    assert [c.name for c in select(cases, ["peer"])].count("tink") == 1
    quick = [c.name for c in select(cases, quick=True)]
    assert "MultiFernet" not in quick
    assert "AESGCMCodec" in quick


def test_payloads_are_the_documented_sizes_and_ascii() -> None:
    assert [len(p.data) for p in PAYLOADS.values()] == [300, 4096, 65536]
    for p in PAYLOADS.values():
        json.loads(p.data)
        p.data.decode("ascii")
    with pytest.raises(KeyError, match="unknown payload"):
        payloads(["1m"])


# --- remote call counting -------------------------------------------------------------------------


class _Quiet(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_url() -> Iterator[str]:
    srv = http.server.HTTPServer(("127.0.0.1", 0), _Quiet)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/"
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join()


def test_remote_calls_are_counted_per_operation(http_url: str) -> None:
    import urllib3

    with urllib3.PoolManager() as pool:

        def seal(payload: bytes) -> str:
            pool.request("GET", http_url)
            return base64.urlsafe_b64encode(payload).decode()

        def unseal(token: str) -> bytes:
            pool.request("GET", http_url)
            pool.request("GET", http_url)
            payload = base64.urlsafe_b64decode(token)
            if payload != b"abc":
                raise ValueError("changed")
            return payload

        with count_remote_calls() as counter:
            assert counter is not None
            pool.request("GET", http_url)
            assert counter.count == 1
        _, calls = check_round_trip(Built(seal, unseal), b"abc")
    assert calls == {"seal": 1, "unseal": 2}


# --- JSON schema and rendering -----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_doc() -> dict[str, Any]:
    cases = [_floor(), _case("AESGCMCodec", AESGCMCodec.ephemeral), _case("gone", _Identity, requires=("nope_x",))]
    return run(cases=cases, payload_names=["state", "4k"], plan=TINY_PLAN, scale=False, command="test")


def test_document_follows_the_schema_and_survives_json(tiny_doc: dict[str, Any]) -> None:
    assert validate(tiny_doc) == []
    again = json.loads(json.dumps(tiny_doc))
    assert validate(again) == []
    assert again["schema"] == SCHEMA
    env = again["environment"]
    assert env["openssl"].startswith("OpenSSL") or env["openssl"] == "unknown"
    assert env["packages"]["cryptography"]
    assert "gc" in again["settings"]
    cell = next(c for c in again["cases"] if c["name"] == "AESGCMCodec")["results"]["state"]
    assert cell["seal"]["median_s"] > 0
    assert cell["token_chars"] == cell["overhead_chars"] + (4 * 300 + 2) // 3


def test_validate_names_each_departure(tiny_doc: dict[str, Any]) -> None:
    bad = copy.deepcopy(tiny_doc)
    bad["schema"] = "other/0"
    del bad["environment"]["openssl"]
    bad["cases"][0]["status"] = "maybe"
    first_ok = next(c for c in bad["cases"] if c["status"] == "ok")
    del first_ok["results"]["state"]["unseal"]["median_s"]
    first_ok["results"]["state"]["token_chars"] = "444"
    problems = validate(bad)
    text = "\n".join(problems)
    assert "schema" in text
    assert "environment: missing 'openssl'" in text
    assert "is not ok/skipped/error" in text
    assert "unseal: missing 'median_s'" in text
    assert "token_chars: expected int, got str" in text
    assert validate([1, 2]) == ["document: expected a JSON object"]


def test_table_shows_ratios_sizes_and_skips(tiny_doc: dict[str, Any]) -> None:
    text = format_table(tiny_doc)
    assert "payload state" in text
    assert "payload 4k" in text
    assert "1.00/1.00" in text  # the floor against itself
    assert "+44" in text
    assert "gone: needs nope_x" in text
    ratio = ratio_to_floor(tiny_doc, "AESGCMCodec", "state", "seal")
    assert ratio is not None
    assert ratio > 0
    assert ratio_to_floor(tiny_doc, "gone", "state", "seal") is None


# --- compare --------------------------------------------------------------------------------------


def _doc(median: float, noise: float, *, n: int = 21, token: int = 444, floor: float = 1e-6) -> dict[str, Any]:
    def stats(m: float) -> dict[str, Any]:
        return {
            "median_s": m,
            "min_s": m * 0.9,
            "p99_s": m * 2,
            "ops_per_s": 1 / m,
            "noise": noise,
            "loops": 100,
            "samples_s": [m] * n,
            "tail_count": n,
        }

    def case(name: str, group: str, m: float, chars: int) -> dict[str, Any]:
        cell = {
            "status": "ok",
            "reason": "",
            "payload_bytes": 300,
            "token_chars": chars,
            "overhead_chars": chars - 400,
            "remote_calls": {"seal": 0, "unseal": 0},
            "seal": stats(m),
            "unseal": stats(m),
        }
        return {"name": name, "group": group, "status": "ok", "reason": "", "kind": "codec", "results": {"state": cell}}

    return {
        "schema": SCHEMA,
        "command": "x",
        "elapsed_s": 1.0,
        "environment": {"machine": "m", "cpu": "c", "python": "3", "openssl": "o", "packages": {}},
        "settings": {},
        "payloads": {"state": {"bytes": 300}},
        "cases": [case("floor", "floor", floor, 438), case("AESGCMCodec", "statecodec", median, token)],
        "problems": [],
    }


def _verdicts(old: dict[str, Any], new: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {(c.case, c.metric): c.verdict for c in compare(old, new)}


def test_compare_flags_a_regression_beyond_noise() -> None:
    v = _verdicts(_doc(2e-6, 0.01), _doc(3e-6, 0.01))
    assert v[("AESGCMCodec", "seal")] == "regression"
    assert v[("AESGCMCodec", "unseal")] == "regression"
    assert v[("floor", "seal")] == "same"


def test_compare_does_not_flag_a_change_within_noise() -> None:
    # 10 % slower, but each run's medians wander by more than that.
    v = _verdicts(_doc(2e-6, 0.15, n=5), _doc(2.2e-6, 0.15, n=5))
    assert v[("AESGCMCodec", "seal")] == "same"
    # The same 10 % with tight runs is real.
    v = _verdicts(_doc(2e-6, 0.01), _doc(2.2e-6, 0.01))
    assert v[("AESGCMCodec", "seal")] == "regression"


def test_compare_flags_improvements_and_token_growth() -> None:
    changes = compare(_doc(3e-6, 0.01), _doc(2e-6, 0.01, token=460))
    v = {(c.case, c.metric): c for c in changes}
    assert v[("AESGCMCodec", "seal")].verdict == "improvement"
    assert v[("AESGCMCodec", "token")].verdict == "regression"
    assert (v[("AESGCMCodec", "token")].old, v[("AESGCMCodec", "token")].new) == (444, 460)
    assert ("floor", "token") not in v


def test_ratios_are_paired_round_by_round() -> None:
    # Round 2 ran on a busy machine: both sides slowed 3x; the paired ratio stays 1.1.
    a = {"median_s": 2.2, "samples_s": [1.1, 3.3, 1.1]}
    b = {"median_s": 1.0, "samples_s": [1.0, 3.0, 1.0]}
    assert paired_ratio(a, b) == pytest.approx(1.1)
    # Unpaired (different round counts): the ratio of the medians.
    assert paired_ratio({"median_s": 3.0, "samples_s": [3.0]}, b) == pytest.approx(3.0)
    assert paired_ratio(a, {"median_s": 0, "samples_s": []}) is None


def test_compare_divides_out_the_floor() -> None:
    # Everything 50 % slower (a slower machine): raw ratio 1.5, but 1.0 against the floor.
    changes = compare(_doc(2e-6, 0.01), _doc(3e-6, 0.01, floor=1.5e-6))
    (change,) = [c for c in changes if c.case == "AESGCMCodec" and c.metric == "seal"]
    assert change.ratio == pytest.approx(1.5)
    assert change.floor_ratio == pytest.approx(1.0)
    # The verdict stays on the raw ratio (OpenSSL getting slower is news too); the column shows why.
    assert change.verdict == "regression"
    row = next(line for line in format_compare([change]).splitlines() if line.startswith("AESGCMCodec"))
    assert "1.500" in row
    assert "1.000" in row


def test_cli_compare_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, same, slow = tmp_path / "old.json", tmp_path / "same.json", tmp_path / "slow.json"
    old.write_text(json.dumps(_doc(2e-6, 0.01)))
    same.write_text(json.dumps(_doc(2.01e-6, 0.01)))
    slow.write_text(json.dumps(_doc(4e-6, 0.01)))
    assert main(["bench", "--compare", str(old), str(same)]) == 0
    assert "0 regression(s)" in capsys.readouterr().out
    assert main(["bench", "--compare", str(old), str(slow)]) == 1
    assert "REGRESSION" in capsys.readouterr().out
    junk = tmp_path / "junk.json"
    junk.write_text('{"schema": "other"}')
    assert main(["bench", "--compare", str(old), str(junk)]) == 2
    assert "not a statecodec bench run" in capsys.readouterr().err


# --- a whole quick run through the command line -------------------------------------------------


def test_quick_run_writes_table_json_and_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runner, "QUICK_PLAN", TINY_PLAN)
    out_json, out_png = tmp_path / "run.json", tmp_path / "run.png"
    code = main(["bench", "--quick", "--only", "AESGCMCodec,sdk", "--json", str(out_json), "--plot", str(out_png)])
    assert code == 0
    text = capsys.readouterr().out
    assert "payload 64k" in text
    assert "event loop" in text
    assert "threads" in text
    doc = json.loads(out_json.read_text())
    assert validate(doc) == []
    assert doc["command"].startswith("statecodec bench --quick --only AESGCMCodec --only sdk --json")
    names = {c["name"]: c for c in doc["cases"]}
    assert {"floor", "AESGCMCodec", "sdk.AESGCMRequestStateCodec", "sdk.RequestStateBoundary"} <= set(names)
    assert "Fernet" not in names
    assert all(c["status"] == "ok" for c in names.values())
    loop_rows = {r["case"]: r for r in doc["scale"]["event_loop"]["rows"]}
    assert loop_rows["AESGCMCodec"]["error"] == ""
    assert loop_rows["AESGCMCodec"]["rounds_per_s"] > 0
    assert "sdk.RequestStateBoundary" not in loop_rows  # a boundary cannot sit inside another boundary
    assert {t["case"] for t in doc["scale"]["threads"]} >= {"AESGCMCodec", "floor"}
    assert all(t["parallelism"] > 0 and t["pairs_per_s_2_threads"] > 0 for t in doc["scale"]["threads"])
    assert "2 threads / 1" in format_scale(doc)
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_list_shows_every_case(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    assert "AESGCMCodec" in out
    assert "tink" in out
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0
