"""The provider contract: what every `KeyWrapper` must do under `EnvelopeCodec`, against the real services.

Each test runs against AWS KMS (a real moto_server, behind the fault-injecting proxy), Cloud KMS (the real
google-cloud-kms client and the loopback gRPC server) and Vault transit (a real OpenBao), each through the SDK
client a deployment uses.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from tests.integration.kms_support import ATTEMPTS, assert_no_secret_in, capture_every_record, run_cli
from tests.plugins import assert_not_copyable
from tests.plugins.aws import CREDENTIALS, REGION, MotoServer
from tests.plugins.gcp import FakeCloudKms, key_name
from tests.plugins.vault import CallLog, client_for, transit_policy
from tests.secrecy import chain_texts

from statecodec import EnvelopeCodec, InvalidToken, ProviderError, Reason
from statecodec._encoding import b64u_decode
from statecodec.config import codec_from_env, codec_from_file
from statecodec.envelope import default_context, format_wrapped_keys, new_wrapped_key
from statecodec.errors import ConfigurationError
from statecodec.providers import RetryPolicy
from statecodec.reload import ReloadingCodec

pytestmark = pytest.mark.integration
PROVIDERS = ["aws", "gcp", "vault"]
_S = TypeVar("_S", MotoServer, FakeCloudKms)


@dataclass
class Provider:
    """One live provider key, and what the contract needs to know about it."""

    key: str  # what every error and repr must name
    make: Callable[..., Any]  # (key=None, retry=None) -> a wrapper over the live service
    calls: Callable[[], int]  # provider calls made so far
    new_key: Callable[[], str]  # another key of the same provider
    stop: Callable[[], None]
    down: str  # how a message names the provider being unreachable
    settings: dict[str, str]  # STATECODEC_* settings naming this key, without the wrapped keys
    cli: list[str]  # `statecodec kms` flags naming this key
    loggers: tuple[str, ...]  # the SDK's loggers
    secrets: list[str] = field(default_factory=list)  # credentials no message may carry
    missing: tuple[str, str] = ("", "")  # a key name the provider does not hold, and how its refusal says so
    fail_next: Callable[[int, Any], None] | None = None  # (n, fault): the next n calls answer with that fault


def _own(request: pytest.FixtureRequest, server: _S) -> _S:
    """`server` started for this test alone, which it may stop."""
    server.start()
    request.addfinalizer(server.stop)
    return server


def _aws(request: pytest.FixtureRequest, fresh: bool) -> Provider:
    from statecodec.providers.aws_kms import AwsKmsWrapper

    request.getfixturevalue("aws_credentials")
    server = _own(request, MotoServer()) if fresh else request.getfixturevalue("moto_server")
    proxy = None if fresh else request.getfixturevalue("kms_proxy")
    client = (proxy or server).client()
    request.addfinalizer(client.close)
    sent: list[str] = []
    client.meta.events.register("before-call.kms", lambda model, **_: sent.append(model.name))
    arn = server.create_key()[0]
    return Provider(
        key=arn,
        make=lambda key=arn, retry=None: AwsKmsWrapper(key, client=client, retry=retry),
        calls=lambda: len(sent),
        new_key=lambda: server.create_key()[0],
        stop=server.stop,
        down="KMS unreachable",
        settings={
            "STATECODEC_CODEC": "aws-kms",
            "STATECODEC_AWS_KMS_KEY_ID": arn,
            "STATECODEC_AWS_REGION": REGION,
            "STATECODEC_AWS_KMS_ENDPOINT": server.endpoint,
        },
        cli=["--provider", "aws", "--key-id", arn, "--region", REGION, "--endpoint-url", server.endpoint],
        loggers=("botocore", "boto3", "urllib3", "s3transfer"),
        secrets=[CREDENTIALS["aws_secret_access_key"]],
        missing=("arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555", "not found|denied"),
        fail_next=proxy and (lambda n, fault: proxy.fail_next(n, fault[0], status=fault[1], message=fault[2])),
    )


def _gcp(request: pytest.FixtureRequest, fresh: bool) -> Provider:
    from statecodec.providers.gcp_kms import GcpKmsWrapper

    server = _own(request, FakeCloudKms()) if fresh else request.getfixturevalue("gcp_kms")
    client = server.client()
    request.addfinalizer(client.transport.close)
    name = server.create_key()
    return Provider(
        key=name,
        make=lambda key=name, retry=None: GcpKmsWrapper(key, client=client, retry=retry, timeout=5),
        calls=lambda: sum(server.calls.values()),
        new_key=server.create_key,
        stop=server.stop,
        down="Cloud KMS unreachable",
        settings={
            "STATECODEC_CODEC": "gcp-kms",
            "STATECODEC_GCP_KMS_KEY": name,
            "STATECODEC_GCP_KMS_EMULATOR_HOST": server.address,
        },
        cli=["--provider", "gcp", "--key", name, "--emulator-host", server.address],
        loggers=("google", "grpc"),
        missing=(key_name("contract", "ring", "never-created"), "not found"),
        fail_next=server.fail_next,
    )


def _vault(request: pytest.FixtureRequest, fresh: bool, derived: bool = True) -> Provider:
    from statecodec.providers.vault import VaultKeyWrapper

    server = request.getfixturevalue("vault_server_fresh" if fresh else "vault_server")
    request.getfixturevalue("monkeypatch").setenv("STATECODEC_VAULT_TOKEN", server.root_token)  # for the CLI
    stack = contextlib.ExitStack()
    request.addfinalizer(stack.close)
    client = stack.enter_context(client_for(server))
    log = CallLog(client)
    key = server.new_key(derived=derived)
    return Provider(
        key=key,
        make=lambda key=key, retry=None: VaultKeyWrapper(client, key, retry=retry),
        calls=lambda: log.calls,
        new_key=lambda: server.new_key(derived=derived),
        stop=server.stop,
        down="cannot connect",
        settings={
            "STATECODEC_CODEC": "vault-envelope",
            "STATECODEC_VAULT_ADDR": server.addr,
            "STATECODEC_VAULT_TOKEN": server.root_token,
            "STATECODEC_VAULT_KEY": key,
        },
        cli=["--provider", "vault", "--vault-addr", server.addr, "--vault-key", key],
        loggers=("hvac", "requests", "urllib3"),
        secrets=[server.root_token],
        missing=("no-such-key", "create it: bao write -f transit/keys/no-such-key derived=true"),
    )


_BUILD: dict[str, Callable[[pytest.FixtureRequest, bool], Provider]] = {
    "aws": _aws,
    "gcp": _gcp,
    "vault": _vault,
    "vault-not-derived": lambda request, fresh: _vault(request, fresh, derived=False),
}


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> Provider:
    """A new key on the session's provider."""
    return _BUILD[request.param](request, False)


