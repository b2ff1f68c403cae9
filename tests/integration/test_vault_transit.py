"""VaultTransitCodec against a real OpenBao server: one transit call per token, strict before the network."""

from __future__ import annotations

import base64
import copy
import os
import pickle
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from tests.mcp_flows import assert_mcp_rejects, run_mcp_flows
from tests.plugins.vault import BaoServer, CallLog, client_for, transit_policy

from statecodec import AESGCMCodec, ConfigurationError, InvalidToken, ProviderError, Reason
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.providers.vault import TRANSIT_VERSION, VaultTransitCodec
from statecodec.testing import assert_conformant

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def derived_key(vault_server: BaoServer) -> str:
    return vault_server.new_key(derived=True)


@pytest.fixture(scope="module")
def client(vault_server: BaoServer) -> Iterator[Any]:
    with client_for(vault_server) as c:
        yield c


@pytest.fixture(scope="module")
def codec(client: Any, derived_key: str) -> VaultTransitCodec:
    return VaultTransitCodec(client, derived_key)


def test_round_trip_and_layout(codec: VaultTransitCodec) -> None:
    token = codec.seal(b"state")
    raw = b64u_decode(token)
    assert raw[0] == TRANSIT_VERSION
    assert int.from_bytes(raw[1:5], "big") == 1
    assert len(raw) == 5 + 12 + len(b"state") + 16
    assert len(token) - len(b64u_encode(b"state")) <= 45
    assert codec.unseal(token) == b"state"
    assert codec.derived is True
    assert codec.primary_key_id == "00000001"
    assert codec.key_ids == ("00000001",)


def test_conformance_derived_key(codec: VaultTransitCodec) -> None:
    # Every unseal that passes the local checks is an HTTP call: fewer examples and mutations.
    assert_conformant(codec, error_type=InvalidToken, max_examples=8, max_mutations=1200)


def test_conformance_non_derived_key(vault_server: BaoServer, client: Any) -> None:
    plain = VaultTransitCodec(client, vault_server.new_key(derived=False))
    assert plain.derived is False
    other = VaultTransitCodec(client, vault_server.new_key(derived=False))
    assert_conformant(plain, error_type=InvalidToken, max_examples=5, max_mutations=600, foreign=other)


def test_sdk_error_type_and_foreign_key(vault_server: BaoServer, client: Any, codec: VaultTransitCodec) -> None:
    other = VaultTransitCodec(client, vault_server.new_key())
    # The kit's default error type (InvalidToken), and another key's tokens refused.
    assert_conformant(codec, max_examples=3, max_mutations=200, max_payload=1024, foreign=other)


def test_junk_never_reaches_vault(client: Any, derived_key: str) -> None:
    calls = CallLog(client)
    codec = VaultTransitCodec(client, derived_key, max_token_length=2000)
    token = codec.seal(b"x")
    calls.reset()
    raw = b64u_decode(token)
    junk: list[object] = [
        b"bytes",
        None,
        "",
        "A" * 2001,  # over the cap
        token + "=",  # non-canonical
        token[:20],  # too short
        b64u_encode(b"\x01" + raw[1:]),  # another format's version byte
        b64u_encode(raw[:1] + b"\x00\x00\x00\x00" + raw[5:]),  # key version 0
        "vault:v1:" + base64.b64encode(raw[5:]).decode(),  # Vault's own text form
    ]
    for bad in junk:
        with pytest.raises(InvalidToken):
            codec.unseal(bad)  # type: ignore[arg-type]
    assert calls.count() == 0
    with pytest.raises(InvalidToken) as info:
        codec.unseal("A" * 2001)
    assert info.value.reason is Reason.OVERSIZED


