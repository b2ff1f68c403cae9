"""EnvelopeCodec over AWS KMS, against a real moto_server over HTTP.

moto implements KMS encryption with the encryption context bound and
``Decrypt`` pinned to ``KeyId``, which is what these tests rely on. Where
moto does not enforce a KMS rule, the test says so and asserts what moto
can show; responses moto never produces (throttling, access denied,
internal errors) come from the counting proxy in front of it, in KMS's own
error shape, so the real boto3 client parses them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.kms_support import ATTEMPTS, Sleeps, run_cli
from tests.mcp_flows import accept_token, assert_mcp_rejects, mint_token, run_mcp_flows
from tests.plugins.aws import REGION, KmsProxy, MotoServer, free_port, kms_client

from statecodec import EnvelopeCodec, InvalidToken, ProviderError
from statecodec._encoding import b64u_decode
from statecodec.config import codec_from_env, codec_from_file
from statecodec.envelope import default_context, format_wrapped_keys, new_wrapped_key
from statecodec.errors import ConfigurationError
from statecodec.mcp import SDKCodec, security_from_env
from statecodec.providers._retry import RetryPolicy
from statecodec.providers.aws_kms import AwsKmsWrapper
from statecodec.testing import assert_conformant

pytestmark = pytest.mark.integration

@pytest.fixture
def key(moto_server: MotoServer) -> tuple[str, str]:
    return moto_server.create_key()


@pytest.fixture
def client(kms_proxy: KmsProxy) -> Iterator[Any]:
    c = kms_proxy.client()
    yield c
    c.close()


@pytest.fixture
def wrapper(key: tuple[str, str], client: Any, policy: RetryPolicy) -> AwsKmsWrapper:
    return AwsKmsWrapper(key[0], client=client, retry=policy)


@pytest.fixture
def ring(wrapper: AwsKmsWrapper) -> list[bytes]:
    return [new_wrapped_key(wrapper) for _ in range(2)]


def _count_calls(client: Any) -> list[str]:
    """Every KMS operation the client sends, recorded through botocore's event hooks."""
    seen: list[str] = []

    def hook(model: Any, **_: Any) -> None:
        seen.append(model.name)

    client.meta.events.register("before-call.kms", hook)
    return seen


def _capture_params(client: Any) -> list[dict[str, Any]]:
    """The API parameters of every KMS call, as the client serializes them."""
    seen: list[dict[str, Any]] = []

    def hook(params: dict[str, Any], model: Any, **_: Any) -> None:
        seen.append({"operation": model.name, **params})

    client.meta.events.register("before-parameter-build.kms", hook)
    return seen


def test_conformance(wrapper: AwsKmsWrapper, ring: list[bytes]) -> None:
    codec = EnvelopeCodec(wrapper, ring)
    foreign = EnvelopeCodec(wrapper, [new_wrapped_key(wrapper)])
    assert_conformant(codec, foreign=foreign, max_examples=25)


def test_one_decrypt_per_data_key_then_zero_kms_calls(
    wrapper: AwsKmsWrapper, ring: list[bytes], client: Any, kms_proxy: KmsProxy
) -> None:
    calls = _count_calls(client)
    kms_proxy.reset()
    codec = EnvelopeCodec(wrapper, ring)
    assert calls == ["Decrypt", "Decrypt"]
    assert dict(kms_proxy.calls) == {"Decrypt": 2}
    tokens = [codec.seal(b"state %d" % i) for i in range(200)]
    assert [codec.unseal(t) for t in tokens] == [b"state %d" % i for i in range(200)]
    assert calls == ["Decrypt", "Decrypt"]
    assert dict(kms_proxy.calls) == {"Decrypt": 2}


def test_context_is_always_sent_and_decrypt_pins_the_key(
    wrapper: AwsKmsWrapper, client: Any, key: tuple[str, str]
) -> None:
    params = _capture_params(client)
    blob = new_wrapped_key(wrapper, default_context("billing"))
    EnvelopeCodec(wrapper, [blob], context=default_context("billing"))
    generate, decrypt = params
    assert generate["operation"] == "GenerateDataKeyWithoutPlaintext"
    assert generate["EncryptionContext"] == {"purpose": "statecodec-envelope", "audience": "billing"}
    assert generate["KeySpec"] == "AES_256"
    assert decrypt["operation"] == "Decrypt"
    assert decrypt["EncryptionContext"] == {"purpose": "statecodec-envelope", "audience": "billing"}
    assert decrypt["KeyId"] == key[0]


