"""Every test the docs name as proof exists, so "what stops X?" always points at a real test."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "SECURITY.md"]
_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)((?:::\w+)+)`")


def _references() -> list[tuple[str, str, tuple[str, ...]]]:
    found = []
    for doc in DOCS:
        if doc.exists():
            for match in _REFERENCE.finditer(doc.read_text(encoding="utf-8")):
                found.append((doc.name, match.group(1), tuple(match.group(2).split("::")[1:])))
    return found


def _defined(path: Path, names: tuple[str, ...]) -> bool:
    """True when `names` is a chain of class/function definitions in `path` (Class::test)."""
    nodes: list[ast.stmt] = ast.parse(path.read_text(encoding="utf-8")).body
    for name in names:
        match = next(
            (
                n
                for n in nodes
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
            ),
            None,
        )
        if match is None:
            return False
        nodes = match.body
    return True


def test_the_threat_model_names_tests() -> None:
    names = [r for r in _references() if r[0] == "threat-model.md"]
    assert len(names) > 60


def _id(value: object) -> str:
    return "::".join(value) if isinstance(value, tuple) else str(value)


@pytest.mark.parametrize(("doc", "path", "names"), _references(), ids=_id)
def test_named_test_exists(doc: str, path: str, names: tuple[str, ...]) -> None:
    target = ROOT / path
    assert target.is_file(), f"{doc} names {path}, which does not exist"
    assert _defined(target, names), f"{doc} names {path}::{'::'.join(names)}, which is not defined"
    assert names[-1].startswith("test_"), f"{doc} names {names[-1]}, which is not a test"
