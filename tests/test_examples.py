"""Every example and every runnable documentation block runs here, so none can silently rot.

Examples: each ``examples/*.py`` is either run as a script (``python
examples/NAME.py``, must exit 0) or, when it needs a running server, listed
in `DRIVEN_ELSEWHERE` with the test modules that drive it; for those this
module checks that the listed module really names the example, and runs the
example's ``--help``. A new example is picked up automatically and runs as a
script until it is listed.

Runnable documentation blocks: in ``README.md`` and ``docs/**/*.md``, a
fenced block runs when the line ``<!-- runnable -->`` comes right before its
opening fence (blank lines between are allowed; the comment does not render
on GitHub or in MkDocs)::

    <!-- runnable -->
    ```python
    from statecodec import AESGCMCodec
    ...
    ```

Blocks tagged ``python`` (or ``py``) run as a Python file; ``sh``, ``bash``
and ``shell`` blocks run under ``bash -euo pipefail``. Each block runs on its
own, in a fresh temporary directory that holds a link to ``examples/``, with
a timeout, and must exit 0. Its environment: the project's interpreter first
on ``PATH`` (so ``python`` and ``statecodec`` are this checkout's),
``STATECODEC_KEYS`` set to a fresh two-key ring, no other ``STATECODEC_*``
variable, and Python warnings raised as errors. A marker that is not followed
by a block in one of those languages fails the suite, so a typo cannot turn a
block off. Unmarked blocks are not run.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from statecodec import format_keys, generate_key

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TIMEOUT_S = 120
MARKER = "<!-- runnable -->"

DRIVEN_ELSEWHERE: dict[str, tuple[str, ...]] = {
    "fleet_server.py": ("tests/integration/fleet_harness.py", "tests/integration/test_fleet.py"),
    "fleet_client.py": ("tests/integration/test_fleet.py",),
}
"""Examples that need a running server, and the test modules that start and drive them."""

PYTHON_LANGS = frozenset({"python", "py"})
SHELL_LANGS = frozenset({"sh", "bash", "shell"})
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[^\s`]*)")


@dataclass(frozen=True)
class Block:
    """A fenced block marked runnable: where it is, its language and its code."""

    path: Path
    line: int
    lang: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


class MarkerError(ValueError):
    """A runnable marker that does not sit right before a block in a supported language."""


def _closing(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}


def runnable_blocks(path: Path, text: str) -> list[Block]:
    """The blocks of one Markdown document marked runnable, in order; `MarkerError` on a stray marker."""
    lines = text.splitlines()
    blocks: list[Block] = []
    pending: int | None = None  # line number of a marker still waiting for its block
    i = 0
    while i < len(lines):
        line = lines[i]
        match = _FENCE.match(line)
        if match is None:
            if line.strip() == MARKER:
                if pending is not None:
                    raise MarkerError(f"{path}:{pending}: runnable marker not followed by a code block")
                pending = i + 1
            elif line.strip() and pending is not None:
                raise MarkerError(f"{path}:{pending}: runnable marker not followed by a code block")
            i += 1
            continue
        indent, fence, lang = match["indent"], match["fence"], match["lang"].lower()
        opening = i + 1
        body: list[str] = []
        i += 1
        while i < len(lines) and not _closing(lines[i], fence):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        if pending is not None:
            if i == len(lines):
                raise MarkerError(f"{path}:{opening}: runnable code block never closed")
            if lang not in PYTHON_LANGS | SHELL_LANGS:
                supported = ", ".join(sorted(PYTHON_LANGS | SHELL_LANGS))
                raise MarkerError(
                    f"{path}:{pending}: runnable block in {lang or 'no language'}; use one of {supported}"
                )
            blocks.append(Block(path, opening, lang, "\n".join(body) + "\n"))
            pending = None
        i += 1
    if pending is not None:
        raise MarkerError(f"{path}:{pending}: runnable marker not followed by a code block")
    return blocks


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def all_blocks() -> tuple[list[Block], list[str]]:
    """Every runnable block, and every stray marker (reported by a test, not as a collection error)."""
    found: list[Block] = []
    errors: list[str] = []
    for path in documents():
        if path.is_file():
            try:
                found.extend(runnable_blocks(path, path.read_text(encoding="utf-8")))
            except MarkerError as exc:
                errors.append(str(exc))
    return found, errors


def run_env() -> dict[str, str]:
    """The environment blocks and example scripts run in (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATECODEC_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["STATECODEC_KEYS"] = format_keys([generate_key(), generate_key()])
    env["PYTHONWARNINGS"] = "error"
    return env


def run(cmd: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `cmd` in its own process group; whatever it left running is killed when it exits.

    Output goes to files, not pipes: a background process a shell block
    started would hold a pipe open and stall the read.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(
            cmd,
            cwd=cwd,
            env={**run_env(), **env},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            returncode = -signal.SIGKILL
            err.write(f"\n[killed after {TIMEOUT_S} s]\n".encode())
        finally:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    return subprocess.CompletedProcess(cmd, returncode, stdout, stderr)


def explain(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


# --- examples ---------------------------------------------------------------------------------

EXAMPLE_FILES = sorted(p.name for p in EXAMPLES.glob("*.py"))
SCRIPTS = [name for name in EXAMPLE_FILES if name not in DRIVEN_ELSEWHERE]


def test_examples_exist_and_every_listed_one_is_present() -> None:
    assert "quickstart.py" in EXAMPLE_FILES
    assert set(DRIVEN_ELSEWHERE) <= set(EXAMPLE_FILES), "an example listed in DRIVEN_ELSEWHERE was removed"


@pytest.mark.parametrize("name", SCRIPTS)
def test_example_script_runs(name: str, tmp_path: Path) -> None:
    result = run([sys.executable, str(EXAMPLES / name)], tmp_path)
    assert result.returncode == 0, explain(result)
    assert result.stdout.strip(), f"{name} printed nothing"


@pytest.mark.parametrize("name", sorted(DRIVEN_ELSEWHERE))
def test_served_example_is_driven_by_its_tests(name: str, tmp_path: Path) -> None:
    stem = Path(name).stem
    for module in DRIVEN_ELSEWHERE[name]:
        assert stem in (ROOT / module).read_text(encoding="utf-8"), f"{module} does not drive {name}"
    result = run([sys.executable, str(EXAMPLES / name), "--help"], tmp_path)
    assert result.returncode == 0, explain(result)
    assert "usage:" in result.stdout


def test_fleet_server_refuses_to_listen_beyond_loopback(tmp_path: Path) -> None:
    result = run([sys.executable, str(EXAMPLES / "fleet_server.py"), "--host", "0.0.0.0", "--port", "1"], tmp_path)
    assert result.returncode != 0
    assert "loopback" in result.stderr


def test_fleet_server_without_a_ring_stops_before_serving(tmp_path: Path) -> None:
    result = run([sys.executable, str(EXAMPLES / "fleet_server.py"), "--port", "1"], tmp_path, STATECODEC_KEYS="")
    assert result.returncode != 0
    assert "cannot start: no codec configured: set STATECODEC_KEYS" in result.stderr
    assert "Traceback" not in result.stderr


# --- runnable documentation blocks --------------------------------------------------------------

BLOCKS, MARKER_ERRORS = all_blocks()


def test_every_runnable_marker_sits_on_a_block() -> None:
    assert MARKER_ERRORS == []


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_runnable_doc_block(block: Block, tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(EXAMPLES, target_is_directory=True)
    if block.lang in PYTHON_LANGS:
        script = tmp_path / "block.py"
        script.write_text(block.code, encoding="utf-8")
        cmd = [sys.executable, str(script)]
    else:
        script = tmp_path / "block.sh"
        script.write_text(block.code, encoding="utf-8")
        cmd = ["bash", "-euo", "pipefail", str(script)]
    result = run(cmd, tmp_path)
    assert result.returncode == 0, f"{block.id}: {explain(result)}"


def _alive(pid: int) -> bool:
    """Whether `pid` is a running process (a killed one waiting to be reaped does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to inspect process state")
def test_a_block_cannot_leave_a_process_running(tmp_path: Path) -> None:
    result = run(["bash", "-c", "sleep 600 & echo $!"], tmp_path)
    assert result.returncode == 0, explain(result)
    pid = int(result.stdout)
    # SIGKILL is delivered asynchronously: give the kernel a bounded moment to finish the job.
    for _ in range(1000):
        if not _alive(pid):
            break
        time.sleep(0.01)
    assert not _alive(pid)


# --- the extractor itself ----------------------------------------------------------------------

SAMPLE = """# Title

```python
print("not marked: never run")
```

<!-- runnable -->

```python
print("one")
```

- a list item:

  <!-- runnable -->
  ````sh
  echo two
  ```
  still inside
  ````
"""


def test_extractor_finds_exactly_the_marked_blocks() -> None:
    blocks = runnable_blocks(Path("doc.md"), SAMPLE)
    assert [(b.line, b.lang, b.code) for b in blocks] == [
        (9, "python", 'print("one")\n'),
        (16, "sh", "echo two\n```\nstill inside\n"),
    ]


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
        runnable_blocks(Path("doc.md"), text)
