"""VaultTransitCodec against a real OpenBao server: one transit call per token, strict before the network."""

from __future__ import annotations

import base64
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from tests.mcp_flows import assert_mcp_rejects, run_mcp_flows
from tests.plugins.vault import BaoServer, CallLog, assert_not_copyable, client_for, reason, transit_policy

from statecodec import AESGCMCodec, ConfigurationError, InvalidToken, ProviderError, Reason, SealError
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.providers.vault import VaultTransitCodec, vault_client
from statecodec.testing import assert_conformant

pytestmark = pytest.mark.integration
VERSION = VaultTransitCodec.VERSION
ALL_OPS = ("keys", "encrypt", "decrypt", "rewrap")


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


def with_key_version(token: str, version: int) -> str:
    raw = b64u_decode(token)
    return b64u_encode(raw[:1] + version.to_bytes(4, "big") + raw[5:])


def test_one_round_trip_per_token(vault_server: BaoServer, derived_key: str) -> None:
    with client_for(vault_server) as client:
        calls = CallLog(client)
        codec = VaultTransitCodec(client, derived_key)
        assert (codec.derived, codec.primary_key_id, codec.key_ids) == (True, "00000001", ("00000001",))
        for payload in (b"", b"state", os.urandom(4096), *(b"%d" % i for i in range(30))):
            calls.reset()
            token = codec.seal(payload)
            raw = b64u_decode(token)
            assert (raw[0], int.from_bytes(raw[1:5], "big"), len(raw)) == (VERSION, 1, 5 + 12 + len(payload) + 16)
            assert len(token) - len(b64u_encode(payload)) <= 45
            assert codec.unseal(token) == payload
            assert (calls.count("encrypt"), calls.count("decrypt"), calls.count()) == (1, 1, 2)
        pools = list(client.adapter.session.get_adapter(vault_server.addr).poolmanager.pools._container.values())
        # Start-up and 66 token calls over one keep-alive connection: no handshake per token.
        assert [(p.num_connections, p.num_requests >= 66) for p in pools] == [(1, True)]


def test_repr_and_pickle_hold_no_secret(codec: VaultTransitCodec, vault_server: BaoServer) -> None:
    assert vault_server.root_token not in repr(codec)
    assert repr(codec).startswith("VaultTransitCodec(")
    assert_not_copyable(codec)


def test_conformance_derived_key(codec: VaultTransitCodec) -> None:
    # Every unseal that passes the local checks is an HTTP call: fewer examples and mutations.
    assert_conformant(codec, error_type=InvalidToken, max_examples=8, max_mutations=1200)


def test_conformance_non_derived_key(vault_server: BaoServer, client: Any) -> None:
    plain = VaultTransitCodec(client, vault_server.new_key(derived=False))
    other = VaultTransitCodec(client, vault_server.new_key(derived=False))
    assert plain.derived is False
    assert_conformant(plain, max_examples=5, max_mutations=600, foreign=other)


def test_junk_never_reaches_vault(client: Any, derived_key: str) -> None:
    codec = VaultTransitCodec(client, derived_key, max_token_length=2000)
    token = codec.seal(b"x")
    raw = b64u_decode(token)
    calls = CallLog(client)
    junk: list[tuple[object, Reason]] = [
        (b"bytes", Reason.MALFORMED),
        ("", Reason.MALFORMED),
        ("A" * 2001, Reason.OVERSIZED),
        (token + "=", Reason.MALFORMED),  # non-canonical
        (token[:20], Reason.MALFORMED),  # too short
        (b64u_encode(b"\x01" + raw[1:]), Reason.FORMAT),  # another format's version byte
        (with_key_version(token, 0), Reason.MALFORMED),
        ("vault:v1:" + base64.b64encode(raw[5:]).decode(), Reason.MALFORMED),  # Vault's own text form
    ]
    assert [reason(codec.unseal, bad) for bad, _ in junk] == [r for _, r in junk]
    assert calls.count() == 0
    with pytest.raises(SealError, match="exceeds"):  # seal refuses what unseal would refuse
        VaultTransitCodec(client, derived_key, max_token_length=100).seal(b"x" * 100)


