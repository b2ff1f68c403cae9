"""The codec contract is defined once and every module that names it shares that one definition."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import statecodec
from statecodec import AESGCMCodec, Codec, JWECodec, JWSCodec, KeyRing, XAESGCMCodec
from statecodec._types import Codec as DefinedCodec

SRC = Path(statecodec.__file__).resolve().parent


def test_public_name_is_the_single_definition() -> None:
    import statecodec.binding
    import statecodec.cli.bench
    import statecodec.config
    import statecodec.testing

    assert Codec is DefinedCodec
    assert "Codec" in statecodec.__all__
    for module in (statecodec.binding, statecodec.config, statecodec.testing, statecodec.cli.bench):
        assert module.Codec is DefinedCodec, module.__name__


def _seal_unseal_protocols(path: Path) -> list[str]:
    """Protocol classes in `path` that declare both `seal` and `unseal`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
        methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        if "Protocol" in bases and {"seal", "unseal"} <= methods:
            found.append(f"{path.relative_to(SRC)}:{node.name}")
    return found


def test_no_module_declares_a_second_codec_protocol() -> None:
    found = [name for path in sorted(SRC.rglob("*.py")) for name in _seal_unseal_protocols(path)]
    assert found == ["_types.py:Codec"]


def test_the_contract_docstring_states_the_duties() -> None:
    doc = Codec.__doc__ or ""
    for duty in ("InvalidToken", "constant-time", "synchronous", "ConfigurationError", "SealError", "repr"):
        assert duty in doc, duty


@pytest.mark.parametrize(
    "codec",
    [
        AESGCMCodec(KeyRing.generate()),
        XAESGCMCodec(KeyRing.generate()),
        JWECodec(KeyRing.generate()),
        JWSCodec(KeyRing.generate()),
    ],
    ids=lambda c: type(c).__name__,
)
def test_codecs_satisfy_the_runtime_check(codec: Codec) -> None:
    assert isinstance(codec, Codec)
    assert codec.unseal(codec.seal(b"state")) == b"state"


def test_an_object_without_unseal_is_not_a_codec() -> None:
    class SealOnly:
        def seal(self, payload: bytes) -> str:
            return "x"

    assert not isinstance(SealOnly(), Codec)
