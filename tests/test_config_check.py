"""The whole configuration is checked before any builder runs: typos named with the closest valid name, settings
another makes ineffective refused, and nothing reaches a provider until the configuration is right."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecodec import AESGCMCodec, ConfigurationError, ProviderError, format_keys, generate_key
from statecodec import config as cfg
from statecodec._settings import ReadTracker
from statecodec.single_use import SingleUse

KEY = generate_key()
KEYS = format_keys([KEY])
STORE = {"STATECODEC_STORE_URL": "memory", "STATECODEC_STORE_KEY": format_keys([generate_key()])}


class Listener:
    """A loopback TCP endpoint that records the connections made to it, and closes each at once."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self._peers: list[object] = []  # the client address of every accepted connection, in order
        self._own: set[object] = set()
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, peer = self._sock.accept()
            except OSError:  # shut down
                return
            conn.close()
            with self._changed:
                self._peers.append(peer)
                self._changed.notify_all()

    def connections(self) -> int:
        """Connections made so far by anyone but this method. Deterministic without a sleep: it connects once
        itself and waits until that very connection is accepted; the accept queue is FIFO, so every earlier
        connection has been recorded by then."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as own:
            mine = own.getsockname()
        self._own.add(mine)
        with self._changed:
            assert self._changed.wait_for(lambda: mine in self._peers, timeout=60)
            return sum(peer not in self._own for peer in self._peers)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(); close() alone does not
        self._sock.close()
        self._thread.join(timeout=30)


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("STATECODEC_CODE", "STATECODEC_CODEC"),
        ("STATECODEC_KEY", "STATECODEC_KEYS"),
        ("STATECODEC_KMS_AUDIENSE", "STATECODEC_KMS_AUDIENCE"),
        ("STATECODEC_VAULT_TOKEN_FLE", "STATECODEC_VAULT_TOKEN_FILE"),
        ("STATECODEC_STORE_ULR", "STATECODEC_STORE_URL"),
        ("STATECODEC_TLL", "STATECODEC_TTL"),
    ],
)
def test_an_unknown_setting_is_refused_with_the_closest_valid_name(tmp_path: Path, typo: str, meant: str) -> None:
    env = {"STATECODEC_KEYS": KEYS, typo: "jws"}
    if typo == "STATECODEC_KEY":
        env = {"STATECODEC_CODEC": "aesgcm", typo: KEYS}
    expected = f"unknown setting {typo}; did you mean {meant}?"
    with pytest.raises(ConfigurationError) as info:
        cfg.codec_from_env(env)
    assert str(info.value) == expected
    conf = tmp_path / "c.json"
    conf.write_text(json.dumps(env))
    with pytest.raises(ConfigurationError) as info:
        cfg.codec_from_file(conf)
    assert str(info.value) == f"config file {conf}: {expected}"
    assert KEYS not in str(info.value)


def test_a_name_like_no_setting_points_at_the_reference() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown setting STATECODEC_ZZZZZZZZ; docs/configuration\.md lists"):
        cfg.codec_from_env({"STATECODEC_KEYS": KEYS, "STATECODEC_ZZZZZZZZ": "1"})


def test_the_single_use_guard_refuses_a_misspelt_setting_too() -> None:
    with pytest.raises(ConfigurationError, match="unknown setting STATECODEC_STORE_TIMEOUTS; did you mean"):
        SingleUse.from_env({**STORE, "STATECODEC_STORE_TIMEOUTS": "1"})


def test_settings_read_by_single_use_are_valid_beside_any_codec() -> None:
    env = {
        "STATECODEC_KEYS": KEYS,
        "STATECODEC_TTL": "300",
        "STATECODEC_STORE_TIMEOUT": "0.5",
        "STATECODEC_STORE_NAMESPACE": "billing",
        "STATECODEC_STORE_ON_ERROR": "refuse",
        **STORE,
    }
    assert isinstance(cfg.codec_from_env(env), AESGCMCodec)
    assert SingleUse.from_env(env).ttl == 300


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        (
            {"STATECODEC_KEYS": KEYS, "STATECODEC_VAULT_ADDR": "https://vault.example"},
            "STATECODEC_VAULT_ADDR is set but codec kind 'aesgcm' does not read it (it is read by vault-envelope, "
            "vault-transit)",
        ),
        (
            {"STATECODEC_CODEC": "jwe", "STATECODEC_KEYS": KEYS, "STATECODEC_JWS_ALG": "HS256"},
            "STATECODEC_JWS_ALG is set but codec kind 'jwe' does not read it",
        ),
        (
            {"STATECODEC_CODEC": "jws", "STATECODEC_KEYS": KEYS, "STATECODEC_JWKS_FILE": "/set.json"},
            "STATECODEC_KEYS has no effect beside STATECODEC_JWKS_FILE",
        ),
        (
            {
                "STATECODEC_CODEC": "aws-kms",
                "STATECODEC_KMS_CONTEXT": "purpose=x",
                "STATECODEC_KMS_AUDIENCE": "billing",
            },
            "STATECODEC_KMS_AUDIENCE has no effect beside STATECODEC_KMS_CONTEXT",
        ),
        (
            {
                "STATECODEC_CODEC": "vault-transit",
                "STATECODEC_VAULT_TOKEN_FILE": "/t",
                "STATECODEC_VAULT_ROLE_ID": "role",
            },
            "STATECODEC_VAULT_TOKEN_FILE has no effect beside STATECODEC_VAULT_ROLE_ID",
        ),
        (
            {
                "STATECODEC_CODEC": "vault-transit",
                "STATECODEC_VAULT_SECRET_ID": "s",
                "STATECODEC_VAULT_SECRET_ID_FILE": "/s",
            },
            "both STATECODEC_VAULT_SECRET_ID and STATECODEC_VAULT_SECRET_ID_FILE are set; set exactly one",
        ),
    ],
    ids=["other-kind", "jws-for-jwe", "ring-beside-jwks", "audience-beside-context", "token-beside-approle", "x-file"],
)
def test_a_setting_made_ineffective_is_an_error_not_a_silent_drop(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        cfg.codec_from_env(env)
    assert fragment in str(info.value)


def test_a_config_file_takes_codec_settings_only(tmp_path: Path) -> None:
    conf = tmp_path / "c.json"
    conf.write_text(json.dumps({"STATECODEC_KEYS": KEYS, "STATECODEC_TTL": "60"}))
    with pytest.raises(ConfigurationError, match="STATECODEC_TTL is read from the environment"):
        cfg.codec_from_file(conf)


def test_the_table_lists_every_setting_the_local_builders_read(tmp_path: Path) -> None:
    """`READS` is what the configuration is checked against: a builder reading more would accept a typo's twin."""
    jwks = tmp_path / "set.json"
    jwks.write_text(json.dumps({"keys": [{"kty": "oct", "k": format_keys([KEY]), "kid": "k1"}]}))
    cases = {
        "aesgcm": {"STATECODEC_KEYS": KEYS},
        "xaesgcm": {"STATECODEC_KEYS_FILE": str(tmp_path / "absent")},
        "jwe": {"STATECODEC_JWKS_FILE": str(jwks)},
        "jws": {"STATECODEC_KEYS": KEYS},
    }
    for kind, settings in cases.items():
        tracker = ReadTracker({"STATECODEC_CODEC": kind, **settings})
        with contextlib.suppress(ConfigurationError):  # a missing file: what was read up to there still counts
            cfg.build_codec(kind, tracker)
        assert tracker.read <= cfg.READS[kind] | {"STATECODEC_CODEC", "STATECODEC_MAX_TOKEN_LENGTH"}, kind
        assert tracker.read, kind