@pytest.mark.parametrize("derived", [True, False])
def test_the_context_and_prefix_are_bound(vault_server: BaoServer, client: Any, derived: bool) -> None:
    key = vault_server.new_key(derived=derived)
    a = VaultTransitCodec(client, key, context={"audience": "billing"})
    b = VaultTransitCodec(client, key, context={"audience": "search"})
    token = a.seal(b"p")
    assert a.unseal(token) == b"p"
    assert reason(b.unseal, token) is Reason.SEAL  # Vault's tag check, as for any changed bit (conformance)
    # Another application encrypting under the same key (without our binding) cannot mint tokens.
    body = {"plaintext": base64.b64encode(b"forged").decode(), **({"context": "YXBw"} if derived else {})}
    version, _, text = vault_server.api("POST", f"transit/encrypt/{key}", body)["data"]["ciphertext"][7:].partition(":")
    forged = b64u_encode(bytes([VERSION]) + int(version).to_bytes(4, "big") + base64.b64decode(text))
    assert reason(a.unseal, forged) is Reason.SEAL


@pytest.mark.parametrize(("derived", "reseal_calls"), [(True, {"rewrap": 1}), (False, {"decrypt": 1, "encrypt": 1})])
def test_rotation_versions_and_rewrap(
    vault_server: BaoServer, client: Any, derived: bool, reseal_calls: dict[str, int]
) -> None:
    key = vault_server.new_key(derived=derived)
    calls = CallLog(client)
    codec = VaultTransitCodec(client, key)
    old = codec.seal(b"before rotation")
    vault_server.rotate(key)
    new = codec.seal(b"after rotation")
    assert codec.primary_key_id == "00000002"
    assert b64u_decode(new)[1:5] == (2).to_bytes(4, "big")
    assert codec.unseal(old) == b"before rotation"  # both versions unseal until the old one is retired
    calls.reset()
    moved = codec.reseal(old)
    assert {op: calls.count(op) for op in ("rewrap", "decrypt", "encrypt") if calls.count(op)} == reseal_calls
    assert b64u_decode(moved)[1:5] == (2).to_bytes(4, "big")
    assert codec.unseal(moved) == b"before rotation"
    vault_server.api("POST", f"transit/keys/{key}/config", {"min_decryption_version": 2})
    assert reason(codec.unseal, old) is Reason.UNKNOWN_KEY
    assert reason(codec.reseal, old) is Reason.UNKNOWN_KEY
    assert reason(codec.unseal, with_key_version(new, 9)) is Reason.UNKNOWN_KEY  # not created yet
    assert codec.unseal(moved) == b"before rotation"
    # A codec started now reports the decryptable versions, newest first.
    assert VaultTransitCodec(client, key).key_ids == ("00000002",)
    vault_server.rotate(key)
    assert VaultTransitCodec(client, key).key_ids == ("00000003", "00000002")


def test_another_mount_and_a_missing_key(vault_server: BaoServer, client: Any) -> None:
    vault_server.api("POST", "sys/mounts/state-transit", {"type": "transit"})
    vault_server.api("POST", "state-transit/keys/sc", {"derived": True})
    codec = VaultTransitCodec(client, "sc", mount_point="/state-transit/")
    assert codec.unseal(codec.seal(b"m")) == b"m"
    assert "state-transit/sc" in codec.describe()
    # Even a token that may create keys does not get a fresh key for a wrong name at start-up.
    with pytest.raises(ProviderError, match="does not exist"):
        VaultTransitCodec(client, "no-such-key")
    with pytest.raises(Exception, match="404"):
        vault_server.api("GET", "transit/keys/no-such-key")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"type": "chacha20-poly1305"}, None),  # served: 12-byte nonce, 16-byte tag, 256-bit key
        ({"type": "aes128-gcm96"}, "type 'aes128-gcm96'"),  # not the documented AES-256-GCM
        ({"type": "xchacha20-poly1305"}, "type 'xchacha20-poly1305'"),  # 24-byte nonce: tokens over the cap
        ({"type": "ed25519"}, "type 'ed25519'"),  # not an encryption key at all
        ({"derived": True, "convergent_encryption": True}, "convergent_encryption"),  # deterministic seal
        ({"exportable": True, "allow_plaintext_backup": True}, "exportable"),  # the key could leave Vault
    ],
)
def test_keys_are_allow_listed_at_start(
    vault_server: BaoServer, client: Any, options: dict[str, Any], named: str | None
) -> None:
    key = f"kt-{secrets.token_hex(4)}"
    vault_server.api("POST", f"transit/keys/{key}", {"type": "aes256-gcm96", **options})
    calls = CallLog(client)
    if named is None:
        codec = VaultTransitCodec(client, key)
        assert codec.unseal(codec.seal(b"c")) == b"c"
        return
    with pytest.raises(ConfigurationError, match=named) as info:
        VaultTransitCodec(client, key)
    assert "type=aes256-gcm96" in str(info.value)  # says what to use instead
    assert f"transit/{key}" in str(info.value)
    assert calls.count("encrypt") == calls.count("decrypt") == 0  # refused before any encrypt or decrypt
    if named == "exportable":  # a key restored from a backup is served when allowed
        codec = VaultTransitCodec(client, key, allow_exportable_key=True)
        assert codec.unseal(codec.seal(b"restored")) == b"restored"
    elif named == "convergent_encryption":  # only the custody flags are waived
        with pytest.raises(ConfigurationError, match=named):
            VaultTransitCodec(client, key, allow_exportable_key=True)


