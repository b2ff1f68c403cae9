"""AWS KMS beyond the provider contract, against a real moto_server over HTTP.

moto binds the encryption context and pins ``Decrypt`` to ``KeyId``. Responses moto never
produces (throttling, access denied, internal errors) come from the counting proxy in front of
it, in KMS's own error shape, so the real boto3 client parses them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.kms_support import ATTEMPTS
from tests.plugins.aws import KmsProxy, MotoServer

from statecodec import EnvelopeCodec, ProviderError
from statecodec.envelope import default_context, new_wrapped_key
from statecodec.errors import ConfigurationError
from statecodec.providers._retry import RetryPolicy
from statecodec.providers.aws_kms import AwsKmsWrapper

pytestmark = pytest.mark.integration


@pytest.fixture
def arn(moto_server: MotoServer) -> str:
    return moto_server.create_key()[0]


@pytest.fixture
def client(kms_proxy: KmsProxy) -> Iterator[Any]:
    client = kms_proxy.client()
    yield client
    client.close()


@pytest.fixture
def wrapper(arn: str, client: Any, policy: RetryPolicy) -> AwsKmsWrapper:
    return AwsKmsWrapper(arn, client=client, retry=policy)


@pytest.fixture
def ring(wrapper: AwsKmsWrapper, kms_proxy: KmsProxy) -> list[bytes]:
    blobs = [new_wrapped_key(wrapper) for _ in range(2)]
    kms_proxy.reset()
    return blobs


def test_context_is_always_sent_and_decrypt_pins_the_key(wrapper: AwsKmsWrapper, client: Any, arn: str) -> None:
    sent: list[dict[str, Any]] = []
    client.meta.events.register("before-parameter-build.kms", lambda params, model, **_: sent.append(params))
    context = default_context("billing")
    EnvelopeCodec(wrapper, [new_wrapped_key(wrapper, context)], context=context)
    generate, decrypt = sent
    assert generate == {"KeyId": arn, "KeySpec": "AES_256", "EncryptionContext": context}
    assert decrypt["EncryptionContext"] == context
    assert decrypt["KeyId"] == arn


@pytest.mark.parametrize(
    ("code", "status", "message", "cause", "calls"),
    [
        ("ThrottlingException", 400, "Rate exceeded", "throttled", ATTEMPTS),
        ("KMSInternalException", 500, "injected", "unavailable", ATTEMPTS),
        ("AccessDeniedException", 400, "not authorized to perform kms:Decrypt", "access denied", 1),
        ("IncorrectKeyException", 400, "another CMK", "wrong key", 1),
        ("DisabledException", 400, "the key is disabled.", "disabled", 1),
        ("KMSInvalidStateException", 400, "pending deletion.", "not usable in its current state", 1),
    ],
)
def test_kms_errors_are_named_and_retried_only_when_waiting_can_help(
    wrapper: AwsKmsWrapper,
    ring: list[bytes],
    kms_proxy: KmsProxy,
    sleeps: list[float],
    code: str,
    status: int,
    message: str,
    cause: str,
    calls: int,
) -> None:
    kms_proxy.fail_next(calls, code, status=status, message=message)
    with pytest.raises(ProviderError) as info:
        EnvelopeCodec(wrapper, ring)
    assert cause in str(info.value)
    if calls == 1:  # a definitive refusal passes on what KMS said
        assert message in str(info.value)
    assert kms_proxy.calls["Decrypt"] == calls
    assert len(sleeps) == calls - 1


def test_unknown_key(client: Any, ring: list[bytes]) -> None:
    missing = "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"
    with pytest.raises(ProviderError, match=r"not found|access denied"):
        EnvelopeCodec(AwsKmsWrapper(missing, client=client), ring)


def test_no_region_names_the_settings(monkeypatch: pytest.MonkeyPatch, aws_credentials: None) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigurationError, match="set AWS_REGION \\(or STATECODEC_AWS_REGION"):
        AwsKmsWrapper("1234abcd-12ab-34cd-56ef-1234567890ab")
