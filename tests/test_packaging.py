"""What a release ships: the licence it declares, an sdist without the tests, no dev tooling, public names only.

The sdist is built and checked by .ci/run; these tests read the declarations that decide its contents.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import statecodec

ROOT = Path(__file__).resolve().parents[1]


def test_the_published_metadata_declares_the_licence_it_ships_in_full_versions_and_no_dev_tooling() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the whole text, not a header pointing elsewhere
    assert "dev" not in project["optional-dependencies"]  # tooling lives in requirements-dev.txt
    versions = {c.rpartition(" :: ")[2] for c in project["classifiers"] if c.startswith("Programming Language :: Py")}
    assert {"3.11", "3.12", "3.13"} <= versions
    assert project["requires-python"] == ">=3.11"


def test_the_sdist_leaves_out_what_needs_the_repository() -> None:
    # The tests start local services and read docs/ and examples/: shipped alone they could not run.
    lines = {line.strip() for line in (ROOT / "MANIFEST.in").read_text(encoding="utf-8").splitlines()}
    assert {"prune tests", "prune benchmarks", "prune examples", "prune docs"} <= lines
    assert "include LICENSE README.md CHANGELOG.md SECURITY.md" in lines


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = next(line for line in readme.splitlines() if line.endswith("-m pytest"))
    assert "-c constraints.txt -r requirements-dev.txt" in command
    assert command in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()


def test_the_top_level_shows_only_its_public_names() -> None:
    assert dir(statecodec) == sorted(statecodec.__all__)
    assert len(statecodec.__all__) <= 60
    assert not [name for name in statecodec.__all__ if name.startswith("_") and name != "__version__"]


@pytest.mark.parametrize("module", ["statecodec", "statecodec.cli.main"])
def test_the_command_runs_as_a_module_and_prints_a_key(module: str) -> None:
    result = subprocess.run([sys.executable, "-m", module, "keygen"], capture_output=True, text=True, check=False)
    assert (result.returncode, result.stderr) == (0, "")
    assert len(statecodec.KeyRing.parse(result.stdout.strip())) == 1


def test_the_long_description_reads_on_a_package_index(monkeypatch: pytest.MonkeyPatch) -> None:
    # A package index shows the readme alone: a relative link (docs/x.md) leads nowhere there, and its reader has
    # no clone. It says how to install, and its Python runs as written.
    readme = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["readme"]
    text = (ROOT / readme).read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)]*)\)", text)
    assert [target for target in targets if not target.startswith("https://")] == []
    assert "clone" not in text
    assert "pip install statecodec " in text
    monkeypatch.setenv("STATECODEC_KEYS", statecodec.format_keys([statecodec.generate_key()]))
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block, readme, "exec"), {})  # noqa: S102 - the project's own text
