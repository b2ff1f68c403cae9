"""The codec contract is defined once and every module that names it shares that one definition."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import statecodec
from statecodec import Codec
from statecodec._types import Codec as DefinedCodec
from statecodec._types import require_codec
from statecodec.errors import ConfigurationError
from tests.codecs import CODECS

SRC = Path(statecodec.__file__).resolve().parent


def test_public_name_is_the_single_definition() -> None:
    import statecodec.binding
    import statecodec.config
    import statecodec.testing

    assert Codec is DefinedCodec
    assert "Codec" in statecodec.__all__
    for module in (statecodec.binding, statecodec.config, statecodec.testing):
        assert module.Codec is DefinedCodec, module.__name__
    found = []  # no module declares a second codec protocol
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):  # a Protocol class declaring both seal and unseal
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                if "Protocol" in bases and {"seal", "unseal"} <= methods:
                    found.append(f"{path.relative_to(SRC)}:{node.name}")
    assert found == ["_types.py:Codec"]


def test_every_registered_codec_passes_the_one_codec_check() -> None:
    assert all(isinstance(codec, Codec) and require_codec(codec) is codec for codec in CODECS.values())
    with pytest.raises(ConfigurationError, match=r"^the codec must have seal\(bytes\) -> str and unseal"):
        require_codec(type("SealOnly", (), {"seal": lambda self, p: ""})(), "the codec")
