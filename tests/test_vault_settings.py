"""Vault provider configuration: mistakes fail at construction with a fix, before any network call."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hvac")

from statecodec import ConfigurationError
from statecodec.config import codec_from_env
from statecodec.providers._vault_api import AppRoleLogin
from statecodec.providers.vault import (
    VaultKeyWrapper,
    VaultTransitCodec,
    transit_codec_from_settings,
    vault_client,
    vault_client_from_settings,
)
from tests.plugins.vault import assert_not_copyable
from tests.secrecy import assert_unreachable

SECRET = "s.do-not-print-this-token"
ADDR = {"VAULT_ADDR": "http://127.0.0.1:9"}  # nothing listens there
TOKEN = {**ADDR, "VAULT_TOKEN": SECRET}


@pytest.fixture
def client() -> Iterator[Any]:
    c = vault_client("http://127.0.0.1:9", token=SECRET)  # token auth contacts no Vault
    yield c
    c.adapter.close()


URL = "http://127.0.0.1:8200"
BAD_URLS = ["127.0.0.1:8200", "ftp://vault", "https://vault:8200/v1/transit", "", "https:// x", "https://u:p@v:8200"]


@pytest.mark.parametrize(
    ("url", "kwargs", "message"),
    [
        (URL, {"token": SECRET, "role_id": "r", "secret_id": "s"}, "exactly one Vault auth"),
        (URL, {}, "exactly one Vault auth"),
        (URL, {"role_id": "r"}, r"secret id \(both\)"),
        (URL, {"token": "  "}, "token is empty"),
        *[(URL, {"token": SECRET, "timeout": t}, "Vault (connect|read) timeout must be") for t in (0, (1, 99), True)],
        (URL, {"token": SECRET, "timeout": "2"}, "timeout must be seconds or a"),
        (URL, {"token": SECRET, "pool_size": 0}, "pool_size"),
        *[(url, {"token": SECRET}, r"http\(s\)://host\[:port\] \(no credentials") for url in BAD_URLS],
    ],
)
def test_vault_client_refuses(url: str, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        vault_client(url, **kwargs)
    assert SECRET not in str(info.value)


SHARED_ARGUMENTS = [  # checked by the base both take: key name, mount path, client
    *[({"key": key}, "key name") for key in ["", "a/b", "../x", "k y", "-k", "k\n"]],
    *[({"mount_point": m}, "mount") for m in ["", "a//b", "tran sit", "../sys", "a/./b", "x/.."]],
    ({"client": object()}, r"hvac\.Client"),
]
CODEC_ARGUMENTS = [
    *[({"max_token_length": cap}, "max_token_length") for cap in (10, True, 2**31)],
    *[({"outage_backoff": seconds}, "outage_backoff") for seconds in (-1, True, float("nan"))],
    ({"allow_exportable_key": 1}, "allow_exportable_key"),
    *[({"context": c}, "context") for c in ({}, {"audience": 3}, "audience=a", {f"k{i}": "v" for i in range(17)})],
    ({"context": {"audience": "x" * 257}}, "context"),
]


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        *[
            (cls, kwargs, message)
            for cls in (VaultTransitCodec, VaultKeyWrapper)
            for kwargs, message in SHARED_ARGUMENTS
        ],
        *[(VaultTransitCodec, kwargs, message) for kwargs, message in CODEC_ARGUMENTS],
    ],
)
def test_codec_and_wrapper_arguments(client: Any, cls: type, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        cls(**{"client": client, "key": "k", **kwargs})


@pytest.mark.parametrize(
    "make", [lambda c: VaultKeyWrapper(c, "k"), lambda c: AppRoleLogin(c, "role", SECRET, "approle")]
)
def test_secret_holders_refuse_pickling_and_copying(client: Any, make: Callable[[Any], object]) -> None:
    """Each holds the Vault token (its client) or the secret id; `VaultTransitCodec`: test_vault_transit.py."""
    holder = make(client)
    assert_not_copyable(holder)
    assert SECRET not in repr(holder)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "STATECODEC_VAULT_ADDR"),
        ({"STATECODEC_VAULT_ADDR": "vault:8200"}, r"STATECODEC_VAULT_ADDR \(or VAULT_ADDR\): the Vault address"),
        (ADDR, r"STATECODEC_VAULT_TOKEN_FILE \(or STATECODEC_VAULT_TOKEN, VAULT_TOKEN\)"),
        ({**TOKEN, "STATECODEC_VAULT_SKIP_VERIFY": "maybe"}, "SKIP_VERIFY"),
        ({**TOKEN, "STATECODEC_VAULT_CLIENT_CERT": "/c.pem"}, "CLIENT_KEY"),
        *[
            ({**TOKEN, "STATECODEC_VAULT_TIMEOUT": bad}, "STATECODEC_VAULT_TIMEOUT must be a number of seconds more")
            for bad in ("soon", "600", "0", "nan")
        ],
        ({**ADDR, "STATECODEC_VAULT_TOKEN": SECRET, "STATECODEC_VAULT_TOKEN_FILE": "x"}, "exactly one"),
        ({**ADDR, "STATECODEC_VAULT_TOKEN_FILE": "/nonexistent/token"}, "cannot read STATECODEC_VAULT_TOKEN_FILE"),
    ],
)
def test_client_settings_refused(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        vault_client_from_settings(settings)
    assert SECRET not in str(info.value)


def test_settings_reach_the_client(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(SECRET + "\n")
    settings = {"STATECODEC_VAULT_ADDR": "https://vault.example:8200", "VAULT_ADDR": "https://ignored.example"}
    # An explicit token file wins over a VAULT_TOKEN inherited from the shell.
    settings |= {"VAULT_TOKEN": "inherited", "STATECODEC_VAULT_TOKEN_FILE": str(tmp_path / "token")}
    settings |= {"VAULT_NAMESPACE": "team-b", "VAULT_CACERT": "/ca.pem", "STATECODEC_VAULT_TIMEOUT": "5"}
    settings |= {"VAULT_CLIENT_CERT": "/c.pem", "STATECODEC_VAULT_CLIENT_KEY": "/c.key"}
    c = vault_client_from_settings(settings)
    skip = vault_client_from_settings({**TOKEN, "VAULT_CACERT": "/ca.pem", "VAULT_SKIP_VERIFY": "1"})
    c.adapter.close()
    skip.adapter.close()
    assert (c.url, c.token, c.adapter.namespace) == ("https://vault.example:8200", SECRET, "team-b")
    assert c.adapter.allow_redirects is False  # the token header never follows a redirect
    kwargs = c.adapter._kwargs
    assert (kwargs["verify"], kwargs["cert"], kwargs["timeout"]) == ("/ca.pem", ("/c.pem", "/c.key"), (0.5, 5.0))
    assert (skip.adapter._kwargs["verify"], skip.adapter._kwargs["timeout"]) == (False, (0.5, 1.0))


@pytest.mark.parametrize("name", ["STATECODEC_VAULT_TOKEN_FILE", "STATECODEC_VAULT_SECRET_ID_FILE"])
def test_a_secret_file_that_is_not_utf8_leaves_the_secret_out_of_the_exception(tmp_path: Path, name: str) -> None:
    """The decoder's error holds the whole file; nothing reachable from ours may (`from None` is not enough)."""
    secret = SECRET.encode() + b"-\xff-rest-of-the-secret"
    (tmp_path / "secret").write_bytes(secret)
    settings = {**ADDR, name: str(tmp_path / "secret")}
    if name == "STATECODEC_VAULT_SECRET_ID_FILE":
        settings["STATECODEC_VAULT_ROLE_ID"] = "role"
    with pytest.raises(ConfigurationError, match="not UTF-8 text") as info:
        vault_client_from_settings(settings)
    assert info.value.__context__ is None
    assert_unreachable(info.value, secret, SECRET.encode())


def test_codec_kinds_read_their_settings_before_vault() -> None:
    with pytest.raises(ConfigurationError, match="STATECODEC_VAULT_KEY"):
        codec_from_env({"STATECODEC_CODEC": "vault-transit", **TOKEN})
    with pytest.raises(ConfigurationError, match="STATECODEC_VAULT_KEY: the transit key name"):
        codec_from_env({"STATECODEC_CODEC": "vault-transit", **TOKEN, "STATECODEC_VAULT_KEY": "no spaces"})
    with pytest.raises(ConfigurationError, match="STATECODEC_VAULT_CONTEXT"):
        transit_codec_from_settings({**TOKEN, "STATECODEC_VAULT_KEY": "k", "STATECODEC_VAULT_CONTEXT": "no-pairs"})
