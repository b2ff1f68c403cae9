"""Configuration from the environment and from JSON files: every mistake fails at start-up, and the whole
configuration is checked before any builder runs: typos named with the closest valid name, settings another makes
ineffective refused, and nothing reaches a provider until the configuration is right."""

from __future__ import annotations

import importlib.util
import json
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecodec import AESGCMCodec, ConfigurationError, XAESGCMCodec, format_keys, generate_key
from statecodec import config as cfg
from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH
from statecodec._settings import settings_from_file
from statecodec._settings import ttl as ttl_setting
from statecodec.mcp import guard_from_env
from tests.secrecy import refused

KEY_A, KEY_B = generate_key(), generate_key()
KEYS_TEXT = format_keys([KEY_A, KEY_B])
KEY, KEYS = KEY_A, format_keys([KEY_A])
STORE = {"STATECODEC_STORE_URL": "memory", "STATECODEC_STORE_KEY": format_keys([generate_key()])}


def write_json(path: Path, doc: object) -> Path:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


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
    assert fragment in refused(lambda: cfg.codec_from_env(env), KEY_A, KEY_B)


def test_registry_entries_resolve_lazily_and_must_build_a_codec(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[Mapping[str, str]] = []

    def build(settings: Mapping[str, str]) -> AESGCMCodec:
        seen.append(settings)
        return AESGCMCodec([KEY_A])

    (tmp_path / "statecodec_guarded_provider.py").write_text(
        "raise ImportError(\"this codec needs boto3: pip install 'statecodec[aws]'\")\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cfg.KINDS, "callable-kind", cfg.Kind(frozenset(), build))
    env = {"STATECODEC_CODEC": "callable-kind", "STATECODEC_MAX_TOKEN_LENGTH": "1000"}
    assert isinstance(cfg.codec_from_env(env), AESGCMCodec)
    assert seen == [env]
    refusals: dict[str, tuple[Any, str]] = {  # kind: (its builder, what its refusal says)
        "path-kind": ("statecodec.aead:AESGCMCodec.ephemeral", "does not exist"),
        "missing-dep": ("statecodec_no_such_module.sub:build",
                        "STATECODEC_CODEC=missing-dep: the Python package 'statecodec_no_such_module' is not"),
        "missing-attr": ("statecodec.aead:no_such_builder", "does not exist"),
        "guarded": ("statecodec_guarded_provider:build",
                    "STATECODEC_CODEC=guarded: this codec needs boto3: pip install 'statecodec[aws]'"),
        "broken": (lambda settings: object(), "must have seal(bytes) -> str and unseal(str) -> bytes"),
    }
    for kind, (builder, fragment) in refusals.items():
        monkeypatch.setitem(cfg.KINDS, kind, cfg.Kind(frozenset(), builder))
        assert fragment in refused(lambda: cfg.codec_from_env({"STATECODEC_CODEC": kind}))  # noqa: B023 - called at once


def test_a_builder_sees_only_the_settings_its_entry_in_the_table_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """`KINDS` is the one table of what each kind reads: a builder reading more fails, so it cannot fall behind."""
    peek = lambda settings: AESGCMCodec.from_env(settings)  # noqa: E731
    monkeypatch.setitem(cfg.KINDS, "peek", cfg.Kind(frozenset(), peek))
    env = {"STATECODEC_CODEC": "peek"}
    assert "STATECODEC_CODEC=peek reads STATECODEC_KEYS, which its entry" in refused(lambda: cfg.codec_from_env(env))
    monkeypatch.setitem(cfg.KINDS, "peek", cfg.Kind(cfg.KINDS["aesgcm"].reads, peek))
    assert isinstance(cfg.codec_from_env({**env, "STATECODEC_KEYS": KEYS_TEXT}), AESGCMCodec)


def test_codec_from_file(tmp_path: Path) -> None:
    codec = cfg.codec_from_env({"STATECODEC_KEYS": KEYS_TEXT})  # aesgcm by default, the kind case-insensitive
    assert type(codec) is AESGCMCodec
    assert (codec.key_ids, codec.max_token_length) == (AESGCMCodec([KEY_A, KEY_B]).key_ids, DEFAULT_MAX_TOKEN_LENGTH)
    env = {"STATECODEC_CODEC": "XAESGCM", "STATECODEC_KEYS": KEYS_TEXT, "STATECODEC_MAX_TOKEN_LENGTH": "4096"}
    assert type(cfg.codec_from_env(env)) is XAESGCMCodec
    (tmp_path / "keys.txt").write_text(KEYS_TEXT)
    conf = {"STATECODEC_CODEC": "xaesgcm", "STATECODEC_KEYS_FILE": "keys.txt", "STATECODEC_MAX_TOKEN_LENGTH": 2048}
    codec = cfg.codec_from_file(write_json(tmp_path / "statecodec.json", conf))
    assert (type(codec), codec.max_token_length) == (XAESGCMCodec, 2048)  # type: ignore[attr-defined]
    assert codec.key_ids == XAESGCMCodec([KEY_A, KEY_B]).key_ids  # type: ignore[attr-defined]
    listed = write_json(tmp_path / "c.json", {"STATECODEC_KEYS": [format_keys([KEY_B]), format_keys([KEY_A])]})
    assert cfg.codec_from_file(listed).key_ids == AESGCMCodec([KEY_B, KEY_A]).key_ids  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="not picklable"):  # the settings may hold keys
        pickle.dumps(settings_from_file(listed))


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        # The parser's error holds the whole document (JSONDecodeError.doc, UnicodeDecodeError.object).
        (f'{{"STATECODEC_KEYS": "{KEYS_TEXT}",}}', "is not valid JSON"),
        (f'{{"STATECODEC_KEYS": "{KEYS_TEXT}", "STATECODEC_CODEC": "caf\xe9"}}'.encode("latin-1"), "is not valid JSON"),
        (json.dumps({"STATECODEC_KEYS_FILE": "keys.txt"}), "not UTF-8"),  # a key file the config file names
        ("[1, 2]", "must hold a JSON object"),
        (json.dumps({"STATECODEC_KEYS": KEYS_TEXT, "STATECODEC_CODE": "aesgcm", "codec": "x"}), "'codec'"),
        (json.dumps({"STATECODEC_KEYS": True}), "must be a JSON string"),
        (json.dumps({"STATECODEC_CODEC": ["aesgcm"]}), "must be a JSON string"),
        (json.dumps({"STATECODEC_CODEC": "aesgcm"}), "no keys configured"),
        (json.dumps({"STATECODEC_KEYS": KEYS_TEXT, "STATECODEC_TTL": "60"}), "STATECODEC_TTL is read from the envir"),
        ("[" * 100_000, "is not valid JSON"),
        (" " * (1024 * 1024 + 1), "the file is over"),
        (None, "cannot read the file"),
    ],
)
def test_a_broken_config_file_keeps_no_secret_in_the_exception_chain(
    tmp_path: Path, content: str | bytes | None, fragment: str
) -> None:
    (tmp_path / "keys.txt").write_bytes(KEYS_TEXT.encode() + b"\n# caf\xe9\n")
    conf = tmp_path / "c.json"
    if isinstance(content, bytes):
        conf.write_bytes(content)
    elif content is not None:
        conf.write_text(content)
    message = refused(lambda: cfg.codec_from_file(conf), KEY_A, KEY_B)
    assert message.startswith(f"config file {conf}: ")
    assert fragment in message