@pytest.fixture(params=PROVIDERS)
def stoppable(request: pytest.FixtureRequest) -> Provider:
    """A new key on a provider of this test's own, which the test may stop."""
    return _BUILD[request.param](request, True)


def _refused(provider: Provider, wrapper: Any, blobs: list[bytes], secrets: list[bytes], **kw: Any) -> str:
    """Start-up fails as a `ProviderError` naming the ring slot and the key; no secret in its message or chain."""
    with pytest.raises(ProviderError) as info:
        EnvelopeCodec(wrapper, blobs, **kw)
    assert_no_secret_in(chain_texts(info.value), [*secrets, *provider.secrets])
    message = str(info.value)
    assert "wrapped_keys[0]" in message
    assert provider.key in message
    return message


def test_round_trip_with_one_call_per_data_key_and_none_per_token(provider: Provider) -> None:
    wrapper = provider.make()
    ring = [new_wrapped_key(wrapper) for _ in range(2)]
    before = provider.calls()
    codec = EnvelopeCodec(wrapper, ring)
    assert provider.calls() - before == 2
    twin = EnvelopeCodec(wrapper, format_wrapped_keys(ring).split(","))  # another instance, from the settings text
    before = provider.calls()
    tokens = [codec.seal(b"state %d" % i) for i in range(50)]
    assert [twin.unseal(t) for t in tokens] == [b"state %d" % i for i in range(50)]
    assert provider.calls() == before
    stranger = EnvelopeCodec(wrapper, [new_wrapped_key(wrapper)])
    with pytest.raises(InvalidToken) as info:
        stranger.unseal(tokens[0])
    assert info.value.reason == Reason.UNKNOWN_KEY


@pytest.mark.parametrize("provider", [*PROVIDERS, "vault-not-derived"], indirect=True)
def test_wrong_context_is_refused_once_naming_the_key(provider: Provider) -> None:
    wrapper = provider.make()
    blob = new_wrapped_key(wrapper, default_context("billing"))
    data_key = wrapper.unwrap(blob, default_context("billing"))
    before = provider.calls()
    _refused(provider, wrapper, [blob], [data_key], context=default_context("orders"))
    assert provider.calls() - before == 1  # a definitive refusal is not retried