def _aws_file(tmp_path: Path, port: int, **extra: str) -> Path:
    conf = tmp_path / "aws.json"
    settings = {
        "STATECODEC_CODEC": "aws-kms",
        "STATECODEC_AWS_KMS_KEY_ID": "1234abcd-12ab-34cd-56ef-1234567890ab",
        "STATECODEC_AWS_REGION": "eu-west-1",
        "STATECODEC_AWS_KMS_ENDPOINT": f"http://127.0.0.1:{port}",
        "STATECODEC_WRAPPED_KEYS": format_keys([generate_key()]),
        **extra,
    }
    conf.write_text(json.dumps(settings))
    return conf


def test_a_misspelt_member_never_reaches_the_provider(
    tmp_path: Path, listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: `STATECODEC_KMS_AUDIENSE` in a config file is refused before the unwrap call is made."""
    pytest.importorskip("boto3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIASTATECODECTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "statecodec-test-secret")
    typo = _aws_file(tmp_path, listener.port, STATECODEC_KMS_AUDIENSE="billing")
    with pytest.raises(ConfigurationError, match="unknown setting STATECODEC_KMS_AUDIENSE; did you mean"):
        cfg.codec_from_file(typo)
    foreign = _aws_file(tmp_path, listener.port, STATECODEC_VAULT_KEY="statecodec")
    with pytest.raises(ConfigurationError, match="STATECODEC_VAULT_KEY is set but codec kind 'aws-kms'"):
        cfg.codec_from_file(foreign)
    assert listener.connections() == 0
    # The same file, spelt right, does reach the endpoint: the count above could have moved.
    with pytest.raises(ProviderError, match=r"KMS unreachable|KMS unavailable|KMS refused"):
        cfg.codec_from_file(_aws_file(tmp_path, listener.port, STATECODEC_KMS_AUDIENCE="billing"))
    assert listener.connections() >= 1


def test_an_environment_typo_never_reaches_vault(listener: Listener) -> None:
    pytest.importorskip("hvac")
    env = {
        "STATECODEC_CODEC": "vault-transit",
        "STATECODEC_VAULT_ADDR": f"http://127.0.0.1:{listener.port}",
        "STATECODEC_VAULT_TOKEN": "s.statecodec-test-token",
        "STATECODEC_VAULT_KEY": "statecodec",
    }
    with pytest.raises(ConfigurationError, match="unknown setting STATECODEC_VAULT_CONTXT; did you mean"):
        cfg.codec_from_env({**env, "STATECODEC_VAULT_CONTXT": "purpose=x"})
    assert listener.connections() == 0
    with pytest.raises(ProviderError):
        cfg.codec_from_env(env)
    assert listener.connections() >= 1


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"STATECODEC_VAULT_ADDR": "vault.example:8200"}, "STATECODEC_VAULT_ADDR (or VAULT_ADDR): the Vault address"),
        ({"STATECODEC_VAULT_KEY": "no spaces"}, "STATECODEC_VAULT_KEY: the transit key name"),
        ({"STATECODEC_VAULT_TIMEOUT": "600"}, "STATECODEC_VAULT_TIMEOUT must be seconds in (0, 60]"),
        ({"STATECODEC_VAULT_TOKEN": None}, "STATECODEC_VAULT_TOKEN_FILE (or STATECODEC_VAULT_TOKEN, VAULT_TOKEN)"),
    ],
    ids=["address", "key-name", "timeout", "no-auth"],
)
def test_provider_messages_name_the_variable_the_user_wrote(env: dict[str, str | None], fragment: str) -> None:
    pytest.importorskip("hvac")
    base = {
        "STATECODEC_CODEC": "vault-transit",
        "STATECODEC_VAULT_ADDR": "http://127.0.0.1:9",
        "STATECODEC_VAULT_TOKEN": "s.statecodec-test-token",
        "STATECODEC_VAULT_KEY": "statecodec",
    }
    settings = {name: value for name, value in {**base, **env}.items() if value is not None}
    with pytest.raises(ConfigurationError) as info:
        cfg.codec_from_env(settings)
    assert fragment in str(info.value)
    assert "s.statecodec-test-token" not in str(info.value)


@pytest.mark.parametrize(("text", "seconds"), [(None, 600), ("1", 1), ("86400", 86400), (" 300 ", 300)])
def test_ttl_from_the_environment(text: str | None, seconds: int) -> None:
    env = {} if text is None else {"STATECODEC_TTL": text}
    assert cfg.ttl_setting(env) == seconds
    assert SingleUse.from_env({**STORE, **env}).ttl == seconds


@pytest.mark.parametrize("text", ["0", "-5", "+5", "1_000", "1.5", "nan", "2592001", "٣"])
def test_a_ttl_out_of_range_names_the_variable(text: str) -> None:
    with pytest.raises(ConfigurationError, match=r"STATECODEC_TTL must be whole seconds from 1 to 2592000"):
        cfg.ttl_setting({"STATECODEC_TTL": text})
    with pytest.raises(ConfigurationError, match=r"STATECODEC_TTL must be whole seconds"):
        SingleUse.from_env({**STORE, "STATECODEC_TTL": text})


def test_the_mcp_policy_and_the_single_use_guard_read_one_ttl() -> None:
    pytest.importorskip("mcp")
    from statecodec.mcp import security_from_env

    env = {"STATECODEC_KEYS": KEYS, "STATECODEC_TTL": "120", **STORE}
    assert security_from_env(environ=env).ttl == 120 == SingleUse.from_env(env).ttl
    assert security_from_env(environ=env, ttl=30).ttl == 30  # an argument in code wins
    assert security_from_env(environ={"STATECODEC_KEYS": KEYS}).ttl == 600


@given(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=30))
def test_every_unknown_name_is_refused_and_every_foreign_variable_ignored(suffix: str) -> None:
    name = f"STATECODEC_{suffix}"
    env = {"STATECODEC_KEYS": KEYS, name: "1", f"OTHER_{suffix}": "1"}
    if name in cfg.known_settings():
        return  # a real setting: judged by the kind tables instead
    with pytest.raises(ConfigurationError, match=f"^unknown setting {name}; "):
        cfg.codec_from_env(env)
    assert isinstance(cfg.codec_from_env({"STATECODEC_KEYS": KEYS, f"OTHER_{suffix}": "1"}), AESGCMCodec)