def test_one_round_trip_per_token(client: Any, derived_key: str) -> None:
    calls = CallLog(client)
    codec = VaultTransitCodec(client, derived_key)
    for payload in (b"", b"x", os.urandom(300), os.urandom(4096)):
        calls.reset()
        token = codec.seal(payload)
        assert calls.count() == 1
        assert calls.count("encrypt") == 1
        assert codec.unseal(token) == payload
        assert calls.count() == 2
        assert calls.count("decrypt") == 1


def test_one_pooled_connection(vault_server: BaoServer, derived_key: str) -> None:
    with client_for(vault_server) as c:
        codec = VaultTransitCodec(c, derived_key)
        for i in range(30):
            assert codec.unseal(codec.seal(b"%d" % i)) == b"%d" % i
        pools = list(c.adapter.session.get_adapter(vault_server.addr).poolmanager.pools._container.values())
        assert len(pools) == 1
        # Start-up probes and 60 token calls over one keep-alive connection: no handshake per token.
        assert pools[0].num_connections == 1
        assert pools[0].num_requests >= 60


def test_tampered_token_is_seal(codec: VaultTransitCodec) -> None:
    token = codec.seal(b"payload")
    raw = bytearray(b64u_decode(token))
    raw[-1] ^= 1
    with pytest.raises(InvalidToken) as info:
        codec.unseal(b64u_encode(bytes(raw)))
    assert info.value.reason is Reason.SEAL


def test_context_binds_the_prefix(client: Any, derived_key: str, vault_server: BaoServer) -> None:
    a = VaultTransitCodec(client, derived_key, context={"audience": "billing"})
    b = VaultTransitCodec(client, derived_key, context={"audience": "search"})
    token = a.seal(b"p")
    assert a.unseal(token) == b"p"
    with pytest.raises(InvalidToken) as info:
        b.unseal(token)
    assert info.value.reason is Reason.SEAL
    # The same holds on a non-derived key, where the binding is AES-GCM associated data.
    key = vault_server.new_key(derived=False)
    c = VaultTransitCodec(client, key, context={"audience": "billing"})
    d = VaultTransitCodec(client, key, context={"audience": "search"})
    with pytest.raises(InvalidToken) as info:
        d.unseal(c.seal(b"p"))
    assert info.value.reason is Reason.SEAL


def test_plain_transit_ciphertext_is_refused(vault_server: BaoServer, client: Any, derived_key: str) -> None:
    """Another application encrypting under the same key (without our binding) cannot mint tokens."""
    codec = VaultTransitCodec(client, derived_key)
    out = vault_server.api(
        "POST",
        f"transit/encrypt/{derived_key}",
        {"plaintext": base64.b64encode(b"forged").decode(), "context": base64.b64encode(b"app").decode()},
    )
    version, _, body = out["data"]["ciphertext"].removeprefix("vault:v").partition(":")
    forged = b64u_encode(bytes([TRANSIT_VERSION]) + int(version).to_bytes(4, "big") + base64.b64decode(body))
    with pytest.raises(InvalidToken) as info:
        codec.unseal(forged)
    assert info.value.reason is Reason.SEAL


def test_rotation_versions_and_rewrap(vault_server: BaoServer, client: Any) -> None:
    key = vault_server.new_key()
    calls = CallLog(client)
    codec = VaultTransitCodec(client, key)
    old = codec.seal(b"before rotation")
    vault_server.rotate(key)
    new = codec.seal(b"after rotation")
    assert codec.primary_key_id == "00000002"
    assert b64u_decode(new)[1:5] == (2).to_bytes(4, "big")
    # Both versions unseal until the old one is retired.
    assert codec.unseal(old) == b"before rotation"
    calls.reset()
    moved = codec.reseal(old)
    assert calls.count() == 1
    assert calls.count("rewrap") == 1
    assert b64u_decode(moved)[1:5] == (2).to_bytes(4, "big")
    assert codec.unseal(moved) == b"before rotation"
    vault_server.set_min_decryption_version(key, 2)
    with pytest.raises(InvalidToken) as info:
        codec.unseal(old)
    assert info.value.reason is Reason.UNKNOWN_KEY
    with pytest.raises(InvalidToken) as info:
        codec.reseal(old)
    assert info.value.reason is Reason.UNKNOWN_KEY
    assert codec.unseal(moved) == b"before rotation"
    # A version Vault has not created yet is unknown too.
    raw = bytearray(b64u_decode(new))
    raw[1:5] = (9).to_bytes(4, "big")
    with pytest.raises(InvalidToken) as info:
        codec.unseal(b64u_encode(bytes(raw)))
    assert info.value.reason is Reason.UNKNOWN_KEY
    # A codec started now reports the decryptable versions, newest first.
    assert VaultTransitCodec(client, key).key_ids == ("00000002",)
    vault_server.rotate(key)
    assert VaultTransitCodec(client, key).key_ids == ("00000003", "00000002")


