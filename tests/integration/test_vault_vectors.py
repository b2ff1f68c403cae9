"""Frozen VaultTransitCodec tokens: restored transit keys must still open them, byte for byte.

`tests/vectors/vault_transit.json` holds transit key backups (test keys, exportable on purpose) and tokens
sealed under them. Vault picks each nonce, so the tokens cannot be re-derived: the file is frozen.
"""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from tests.plugins.vault import BaoServer, client_for, reason

from statecodec import ConfigurationError, Reason
from statecodec._encoding import b64u_decode
from statecodec.providers.vault import VaultTransitCodec

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "vault_transit.json").read_text(encoding="utf-8"))


@pytest.mark.integration
@pytest.mark.parametrize("entry", VECTORS["keys"], ids=["key0", "key1"])
def test_frozen_tokens_unseal(vault_server: BaoServer, entry: dict[str, Any]) -> None:
    assert VECTORS["schema"] == "statecodec-vault-transit-vectors/1"
    name = f"restored-{secrets.token_hex(4)}"
    vault_server.api("POST", f"transit/restore/{name}", {"backup": entry["backup"]})
    with client_for(vault_server) as c:
        with pytest.raises(ConfigurationError, match="exportable"):  # a backup needs an exportable key
            VaultTransitCodec(c, name, context=entry["context"])
        codec = VaultTransitCodec(c, name, context=entry["context"], allow_exportable_key=True)
        other = VaultTransitCodec(c, name, context={"purpose": "another"}, allow_exportable_key=True)
        assert codec.derived is entry["derived"]
        for vector in entry["valid"]:
            raw = b64u_decode(vector["token"])
            # The documented layout: version, big-endian key version, then Vault's raw ciphertext.
            assert (raw[0], int.from_bytes(raw[1:5], "big")) == (VaultTransitCodec.VERSION, vector["key_version"])
            assert f"vault:v{vector['key_version']}:{base64.b64encode(raw[5:]).decode()}" == vector["vault_ciphertext"]
            assert codec.unseal(vector["token"]) == bytes.fromhex(vector["payload"])
            assert reason(other.unseal, vector["token"]) is Reason.SEAL  # the context is bound
        for vector in entry["invalid"]:
            assert reason(codec.unseal, vector["token"]) is Reason(vector["reason"])