def test_keeps_working_with_kms_stopped(moto_server_fn: MotoServer, policy: RetryPolicy, sleeps: Sleeps) -> None:
    arn, _ = moto_server_fn.create_key()
    client = moto_server_fn.client()
    try:
        wrapper = AwsKmsWrapper(arn, client=client, retry=policy)
        ring = [new_wrapped_key(wrapper)]
        codec = EnvelopeCodec(wrapper, ring)
        token = codec.seal(b"before the outage")
        moto_server_fn.stop()
        assert codec.unseal(token) == b"before the outage"
        assert codec.unseal(codec.seal(b"during the outage")) == b"during the outage"
        # A new instance cannot start without KMS: a named, bounded failure.
        with pytest.raises(ProviderError) as exc:
            EnvelopeCodec(wrapper, ring)
        assert "unreachable" in str(exc.value)
        assert arn in str(exc.value)
        assert len(sleeps.delays) == ATTEMPTS - 1
        assert all(0 <= d <= 0.2 for d in sleeps.delays)
    finally:
        client.close()


def test_mcp_flows(wrapper: AwsKmsWrapper, ring: list[bytes]) -> None:
    report = run_mcp_flows(EnvelopeCodec(wrapper, ring))
    assert report.sealed
    assert report.tool


def test_two_servers_on_one_wrapped_ring_accept_each_other_and_another_ring_refuses(
    wrapper: AwsKmsWrapper, ring: list[bytes]
) -> None:
    text = format_wrapped_keys(ring)
    instance_a = EnvelopeCodec(wrapper, text.split(","))
    instance_b = EnvelopeCodec(wrapper, text.split(","))
    accept_token(instance_b, mint_token(instance_a))
    accept_token(instance_a, mint_token(instance_b))
    other = EnvelopeCodec(wrapper, [new_wrapped_key(wrapper)])
    assert assert_mcp_rejects(other, lambda t: t, minted_by=instance_a, reason="unknown_key") == "unknown_key"


# --- faults at start-up -------------------------------------------------------------------------


def _startup_error(wrapper: AwsKmsWrapper, ring: list[bytes], **kw: Any) -> str:
    with pytest.raises(ProviderError) as exc:
        EnvelopeCodec(wrapper, ring, **kw)
    message = str(exc.value)
    assert wrapper.key_id in message
    assert "wrapped_keys[0]" in message
    return message


def test_throttled_is_retried_with_bounded_backoff_then_named(
    wrapper: AwsKmsWrapper, ring: list[bytes], kms_proxy: KmsProxy, sleeps: Sleeps
) -> None:
    kms_proxy.reset()
    kms_proxy.fail_next(ATTEMPTS, "ThrottlingException", message="Rate exceeded")
    assert "throttled" in _startup_error(wrapper, ring)
    assert kms_proxy.calls["Decrypt"] == ATTEMPTS
    assert len(sleeps.delays) == ATTEMPTS - 1
    assert all(0 <= d <= 0.2 for d in sleeps.delays)


def test_transient_throttling_recovers(
    wrapper: AwsKmsWrapper, ring: list[bytes], kms_proxy: KmsProxy, sleeps: Sleeps
) -> None:
    kms_proxy.reset()
    kms_proxy.fail_next(ATTEMPTS - 1, "ThrottlingException")
    codec = EnvelopeCodec(wrapper, ring)
    assert codec.unseal(codec.seal(b"ok")) == b"ok"
    assert kms_proxy.calls["Decrypt"] == ATTEMPTS - 1 + len(ring)


def test_kms_internal_error_is_retried_then_named(
    wrapper: AwsKmsWrapper, ring: list[bytes], kms_proxy: KmsProxy
) -> None:
    kms_proxy.reset()
    kms_proxy.fail_next(ATTEMPTS, "KMSInternalException", status=500)
    assert "unavailable" in _startup_error(wrapper, ring)
    assert kms_proxy.calls["Decrypt"] == ATTEMPTS


def test_access_denied_is_not_retried(
    wrapper: AwsKmsWrapper, ring: list[bytes], kms_proxy: KmsProxy, sleeps: Sleeps
) -> None:
    kms_proxy.reset()
    kms_proxy.fail_next(1, "AccessDeniedException", message="User is not authorized to perform kms:Decrypt")
    message = _startup_error(wrapper, ring)
    assert "access denied" in message
    assert "kms:Decrypt" in message
    assert kms_proxy.calls["Decrypt"] == 1
    assert sleeps.delays == []


