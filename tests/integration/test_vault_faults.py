"""The Vault key wrapper against a real OpenBao that is sealed, stopped, silent, misnamed or behind TLS: every
failure is a `ProviderError` saying why and how to fix it, with no credential reachable; a running codec never
calls Vault. What every provider shares (outage after start-up, retries, least privilege): test_provider_contract."""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any

import pytest
from tests.plugins.vault import BaoServer, CallLog, client_for
from tests.secrecy import assert_unreachable

from statecodec import EnvelopeCodec, ProviderError
from statecodec.envelope import default_context, new_wrapped_key
from statecodec.providers import RetryPolicy
from statecodec.providers.vault import VaultKeyWrapper

pytestmark = pytest.mark.integration
ONCE = RetryPolicy(attempts=1)
TWICE = RetryPolicy(attempts=2, base_delay=0)  # every retry counted, none slept


@pytest.mark.parametrize(
    ("fault", "phrase"),
    [("sealed", "sealed"), ("stopped", "cannot connect"), ("paused", "did not answer within the read timeout")],
)
def test_a_vault_that_cannot_answer_fails_closed(vault_server_fresh: BaoServer, fault: str, phrase: str) -> None:
    server = vault_server_fresh
    with client_for(server, timeout=(0.5, 0.5)) as client:
        wrapper = VaultKeyWrapper(client, server.new_key(), retry=TWICE)
        blob = new_wrapped_key(wrapper)
        codec = EnvelopeCodec(wrapper, [blob])
        token = codec.seal(b"p")
        log = CallLog(client)
        if fault != "paused":
            server.seal() if fault == "sealed" else server.stop()
        with server.paused() if fault == "paused" else contextlib.nullcontext():  # paused: connects, never answers
            for call in (partial(new_wrapped_key, wrapper), partial(EnvelopeCodec, wrapper, [blob])):
                with pytest.raises(ProviderError, match=phrase) as err:
                    call()
                # The `requests` error keeps the request, X-Vault-Token header and all: nothing may reach it.
                inner = err.value.__context__ or err.value  # EnvelopeCodec names the ring slot around ours
                assert (type(inner), inner.__context__, inner.__cause__) == (ProviderError, None, None)
                assert_unreachable(err.value, server.root_token.encode())
            assert codec.unseal(codec.seal(b"q")) == b"q"
        assert codec.unseal(token) == b"p"
        assert log.calls == 4  # each failed call retried once (waiting can help); sealing and unsealing made none
        if fault == "sealed":  # unsealed again, a new instance starts: nothing else to repair
            server.unseal()
            assert EnvelopeCodec(wrapper, [blob]).unseal(token) == b"p"


def test_a_missing_grant_is_named_with_its_fix(vault_server: BaoServer) -> None:
    # A missing key, named with its fix: test_provider_contract::test_an_unknown_key_is_named_with_its_fix.
    key = vault_server.new_key()
    with client_for(vault_server) as c:
        blob = new_wrapped_key(VaultKeyWrapper(c, key))
    token = vault_server.token_with_policy(f"none-{key}", f'path "transit/keys/{key}" {{ capabilities = ["read"] }}')
    denied = f"permission denied.*grant the token 'update' on transit/decrypt/{key}$"
    with client_for(vault_server, token=token) as c:
        log = CallLog(c)
        with pytest.raises(ProviderError, match=denied):
            VaultKeyWrapper(c, key, retry=TWICE).unwrap(blob, default_context())
    assert log.calls == 1  # a refusal is not retried: waiting cannot grant the policy


# urllib3 warns on every unverified request, as it should; the test asserts the setting took effect.
@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
@pytest.mark.parametrize("verify", ["ca", False])
def test_verified_against_the_configured_ca_or_not_at_all(vault_server_tls: BaoServer, verify: Any) -> None:
    key = vault_server_tls.new_key()
    with client_for(vault_server_tls, verify=str(vault_server_tls.ca_file) if verify else False) as c:
        wrapper = VaultKeyWrapper(c, key)
        codec = EnvelopeCodec(wrapper, [new_wrapped_key(wrapper)])
        assert codec.unseal(codec.seal(b"tls")) == b"tls"
    with client_for(vault_server_tls) as c, pytest.raises(ProviderError, match="TLS handshake failed"):
        new_wrapped_key(VaultKeyWrapper(c, key, retry=ONCE))  # an unknown CA is refused
