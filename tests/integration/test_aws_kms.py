"""AWS KMS beyond the provider contract (which also names and retries its errors), against a real moto_server.

moto binds the encryption context and pins ``Decrypt`` to ``KeyId``; the errors moto never produces (throttling,
access denied, internal errors) come from the counting proxy in front of it, in KMS's own error shape.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from tests.plugins.aws import KmsProxy, MotoServer

from statecodec import EnvelopeCodec
from statecodec.envelope import default_context, new_wrapped_key
from statecodec.errors import ConfigurationError
from statecodec.providers import RetryPolicy
from statecodec.providers.aws_kms import AwsKmsWrapper

pytestmark = pytest.mark.integration


def test_context_is_always_sent_and_decrypt_pins_the_key(
    moto_server: MotoServer, kms_proxy: KmsProxy, policy: RetryPolicy
) -> None:
    arn, sent = moto_server.create_key()[0], list[dict[str, Any]]()
    with contextlib.closing(kms_proxy.client()) as client:
        client.meta.events.register("before-parameter-build.kms", lambda params, model, **_: sent.append(params))
        wrapper, context = AwsKmsWrapper(arn, client=client, retry=policy), default_context("billing")
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
