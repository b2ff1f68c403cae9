"""Every test the docs name as proof exists, so "what stops X?" always points at a real test."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "SECURITY.md"]
REFERENCES = sorted(
    {(doc.name, m[1], m[2]) for doc in DOCS for m in re.finditer(r"`(tests/[\w/]+\.py)((?:::\w+)+)`", doc.read_text())}
)


@pytest.mark.parametrize(("doc", "path", "names"), REFERENCES, ids=[f"{p}{n}" for _, p, n in REFERENCES])
def test_named_test_exists(doc: str, path: str, names: str) -> None:
    assert (ROOT / path).is_file(), f"{doc} names {path}, which does not exist"
    nodes: list[ast.stmt] = ast.parse((ROOT / path).read_text(encoding="utf-8")).body
    for name in names.split("::")[1:]:  # Class::test is a chain of definitions
        kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        defined = [n for n in nodes if isinstance(n, kinds) and n.name == name]
        assert defined, f"{doc} names {path}{names}, which is not defined"
        nodes = defined[0].body
    assert names.rpartition("::")[2].startswith("test_"), f"{doc} names {names}, which is not a test"


# What the docs call `statecodec.something` that is not a Python name: the metrics (`statecodec.otel`).
NOT_PYTHON = {"statecodec.request_state", "statecodec.replay"}
NAMED = sorted(
    {(doc.name, m[1]) for doc in DOCS for m in re.finditer(r"`(statecodec(?:\.\w+)+)`", doc.read_text())} - {
        (doc.name, name) for doc in DOCS for name in NOT_PYTHON
    }
)


@pytest.mark.parametrize(("doc", "dotted"), NAMED, ids=[f"{doc}:{name}" for doc, name in NAMED])
def test_every_module_and_name_the_docs_name_exists(doc: str, dotted: str) -> None:
    # Module by module, then attribute by attribute: a renamed module or function leaves no stale name in the docs.
    found: object = importlib.import_module("statecodec")
    path = "statecodec"
    for name in dotted.split(".")[1:]:
        path = f"{path}.{name}"
        if not hasattr(found, name) and hasattr(found, "__path__") and importlib.util.find_spec(path) is not None:
            importlib.import_module(path)
        assert hasattr(found, name), f"{doc} names {dotted}, which does not exist"
        found = getattr(found, name)


def test_the_docs_name_tests_modules_and_the_metric_counted() -> None:
    from statecodec.otel import REPLAY, REQUEST_STATE

    assert sum(1 for doc, _, _ in REFERENCES if doc == "threat-model.md") > 60
    assert len({name for _, name in NAMED}) > 20
    assert {REQUEST_STATE, REPLAY} == NOT_PYTHON


def test_the_api_page_is_generated_from_the_whole_package() -> None:
    # mkdocs.yml renders `::: statecodec` with every submodule not starting with `_` (show_submodules, filters:
    # public), so a module cannot be left out; this keeps the page on that one directive.
    directives = re.findall(r"^::: *(\S+)", (ROOT / "docs" / "api.md").read_text(encoding="utf-8"), re.MULTILINE)
    assert directives == ["statecodec"]
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert all(option in config for option in ("show_submodules: true", "filters: public", "paths: [src]"))


def test_the_reason_code_table_has_every_code_once_with_what_happened_and_what_to_do() -> None:
    from statecodec.errors import Reason

    rows = [line.split(" | ") for line in (ROOT / "docs" / "reason-codes.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| `")]  # fmt: skip
    assert [row[0].removeprefix("| ").strip("`") for row in rows] == [reason.value for reason in Reason]
    assert all(len(row) == 4 and all(cell.strip(" |") for cell in row) for row in rows)  # no empty column
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "- Reason codes: reason-codes.md" in config


def test_the_site_includes_the_changelog_itself() -> None:
    # One file: the site's page includes the repository's CHANGELOG.md (pymdownx.snippets; check_paths fails the
    # build when it is missing), so the two cannot drift.
    page = (ROOT / "docs" / "changelog.md").read_text(encoding="utf-8")
    assert '--8<-- "CHANGELOG.md"' in page.splitlines()
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "- Changelog: changelog.md" in config
    assert "check_paths: true" in config
    assert (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").startswith("# Changelog\n")
