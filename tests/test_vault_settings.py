"""Vault provider configuration: mistakes fail at construction with a fix, before any network call."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statecodec import ConfigurationError
from statecodec.config import codec_from_env
from statecodec.providers._vault_api import AppRoleLogin, Transit, unb64
from statecodec.providers.vault import (
    VaultKeyWrapper,
    VaultTransitCodec,
    transit_codec_from_settings,
    vault_client,
    vault_client_from_settings,
)
from tests.plugins.vault import assert_secret_unreachable

SECRET = "s.do-not-print-this-token"


@pytest.fixture
def client() -> Iterator[Any]:
    # Token auth builds a client without contacting Vault; nothing listens at this address.
    c = vault_client("http://127.0.0.1:9", token=SECRET)
    try:
        yield c
    finally:
        c.adapter.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"token": SECRET, "role_id": "r", "secret_id": "s"}, "exactly one Vault auth method"),
        ({}, "exactly one Vault auth method"),
        ({"role_id": "r"}, "both a role id and a secret id"),
        ({"token": "  "}, "token is empty"),
        ({"token": SECRET, "timeout": 0}, "timeouts must be"),
        ({"token": SECRET, "timeout": (1.0, float("inf"))}, "timeouts must be"),
        ({"token": SECRET, "timeout": "2"}, "timeout must be"),
        ({"token": SECRET, "pool_size": 0}, "pool_size"),
    ],
)
def test_vault_client_refuses(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        vault_client("http://127.0.0.1:8200", **kwargs)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("url", ["127.0.0.1:8200", "ftp://vault", "https://vault:8200/v1/transit", "", "https:// x"])
def test_vault_client_refuses_addresses(url: str) -> None:
    with pytest.raises(ConfigurationError, match=r"http\(s\)://host"):
        vault_client(url, token=SECRET)


def test_client_settings_pass_through(client: Any) -> None:
    assert client.adapter.allow_redirects is False
    assert client.adapter._kwargs["timeout"] == (0.5, 1.0)
    assert client.adapter._kwargs["verify"] is True
    insecure = vault_client("https://vault.example:8200", token=SECRET, verify=False)
    try:
        assert insecure.adapter._kwargs["verify"] is False
    finally:
        insecure.adapter.close()
    c = vault_client(
        "https://vault.example:8200",
        token=SECRET,
        namespace="team-a",
        verify="/etc/ssl/ca.pem",
        cert=("/tls/client.pem", "/tls/client.key"),
        timeout=5,
    )
    try:
        assert c.adapter.namespace == "team-a"
        assert c.adapter._kwargs["verify"] == "/etc/ssl/ca.pem"
        assert c.adapter._kwargs["cert"] == ("/tls/client.pem", "/tls/client.key")
        assert c.adapter._kwargs["timeout"] == (0.5, 5.0)
    finally:
        c.adapter.close()


@pytest.mark.parametrize("key", ["", "a/b", "../x", "k y", "-k", "k\n"])
def test_bad_key_names(client: Any, key: str) -> None:
    with pytest.raises(ConfigurationError, match="key name"):
        VaultTransitCodec(client, key)
    with pytest.raises(ConfigurationError, match="key name"):
        VaultKeyWrapper(client, key)


@pytest.mark.parametrize("mount", ["", "a//b", "tran sit", "../sys", "a/./b", "x/.."])
def test_bad_mounts(client: Any, mount: str) -> None:
    with pytest.raises(ConfigurationError, match="mount"):
        VaultTransitCodec(client, "k", mount_point=mount)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_token_length": 10}, "max_token_length"),
        ({"max_token_length": True}, "max_token_length"),
        ({"outage_backoff": -1}, "outage_backoff"),
        ({"context": {}}, "context"),
        ({"context": {"audience": 3}}, "context"),
        ({"context": "audience=a"}, "context"),
    ],
)
def test_transit_codec_arguments(client: Any, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        VaultTransitCodec(client, "k", **kwargs)


def _wrapper(client: Any) -> object:
    return VaultKeyWrapper(client, "k")


def _approle_login(client: Any) -> object:
    return AppRoleLogin(client, "role", SECRET, "approle")


def _transit(client: Any) -> object:
    return Transit(client, "k", "transit")


@pytest.mark.parametrize("make", [_wrapper, _approle_login, _transit])
def test_secret_holders_refuse_pickling_and_copying(client: Any, make: Callable[[Any], object]) -> None:
    """Each holds the Vault token (through its client) or the AppRole secret id: no copy of it may leave.

    Copying is refused too (by the same `__reduce__`): a silent duplicate of a
    credential holder is one more object to keep from logs and dumps.
    """
    holder = make(client)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(TypeError, match="not picklable"):
            pickle.dumps(holder, protocol)
    with pytest.raises(TypeError, match="not picklable"):
        copy.copy(holder)
    with pytest.raises(TypeError, match="not picklable"):
        copy.deepcopy(holder)
    assert SECRET not in repr(holder)


def test_not_an_hvac_client() -> None:
    with pytest.raises(ConfigurationError, match=r"hvac\.Client"):
        VaultTransitCodec(object(), "k")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "STATECODEC_VAULT_ADDR"),
        ({"VAULT_ADDR": "http://127.0.0.1:8200"}, "no Vault credentials"),
        (
            {"VAULT_ADDR": "http://127.0.0.1:8200", "VAULT_TOKEN": SECRET, "STATECODEC_VAULT_SKIP_VERIFY": "maybe"},
            "SKIP_VERIFY",
        ),
        (
            {"VAULT_ADDR": "http://127.0.0.1:8200", "VAULT_TOKEN": SECRET, "STATECODEC_VAULT_CLIENT_CERT": "/c.pem"},
            "CLIENT_KEY",
        ),
        (
            {"VAULT_ADDR": "http://127.0.0.1:8200", "VAULT_TOKEN": SECRET, "STATECODEC_VAULT_TIMEOUT": "soon"},
            "STATECODEC_VAULT_TIMEOUT",
        ),
        (
            {
                "VAULT_ADDR": "http://127.0.0.1:8200",
                "STATECODEC_VAULT_TOKEN": SECRET,
                "STATECODEC_VAULT_TOKEN_FILE": "x",
            },
            "exactly one",
        ),
        (
            {"VAULT_ADDR": "http://127.0.0.1:8200", "STATECODEC_VAULT_TOKEN_FILE": "/nonexistent/token"},
            "cannot read STATECODEC_VAULT_TOKEN_FILE",
        ),
    ],
)
def test_client_settings_refused(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        vault_client_from_settings(settings)
    assert SECRET not in str(info.value)


def test_client_settings_read_files_and_fallbacks(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(SECRET + "\n")
    c = vault_client_from_settings(
        {
            "STATECODEC_VAULT_ADDR": "https://vault.example:8200",
            "VAULT_ADDR": "https://ignored.example",
            "STATECODEC_VAULT_TOKEN_FILE": str(token_file),
            "VAULT_NAMESPACE": "team-b",
            "VAULT_CACERT": "/ca.pem",
            "STATECODEC_VAULT_TIMEOUT": "0.5",
        }
    )
    try:
        assert c.url == "https://vault.example:8200"
        assert c.token == SECRET
        assert c.adapter.namespace == "team-b"
        assert c.adapter._kwargs["verify"] == "/ca.pem"
        assert c.adapter._kwargs["timeout"] == (0.5, 0.5)
    finally:
        c.adapter.close()


def test_an_explicit_token_file_wins_over_an_inherited_vault_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(SECRET + "\n")
    c = vault_client_from_settings(
        {
            "STATECODEC_VAULT_ADDR": "https://vault.example:8200",
            "VAULT_TOKEN": "inherited-from-the-shell",
            "STATECODEC_VAULT_TOKEN_FILE": str(token_file),
        }
    )
    try:
        assert c.token == SECRET
    finally:
        c.adapter.close()
    with pytest.raises(ConfigurationError, match="both STATECODEC_VAULT_TOKEN and STATECODEC_VAULT_TOKEN_FILE"):
        vault_client_from_settings(
            {
                "STATECODEC_VAULT_ADDR": "https://vault.example:8200",
                "STATECODEC_VAULT_TOKEN": SECRET,
                "STATECODEC_VAULT_TOKEN_FILE": str(token_file),
            }
        )


@pytest.mark.parametrize("name", ["STATECODEC_VAULT_TOKEN_FILE", "STATECODEC_VAULT_SECRET_ID_FILE"])
def test_a_secret_file_that_is_not_utf8_leaves_the_secret_out_of_the_exception(tmp_path: Path, name: str) -> None:
    """The decoder's error holds the whole file; nothing reachable from ours may (`from None` is not enough)."""
    secret = SECRET.encode() + b"-\xff-rest-of-the-secret"
    path = tmp_path / "secret"
    path.write_bytes(secret)
    settings = {"STATECODEC_VAULT_ADDR": "http://127.0.0.1:9", "STATECODEC_VAULT_ROLE_ID": "role", name: str(path)}
    if name == "STATECODEC_VAULT_TOKEN_FILE":
        del settings["STATECODEC_VAULT_ROLE_ID"]
    with pytest.raises(ConfigurationError, match="not UTF-8 text") as info:
        vault_client_from_settings(settings)
    assert_secret_unreachable(info.value, secret)


