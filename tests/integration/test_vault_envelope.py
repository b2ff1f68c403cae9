"""EnvelopeCodec over VaultKeyWrapper against a real OpenBao: Vault at start-up only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.mcp_flows import accept_token, assert_mcp_rejects, mint_token, run_mcp_flows
from tests.plugins.vault import BaoServer, CallLog, client_for, transit_policy

from statecodec import EnvelopeCodec, InvalidToken, ProviderError, Reason
from statecodec.envelope import new_wrapped_key
from statecodec.providers.vault import VaultKeyWrapper
from statecodec.testing import assert_conformant

pytestmark = pytest.mark.integration

CONTEXT = {"purpose": "statecodec-envelope", "audience": "orders"}


@pytest.fixture(scope="module")
def client(vault_server: BaoServer) -> Iterator[Any]:
    with client_for(vault_server) as c:
        yield c


@pytest.fixture(scope="module")
def key(vault_server: BaoServer) -> str:
    return vault_server.new_key(derived=True)


@pytest.fixture(scope="module")
def ring(client: Any, key: str) -> list[bytes]:
    wrapper = VaultKeyWrapper(client, key)
    return [new_wrapped_key(wrapper, CONTEXT), new_wrapped_key(wrapper, CONTEXT)]


@pytest.fixture(scope="module")
def codec(client: Any, key: str, ring: list[bytes]) -> EnvelopeCodec:
    return EnvelopeCodec(VaultKeyWrapper(client, key), ring, context=CONTEXT)


def test_wrapped_key_is_a_vault_ciphertext(ring: list[bytes]) -> None:
    assert all(blob.startswith(b"vault:v1:") for blob in ring)
    assert ring[0] != ring[1]


def test_conformance(codec: EnvelopeCodec) -> None:
    assert_conformant(codec, error_type=InvalidToken)


def test_conformance_sdk_error_type(codec: EnvelopeCodec, client: Any, key: str) -> None:
    wrapper = VaultKeyWrapper(client, key)
    other = EnvelopeCodec(wrapper, [new_wrapped_key(wrapper, CONTEXT)], context=CONTEXT)
    assert_conformant(codec, max_examples=10, foreign=other)


def test_start_up_unwraps_once_per_key_and_tokens_never_call_vault(client: Any, key: str, ring: list[bytes]) -> None:
    calls = CallLog(client)
    codec = EnvelopeCodec(VaultKeyWrapper(client, key), ring, context=CONTEXT)
    assert calls.count() == 2
    assert calls.count("decrypt") == 2
    calls.reset()
    for i in range(200):
        assert codec.unseal(codec.seal(b"%d" % i)) == b"%d" % i
    with pytest.raises(InvalidToken):
        codec.unseal("A" * 60)
    assert calls.count() == 0


def test_non_derived_key_binds_context_as_associated_data(vault_server: BaoServer, client: Any) -> None:
    wrapper = VaultKeyWrapper(client, vault_server.new_key(derived=False))
    blob = new_wrapped_key(wrapper, CONTEXT)
    codec = EnvelopeCodec(wrapper, [blob], context=CONTEXT)
    assert codec.unseal(codec.seal(b"p")) == b"p"
    with pytest.raises(ProviderError, match="did not verify"):
        EnvelopeCodec(wrapper, [blob], context={**CONTEXT, "audience": "billing"})


def test_wrong_context_key_or_blob_fails_at_start(
    vault_server: BaoServer, client: Any, key: str, ring: list[bytes]
) -> None:
    wrapper = VaultKeyWrapper(client, key)
    with pytest.raises(ProviderError, match="did not verify") as info:
        EnvelopeCodec(wrapper, ring, context={"purpose": "other"})
    assert "wrapped_keys[0]" in str(info.value)
    other_key = VaultKeyWrapper(client, vault_server.new_key())
    with pytest.raises(ProviderError, match="did not verify"):
        EnvelopeCodec(other_key, ring, context=CONTEXT)
    corrupted = bytearray(ring[0])
    corrupted[-5] = ord("A") if corrupted[-5] != ord("A") else ord("B")
    with pytest.raises(ProviderError, match="did not verify"):
        EnvelopeCodec(wrapper, [bytes(corrupted)], context=CONTEXT)
    calls = CallLog(client)
    with pytest.raises(ProviderError, match="not a Vault transit ciphertext"):
        EnvelopeCodec(VaultKeyWrapper(client, key), [b"\x01\x02" * 40], context=CONTEXT)
    assert calls.count() == 0


def test_wrap_and_unwrap_round_trip(client: Any, key: str) -> None:
    wrapper = VaultKeyWrapper(client, key)
    data_key = bytes(range(32))
    blob = wrapper.wrap(data_key, CONTEXT)
    assert wrapper.unwrap(blob, CONTEXT) == data_key
    with pytest.raises(ProviderError):
        wrapper.unwrap(blob, {"purpose": "elsewhere"})
    assert wrapper.name == "vault"
    assert key in wrapper.describe()


def test_mcp_flow(codec: EnvelopeCodec) -> None:
    report = run_mcp_flows(codec)
    assert len(report.sealed) == 7


def test_two_instances_share_a_ring(client: Any, key: str, ring: list[bytes]) -> None:
    a = EnvelopeCodec(VaultKeyWrapper(client, key), ring, context=CONTEXT)
    b = EnvelopeCodec(VaultKeyWrapper(client, key), ring, context=CONTEXT)
    accept_token(b, mint_token(a))
    wrapper = VaultKeyWrapper(client, key)
    stranger = EnvelopeCodec(wrapper, [new_wrapped_key(wrapper, CONTEXT)], context=CONTEXT)
    assert assert_mcp_rejects(stranger, lambda t: t, minted_by=a, reason="unknown_key") == "unknown_key"


def test_least_privilege_policy(vault_server: BaoServer, key: str, ring: list[bytes]) -> None:
    provision = vault_server.token_with_policy(f"env-prov-{key}", transit_policy("transit", key, ("datakey/wrapped",)))
    runtime = vault_server.token_with_policy(f"env-run-{key}", transit_policy("transit", key, ("decrypt",)))
    with client_for(vault_server, token=provision) as c:
        blob = new_wrapped_key(VaultKeyWrapper(c, key), CONTEXT)
        with pytest.raises(ProviderError, match="permission denied") as info:
            EnvelopeCodec(VaultKeyWrapper(c, key), [blob], context=CONTEXT)
        assert f"transit/decrypt/{key}" in str(info.value)
    with client_for(vault_server, token=runtime) as c:
        codec = EnvelopeCodec(VaultKeyWrapper(c, key), [blob, *ring], context=CONTEXT)
        assert codec.unseal(codec.seal(b"ok")) == b"ok"
        with pytest.raises(ProviderError, match="permission denied"):
            new_wrapped_key(VaultKeyWrapper(c, key), CONTEXT)


def test_unaffected_by_vault_after_start(vault_server_fresh: BaoServer) -> None:
    server = vault_server_fresh
    key = server.new_key()
    with client_for(server) as c:
        wrapper = VaultKeyWrapper(c, key)
        codec = EnvelopeCodec(wrapper, [new_wrapped_key(wrapper, CONTEXT)], context=CONTEXT)
        token = codec.seal(b"before")
        server.seal()
        assert codec.unseal(token) == b"before"
        with pytest.raises(ProviderError, match="sealed"):
            EnvelopeCodec(wrapper, list(codec.wrapped_keys), context=CONTEXT)
        server.stop()
        assert codec.unseal(codec.seal(b"after")) == b"after"
        assert codec.unseal(token) == b"before"
        with pytest.raises(ProviderError, match="cannot connect"):
            EnvelopeCodec(wrapper, list(codec.wrapped_keys), context=CONTEXT)


def test_reason_codes_after_start(codec: EnvelopeCodec) -> None:
    token = codec.seal(b"x")
    with pytest.raises(InvalidToken) as info:
        codec.unseal(token[:-1] + ("A" if token[-1] != "A" else "B"))
    assert info.value.reason in {Reason.SEAL, Reason.MALFORMED}