FAULTS = [  # (provider, its fault, what the message says, calls made: every attempt only when waiting can help)
    ("aws", ("ThrottlingException", 400, "Rate exceeded"), "throttled", ATTEMPTS),
    ("aws", ("KMSInternalException", 500, "injected"), "unavailable", ATTEMPTS),
    ("aws", ("AccessDeniedException", 400, "not authorized to perform kms:Decrypt"), "access denied", 1),
    ("aws", ("IncorrectKeyException", 400, "another CMK"), "wrong key", 1),
    ("aws", ("DisabledException", 400, "the key is disabled."), "disabled", 1),
    ("aws", ("KMSInvalidStateException", 400, "pending deletion."), "not usable in its current state", 1),
    ("gcp", grpc.StatusCode.RESOURCE_EXHAUSTED, "throttled", ATTEMPTS),
    ("gcp", grpc.StatusCode.PERMISSION_DENIED, "access denied (grant roles/cloudkms.cryptoKeyDecrypter", 1),
    ("gcp", grpc.StatusCode.FAILED_PRECONDITION, "not enabled", 1),
]


@pytest.mark.parametrize(("provider", "fault", "cause", "calls"), FAULTS, indirect=["provider"])
def test_kms_errors_are_named_and_retried_only_when_waiting_can_help(
    provider: Provider, fault: Any, cause: str, calls: int, policy: RetryPolicy, sleeps: list[float]
) -> None:
    wrapper = provider.make(retry=policy)
    ring = [new_wrapped_key(wrapper) for _ in range(2)]
    assert provider.fail_next is not None
    provider.fail_next(calls, fault)
    before = provider.calls()
    with pytest.raises(ProviderError) as info:
        EnvelopeCodec(wrapper, ring)
    assert cause in str(info.value)
    if calls == 1 and isinstance(fault, tuple):  # a definitive AWS refusal passes on what KMS said
        assert fault[2] in str(info.value)
    assert provider.calls() - before == calls
    assert len(sleeps) == calls - 1


def test_an_unknown_key_is_named_with_its_fix(provider: Provider, policy: RetryPolicy) -> None:
    blob = new_wrapped_key(provider.make())
    with pytest.raises(ProviderError, match=provider.missing[1]):
        EnvelopeCodec(provider.make(key=provider.missing[0], retry=policy), [blob])


def test_corrupted_foreign_or_junk_blob_is_refused(provider: Provider) -> None:
    wrapper = provider.make()
    blob = new_wrapped_key(wrapper)
    data_key = wrapper.unwrap(blob, default_context())
    corrupted = bytearray(blob)
    corrupted[-5] = ord("A") if corrupted[-5] != ord("A") else ord("B")
    foreign = new_wrapped_key(provider.make(key=provider.new_key()))
    for bad in (bytes(corrupted), foreign, b"\x01\x02" * 40):
        _refused(provider, wrapper, [bad], [data_key])


def test_provider_down_after_start_up(stoppable: Provider, policy: RetryPolicy, sleeps: list[float]) -> None:
    wrapper = stoppable.make(retry=policy)
    ring = [new_wrapped_key(wrapper)]
    codec = EnvelopeCodec(wrapper, ring)
    token = codec.seal(b"before the outage")
    stoppable.stop()
    assert codec.unseal(token) == b"before the outage"
    assert codec.unseal(codec.seal(b"during the outage")) == b"during the outage"
    # A new instance cannot start: retried a bounded number of times, then named.
    assert stoppable.down in _refused(stoppable, wrapper, ring, [])
    assert len(sleeps) == ATTEMPTS - 1
    assert all(0 <= d <= 0.2 for d in sleeps)


def test_no_data_key_in_any_log_record(provider: Provider) -> None:
    """Provisioning with the CLI and start-up from the settings, each building its own client, log no key."""
    with capture_every_record(provider.loggers) as capture:
        blobs = [b64u_decode(run_cli("kms", "new-data-key", *provider.cli)[1].strip()) for _ in range(2)]
        codec_from_env({**provider.settings, "STATECODEC_WRAPPED_KEYS": format_wrapped_keys(blobs)})
    # The capture works: the SDK's own records (building its client, opening connections) reached it.
    assert any(name.split(".")[0] in provider.loggers for name in capture.names)
    keys = [provider.make().unwrap(blob, default_context()) for blob in blobs]
    assert_no_secret_in(capture.lines, [*keys, *provider.secrets])


