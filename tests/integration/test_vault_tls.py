"""TLS settings reach every Vault call: a real OpenBao speaking HTTPS under its own CA."""

from __future__ import annotations

import pytest
from tests.plugins.vault import BaoServer, client_for

from statecodec import ProviderError, VaultTransitCodec
from statecodec.config import codec_from_env
from statecodec.providers.vault import vault_client

pytestmark = pytest.mark.integration


def test_verified_against_the_configured_ca(vault_server_tls: BaoServer) -> None:
    server = vault_server_tls
    assert server.addr.startswith("https://")
    key = server.new_key()
    with client_for(server, verify=str(server.ca_file)) as c:
        codec = VaultTransitCodec(c, key)
        assert codec.unseal(codec.seal(b"tls")) == b"tls"


def test_unknown_ca_is_refused_at_start(vault_server_tls: BaoServer) -> None:
    key = vault_server_tls.new_key()
    with client_for(vault_server_tls) as c, pytest.raises(ProviderError, match="TLS handshake failed"):
        VaultTransitCodec(c, key)


# urllib3 warns on every unverified request, as it should; the test asserts the setting took effect.
@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_skip_verify_is_passed_through(vault_server_tls: BaoServer) -> None:
    key = vault_server_tls.new_key()
    client = vault_client(vault_server_tls.addr, token=vault_server_tls.root_token, verify=False)
    try:
        codec = VaultTransitCodec(client, key)
        assert codec.unseal(codec.seal(b"insecure")) == b"insecure"
    finally:
        client.adapter.close()


def test_ca_from_settings(vault_server_tls: BaoServer) -> None:
    key = vault_server_tls.new_key()
    env = {
        "STATECODEC_CODEC": "vault-transit",
        "STATECODEC_VAULT_ADDR": vault_server_tls.addr,
        "STATECODEC_VAULT_TOKEN": vault_server_tls.root_token,
        "STATECODEC_VAULT_KEY": key,
        "STATECODEC_VAULT_CACERT": str(vault_server_tls.ca_file),
    }
    codec = codec_from_env(env)
    assert isinstance(codec, VaultTransitCodec)
    with codec:
        assert codec.unseal(codec.seal(b"env")) == b"env"
    with pytest.raises(ProviderError, match="TLS handshake failed"):
        codec_from_env({k: v for k, v in env.items() if k != "STATECODEC_VAULT_CACERT"})