def test_unreachable_kms_is_retried_then_named(policy: RetryPolicy, sleeps: Sleeps, ring: list[bytes]) -> None:
    dead = kms_client(f"http://127.0.0.1:{free_port()}")
    try:
        wrapper = AwsKmsWrapper("arn:aws:kms:us-east-1:123456789012:key/0000", client=dead, retry=policy)
        assert "unreachable" in _startup_error(wrapper, ring)
        assert len(sleeps.delays) == ATTEMPTS - 1
    finally:
        dead.close()


def test_wrong_context(wrapper: AwsKmsWrapper, ring: list[bytes], kms_proxy: KmsProxy) -> None:
    kms_proxy.reset()
    message = _startup_error(wrapper, ring, context=default_context("another-service"))
    assert "wrong context" in message
    assert kms_proxy.calls["Decrypt"] == 1  # a definitive refusal is not retried


def test_corrupted_wrapped_key(wrapper: AwsKmsWrapper, ring: list[bytes]) -> None:
    corrupted = bytearray(ring[0])
    corrupted[-5] ^= 0x01
    assert "corrupted wrapped key" in _startup_error(wrapper, [bytes(corrupted)])


def test_wrong_key_is_refused_because_decrypt_pins_the_key_id(
    moto_server: MotoServer, client: Any, ring: list[bytes], policy: RetryPolicy
) -> None:
    other_arn, _ = moto_server.create_key()
    wrapper = AwsKmsWrapper(other_arn, client=client, retry=policy)
    # AWS KMS answers IncorrectKeyException here; moto answers AccessDeniedException.
    # Either way the blob made under another key does not unwrap, and the error names
    # the configured key.
    message = _startup_error(wrapper, ring)
    assert "access denied" in message or "wrong key" in message


def test_incorrect_key_exception_is_named_wrong_key(
    wrapper: AwsKmsWrapper, ring: list[bytes], kms_proxy: KmsProxy
) -> None:
    kms_proxy.reset()
    kms_proxy.fail_next(1, "IncorrectKeyException", message="The key ID in the request does not identify a CMK")
    assert "wrong key" in _startup_error(wrapper, ring)


def test_unknown_key(client: Any, ring: list[bytes], policy: RetryPolicy) -> None:
    missing = "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"
    wrapper = AwsKmsWrapper(missing, client=client, retry=policy)
    message = _startup_error(wrapper, ring)
    assert "not found" in message or "access denied" in message


def test_disabled_key(
    moto_server: MotoServer, key: tuple[str, str], wrapper: AwsKmsWrapper, ring: list[bytes], kms_proxy: KmsProxy
) -> None:
    admin = moto_server.client()
    try:
        admin.disable_key(KeyId=key[1])
        assert admin.describe_key(KeyId=key[1])["KeyMetadata"]["KeyState"] == "Disabled"
    finally:
        admin.close()
    # moto still decrypts under a disabled key (AWS answers DisabledException), so the
    # refusal is shown with AWS's response through the proxy; what moto can show is that
    # the key really is disabled above.
    kms_proxy.reset()
    kms_proxy.fail_next(1, "DisabledException", message=f"{key[0]} is disabled.")
    assert "disabled" in _startup_error(wrapper, ring)
    kms_proxy.fail_next(1, "KMSInvalidStateException", message=f"{key[0]} is pending deletion.")
    assert "pending deletion" in _startup_error(wrapper, ring)


def test_no_secret_in_errors_or_repr(wrapper: AwsKmsWrapper, ring: list[bytes], moto_server: MotoServer) -> None:
    admin = moto_server.client()
    try:
        data_key = admin.decrypt(CiphertextBlob=ring[0], EncryptionContext=default_context())["Plaintext"]
    finally:
        admin.close()
    codec = EnvelopeCodec(wrapper, ring)
    assert data_key.hex() not in repr(codec)
    assert repr(codec).startswith("EnvelopeCodec(provider='aws-kms key arn:aws:kms:")
    with pytest.raises(InvalidToken) as exc:
        codec.unseal(codec.seal(b"x")[:-2])
    assert str(exc.value) == "seal"


# --- configuration, one-liner and CLI -----------------------------------------------------------


