"""The documentation site builds under ``mkdocs --strict``: no broken link or anchor, no page left out of the nav.

.ci/run builds it too; this test makes the same failure show up in a local test run, with the warnings.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strictly_without_a_warning(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # the theme's end-of-life banner is not about our pages
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    assert (tmp_path / "site" / "choose" / "index.html").is_file()
    # A page in the nav marks its own entry active; the contributors' page is reached by link only.
    assert "md-nav__link--active" in (tmp_path / "site" / "choose" / "index.html").read_text(encoding="utf-8")
    assert "md-nav__link--active" not in (tmp_path / "site" / "contributing-docs" / "index.html").read_text(
        encoding="utf-8"
    )
