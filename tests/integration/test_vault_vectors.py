"""Frozen VaultTransitCodec tokens: restored transit keys must still open them, byte for byte.

`tests/vectors/vault_transit.json` holds transit key backups (test keys, exportable on purpose) and tokens
sealed under them. Vault picks each nonce, so the tokens cannot be re-derived: the file is frozen.
"""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path

import pytest
from tests.plugins.vault import BaoServer, client_for

from statecodec import ConfigurationError, InvalidToken, Reason
from statecodec._encoding import b64u_decode
from statecodec.providers.vault import VaultTransitCodec

VECTORS = Path(__file__).parents[1] / "vectors" / "vault_transit.json"


@pytest.mark.integration
@pytest.mark.parametrize("key_index", [0, 1])
def test_frozen_tokens_unseal(vault_server: BaoServer, key_index: int) -> None:
    data = json.loads(VECTORS.read_text(encoding="utf-8"))
    assert data["schema"] == "statecodec-vault-transit-vectors/1"
    entry, name = data["keys"][key_index], f"restored-{secrets.token_hex(4)}"
    vault_server.api("POST", f"transit/restore/{name}", {"backup": entry["backup"]})
    with client_for(vault_server) as c:
        # A backup needs an exportable key, which the codec serves only when told to.
        with pytest.raises(ConfigurationError, match="exportable"):
            VaultTransitCodec(c, name, context=entry["context"])
        codec = VaultTransitCodec(c, name, context=entry["context"], allow_exportable_key=True)
        assert codec.derived is entry["derived"]
        for vector in entry["valid"]:
            token = vector["token"]
            raw = b64u_decode(token)
            # The documented layout: version, big-endian key version, then Vault's raw ciphertext.
            assert raw[0] == VaultTransitCodec.VERSION
            assert int.from_bytes(raw[1:5], "big") == vector["key_version"]
            assert f"vault:v{vector['key_version']}:{base64.b64encode(raw[5:]).decode()}" == vector["vault_ciphertext"]
            assert codec.unseal(token) == bytes.fromhex(vector["payload"])
        for vector in entry["invalid"]:
            with pytest.raises(InvalidToken) as info:
                codec.unseal(vector["token"])
            assert info.value.reason is Reason(vector["reason"])
        # Another context refuses every frozen token: the context is bound.
        other = VaultTransitCodec(c, name, context={"purpose": "another"}, allow_exportable_key=True)
        for vector in entry["valid"]:
            with pytest.raises(InvalidToken) as info:
                other.unseal(vector["token"])
            assert info.value.reason is Reason.SEAL