@pytest.fixture
def aws_env(
    monkeypatch: pytest.MonkeyPatch, key: tuple[str, str], ring: list[bytes], kms_proxy: KmsProxy
) -> dict[str, str]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    return {
        "STATECODEC_CODEC": "aws-kms",
        "STATECODEC_AWS_KMS_KEY_ID": key[0],
        "STATECODEC_AWS_REGION": REGION,
        "STATECODEC_AWS_KMS_ENDPOINT": kms_proxy.endpoint,
        "STATECODEC_WRAPPED_KEYS": format_wrapped_keys(ring),
    }


def test_codec_from_env_and_file(
    aws_env: dict[str, str], wrapper: AwsKmsWrapper, ring: list[bytes], tmp_path: Path
) -> None:
    reference = EnvelopeCodec(wrapper, ring)
    codec = codec_from_env(aws_env)
    assert isinstance(codec, EnvelopeCodec)
    assert codec.key_ids == reference.key_ids
    assert reference.unseal(codec.seal(b"from env")) == b"from env"
    config = tmp_path / "statecodec.json"
    config.write_text(json.dumps(aws_env))
    from_file = codec_from_file(config)
    assert codec.unseal(from_file.seal(b"from file")) == b"from file"


def test_context_setting_is_bound(aws_env: dict[str, str], wrapper: AwsKmsWrapper) -> None:
    blob = new_wrapped_key(wrapper, {"purpose": "statecodec-envelope", "audience": "billing"})
    env = {**aws_env, "STATECODEC_WRAPPED_KEYS": format_wrapped_keys([blob])}
    with pytest.raises(ProviderError, match="wrong context"):
        codec_from_env(env)
    assert isinstance(codec_from_env({**env, "STATECODEC_KMS_AUDIENCE": "billing"}), EnvelopeCodec)
    assert isinstance(
        codec_from_env({**env, "STATECODEC_KMS_CONTEXT": "audience=billing,purpose=statecodec-envelope"}), EnvelopeCodec
    )


def test_missing_settings_say_what_to_set(aws_env: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="STATECODEC_AWS_KMS_KEY_ID"):
        codec_from_env({k: v for k, v in aws_env.items() if k != "STATECODEC_AWS_KMS_KEY_ID"})
    with pytest.raises(ConfigurationError, match="STATECODEC_WRAPPED_KEYS"):
        codec_from_env({k: v for k, v in aws_env.items() if k != "STATECODEC_WRAPPED_KEYS"})


def test_security_from_env_one_liner(aws_env: dict[str, str]) -> None:
    security = security_from_env(environ=aws_env)
    assert isinstance(security.codec, SDKCodec)
    assert isinstance(security.codec.codec, EnvelopeCodec)
    report = run_mcp_flows(security)
    assert report.tool


def test_cli_new_data_key_and_check(aws_env: dict[str, str], moto_server: MotoServer, key: tuple[str, str]) -> None:
    flags = [
        "--provider",
        "aws",
        "--key-id",
        key[0],
        "--region",
        REGION,
        "--endpoint-url",
        aws_env["STATECODEC_AWS_KMS_ENDPOINT"],
    ]
    code, out, _ = run_cli("kms", "new-data-key", *flags, "--audience", "billing")
    assert code == 0
    wrapped = out.strip()
    blob = b64u_decode(wrapped)
    admin = moto_server.client()
    try:
        context = {"purpose": "statecodec-envelope", "audience": "billing"}
        data_key = admin.decrypt(CiphertextBlob=blob, EncryptionContext=context, KeyId=key[0])["Plaintext"]
    finally:
        admin.close()
    assert len(data_key) == 32
    code, out, _ = run_cli("kms", "check", *flags, "--audience", "billing", "--wrapped-keys", wrapped)
    assert code == 0
    assert "(primary)" in out
    assert "unwrapped 1 data key: ok" in out
    assert data_key.hex() not in out
    code, _, err = run_cli("kms", "check", *flags, "--wrapped-keys", wrapped)
    assert code == 2
    assert "wrong context" in err


def test_cli_check_from_environment(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, wrapper: AwsKmsWrapper, ring: list[bytes]
) -> None:
    for name, value in aws_env.items():
        monkeypatch.setenv(name, value)
    code, out, _ = run_cli("kms", "check")
    assert code == 0
    ids = EnvelopeCodec(wrapper, ring).key_ids
    assert f"key ids: {ids[0]} (primary), {ids[1]}" in out