@pytest.mark.parametrize(
    ("typo", "hint"),
    [
        ("STATECODEC_CODE", "did you mean STATECODEC_CODEC?"),
        ("STATECODEC_KEY", "did you mean STATECODEC_KEYS?"),
        ("STATECODEC_KMS_AUDIENSE", "did you mean STATECODEC_KMS_AUDIENCE?"),
        ("STATECODEC_VAULT_TOKEN_FLE", "did you mean STATECODEC_VAULT_TOKEN_FILE?"),
        ("STATECODEC_STORE_ULR", "did you mean STATECODEC_STORE_URL?"),
        ("STATECODEC_TLL", "did you mean STATECODEC_TTL?"),
        ("STATECODEC_ZZZZZZZZ", "docs/configuration.md lists every setting"),
    ],
)
def test_an_unknown_setting_is_refused_with_the_closest_valid_name(tmp_path: Path, typo: str, hint: str) -> None:
    env = {"STATECODEC_KEYS": KEYS, typo: "1"}
    if typo == "STATECODEC_KEY":
        env = {"STATECODEC_CODEC": "aesgcm", typo: KEYS}
    expected = f"unknown setting {typo}; {hint}"
    assert refused(lambda: cfg.codec_from_env(env), KEY) == expected
    conf = write_json(tmp_path / "c.json", env)
    assert refused(lambda: cfg.codec_from_file(conf), KEY) == f"config file {conf}: {expected}"


def test_the_single_use_settings_are_valid_beside_any_codec_and_checked_for_typos_too() -> None:
    env = {**STORE, "STATECODEC_KEYS": KEYS, "STATECODEC_TTL": "300", "STATECODEC_STORE_TIMEOUT": "0.5"}
    env |= {"STATECODEC_STORE_NAMESPACE": "b", "STATECODEC_STORE_ON_ERROR": "refuse"}
    assert isinstance(cfg.codec_from_env(env), AESGCMCodec)
    assert guard_from_env(env).ttl == 300
    with pytest.raises(ConfigurationError, match="unknown setting STATECODEC_STORE_TIMEOUTS; did you mean"):
        guard_from_env({**STORE, "STATECODEC_STORE_TIMEOUTS": "1"})


