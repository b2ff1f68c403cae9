"""Configuration from the environment and from JSON files: every mistake fails at start-up."""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from statecodec import AESGCMCodec, ConfigurationError, XAESGCMCodec, format_keys, generate_key
from statecodec import config as cfg
from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH
from statecodec._settings import ReadTracker
from tests.secrecy import assert_unreachable

KEY_A = generate_key()
KEY_B = generate_key()
KEYS_TEXT = format_keys([KEY_A, KEY_B])


def test_default_kind_is_aesgcm_and_the_kind_is_case_insensitive() -> None:
    codec = cfg.codec_from_env({"STATECODEC_KEYS": KEYS_TEXT})
    assert type(codec) is AESGCMCodec
    assert codec.key_ids == AESGCMCodec([KEY_A, KEY_B]).key_ids
    assert codec.max_token_length == DEFAULT_MAX_TOKEN_LENGTH
    env = {"STATECODEC_CODEC": "XAESGCM", "STATECODEC_KEYS": KEYS_TEXT, "STATECODEC_MAX_TOKEN_LENGTH": "4096"}
    assert type(cfg.codec_from_env(env)) is XAESGCMCodec


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({}, "no codec configured"),
        ({"STATECODEC_KEYS": "  "}, "no codec configured"),
        ({"STATECODEC_CODEC": "aesgcm"}, "no keys configured"),
        ({"STATECODEC_CODEC": "rot13", "STATECODEC_KEYS": KEYS_TEXT}, "valid kinds: aesgcm, aws-kms, gcp-kms, jwe,"),
        ({"STATECODEC_KEYS": format_keys([bytes(range(16))])}, "at least 32 bytes"),
        ({"STATECODEC_KEYS": KEYS_TEXT, "STATECODEC_KEYS_FILE": "/k"}, "set exactly one"),
        ({"STATECODEC_KEYS": KEYS_TEXT, "STATECODEC_MAX_TOKEN_LENGTH": "+5"}, "positive decimal integer"),
        ({"STATECODEC_KEYS": KEYS_TEXT, "STATECODEC_MAX_TOKEN_LENGTH": "0"}, "positive decimal integer"),
        ({"STATECODEC_KEYS": KEYS_TEXT, "STATECODEC_MAX_TOKEN_LENGTH": "10"}, "below the smallest token"),
        ({"STATECODEC_KEYS": "not base64!"}, "STATECODEC_KEYS: key 0 is not unpadded base64url"),
        ({"STATECODEC_KEYS_FILE": "/nonexistent/statecodec-keys"}, "cannot read STATECODEC_KEYS_FILE"),
    ],
)
def test_configuration_errors_say_what_to_fix(env: Mapping[str, str], fragment: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        cfg.codec_from_env(env)
    message = str(info.value)
    assert fragment in message
    assert format_keys([KEY_A]) not in message
    assert format_keys([KEY_B]) not in message


def test_registry_entry_by_import_path_is_resolved_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Mapping[str, str]] = []

    def build(settings: Mapping[str, str]) -> AESGCMCodec:
        seen.append(settings)
        return AESGCMCodec([KEY_A])

    monkeypatch.setitem(cfg.BUILDERS, "callable-kind", build)
    monkeypatch.setitem(cfg.BUILDERS, "path-kind", "statecodec.aead:AESGCMCodec.ephemeral")
    monkeypatch.setitem(cfg.BUILDERS, "missing-dep", "statecodec_no_such_module.sub:build")
    monkeypatch.setitem(cfg.BUILDERS, "missing-attr", "statecodec.aead:no_such_builder")

    env = {"STATECODEC_CODEC": "callable-kind", "STATECODEC_MAX_TOKEN_LENGTH": "1000"}
    assert isinstance(cfg.codec_from_env(env), AESGCMCodec)
    assert seen == [env]
    with pytest.raises(ConfigurationError, match="does not exist"):
        cfg.codec_from_env({"STATECODEC_CODEC": "path-kind"})
    with pytest.raises(ConfigurationError, match=r"'statecodec_no_such_module'.*not installed"):
        cfg.codec_from_env({"STATECODEC_CODEC": "missing-dep"})
    with pytest.raises(ConfigurationError, match="does not exist"):
        cfg.codec_from_env({"STATECODEC_CODEC": "missing-attr"})


