"""Cloud KMS beyond the provider contract (which also names and retries its errors): the real client against the
loopback Cloud KMS server."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from tests.integration.kms_support import ATTEMPTS, assert_no_secret_in, capture_every_record
from tests.plugins.gcp import CORRUPTIONS, FakeCloudKms

from statecodec import EnvelopeCodec, ProviderError
from statecodec.envelope import canonical_context, default_context, new_wrapped_key
from statecodec.providers import RetryPolicy
from statecodec.providers.gcp_kms import GcpKmsWrapper

pytestmark = pytest.mark.integration


@pytest.fixture
def key(gcp_kms: FakeCloudKms) -> str:
    return gcp_kms.create_key()


@pytest.fixture
def wrapper(key: str, gcp_client: Any, policy: RetryPolicy) -> GcpKmsWrapper:
    return GcpKmsWrapper(key, client=gcp_client, retry=policy, timeout=5)


@pytest.fixture
def ring(wrapper: GcpKmsWrapper, gcp_kms: FakeCloudKms) -> list[bytes]:
    blobs = [new_wrapped_key(wrapper) for _ in range(2)]
    gcp_kms.reset()
    return blobs


def test_key_rotation_in_kms_keeps_old_blobs_unwrapping(
    wrapper: GcpKmsWrapper, ring: list[bytes], gcp_kms: FakeCloudKms, key: str
) -> None:
    assert gcp_kms.rotate(key) == 2
    assert len(EnvelopeCodec(wrapper, [new_wrapped_key(wrapper), *ring]).key_ids) == 3


@pytest.mark.parametrize("mode", [m for m in CORRUPTIONS if m != "encrypt.name"])
def test_every_checksum_is_checked_and_retried_a_bounded_number_of_times(
    mode: str, wrapper: GcpKmsWrapper, ring: list[bytes], gcp_kms: FakeCloudKms
) -> None:
    operation = "Decrypt" if mode in ("decrypt.plaintext_crc32c", "request") else "Encrypt"
    call = partial(EnvelopeCodec, wrapper, ring[:1]) if operation == "Decrypt" else partial(new_wrapped_key, wrapper)
    gcp_kms.corrupt_next(mode, ATTEMPTS)
    with pytest.raises(ProviderError, match="corrupted in transit"):
        call()
    assert gcp_kms.calls[operation] == ATTEMPTS
    gcp_kms.reset()
    gcp_kms.corrupt_next(mode, 1)
    call()  # one corrupted answer is survived by the retry
    assert gcp_kms.calls[operation] == 2


def test_response_from_another_key_is_refused(wrapper: GcpKmsWrapper, gcp_kms: FakeCloudKms) -> None:
    gcp_kms.corrupt_next("encrypt.name")
    with pytest.raises(ProviderError, match="another key"):
        new_wrapped_key(wrapper)


def test_requests_carry_every_checksum_and_the_aad(wrapper: GcpKmsWrapper, gcp_kms: FakeCloudKms) -> None:
    context = default_context("billing")
    EnvelopeCodec(wrapper, [new_wrapped_key(wrapper, context)], context=context)
    encrypt, decrypt = gcp_kms.requests
    assert encrypt.additional_authenticated_data == decrypt.additional_authenticated_data == canonical_context(context)
    for request, data in ((encrypt, "plaintext"), (decrypt, "ciphertext")):
        for name in (data, "additional_authenticated_data"):
            assert f"{name}_crc32c" in request  # present, as Cloud KMS can then verify it


@pytest.fixture
def google_logging_switch(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``GOOGLE_SDK_PYTHON_LOGGING_SCOPE=google.cloud.kms_v1``, which google-api-core reads at its first client
    (then a stderr handler on the scope logger, ``google`` not propagating): cleared so the next client reads it."""
    from google.api_core import client_logging

    loggers = [logging.getLogger("google"), logging.getLogger("google.cloud.kms_v1")]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    monkeypatch.setenv("GOOGLE_SDK_PYTHON_LOGGING_SCOPE", "google.cloud.kms_v1")
    monkeypatch.setattr(client_logging, "_LOGGING_INITIALIZED", False)
    yield
    for lg, handlers, level, propagate in saved:
        for h in lg.handlers[:]:
            if h not in handlers:
                lg.removeHandler(h)
        lg.setLevel(level)
        lg.propagate = propagate


def test_no_data_key_in_logs_under_googles_logging_switch(
    gcp_kms: FakeCloudKms, key: str, google_logging_switch: None, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    with capture_every_record(["google", "grpc"]) as capture:
        wrapper = GcpKmsWrapper(key, emulator_host=gcp_kms.address, timeout=5)
        blobs = [new_wrapped_key(wrapper) for _ in range(2)]
        EnvelopeCodec(wrapper, blobs)
    switch_output = capsys.readouterr().err.splitlines()
    try:
        assert any("Created client" in line for line in switch_output)  # the switch is on
        keys = [wrapper.unwrap(blob, default_context()) for blob in blobs]
    finally:
        wrapper.close()
    assert_no_secret_in([*switch_output, *capture.lines], keys)