def test_mcp_flow(codec: VaultTransitCodec) -> None:
    report = run_mcp_flows(codec)
    assert all(b64u_decode(t)[0] == VERSION for t in report.sealed)
    assert assert_mcp_rejects(codec, AESGCMCodec.ephemeral().seal(b"x"), reason="format") == "format"


def test_least_privilege_then_revoked_then_deleted(vault_server: BaoServer) -> None:
    key, policy = vault_server.new_key(), f"p-{secrets.token_hex(4)}"
    for ops, expected in [
        (("keys", "encrypt"), f"decrypt failed: permission denied.*'update' on transit/decrypt/{key}$"),
        # The key's type cannot be checked without `read` on its description: refused, naming the grant.
        (("encrypt", "decrypt"), f"read failed: .*; grant the token 'read' on transit/keys/{key}$"),
    ]:
        token = vault_server.token_with_policy(f"{policy}-{len(ops)}{ops[0]}", transit_policy("transit", key, ops))
        with client_for(vault_server, token=token) as c, pytest.raises(ProviderError, match=expected) as info:
            VaultTransitCodec(c, key)
        assert token not in str(info.value)
    token = vault_server.token_with_policy(policy, transit_policy("transit", key, ALL_OPS))
    with client_for(vault_server, token=token) as c:
        codec = VaultTransitCodec(c, key)
        sealed = codec.seal(b"p")
        assert codec.unseal(sealed) == b"p"
        vault_server.api("PUT", f"sys/policies/acl/{policy}", {"policy": transit_policy("transit", key, ("rewrap",))})
        assert reason(codec.unseal, sealed) is Reason.PROVIDER
        with pytest.raises(ProviderError, match="permission denied"):
            codec.seal(b"p")
        vault_server.api("PUT", f"sys/policies/acl/{policy}", {"policy": transit_policy("transit", key, ALL_OPS)})
        vault_server.api("POST", f"transit/keys/{key}/config", {"deletion_allowed": True})
        vault_server.api("DELETE", f"transit/keys/{key}")
        assert reason(codec.unseal, sealed) is Reason.PROVIDER
        with pytest.raises(ProviderError, match=key):  # with `update` only, never `create`, encrypt makes no new key
            codec.seal(b"p")
        with pytest.raises(ProviderError, match=f"bao write -f transit/keys/{key}"):
            VaultTransitCodec(c, key)


def test_approle_logs_in_again_when_its_token_is_refused(vault_server: BaoServer) -> None:
    key = vault_server.new_key()
    role_id, secret_id = vault_server.approle(f"ar-{key}", transit_policy("transit", key, ALL_OPS))
    with client_for(vault_server, role_id=role_id, secret_id=secret_id) as c:
        codec = VaultTransitCodec(c, key)
        first_token = c.token
        vault_server.api("POST", "auth/token/revoke", {"token": first_token})
        assert codec.unseal(codec.seal(b"again")) == b"again"
        assert c.token != first_token
    with pytest.raises(ProviderError, match="AppRole login") as info:
        vault_client(vault_server.addr, role_id=role_id, secret_id="not-the-secret")
    assert "not-the-secret" not in str(info.value)
