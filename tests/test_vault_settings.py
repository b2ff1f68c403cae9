"""Vault provider configuration: mistakes fail at construction with a fix, before any network call."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hvac")

from statecodec.config import codec_from_env
from statecodec.providers.vault import VaultKeyWrapper, vault_client, vault_client_from_env
from tests.secrecy import refused

SECRET = "s.do-not-print-this-token"
ADDR = {"VAULT_ADDR": "http://127.0.0.1:9"}  # nothing listens there
TOKEN = {**ADDR, "VAULT_TOKEN": SECRET}


URL = "http://127.0.0.1:8200"
BAD_URLS = ["127.0.0.1:8200", "ftp://vault", "https://vault:8200/v1/transit", "", "https:// x", "https://u:p@v:8200"]
client_with = partial(vault_client, URL, token=SECRET)
CLIENT = client_with()  # building a client contacts no Vault


def wrapper(**kwargs: Any) -> VaultKeyWrapper:
    return VaultKeyWrapper(**{"client": CLIENT, "key": "k", **kwargs})


def from_env(settings: dict[str, str]) -> Callable[[], object]:
    return partial(vault_client_from_env, settings)


def codec_with(name: str, value: str) -> Callable[[], object]:
    env = {"STATECODEC_CODEC": "vault-envelope", "STATECODEC_WRAPPED_KEYS": "dmF1bHQ6djE6QUFBQQ", **TOKEN}
    return partial(codec_from_env, {**env, "STATECODEC_VAULT_KEY": "k", name: value})


TIMEOUT_SETTING = "STATECODEC_VAULT_TIMEOUT must be a number of seconds more"
REFUSED: list[tuple[Callable[[], object], str]] = [
    (partial(vault_client, URL, token="  "), "token is empty"),
    *[(partial(client_with, timeout=t), "Vault (connect|read) timeout must be") for t in (0, (1, 99), True)],
    (partial(client_with, timeout="2"), "timeout must be seconds or a"),
    *[(partial(vault_client, url, token=SECRET), r"http\(s\)://host\[:port\] \(no credentials") for url in BAD_URLS],
    *[(partial(wrapper, key=key), "key name") for key in ["", "a/b", "../x", "k y", "-k", "k\n"]],
    *[(partial(wrapper, mount_point=m), "mount") for m in ["", "a//b", "tran sit", "../sys", "a/./b", "x/.."]],
    (partial(wrapper, client=object()), r"hvac\.Client"),
    (partial(wrapper, retry=5), "RetryPolicy"),
    (from_env({}), "STATECODEC_VAULT_ADDR"),
    (from_env({"STATECODEC_VAULT_ADDR": "vault:8200"}), r"STATECODEC_VAULT_ADDR \(or VAULT_ADDR\): the Vault address"),
    (from_env(ADDR), r"no Vault token: set STATECODEC_VAULT_TOKEN_FILE \(e\.g\. the token file Vault Agent writes\)"),
    (from_env({**TOKEN, "STATECODEC_VAULT_SKIP_VERIFY": "maybe"}), "SKIP_VERIFY"),
    (from_env({**TOKEN, "STATECODEC_VAULT_CLIENT_CERT": "/c.pem"}), "CLIENT_KEY"),
    *[(from_env({**TOKEN, "STATECODEC_VAULT_TIMEOUT": bad}), TIMEOUT_SETTING) for bad in ("soon", "600", "0", "nan")],
    (from_env({**ADDR, "STATECODEC_VAULT_TOKEN": SECRET, "STATECODEC_VAULT_TOKEN_FILE": "x"}), "exactly one"),
    (from_env({**ADDR, "STATECODEC_VAULT_TOKEN_FILE": "/nonexistent/t"}), "cannot read STATECODEC_VAULT_TOKEN_FILE"),
    # A codec setting missing, invalid or removed: refused at start-up, before any call to Vault, with what to set; a
    # left-over setting is not run without effect, nor called 'unknown'.
    (codec_with("STATECODEC_VAULT_KEY", ""), "STATECODEC_VAULT_KEY is not set; it is required for this codec kind"),
    (codec_with("STATECODEC_VAULT_KEY", "no spaces"), "STATECODEC_VAULT_KEY: the transit key name"),
    (codec_with("STATECODEC_CODEC", "vault-transit"), "STATECODEC_CODEC=vault-transit is removed; set vault-envelope"),
    (codec_with("STATECODEC_VAULT_CONTEXT", "audience=a"), "vault-envelope reads STATECODEC_KMS_CONTEXT"),
    *[
        (codec_with(f"STATECODEC_VAULT_{name}", "x"), f"STATECODEC_VAULT_{name} is no longer read: AppRole login is")
        for name in ("ROLE_ID", "SECRET_ID", "SECRET_ID_FILE", "APPROLE_MOUNT")
    ],
]


@pytest.mark.parametrize(("build", "message"), REFUSED)
def test_client_and_wrapper_arguments_and_settings_are_refused(build: Callable[[], object], message: str) -> None:
    assert re.search(message, refused(build, SECRET.encode()))


def test_settings_reach_the_client(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(SECRET + "\n")
    settings = {"STATECODEC_VAULT_ADDR": "https://vault.example:8200", "VAULT_ADDR": "https://ignored.example"}
    # An explicit token file (the one Vault Agent keeps fresh) wins over a VAULT_TOKEN inherited from the shell.
    settings |= {"VAULT_TOKEN": "inherited", "STATECODEC_VAULT_TOKEN_FILE": str(tmp_path / "token")}
    settings |= {"VAULT_NAMESPACE": "team-b", "VAULT_CACERT": "/ca.pem", "STATECODEC_VAULT_TIMEOUT": "5"}
    settings |= {"VAULT_CLIENT_CERT": "/c.pem", "STATECODEC_VAULT_CLIENT_KEY": "/c.key"}
    c = vault_client_from_env(settings)
    skip = vault_client_from_env({**TOKEN, "VAULT_CACERT": "/ca.pem", "VAULT_SKIP_VERIFY": "1"})
    c.adapter.close()
    skip.adapter.close()
    assert (c.url, c.token, c.adapter.namespace) == ("https://vault.example:8200", SECRET, "team-b")
    assert c.adapter.allow_redirects is False  # the token header never follows a redirect
    kwargs = c.adapter._kwargs
    assert (kwargs["verify"], kwargs["cert"], kwargs["timeout"]) == ("/ca.pem", ("/c.pem", "/c.key"), (0.5, 5.0))
    assert (skip.adapter._kwargs["verify"], skip.adapter._kwargs["timeout"]) == (False, (0.5, 1.0))


def test_a_token_file_that_is_not_utf8_or_too_big_leaves_the_token_out_of_the_exception(tmp_path: Path) -> None:
    """The decoder's error holds the whole file; nothing reachable from ours may (`from None` is not enough). A
    runaway file is not read past a bound."""
    for secret, match in ((SECRET.encode() + b"-\xff-rest-of-the-secret", "not UTF-8 text"), (b"s" * 2**17, "is over")):
        (tmp_path / "secret").write_bytes(secret)
        settings = {**ADDR, "STATECODEC_VAULT_TOKEN_FILE": str(tmp_path / "secret")}
        assert match in refused(lambda: vault_client_from_env(settings), secret, SECRET.encode())  # noqa: B023