def test_reseal_on_non_derived_key(vault_server: BaoServer, client: Any) -> None:
    key = vault_server.new_key(derived=False)
    calls = CallLog(client)
    codec = VaultTransitCodec(client, key)
    token = codec.seal(b"p")
    vault_server.rotate(key)
    calls.reset()
    moved = codec.reseal(token)
    # rewrap cannot carry associated data, so this is decrypt then encrypt.
    assert calls.count("rewrap") == 0
    assert calls.count("decrypt") == 1
    assert calls.count("encrypt") == 1
    assert codec.unseal(moved) == b"p"
    assert b64u_decode(moved)[1:5] == (2).to_bytes(4, "big")


def test_mount_point_and_namespace(vault_server: BaoServer) -> None:
    mount = "state-transit"
    vault_server.api("POST", f"sys/mounts/{mount}", {"type": "transit"})
    vault_server.api("POST", f"{mount}/keys/sc", {"derived": True})
    with client_for(vault_server) as c:
        codec = VaultTransitCodec(c, "sc", mount_point=mount)
        assert codec.unseal(codec.seal(b"m")) == b"m"
        assert "state-transit/sc" in codec.describe()
    ns = vault_server.namespace_with_transit()
    key = vault_server.new_key(namespace=ns)
    with client_for(vault_server, namespace=ns) as c:
        codec = VaultTransitCodec(c, key)
        assert codec.unseal(codec.seal(b"n")) == b"n"
        assert f"namespace {ns}" in codec.describe()
    # The key exists only inside the namespace.
    with client_for(vault_server) as c, pytest.raises(ProviderError, match="does not exist"):
        VaultTransitCodec(c, key)


def test_chacha20_key(vault_server: BaoServer, client: Any) -> None:
    codec = VaultTransitCodec(client, vault_server.new_key(key_type="chacha20-poly1305"))
    assert codec.unseal(codec.seal(b"c")) == b"c"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        # AES-128: the documented AES-256-GCM is not what Vault would run.
        ({"type": "aes128-gcm96"}, "type 'aes128-gcm96'"),
        # A 24-byte nonce: tokens 16 characters over the cap, which unseal then refuses.
        ({"type": "xchacha20-poly1305"}, "type 'xchacha20-poly1305'"),
        # Not an encryption key at all.
        ({"type": "ed25519"}, "type 'ed25519'"),
        ({"type": "hmac", "key_size": 32}, "type 'hmac'"),
        # Deterministic: equal states would give equal tokens.
        ({"type": "aes256-gcm96", "derived": True, "convergent_encryption": True}, "convergent_encryption"),
        # The key can leave Vault, which is what per-token mode exists to prevent.
        ({"type": "aes256-gcm96", "exportable": True}, "exportable"),
        ({"type": "aes256-gcm96", "exportable": True, "allow_plaintext_backup": True}, "exportable"),
    ],
)
def test_keys_the_codec_cannot_serve_as_documented_are_refused_at_start(
    vault_server: BaoServer, client: Any, options: dict[str, Any], named: str
) -> None:
    key = f"refused-{secrets.token_hex(4)}"
    vault_server.api("POST", f"transit/keys/{key}", options)
    calls = CallLog(client)
    with pytest.raises(ConfigurationError, match=named) as info:
        VaultTransitCodec(client, key)
    message = str(info.value)
    # Says what to use instead, and refuses before any encrypt or decrypt.
    assert "type=aes256-gcm96" in message
    assert f"transit/{key}" in message
    assert calls.count("encrypt") == calls.count("decrypt") == 0