def _with(codec: str, **settings: str) -> dict[str, str]:
    return {"STATECODEC_CODEC": codec, **{f"STATECODEC_{name}": value for name, value in settings.items()}}


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        (_with("aesgcm", KEYS=KEYS, VAULT_ADDR="https://v"), "STATECODEC_VAULT_ADDR is set but codec kind 'aesgcm' "
         "does not read it (it is read by vault-envelope)"),
        (_with("jwe", KEYS=KEYS, JWS_ALG="HS256"), "STATECODEC_JWS_ALG is set but codec kind 'jwe' does not read it"),
        (_with("jws", KEYS=KEYS, JWKS_FILE="/s.json"), "STATECODEC_KEYS has no effect beside STATECODEC_JWKS_FILE"),
        (_with("aws-kms", KMS_CONTEXT="purpose=x", KMS_AUDIENCE="billing"),
         "STATECODEC_KMS_AUDIENCE has no effect beside STATECODEC_KMS_CONTEXT"),
        (_with("vault-envelope", VAULT_TOKEN="s", VAULT_TOKEN_FILE="/s"),
         "both STATECODEC_VAULT_TOKEN and STATECODEC_VAULT_TOKEN_FILE are set; set exactly one"),
    ],
    ids=["other-kind", "jws-for-jwe", "ring-beside-jwks", "audience-beside-context", "x-file"],
)
def test_a_setting_made_ineffective_is_an_error_not_a_silent_drop(env: dict[str, str], fragment: str) -> None:
    assert fragment in refused(lambda: cfg.codec_from_env(env), KEY)


AWS = _with("aws-kms", AWS_KMS_KEY_ID="1234abcd", AWS_REGION="eu-west-1", WRAPPED_KEYS=format_keys([generate_key()]))
VAULT = _with("vault-envelope", VAULT_TOKEN="s.statecodec-test-token", VAULT_KEY="statecodec")


def test_a_misspelt_member_never_reaches_the_provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A typo such as `STATECODEC_KMS_AUDIENSE` in a config file is refused before the provider's builder runs
    (it is the only code that contacts a provider), and so is a typo in the environment."""
    built: list[str] = []

    def spy(settings: Mapping[str, str]) -> AESGCMCodec:
        built.append(settings["STATECODEC_CODEC"])
        return AESGCMCodec([KEY])

    for kind in ("aws-kms", "vault-envelope"):
        monkeypatch.setitem(cfg.KINDS, kind, cfg.KINDS[kind]._replace(builder=spy))
    conf = tmp_path / "aws.json"
    for extra, refusal in [
        ({"STATECODEC_KMS_AUDIENSE": "billing"}, "unknown setting STATECODEC_KMS_AUDIENSE; did you mean"),
        ({"STATECODEC_VAULT_KEY": "statecodec"}, "STATECODEC_VAULT_KEY is set but codec kind 'aws-kms'"),
    ]:
        conf.write_text(json.dumps({**AWS, **extra}))
        with pytest.raises(ConfigurationError, match=refusal):
            cfg.codec_from_file(conf)
    with pytest.raises(ConfigurationError, match="unknown setting STATECODEC_VAULT_TIMOUT; did you mean"):
        cfg.codec_from_env({**VAULT, "STATECODEC_VAULT_TIMOUT": "1"})
    assert built == []
    conf.write_text(json.dumps({**AWS, "STATECODEC_KMS_AUDIENCE": "billing"}))  # spelt right: built
    assert isinstance(cfg.codec_from_file(conf), AESGCMCodec)
    assert isinstance(cfg.codec_from_env(VAULT), AESGCMCodec)
    assert built == ["aws-kms", "vault-envelope"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(None, 600), ("1", 1), ("86400", 86400), (" 300 ", 300)]
    + [(bad, None) for bad in ("0", "-5", "+5", "1_000", "1.5", "nan", "2592001", "\u0663", "abc")],
)
def test_one_ttl_for_the_mcp_policy_and_the_single_use_guard(text: str | None, seconds: int | None) -> None:
    env = {} if text is None else {"STATECODEC_TTL": text}
    if seconds is None:
        for read in (ttl_setting, lambda env: guard_from_env({**STORE, **env})):
            with pytest.raises(ConfigurationError, match=r"STATECODEC_TTL must be whole seconds from 1 to 2592000"):
                read(env)
        return
    assert ttl_setting(env) == seconds == guard_from_env({**STORE, **env}).ttl
    if importlib.util.find_spec("mcp") is not None:
        from statecodec.mcp import security_from_env

        assert security_from_env(environ={"STATECODEC_KEYS": KEYS, **env}).ttl == seconds
        assert security_from_env(environ={"STATECODEC_KEYS": KEYS, **env}, ttl=30).ttl == 30  # code wins


@given(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=30))
def test_every_unknown_name_is_refused_and_every_foreign_variable_ignored(suffix: str) -> None:
    name = f"STATECODEC_{suffix}"
    if name in cfg.known_settings() | cfg.REMOVED.keys():
        return  # a real or removed setting: judged by the kind tables, or refused with what replaces it
    with pytest.raises(ConfigurationError, match=f"^unknown setting {name}; "):
        cfg.codec_from_env({"STATECODEC_KEYS": KEYS, name: "1", f"OTHER_{suffix}": "1"})
    assert isinstance(cfg.codec_from_env({"STATECODEC_KEYS": KEYS, f"OTHER_{suffix}": "1"}), AESGCMCodec)
