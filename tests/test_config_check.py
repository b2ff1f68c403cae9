"""The whole configuration is checked before any builder runs: typos named with the closest valid name, settings
another makes ineffective refused, and nothing reaches a provider until the configuration is right."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecodec import AESGCMCodec, ConfigurationError, format_keys, generate_key
from statecodec import config as cfg
from statecodec.single_use import SingleUse

KEY = generate_key()
KEYS = format_keys([KEY])
STORE = {"STATECODEC_STORE_URL": "memory", "STATECODEC_STORE_KEY": format_keys([generate_key()])}


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
    with pytest.raises(ConfigurationError) as info:
        cfg.codec_from_env(env)
    assert str(info.value) == expected
    conf = tmp_path / "c.json"
    conf.write_text(json.dumps(env))
    with pytest.raises(ConfigurationError) as info:
        cfg.codec_from_file(conf)
    assert str(info.value) == f"config file {conf}: {expected}"
    assert KEYS not in str(info.value)


def test_the_single_use_settings_are_valid_beside_any_codec_and_checked_for_typos_too() -> None:
    env = {
        **STORE,
        "STATECODEC_KEYS": KEYS,
        "STATECODEC_TTL": "300",
        "STATECODEC_STORE_TIMEOUT": "0.5",
        "STATECODEC_STORE_NAMESPACE": "billing",
        "STATECODEC_REVOCATION_STALENESS": "2",
        "STATECODEC_STORE_ON_ERROR": "refuse",
    }
    assert isinstance(cfg.codec_from_env(env), AESGCMCodec)
    assert SingleUse.from_env(env).ttl == 300
    with pytest.raises(ConfigurationError, match="unknown setting STATECODEC_STORE_TIMEOUTS; did you mean"):
        SingleUse.from_env({**STORE, "STATECODEC_STORE_TIMEOUTS": "1"})


def _with(codec: str, **settings: str) -> dict[str, str]:
    return {"STATECODEC_CODEC": codec, **{f"STATECODEC_{name}": value for name, value in settings.items()}}


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        (
            _with("aesgcm", KEYS=KEYS, VAULT_ADDR="https://vault.example"),
            "STATECODEC_VAULT_ADDR is set but codec kind 'aesgcm' does not read it (it is read by vault-envelope, "
            "vault-transit)",
        ),
        (_with("jwe", KEYS=KEYS, JWS_ALG="HS256"), "STATECODEC_JWS_ALG is set but codec kind 'jwe' does not read it"),
        (_with("jws", KEYS=KEYS, JWKS_FILE="/s.json"), "STATECODEC_KEYS has no effect beside STATECODEC_JWKS_FILE"),
        (
            _with("aws-kms", KMS_CONTEXT="purpose=x", KMS_AUDIENCE="billing"),
            "STATECODEC_KMS_AUDIENCE has no effect beside STATECODEC_KMS_CONTEXT",
        ),
        (
            _with("vault-transit", VAULT_TOKEN_FILE="/t", VAULT_ROLE_ID="role"),
            "STATECODEC_VAULT_TOKEN_FILE has no effect beside STATECODEC_VAULT_ROLE_ID",
        ),
        (
            _with("vault-transit", VAULT_SECRET_ID="s", VAULT_SECRET_ID_FILE="/s"),
            "both STATECODEC_VAULT_SECRET_ID and STATECODEC_VAULT_SECRET_ID_FILE are set; set exactly one",
        ),
    ],
    ids=["other-kind", "jws-for-jwe", "ring-beside-jwks", "audience-beside-context", "token-beside-approle", "x-file"],
)
def test_a_setting_made_ineffective_is_an_error_not_a_silent_drop(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        cfg.codec_from_env(env)
    assert fragment in str(info.value)


AWS = _with(
    "aws-kms",
    AWS_KMS_KEY_ID="1234abcd-12ab-34cd-56ef-1234567890ab",
    AWS_REGION="eu-west-1",
    WRAPPED_KEYS=format_keys([generate_key()]),
)
VAULT = _with("vault-transit", VAULT_TOKEN="s.statecodec-test-token", VAULT_KEY="statecodec")


def test_a_misspelt_member_never_reaches_the_provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's case: `STATECODEC_KMS_AUDIENSE` in a config file is refused before the provider's builder runs
    (it is the only code that contacts a provider), and so is a typo in the environment."""
    built: list[str] = []

    def spy(settings: Mapping[str, str]) -> AESGCMCodec:
        built.append(settings["STATECODEC_CODEC"])
        return AESGCMCodec([KEY])

    for kind in ("aws-kms", "vault-transit"):
        monkeypatch.setitem(cfg.BUILDERS, kind, spy)
    conf = tmp_path / "aws.json"
    for extra, refusal in [
        ({"STATECODEC_KMS_AUDIENSE": "billing"}, "unknown setting STATECODEC_KMS_AUDIENSE; did you mean"),
        ({"STATECODEC_VAULT_KEY": "statecodec"}, "STATECODEC_VAULT_KEY is set but codec kind 'aws-kms'"),
    ]:
        conf.write_text(json.dumps({**AWS, **extra}))
        with pytest.raises(ConfigurationError, match=refusal):
            cfg.codec_from_file(conf)
    with pytest.raises(ConfigurationError, match="unknown setting STATECODEC_VAULT_CONTXT; did you mean"):
        cfg.codec_from_env({**VAULT, "STATECODEC_VAULT_CONTXT": "purpose=x"})
    assert built == []
    conf.write_text(json.dumps({**AWS, "STATECODEC_KMS_AUDIENCE": "billing"}))  # spelt right: built
    assert isinstance(cfg.codec_from_file(conf), AESGCMCodec)
    assert isinstance(cfg.codec_from_env(VAULT), AESGCMCodec)
    assert built == ["aws-kms", "vault-transit"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(None, 600), ("1", 1), ("86400", 86400), (" 300 ", 300)]
    + [(bad, None) for bad in ("0", "-5", "+5", "1_000", "1.5", "nan", "2592001", "\u0663", "abc")],
)
def test_one_ttl_for_the_mcp_policy_and_the_single_use_guard(text: str | None, seconds: int | None) -> None:
    env = {} if text is None else {"STATECODEC_TTL": text}
    if seconds is None:
        for read in (cfg.ttl_setting, lambda env: SingleUse.from_env({**STORE, **env})):
            with pytest.raises(ConfigurationError, match=r"STATECODEC_TTL must be whole seconds from 1 to 2592000"):
                read(env)
        return
    assert cfg.ttl_setting(env) == seconds == SingleUse.from_env({**STORE, **env}).ttl
    if importlib.util.find_spec("mcp") is not None:
        from statecodec.mcp import security_from_env

        assert security_from_env(environ={"STATECODEC_KEYS": KEYS, **env}).ttl == seconds
        assert security_from_env(environ={"STATECODEC_KEYS": KEYS, **env}, ttl=30).ttl == 30  # code wins


@given(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=30))
def test_every_unknown_name_is_refused_and_every_foreign_variable_ignored(suffix: str) -> None:
    name = f"STATECODEC_{suffix}"
    if name in cfg.known_settings():
        return  # a real setting: judged by the kind tables instead
    with pytest.raises(ConfigurationError, match=f"^unknown setting {name}; "):
        cfg.codec_from_env({"STATECODEC_KEYS": KEYS, name: "1", f"OTHER_{suffix}": "1"})
    assert isinstance(cfg.codec_from_env({"STATECODEC_KEYS": KEYS, f"OTHER_{suffix}": "1"}), AESGCMCodec)
