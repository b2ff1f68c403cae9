"""Every example and every runnable documentation block runs here, so none can silently rot.

Each ``examples/*.py`` runs as a script and must exit 0, unless it needs a running server:
then `DRIVEN_ELSEWHERE` names the test modules that start and drive it. A fenced ``python``
(``py``) or ``sh`` (``bash``, ``shell``) block of ``README.md`` or ``docs/**/*.md`` runs when
the line ``<!-- runnable -->`` comes right before its fence; a marker before anything else
fails the suite, so a typo cannot turn a block off. How blocks run: docs/contributing-docs.md.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from statecodec import format_keys, generate_key

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TIMEOUT_S = 120
MARKER = "<!-- runnable -->"
DRIVEN_ELSEWHERE: dict[str, tuple[str, ...]] = {
    "fleet_server.py": (
        "tests/integration/fleet_harness.py",
        "tests/integration/test_fleet.py",
        "tests/integration/test_fleet_single_use.py",
    ),
    "fleet_client.py": ("tests/integration/test_fleet.py",),
}
LANGUAGES = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[^\s`]*)")


@dataclass(frozen=True)
class Block:
    """A fenced block marked runnable: where it is, its language (python or sh) and its code."""

    id: str
    lang: str
    code: str


class MarkerError(ValueError):
    """A runnable marker that does not sit right before a block in a supported language."""


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return set(stripped) == {fence[0]} and len(stripped) >= len(fence)


def runnable_blocks(name: str, text: str) -> list[Block]:
    """The blocks of one Markdown document marked runnable, in order; `MarkerError` on a stray marker."""
    lines = text.splitlines()
    blocks: list[Block] = []
    pending: int | None = None  # line number of a marker still waiting for its block
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            if pending is not None and lines[i].strip():
                raise MarkerError(f"{name}:{pending}: runnable marker not followed by a code block")
            if lines[i].strip() == MARKER:
                pending = i + 1
            i += 1
            continue
        indent, fence, opening = match["indent"], match["fence"], i + 1
        body: list[str] = []
        i += 1
        while i < len(lines) and not _closes(lines[i], fence):
            body.append(lines[i].removeprefix(indent) if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        if pending is not None:
            if i == len(lines):
                raise MarkerError(f"{name}:{opening}: runnable code block never closed")
            if match["lang"].lower() not in LANGUAGES:
                raise MarkerError(f"{name}:{pending}: runnable block in {match['lang'] or 'no language'}")
            blocks.append(Block(f"{name}:{opening}", LANGUAGES[match["lang"].lower()], "\n".join(body) + "\n"))
            pending = None
        i += 1
    if pending is not None:
        raise MarkerError(f"{name}:{pending}: runnable marker not followed by a code block")
    return blocks


def run(cmd: list[str], cwd: Path) -> tuple[int, str]:
    """Exit status and output (stdout and stderr) of `cmd`, run in its own process group, which is then
    killed with whatever it left running. Output goes to a file: a leftover process would hold a pipe open."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATECODEC_")}
    env |= {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", "PYTHONWARNINGS": "error"}
    env["STATECODEC_KEYS"] = format_keys([generate_key(), generate_key()])
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            returncode = -signal.SIGKILL
        finally:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        out.seek(0)
        return returncode, out.read().decode(errors="replace")


# --- examples ---------------------------------------------------------------------------------

SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py") if p.name not in DRIVEN_ELSEWHERE)


@pytest.mark.parametrize("name", SCRIPTS)
def test_example_script_runs(name: str, tmp_path: Path) -> None:
    returncode, output = run([sys.executable, str(EXAMPLES / name)], tmp_path)
    assert returncode == 0, output
    assert output.strip(), f"{name} printed nothing"


@pytest.mark.parametrize("name", sorted(DRIVEN_ELSEWHERE))
def test_served_example_is_driven_by_its_tests(name: str) -> None:
    assert (EXAMPLES / name).is_file(), f"{name} is listed in DRIVEN_ELSEWHERE but was removed"
    for module in DRIVEN_ELSEWHERE[name]:
        assert Path(name).stem in (ROOT / module).read_text(encoding="utf-8"), f"{module} does not drive {name}"


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(Path(name).stem, EXAMPLES / name)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fleet_server_stops_before_serving_on_a_network_address_or_without_a_ring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = _example("fleet_server.py")
    with pytest.raises(SystemExit, match="loopback"):
        server.main(["--host", "0.0.0.0", "--port", "1"])
    for name in [k for k in os.environ if k.startswith("STATECODEC_")]:
        monkeypatch.delenv(name)
    with pytest.raises(SystemExit, match="cannot start: no codec configured: set STATECODEC_KEYS") as info:
        server.main(["--port", "1"])
    assert info.value.__suppress_context__  # a one-line message, no traceback


def test_fleet_server_factory_on_a_bad_configuration_stops_uvicorn_instead_of_restarting_workers(
    tmp_path: Path,
) -> None:
    # Every worker fails the same way; uvicorn stops on a worker's start-up failure status (3), not on a traceback.
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATECODEC_")}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uvicorn = [sys.executable, "-m", "uvicorn", "--factory", "--app-dir", str(EXAMPLES), "fleet_server:create_app"]
    for workers in ("1", "2"):
        result = subprocess.run(
            [*uvicorn, "--host", "127.0.0.1", "--port", str(port), "--workers", workers],
            cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT_S,
            check=False,
        )
        message = "fleet_server: cannot start: no codec configured: set STATECODEC_KEYS"
        assert 1 <= result.stderr.count(message) <= int(workers), result.stderr  # each worker once at most
        assert "Traceback" not in result.stderr
        if workers == "1":
            assert result.returncode == 3  # the factory runs in uvicorn's own process
        else:  # the supervisor stops the fleet (and, as uvicorn does, exits 0 itself)
            assert "failed to start, stopping the parent process" in result.stderr


def test_fleet_server_stops_before_serving_with_half_a_single_use_setup_or_a_bad_auth_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = _example("fleet_server.py")
    for name in [k for k in os.environ if k.startswith(("STATECODEC_", "FLEET_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("STATECODEC_KEYS", format_keys([generate_key()]))
    monkeypatch.setenv("STATECODEC_STORE_URL", "redis://127.0.0.1:1/0")
    with pytest.raises(SystemExit, match="cannot start: STATECODEC_STORE_KEY is not set") as info:
        server.main(["--port", "1"])
    assert info.value.__suppress_context__
    monkeypatch.setenv("FLEET_DEMO_AUTH", "yes")
    with pytest.raises(SystemExit, match="FLEET_DEMO_AUTH must be 1 or 0, not 'yes'"):
        server.main(["--port", "1"])


# --- runnable documentation blocks --------------------------------------------------------------


def _all_blocks() -> tuple[list[Block], list[str]]:
    """Every runnable block, and every stray marker (reported by a test, not as a collection error)."""
    blocks, errors = [], []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        try:
            blocks += runnable_blocks(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
        except MarkerError as exc:
            errors.append(str(exc))
    return blocks, errors


BLOCKS, MARKER_ERRORS = _all_blocks()


def test_the_suite_finds_every_example_and_block_and_no_stray_marker() -> None:
    assert "quickstart.py" in SCRIPTS
    assert len(BLOCKS) > 20
    assert MARKER_ERRORS == []


# Pages whose blocks cannot run in one shell as a reader pastes them, each with the reason.
SKIP_PAGES: dict[str, str] = {}
PAGES = sorted({block.id.partition(":")[0] for block in BLOCKS})


def one_shell_script(blocks: list[Block]) -> str:
    """The page's blocks in order, as a reader pastes them into one shell: variables, exports and files carry
    over from block to block; a Python block is fed to ``python -`` as pasted. A failure names its block."""
    lines = ["trap 'echo \"failed in block $BLOCK\" >&2' ERR"]
    for block in blocks:
        lines.append(f"BLOCK={block.id}")
        lines.append(block.code if block.lang == "sh" else f"python - <<'PASTED_PYTHON'\n{block.code}PASTED_PYTHON")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("page", PAGES)
def test_a_page_runs_in_one_shell_as_a_reader_pastes_it(page: str, tmp_path: Path) -> None:
    if page in SKIP_PAGES:
        pytest.skip(SKIP_PAGES[page])
    (tmp_path / "examples").symlink_to(EXAMPLES, target_is_directory=True)
    (tmp_path / "page.sh").write_text(one_shell_script([b for b in BLOCKS if b.id.startswith(f"{page}:")]))
    returncode, output = run(["bash", "-euo", "pipefail", str(tmp_path / "page.sh")], tmp_path)
    assert returncode == 0, f"{page}: exit {returncode}\n{output}"


def _free_ports(count: int) -> list[int]:
    """Ports nothing listens on now, held together while chosen so that no two are the same."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]


def test_the_two_instance_blocks_run_as_written(tmp_path: Path, redis_url: str) -> None:
    # Run as the page shows them, on free ports in place of 8001 to 8004, so that a run beside another one (or
    # a server a reader left running) cannot answer in place of the block's own servers; the single-use block
    # on the test's own redis-server in place of the one at 6379.
    text = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"^```sh\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE) if "fleet_client" in b]
    assert len(blocks) == 3, "docs/deployment.md: expected the shared-ring, SDK-default and single-use blocks"
    blocks = [block.replace("redis://127.0.0.1:6379/0", redis_url) for block in blocks]
    (tmp_path / "examples").symlink_to(EXAMPLES, target_is_directory=True)
    ports = dict(zip(("8001", "8002", "8003", "8004"), map(str, _free_ports(4)), strict=True))
    outputs = []
    for block in blocks:
        script = tmp_path / "block.sh"
        script.write_text(re.sub(r"\b800[1-4]\b", lambda m: ports[m[0]], block), encoding="utf-8")
        returncode, output = run(["bash", "-euo", "pipefail", str(script)], tmp_path)
        assert returncode == 0, output
        assert "Traceback" not in output
        outputs.append(output)
    shared, sdk_default, single_use = outputs
    assert '"completed_by": "pid-' in shared
    assert '"completed_by": "pid-' in single_use
    assert "rejected: -32602 Invalid or expired requestState" in sdk_default
    assert "exit status 2" in sdk_default


@pytest.mark.parametrize(
    "text",
    [
        "<!-- runnable -->\nSome prose.\n\n```python\nx = 1\n```\n",
        "<!-- runnable -->\n```\nno language\n```\n",
        "<!-- runnable -->\n```json\n{}\n```\n",
        "text\n<!-- runnable -->\n",
        "<!-- runnable -->\n<!-- runnable -->\n```python\nx = 1\n```\n",
        "<!-- runnable -->\n```python\nnever closed\n",
    ],
    ids=["prose-between", "no-language", "unsupported-language", "at-end", "doubled", "unclosed"],
)
def test_a_stray_marker_fails_instead_of_skipping(text: str) -> None:
    with pytest.raises(MarkerError):
        runnable_blocks("doc.md", text)