def test_a_malformed_vault_plaintext_leaves_it_out_of_the_exception() -> None:
    """`unb64` reads Vault's plaintext (a payload or a data key): its error must not keep the text."""
    secret = b"c2VjcmV0LWRhdGEta2V5LW1hdGVyaWFs"
    with pytest.raises(ValueError, match="not base64") as info:
        unb64(secret.decode() + "\u00e9")
    assert_secret_unreachable(info.value, secret)
    with pytest.raises(ValueError, match="not base64") as info:
        unb64(secret.decode() + "!")
    assert_secret_unreachable(info.value, secret)


def test_the_chain_walker_finds_a_kept_secret() -> None:
    """The walker the two tests above rely on sees a secret kept in an exception's context."""
    secret = SECRET.encode() + b"\xff"
    try:
        try:
            secret.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigurationError("not UTF-8") from None
    except ConfigurationError as exc:
        with pytest.raises(AssertionError, match="reaches the secret"):
            assert_secret_unreachable(exc, secret)


def test_transit_settings_need_a_key() -> None:
    with pytest.raises(ConfigurationError, match="STATECODEC_VAULT_KEY"):
        transit_codec_from_settings({"VAULT_ADDR": "http://127.0.0.1:9", "VAULT_TOKEN": SECRET})
    with pytest.raises(ConfigurationError, match="STATECODEC_VAULT_CONTEXT"):
        transit_codec_from_settings(
            {
                "VAULT_ADDR": "http://127.0.0.1:9",
                "VAULT_TOKEN": SECRET,
                "STATECODEC_VAULT_KEY": "k",
                "STATECODEC_VAULT_CONTEXT": "no-equals-sign",
            }
        )


def test_config_kinds_are_registered() -> None:
    with pytest.raises(ConfigurationError, match="STATECODEC_VAULT_KEY"):
        codec_from_env({"STATECODEC_CODEC": "vault-transit", "VAULT_ADDR": "http://127.0.0.1:9", "VAULT_TOKEN": "t"})
    with pytest.raises(ConfigurationError, match="STATECODEC_WRAPPED_KEYS"):
        codec_from_env({"STATECODEC_CODEC": "vault-envelope", "VAULT_ADDR": "http://127.0.0.1:9"})


_WITHOUT_HVAC = """
import sys
sys.modules["hvac"] = None  # as if the extra were not installed
import statecodec
from statecodec.config import codec_from_env
from statecodec import ConfigurationError
try:
    statecodec.VaultTransitCodec
except ImportError as exc:
    print("import:", exc)
try:
    codec_from_env({"STATECODEC_CODEC": "vault-transit"})
except ConfigurationError as exc:
    print("config:", exc)
"""


def test_without_hvac_statecodec_imports_and_names_the_extra() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_HVAC], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("import:")
    assert lines[1].startswith("config:")
    assert all("pip install 'statecodec[vault]'" in line for line in lines)
