"""Vault codecs from the environment, a config file and `statecodec kms`, and TLS settings, on a real OpenBao."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.plugins.vault import BaoServer, client_for, reason, transit_policy

from statecodec import ProviderError, Reason, VaultTransitCodec
from statecodec.cli.main import main
from statecodec.config import codec_from_env, codec_from_file

pytestmark = pytest.mark.integration


def _env(server: BaoServer, key: str, **more: str) -> dict[str, str]:
    return {"VAULT_ADDR": server.addr, "VAULT_TOKEN": server.root_token, "STATECODEC_VAULT_KEY": key, **more}


def test_transit_from_env_binds_its_context(vault_server: BaoServer) -> None:
    env = _env(vault_server, vault_server.new_key(), STATECODEC_CODEC="vault-transit")
    a, b = (codec_from_env({**env, "STATECODEC_VAULT_CONTEXT": f"audience={x}"}) for x in "ab")
    assert isinstance(a, VaultTransitCodec)
    assert isinstance(b, VaultTransitCodec)
    with a, b:
        assert dict(a.context) == {"audience": "a"}
        token = a.seal(b"env")
        assert a.unseal(token) == b"env"
        assert reason(b.unseal, token) is Reason.SEAL


def test_transit_from_file_with_approle(vault_server: BaoServer, tmp_path: Path) -> None:
    key = vault_server.new_key()
    policy = transit_policy("transit", key, ("keys", "encrypt", "decrypt"))
    role_id, secret_id = vault_server.approle(f"cfg-{key}", policy)
    (tmp_path / "secret-id").write_text(secret_id)
    settings = {
        "STATECODEC_CODEC": "vault-transit",
        "STATECODEC_VAULT_ADDR": vault_server.addr,
        "STATECODEC_VAULT_KEY": key,
    }
    settings |= {"STATECODEC_VAULT_ROLE_ID": role_id, "STATECODEC_VAULT_SECRET_ID_FILE": "secret-id"}  # relative
    (tmp_path / "statecodec.json").write_text(json.dumps({**settings, "STATECODEC_VAULT_TIMEOUT": 3}))
    codec = codec_from_file(tmp_path / "statecodec.json")
    assert isinstance(codec, VaultTransitCodec)
    with codec:
        assert codec.unseal(codec.seal(b"file")) == b"file"


def test_kms_check_probes_a_transit_configuration(
    vault_server: BaoServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = vault_server.new_key()
    vault_server.rotate(key)
    for name, value in _env(vault_server, key, STATECODEC_CODEC="vault-transit").items():
        monkeypatch.setenv(name, value)
    assert main(["kms", "check"]) == 0
    out = capsys.readouterr().out
    assert f"transit/{key}" in out
    assert "key versions: 00000002 (primary), 00000001" in out
    monkeypatch.setenv("STATECODEC_VAULT_KEY", "missing-key")
    assert main(["kms", "check"]) == 2
    assert "does not exist" in capsys.readouterr().err


# urllib3 warns on every unverified request, as it should; the test asserts the setting took effect.
@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
@pytest.mark.parametrize("verify", ["ca", False])
def test_verified_against_the_configured_ca_or_not_at_all(vault_server_tls: BaoServer, verify: Any) -> None:
    key = vault_server_tls.new_key()
    with client_for(vault_server_tls, verify=str(vault_server_tls.ca_file) if verify else False) as c:
        codec = VaultTransitCodec(c, key)
        assert codec.unseal(codec.seal(b"tls")) == b"tls"
    with client_for(vault_server_tls) as c, pytest.raises(ProviderError, match="TLS handshake failed"):
        VaultTransitCodec(c, key)  # an unknown CA is refused at start
