"""What a release ships: the Apache-2.0 licence it declares, and an sdist without the tests.

The sdist itself is built and checked (`python -m build`, `twine check`) by .ci/run; building it here would
cost an isolated build environment per run, so these tests read the declarations that decide its contents.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_declared_licence_ships_in_full() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the whole text, not a header pointing elsewhere


def test_the_sdist_leaves_out_what_needs_the_repository() -> None:
    # The tests start local services and read docs/ and examples/: shipped alone they could not run.
    lines = {line.strip() for line in (ROOT / "MANIFEST.in").read_text(encoding="utf-8").splitlines()}
    assert {"prune tests", "prune benchmarks", "prune examples", "prune docs"} <= lines
    assert "include LICENSE README.md CHANGELOG.md SECURITY.md" in lines
