"""Every test the docs name as proof exists, so "what stops X?" always points at a real test."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "SECURITY.md"]
REFERENCES = sorted(
    {(doc.name, m[1], m[2]) for doc in DOCS for m in re.finditer(r"`(tests/[\w/]+\.py)((?:::\w+)+)`", doc.read_text())}
)


def test_the_threat_model_names_tests() -> None:
    assert sum(1 for doc, _, _ in REFERENCES if doc == "threat-model.md") > 60


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


API_MODULES = (
    "statecodec",
    "statecodec.mcp",
    "statecodec.single_use",
    "statecodec.store",
    "statecodec.rotation",
    "statecodec.binding",
    "statecodec.testing",
    "statecodec.providers.aws_kms",
    "statecodec.providers.gcp_kms",
    "statecodec.providers.vault",
    "statecodec.redis_store",
    "statecodec.otel",
    "statecodec.sdk_migration",
)


@pytest.mark.parametrize("module", API_MODULES)
def test_the_api_page_lists_every_public_name(module: str) -> None:
    # Imported by name only: the providers' SDKs are imported lazily, so this needs no extra.
    names: list[str] = importlib.import_module(module).__all__
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    listed = {part for span in re.findall(r"`([^`]+)`", text) for part in span.split(".")}
    missing = sorted(set(names) - listed)
    assert not missing, f"docs/api.md does not list {module}: {', '.join(missing)}"