def test_an_exportable_key_restored_from_a_backup_is_served_when_allowed(vault_server: BaoServer, client: Any) -> None:
    key = vault_server.new_key()
    vault_server.api("POST", f"transit/keys/{key}/config", {"exportable": True, "allow_plaintext_backup": True})
    with pytest.raises(ConfigurationError, match="exportable"):
        VaultTransitCodec(client, key)
    codec = VaultTransitCodec(client, key, allow_exportable_key=True)
    assert codec.unseal(codec.seal(b"restored")) == b"restored"
    # Only the custody flags are waived: a deterministic key stays refused.
    convergent = f"conv-{secrets.token_hex(4)}"
    vault_server.api("POST", f"transit/keys/{convergent}", {"derived": True, "convergent_encryption": True})
    with pytest.raises(ConfigurationError, match="convergent_encryption"):
        VaultTransitCodec(client, convergent, allow_exportable_key=True)


def test_mcp_flow(codec: VaultTransitCodec) -> None:
    report = run_mcp_flows(codec)
    assert all(b64u_decode(t)[0] == TRANSIT_VERSION for t in report.sealed)


def test_mcp_rejects_tampered_and_foreign(codec: VaultTransitCodec) -> None:
    def flip_last(token: str) -> str:
        raw = bytearray(b64u_decode(token))
        raw[-1] ^= 0x80
        return b64u_encode(bytes(raw))

    assert assert_mcp_rejects(codec, flip_last, reason="seal") == "seal"
    assert assert_mcp_rejects(codec, lambda t: t[:30], reason="malformed") == "malformed"
    assert assert_mcp_rejects(codec, AESGCMCodec.ephemeral().seal(b"x"), reason="format") == "format"


def test_seal_checks_payload(codec: VaultTransitCodec, client: Any, derived_key: str) -> None:
    small = VaultTransitCodec(client, derived_key, max_token_length=100)
    with pytest.raises(Exception, match="exceeds"):
        small.seal(b"x" * 100)
    with pytest.raises(TypeError):
        codec.seal("text")  # type: ignore[arg-type]


def test_repr_and_pickle_hold_no_secret(codec: VaultTransitCodec, vault_server: BaoServer) -> None:
    text = repr(codec)
    assert vault_server.root_token not in text
    assert "VaultTransitCodec" in text
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(TypeError, match="not picklable"):
            pickle.dumps(codec, protocol)
    # Copies are refused by the same __reduce__: no silent second holder of the Vault session.
    with pytest.raises(TypeError, match="not picklable"):
        copy.copy(codec)
    with pytest.raises(TypeError, match="not picklable"):
        copy.deepcopy(codec)


def test_restricted_policy(vault_server: BaoServer) -> None:
    key = vault_server.new_key()
    full = vault_server.token_with_policy(
        f"sc-{key}", transit_policy("transit", key, ("keys", "encrypt", "decrypt", "rewrap"))
    )
    with client_for(vault_server, token=full) as c:
        codec = VaultTransitCodec(c, key)
        assert codec.unseal(codec.seal(b"ok")) == b"ok"
        assert codec.key_ids == ("00000001",)
        with pytest.raises(ProviderError, match="permission denied"):
            VaultTransitCodec(c, vault_server.new_key())
    no_decrypt = vault_server.token_with_policy(f"enc-{key}", transit_policy("transit", key, ("keys", "encrypt")))
    with client_for(vault_server, token=no_decrypt) as c, pytest.raises(ProviderError) as info:
        VaultTransitCodec(c, key)
    message = str(info.value)
    assert "decrypt failed: permission denied" in message
    assert f"transit/decrypt/{key}" in message
    assert no_decrypt not in message
    # The key's type cannot be checked without `read` on its description: refused, naming the grant.
    no_read = vault_server.token_with_policy(f"nr-{key}", transit_policy("transit", key, ("encrypt", "decrypt")))
    with client_for(vault_server, token=no_read) as c, pytest.raises(ProviderError) as info:
        VaultTransitCodec(c, key)
    message = str(info.value)
    assert "read failed: permission denied" in message
    assert f"grant the token 'read' on transit/keys/{key} and 'update' on transit/encrypt/{key}" in message


