"""EnvelopeCodec over Google Cloud KMS: the real client against the loopback Cloud KMS server."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from tests.integration.kms_support import ATTEMPTS, Sleeps, run_cli
from tests.mcp_flows import accept_token, assert_mcp_rejects, mint_token, run_mcp_flows
from tests.plugins.aws import free_port
from tests.plugins.gcp import CORRUPTIONS, FakeCloudKms, key_name

from statecodec import EnvelopeCodec, ProviderError
from statecodec._encoding import b64u_decode
from statecodec.config import codec_from_env, codec_from_file
from statecodec.envelope import canonical_context, default_context, format_wrapped_keys, new_wrapped_key
from statecodec.errors import ConfigurationError
from statecodec.mcp import SDKCodec, security_from_env
from statecodec.providers._retry import RetryPolicy
from statecodec.providers.gcp_kms import GcpKmsWrapper

pytestmark = pytest.mark.integration

_names = itertools.count()


@pytest.fixture
def key(gcp_kms: FakeCloudKms) -> str:
    return gcp_kms.create_key(key_name("statecodec-test", "ring", f"key-{next(_names)}"))


@pytest.fixture
def wrapper(key: str, gcp_client: Any, policy: RetryPolicy) -> GcpKmsWrapper:
    return GcpKmsWrapper(key, client=gcp_client, retry=policy, timeout=5)


@pytest.fixture
def ring(wrapper: GcpKmsWrapper, gcp_kms: FakeCloudKms) -> list[bytes]:
    blobs = [new_wrapped_key(wrapper) for _ in range(2)]
    gcp_kms.reset()
    return blobs


def test_conformance(wrapper: GcpKmsWrapper, ring: list[bytes]) -> None:
    from statecodec.testing import assert_conformant

    codec = EnvelopeCodec(wrapper, ring)
    foreign = EnvelopeCodec(wrapper, [new_wrapped_key(wrapper)])
    assert_conformant(codec, foreign=foreign, max_examples=25)


def test_one_decrypt_per_data_key_then_zero_kms_calls(
    wrapper: GcpKmsWrapper, ring: list[bytes], gcp_kms: FakeCloudKms
) -> None:
    codec = EnvelopeCodec(wrapper, ring)
    assert dict(gcp_kms.calls) == {"Decrypt": 2}
    tokens = [codec.seal(b"state %d" % i) for i in range(200)]
    assert [codec.unseal(t) for t in tokens] == [b"state %d" % i for i in range(200)]
    assert dict(gcp_kms.calls) == {"Decrypt": 2}


def test_keeps_working_with_kms_stopped(gcp_kms_fn: FakeCloudKms, policy: RetryPolicy, sleeps: Sleeps) -> None:
    name = gcp_kms_fn.create_key(key_name("p", "r", "stopped"))
    client = gcp_kms_fn.client()
    try:
        wrapper = GcpKmsWrapper(name, client=client, retry=policy, timeout=2)
        ring = [new_wrapped_key(wrapper)]
        codec = EnvelopeCodec(wrapper, ring)
        token = codec.seal(b"before the outage")
        gcp_kms_fn.stop()
        assert codec.unseal(token) == b"before the outage"
        assert codec.unseal(codec.seal(b"during the outage")) == b"during the outage"
        with pytest.raises(ProviderError) as exc:
            EnvelopeCodec(wrapper, ring)
        assert "unreachable" in str(exc.value)
        assert name in str(exc.value)
        assert len(sleeps.delays) == ATTEMPTS - 1
    finally:
        client.transport.close()


def test_mcp_flows(wrapper: GcpKmsWrapper, ring: list[bytes]) -> None:
    assert run_mcp_flows(EnvelopeCodec(wrapper, ring)).tool


def test_two_servers_on_one_wrapped_ring_accept_each_other_and_another_ring_refuses(
    wrapper: GcpKmsWrapper, ring: list[bytes]
) -> None:
    text = format_wrapped_keys(ring)
    instance_a = EnvelopeCodec(wrapper, text.split(","))
    instance_b = EnvelopeCodec(wrapper, text.split(","))
    accept_token(instance_b, mint_token(instance_a))
    accept_token(instance_a, mint_token(instance_b))
    other = EnvelopeCodec(wrapper, [new_wrapped_key(wrapper)])
    assert_mcp_rejects(other, lambda t: t, minted_by=instance_a, reason="unknown_key")


def test_key_rotation_in_kms_keeps_old_blobs_unwrapping(
    wrapper: GcpKmsWrapper, ring: list[bytes], gcp_kms: FakeCloudKms, key: str
) -> None:
    assert gcp_kms.rotate(key) == 2
    fresh = new_wrapped_key(wrapper)
    codec = EnvelopeCodec(wrapper, [fresh, *ring])
    assert len(codec.key_ids) == 3


# --- integrity fields -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [m for m in CORRUPTIONS if m != "encrypt.name"])
def test_every_checksum_is_checked_and_retried_a_bounded_number_of_times(
    mode: str, wrapper: GcpKmsWrapper, ring: list[bytes], gcp_kms: FakeCloudKms
) -> None:
    operation = "Decrypt" if mode in ("decrypt.plaintext_crc32c", "request") else "Encrypt"

    def call() -> None:
        if operation == "Decrypt":
            EnvelopeCodec(wrapper, ring[:1])
        else:
            new_wrapped_key(wrapper)

    gcp_kms.corrupt_next(mode, ATTEMPTS)
    with pytest.raises(ProviderError) as exc:
        call()
    assert "corrupted in transit" in str(exc.value)
    assert gcp_kms.calls[operation] == ATTEMPTS
    # One corrupted answer is survived by the retry.
    gcp_kms.reset()
    gcp_kms.corrupt_next(mode, 1)
    call()
    assert gcp_kms.calls[operation] == 2


def test_response_from_another_key_is_refused(wrapper: GcpKmsWrapper, gcp_kms: FakeCloudKms) -> None:
    gcp_kms.corrupt_next("encrypt.name")
    with pytest.raises(ProviderError, match="another key"):
        new_wrapped_key(wrapper)


def test_requests_carry_every_checksum_and_the_aad(gcp_kms: FakeCloudKms, key: str, policy: RetryPolicy) -> None:
    seen: list[tuple[str, Any]] = []

    class Recorder(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
        def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
            seen.append((details.method, request))
            return continuation(details, request)

    from google.auth.credentials import AnonymousCredentials
    from google.cloud import kms_v1
    from google.cloud.kms_v1.services.key_management_service.transports import KeyManagementServiceGrpcTransport

    channel = grpc.intercept_channel(grpc.insecure_channel(gcp_kms.address), Recorder())
    transport = KeyManagementServiceGrpcTransport(
        channel=channel,
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
    )
    client: Any = kms_v1.KeyManagementServiceClient(transport=transport)
    try:
        wrapper = GcpKmsWrapper(key, client=client, retry=policy)
        context = default_context("billing")
        EnvelopeCodec(wrapper, [new_wrapped_key(wrapper, context)], context=context)
    finally:
        client.transport.close()
    (enc_method, enc), (dec_method, dec) = seen
    assert enc_method.endswith("/Encrypt")
    assert dec_method.endswith("/Decrypt")
    aad = canonical_context(context)
    assert enc.additional_authenticated_data == aad
    assert dec.additional_authenticated_data == aad
    assert enc.plaintext_crc32c is not None
    assert enc.additional_authenticated_data_crc32c is not None
    assert dec.ciphertext_crc32c is not None
    assert dec.additional_authenticated_data_crc32c is not None
    assert dict(gcp_kms.calls) == {"Encrypt": 1, "Decrypt": 1}


# --- faults at start-up -------------------------------------------------------------------------


def _startup_error(wrapper: GcpKmsWrapper, ring: list[bytes], **kw: Any) -> str:
    with pytest.raises(ProviderError) as exc:
        EnvelopeCodec(wrapper, ring, **kw)
    message = str(exc.value)
    assert wrapper.key_name in message
    assert "wrapped_keys[0]" in message
    return message


def test_throttled_is_retried_then_named(
    wrapper: GcpKmsWrapper, ring: list[bytes], gcp_kms: FakeCloudKms, sleeps: Sleeps
) -> None:
    gcp_kms.fail_next(ATTEMPTS, grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "throttled" in _startup_error(wrapper, ring)
    assert gcp_kms.calls["Decrypt"] == ATTEMPTS
    assert len(sleeps.delays) == ATTEMPTS - 1
    assert all(0 <= d <= 0.2 for d in sleeps.delays)


def test_transient_unavailability_recovers(wrapper: GcpKmsWrapper, ring: list[bytes], gcp_kms: FakeCloudKms) -> None:
    gcp_kms.fail_next(ATTEMPTS - 1, grpc.StatusCode.UNAVAILABLE)
    codec = EnvelopeCodec(wrapper, ring)
    assert codec.unseal(codec.seal(b"ok")) == b"ok"
    assert gcp_kms.calls["Decrypt"] == ATTEMPTS - 1 + len(ring)


def test_unreachable(ring: list[bytes], policy: RetryPolicy, sleeps: Sleeps) -> None:
    name = key_name("p", "r", "nowhere")
    wrapper = GcpKmsWrapper(name, emulator_host=f"127.0.0.1:{free_port()}", retry=policy, timeout=2)
    try:
        assert "unreachable" in _startup_error(wrapper, ring)
        assert len(sleeps.delays) == ATTEMPTS - 1
    finally:
        wrapper.close()


def test_access_denied_is_not_retried(
    wrapper: GcpKmsWrapper, ring: list[bytes], gcp_kms: FakeCloudKms, key: str, sleeps: Sleeps
) -> None:
    gcp_kms.deny(key)
    message = _startup_error(wrapper, ring)
    assert "access denied" in message
    assert "cryptoKeyDecrypter" in message
    assert gcp_kms.calls["Decrypt"] == 1
    assert sleeps.delays == []


def test_wrong_key(ring: list[bytes], gcp_kms: FakeCloudKms, gcp_client: Any, policy: RetryPolicy) -> None:
    other = gcp_kms.create_key(key_name("p", "r", f"other-{next(_names)}"))
    message = _startup_error(GcpKmsWrapper(other, client=gcp_client, retry=policy), ring)
    assert "another key" in message
    assert gcp_kms.calls["Decrypt"] == 1


def test_wrong_context(wrapper: GcpKmsWrapper, ring: list[bytes], gcp_kms: FakeCloudKms) -> None:
    assert "another context" in _startup_error(wrapper, ring, context=default_context("other-service"))
    assert gcp_kms.calls["Decrypt"] == 1


def test_corrupted_wrapped_key(wrapper: GcpKmsWrapper, ring: list[bytes]) -> None:
    corrupted = bytearray(ring[0])
    corrupted[-3] ^= 0x01
    assert "corrupted" in _startup_error(wrapper, [bytes(corrupted)])


def test_disabled_version(wrapper: GcpKmsWrapper, ring: list[bytes], gcp_kms: FakeCloudKms, key: str) -> None:
    gcp_kms.disable_version(key, 1)
    assert "not enabled" in _startup_error(wrapper, ring)


def test_unknown_key(ring: list[bytes], gcp_client: Any, policy: RetryPolicy) -> None:
    wrapper = GcpKmsWrapper(key_name("p", "r", "never-created"), client=gcp_client, retry=policy)
    assert "not found" in _startup_error(wrapper, ring)


@pytest.mark.parametrize(
    "name", ["projects/p/locations/l/keyRings/r", "projects/p/locations/l/keyRings/r/cryptoKeys/k/cryptoKeyVersions/1"]
)
def test_key_name_must_be_a_crypto_key(name: str) -> None:
    with pytest.raises(ConfigurationError, match="crypto key name"):
        GcpKmsWrapper(name, client=object())


@pytest.mark.parametrize("host", ["10.0.0.5:9000", "kms.example.com:443", "127.0.0.1"])
def test_plaintext_grpc_only_to_loopback(host: str) -> None:
    with pytest.raises(ConfigurationError, match="loopback"):
        GcpKmsWrapper(key_name("p", "r", "k"), emulator_host=host)


# --- configuration, one-liner and CLI -----------------------------------------------------------


@pytest.fixture
def gcp_env(key: str, ring: list[bytes], gcp_kms: FakeCloudKms) -> dict[str, str]:
    return {
        "STATECODEC_CODEC": "gcp-kms",
        "STATECODEC_GCP_KMS_KEY": key,
        "STATECODEC_GCP_KMS_EMULATOR_HOST": gcp_kms.address,
        "STATECODEC_WRAPPED_KEYS": format_wrapped_keys(ring),
    }


def test_codec_from_env_and_file(
    gcp_env: dict[str, str], wrapper: GcpKmsWrapper, ring: list[bytes], tmp_path: Path
) -> None:
    reference = EnvelopeCodec(wrapper, ring)
    codec = codec_from_env(gcp_env)
    assert isinstance(codec, EnvelopeCodec)
    assert codec.key_ids == reference.key_ids
    assert reference.unseal(codec.seal(b"from env")) == b"from env"
    (tmp_path / "wrapped.txt").write_text(gcp_env["STATECODEC_WRAPPED_KEYS"].replace(",", "\n") + "\n")
    doc = {k: v for k, v in gcp_env.items() if k != "STATECODEC_WRAPPED_KEYS"}
    doc["STATECODEC_WRAPPED_KEYS_FILE"] = "wrapped.txt"
    (tmp_path / "statecodec.json").write_text(json.dumps(doc))
    from_file = codec_from_file(tmp_path / "statecodec.json")
    assert codec.unseal(from_file.seal(b"from file")) == b"from file"


def test_security_from_env_one_liner(gcp_env: dict[str, str]) -> None:
    security = security_from_env(environ=gcp_env)
    assert isinstance(security.codec, SDKCodec)
    assert isinstance(security.codec.codec, EnvelopeCodec)
    assert run_mcp_flows(security).tool


def test_missing_key_setting(gcp_env: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="STATECODEC_GCP_KMS_KEY"):
        codec_from_env({k: v for k, v in gcp_env.items() if k != "STATECODEC_GCP_KMS_KEY"})


@pytest.fixture
def cli_flags(key: str, gcp_kms: FakeCloudKms) -> list[str]:
    return ["--provider", "gcp", "--key", key, "--emulator-host", gcp_kms.address]


def test_cli_new_data_key_and_check(cli_flags: list[str], wrapper: GcpKmsWrapper) -> None:
    code, out, _ = run_cli("kms", "new-data-key", *cli_flags, "--context", "purpose=statecodec-envelope,app=x")
    assert code == 0
    wrapped = out.strip()
    context = {"purpose": "statecodec-envelope", "app": "x"}
    data_key = wrapper.unwrap(b64u_decode(wrapped), context)
    assert len(data_key) == 32
    code, out, _ = run_cli(
        "kms", "check", *cli_flags, "--context", "purpose=statecodec-envelope,app=x", "--wrapped-keys", wrapped
    )
    assert code == 0
    assert "unwrapped 1 data key: ok" in out
    assert "app=x,purpose=statecodec-envelope" in out
    assert data_key.hex() not in out
    code, _, err = run_cli("kms", "check", *cli_flags, "--wrapped-keys", wrapped)
    assert code == 2
    assert "another context" in err
