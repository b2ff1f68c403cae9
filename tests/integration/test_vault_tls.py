"""TLS settings reach every Vault call: a real OpenBao speaking HTTPS under its own CA."""

from __future__ import annotations

from typing import Any

import pytest
from tests.plugins.vault import BaoServer, client_for

from statecodec import ProviderError, VaultTransitCodec
from statecodec.config import codec_from_env

pytestmark = pytest.mark.integration


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


def test_ca_from_settings(vault_server_tls: BaoServer) -> None:
    env = {
        "STATECODEC_CODEC": "vault-transit",
        "STATECODEC_VAULT_ADDR": vault_server_tls.addr,
        "STATECODEC_VAULT_TOKEN": vault_server_tls.root_token,
        "STATECODEC_VAULT_KEY": vault_server_tls.new_key(),
        "STATECODEC_VAULT_CACERT": str(vault_server_tls.ca_file),
    }
    codec = codec_from_env(env)
    assert isinstance(codec, VaultTransitCodec)
    with codec:
        assert codec.unseal(codec.seal(b"env")) == b"env"
    with pytest.raises(ProviderError, match="TLS handshake failed"):
        codec_from_env({k: v for k, v in env.items() if k != "STATECODEC_VAULT_CACERT"})