def test_permission_revoked_after_start(vault_server: BaoServer) -> None:
    key = vault_server.new_key()
    policy = f"rev-{key}"
    token = vault_server.token_with_policy(policy, transit_policy("transit", key, ("keys", "encrypt", "decrypt")))
    with client_for(vault_server, token=token) as c:
        codec = VaultTransitCodec(c, key)
        sealed = codec.seal(b"p")
        vault_server.api("PUT", f"sys/policies/acl/{policy}", {"policy": transit_policy("transit", key, ("rewrap",))})
        with pytest.raises(InvalidToken) as info:
            codec.unseal(sealed)
        assert info.value.reason is Reason.PROVIDER
        with pytest.raises(ProviderError, match="permission denied"):
            codec.seal(b"p")


def test_approle_auth(vault_server: BaoServer) -> None:
    from statecodec.providers.vault import vault_client

    key = vault_server.new_key()
    role_id, secret_id = vault_server.approle(
        f"ar-{key}", transit_policy("transit", key, ("keys", "encrypt", "decrypt", "rewrap"))
    )
    with client_for(vault_server, role_id=role_id, secret_id=secret_id) as c:
        codec = VaultTransitCodec(c, key)
        assert codec.unseal(codec.seal(b"approle")) == b"approle"
    # A revoked or expired token: the client logs in again once and the call goes through.
    with client_for(vault_server, role_id=role_id, secret_id=secret_id) as c:
        codec = VaultTransitCodec(c, key)
        first_token = c.token
        vault_server.api("POST", "auth/token/revoke", {"token": first_token})
        assert codec.unseal(codec.seal(b"again")) == b"again"
        assert c.token != first_token
    with pytest.raises(ProviderError, match="AppRole login") as info:
        vault_client(vault_server.addr, role_id=role_id, secret_id="not-the-secret")
    assert "not-the-secret" not in str(info.value)


def test_key_deleted(vault_server: BaoServer) -> None:
    key = vault_server.new_key()
    token_text = vault_server.token_with_policy(
        f"del-{key}", transit_policy("transit", key, ("keys", "encrypt", "decrypt", "rewrap"))
    )
    with client_for(vault_server, token=token_text) as c:
        codec = VaultTransitCodec(c, key)
        token = codec.seal(b"p")
        vault_server.delete_key(key)
        with pytest.raises(InvalidToken) as info:
            codec.unseal(token)
        assert info.value.reason is Reason.PROVIDER
        # With `update` only (never `create`), Vault refuses to recreate the key on encrypt.
        with pytest.raises(ProviderError, match=key):
            codec.seal(b"p")
        with pytest.raises(ProviderError, match=f"bao write -f transit/keys/{key}"):
            VaultTransitCodec(c, key)


def test_missing_key_is_not_created_at_start(vault_server: BaoServer, client: Any) -> None:
    """Even a token that may create keys does not get a fresh key for a wrong name at start-up."""
    with pytest.raises(ProviderError, match="does not exist"):
        VaultTransitCodec(client, "no-such-key")
    with pytest.raises(Exception, match="404"):
        vault_server.api("GET", "transit/keys/no-such-key")