def test_wrapper_refuses_pickling_and_its_repr_names_the_key_only(provider: Provider) -> None:
    wrapper = provider.make()
    assert_not_copyable(wrapper)
    assert provider.key in repr(wrapper)
    assert_no_secret_in([repr(wrapper), repr(EnvelopeCodec(wrapper, [new_wrapped_key(wrapper)]))], provider.secrets)


def test_cli_and_settings_build_the_codec(provider: Provider, tmp_path: Path) -> None:
    code, out, _ = run_cli("kms", "new-data-key", *provider.cli, "--audience", "billing")
    assert code == 0
    wrapped = out.strip()
    data_key = provider.make().unwrap(b64u_decode(wrapped), default_context("billing"))
    env = {**provider.settings, "STATECODEC_WRAPPED_KEYS": wrapped, "STATECODEC_KMS_AUDIENCE": "billing"}
    (tmp_path / "check.json").write_text(json.dumps(env))
    code, out, _ = run_cli("check", "--json", "--config", str(tmp_path / "check.json"))
    assert (code, json.loads(out)["context"]) == (0, default_context("billing"))
    (tmp_path / "check.json").write_text(json.dumps({**env, "STATECODEC_KMS_AUDIENCE": ""}))  # the default context
    code, _, err = run_cli("check", "--config", str(tmp_path / "check.json"))
    assert (code, provider.key in err) == (1, True)
    assert_no_secret_in([out, err], [data_key, *provider.secrets])

    reference = EnvelopeCodec(provider.make(), [wrapped], context=default_context("billing"))
    assert reference.unseal(codec_from_env(env).seal(b"from env")) == b"from env"
    env = {**env, "STATECODEC_KMS_CONTEXT": "purpose=statecodec-envelope,audience=billing"}
    del env["STATECODEC_KMS_AUDIENCE"]
    (tmp_path / "statecodec.json").write_text(json.dumps(env))
    assert reference.unseal(codec_from_file(tmp_path / "statecodec.json").seal(b"from file")) == b"from file"
    key_setting = next(name for name, value in provider.settings.items() if value == provider.key)
    with pytest.raises(ConfigurationError, match=key_setting):
        codec_from_env({name: value for name, value in env.items() if name != key_setting})


def test_vault_least_privilege(vault_server: Any) -> None:
    """Provisioning needs only ``datakey/wrapped``, start-up only ``decrypt``."""
    from statecodec.providers.vault import VaultKeyWrapper

    key = vault_server.new_key()
    provision = vault_server.token_with_policy(f"env-prov-{key}", transit_policy("transit", key, ("datakey/wrapped",)))
    runtime = vault_server.token_with_policy(f"env-run-{key}", transit_policy("transit", key, ("decrypt",)))
    with client_for(vault_server, token=provision) as c:
        blob = new_wrapped_key(VaultKeyWrapper(c, key))
        with pytest.raises(ProviderError, match="permission denied"):
            EnvelopeCodec(VaultKeyWrapper(c, key), [blob])
    with client_for(vault_server, token=runtime) as c:
        codec = EnvelopeCodec(VaultKeyWrapper(c, key), [blob])
        assert codec.unseal(codec.seal(b"ok")) == b"ok"
        with pytest.raises(ProviderError, match="permission denied"):
            new_wrapped_key(VaultKeyWrapper(c, key))


def test_a_live_codec_reloads_its_wrapped_ring_through_the_provider(provider: Provider, tmp_path: Path) -> None:
    """Live rotation of an envelope ring: a reload unwraps the new file's keys through the real provider, and the
    ring that drops the old key while its tokens live is refused (docs/rotation.md)."""
    old, new = (new_wrapped_key(provider.make(), default_context()) for _ in range(2))
    ring = tmp_path / "wrapped"
    ring.write_text(format_wrapped_keys([old]))
    codec = codec_from_env({**provider.settings, "STATECODEC_WRAPPED_KEYS_FILE": str(ring),
                            "STATECODEC_RELOAD_INTERVAL": "3600"})  # fmt: skip
    assert isinstance(codec, ReloadingCodec)
    try:
        sealed, first = codec.seal(b"old"), codec.key_ids
        for blobs in ([old, new], [new, old]):
            ring.write_text(format_wrapped_keys(blobs))
            assert codec.reload()
            assert codec.unseal(sealed) == b"old"
        assert codec.key_ids[1:] == first
        ring.write_text(format_wrapped_keys([new]))
        assert not codec.reload()  # the old key sealed until just now: its tokens still live
        assert (codec.unseal(sealed), codec.key_ids[1:]) == (b"old", first)
    finally:
        codec.close()