def test_a_guarded_provider_import_passes_its_extra_hint_through(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "statecodec_guarded_provider.py").write_text(
        "raise ImportError(\"this codec needs boto3: pip install 'statecodec[aws]'\")\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cfg.BUILDERS, "guarded", "statecodec_guarded_provider:build")
    with pytest.raises(ConfigurationError, match=r"STATECODEC_CODEC=guarded: .*statecodec\[aws\]"):
        cfg.codec_from_env({"STATECODEC_CODEC": "guarded"})


def test_a_builder_returning_a_non_codec_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cfg.BUILDERS, "broken", lambda settings: object())
    with pytest.raises(ConfigurationError, match="did not return a codec"):
        cfg.codec_from_env({"STATECODEC_CODEC": "broken"})


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_codec_from_file(tmp_path: Path) -> None:
    (tmp_path / "keys.txt").write_text(KEYS_TEXT)
    conf = {"STATECODEC_CODEC": "xaesgcm", "STATECODEC_KEYS_FILE": "keys.txt", "STATECODEC_MAX_TOKEN_LENGTH": 2048}
    codec = cfg.codec_from_file(_write(tmp_path / "statecodec.json", conf))
    assert type(codec) is XAESGCMCodec
    assert codec.max_token_length == 2048
    assert codec.key_ids == XAESGCMCodec([KEY_A, KEY_B]).key_ids
    listed = _write(tmp_path / "c.json", {"STATECODEC_KEYS": [format_keys([KEY_B]), format_keys([KEY_A])]})
    assert cfg.codec_from_file(listed).key_ids == AESGCMCodec([KEY_B, KEY_A]).key_ids  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (f'{{"STATECODEC_KEYS": "{KEYS_TEXT}",}}', "is not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        (json.dumps({"STATECODEC_KEYS": KEYS_TEXT, "STATECODEC_CODE": "aesgcm", "codec": "x"}), "'codec'"),
        (json.dumps({"STATECODEC_KEYS": True}), "must be a JSON string"),
        (json.dumps({"STATECODEC_CODEC": ["aesgcm"]}), "must be a JSON string"),
        (json.dumps({"STATECODEC_CODEC": "aesgcm"}), "no keys configured"),
        ("[" * 100_000, "is not valid JSON"),
    ],
)
def test_codec_from_file_errors(tmp_path: Path, content: str, fragment: str) -> None:
    conf = tmp_path / "c.json"
    conf.write_text(content)
    with pytest.raises(ConfigurationError) as info:
        cfg.codec_from_file(conf)
    assert fragment in str(info.value)
    assert str(conf) in str(info.value)
    assert format_keys([KEY_A]) not in str(info.value)


@pytest.mark.parametrize(
    "content",
    [
        # The parser's error holds the whole document (JSONDecodeError.doc, UnicodeDecodeError.object).
        f'{{"STATECODEC_KEYS": "{KEYS_TEXT}",}}'.encode(),
        f'{{"STATECODEC_KEYS": "{KEYS_TEXT}", "STATECODEC_CODEC": "caf\xe9"}}'.encode("latin-1"),
    ],
    ids=["syntax", "not-utf8"],
)
def test_a_broken_config_file_keeps_no_secret_in_the_exception_chain(tmp_path: Path, content: bytes) -> None:
    conf = tmp_path / "c.json"
    conf.write_bytes(content)
    with pytest.raises(ConfigurationError, match="is not valid JSON") as info:
        cfg.codec_from_file(conf)
    assert_unreachable(info.value, KEY_A, KEY_B)


def test_a_broken_key_file_named_by_a_config_file_keeps_no_secret_in_the_chain(tmp_path: Path) -> None:
    (tmp_path / "keys.txt").write_bytes(KEYS_TEXT.encode() + b"\n# caf\xe9\n")
    conf = _write(tmp_path / "c.json", {"STATECODEC_KEYS_FILE": "keys.txt"})
    with pytest.raises(ConfigurationError, match="not UTF-8") as info:
        cfg.codec_from_file(conf)
    assert_unreachable(info.value, KEY_A, KEY_B)


def test_a_misspelt_or_foreign_member_is_refused(tmp_path: Path) -> None:
    """A typo must not pass as an unused setting and leave the default in force."""
    keys = format_keys([KEY_A])
    typo = _write(tmp_path / "typo.json", {"STATECODEC_KEYS": keys, "STATECODEC_MAX_TOKEN_LENGHT": "1000"})
    hint = "unknown setting STATECODEC_MAX_TOKEN_LENGHT; did you mean STATECODEC_MAX_TOKEN_LENGTH?"
    with pytest.raises(ConfigurationError, match=re.escape(hint)):
        cfg.codec_from_file(typo)
    # A real setting of another codec kind is as wrong here as a typo.
    foreign = _write(tmp_path / "foreign.json", {"STATECODEC_KEYS": keys, "STATECODEC_JWE_ALG": "dir"})
    refusal = "STATECODEC_JWE_ALG is set but codec kind 'aesgcm' does not read it"
    with pytest.raises(ConfigurationError, match=refusal) as info:
        cfg.codec_from_file(foreign)
    assert keys not in str(info.value)
    spelt = _write(tmp_path / "ok.json", {"STATECODEC_KEYS": keys, "STATECODEC_MAX_TOKEN_LENGTH": "1000"})
    assert cfg.codec_from_file(spelt).max_token_length == 1000  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="not picklable"):  # the settings it tracks may hold keys
        pickle.dumps(ReadTracker({"STATECODEC_KEYS": keys}))


def test_codec_from_file_missing_and_oversized(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"config file .*: cannot read the file"):
        cfg.codec_from_file(tmp_path / "absent.json")
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (1024 * 1024 + 1))
    with pytest.raises(ConfigurationError, match="is over"):
        cfg.codec_from_file(big)
