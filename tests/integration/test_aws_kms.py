"""AWS KMS beyond the provider contract (which also names and retries its errors), against a real moto_server.

moto binds the encryption context and pins ``Decrypt`` to ``KeyId``; the errors moto never produces (throttling,
access denied, internal errors) come from the counting proxy in front of it, in KMS's own error shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.plugins.aws import KmsProxy, MotoServer

from statecodec import EnvelopeCodec
from statecodec.envelope import default_context, new_wrapped_key
from statecodec.errors import ConfigurationError
from statecodec.providers import RetryPolicy
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


def test_context_is_always_sent_and_decrypt_pins_the_key(wrapper: AwsKmsWrapper, client: Any, arn: str) -> None:
    sent: list[dict[str, Any]] = []
    client.meta.events.register("before-parameter-build.kms", lambda params, model, **_: sent.append(params))
    context = default_context("billing")
    EnvelopeCodec(wrapper, [new_wrapped_key(wrapper, context)], context=context)
    generate, decrypt = sent
    assert generate == {"KeyId": arn, "KeySpec": "AES_256", "EncryptionContext": context}
    assert decrypt["EncryptionContext"] == context
    assert decrypt["KeyId"] == arn


def test_no_region_names_the_settings(monkeypatch: pytest.MonkeyPatch, aws_credentials: None) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigurationError, match="set AWS_REGION \\(or STATECODEC_AWS_REGION"):
        AwsKmsWrapper("1234abcd-12ab-34cd-56ef-1234567890ab")
