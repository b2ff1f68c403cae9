"""No data key reaches a log handler through a provider SDK's own logging (AWS KMS and Cloud KMS).

botocore logs request and response bodies at DEBUG (``botocore.endpoint``,
``botocore.parsers``), and the Cloud KMS client logs request and response
payloads when its logger is at DEBUG (``GOOGLE_SDK_PYTHON_LOGGING_SCOPE`` or a
handler on ``google``): the ``Encrypt`` request and the ``Decrypt`` response
carry the data key. These tests capture every record that reaches a handler on
the root logger and on each SDK's top loggers (formatted with its args and every
attribute, so ``extra`` fields count too), run the real start-up path against
the real services, and look for each data key raw, in hex, base64 and base64url.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import secrets
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from tests.plugins.aws import REGION, MotoServer
from tests.plugins.gcp import FakeCloudKms, key_name

from statecodec import EnvelopeCodec
from statecodec.envelope import default_context, new_wrapped_key
from statecodec.providers.aws_kms import AwsKmsWrapper
from statecodec.providers.gcp_kms import GcpKmsWrapper

pytestmark = pytest.mark.integration

_AWS_LOGGERS = ("botocore", "boto3", "urllib3", "s3transfer")
_GCP_LOGGERS = ("google", "grpc")


class _Capture(logging.Handler):
    """Every record it is handed, as text: the formatted line with its args, then every attribute."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s args=%(args)r"))
        self.lines: list[str] = []
        self.names: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.names.append(record.name)
        self.lines.append(f"{self.format(record)} {vars(record)!r}")


@contextlib.contextmanager
def _capture_every_record(tops: tuple[str, ...]) -> Iterator[_Capture]:
    """The root logger at DEBUG with a capturing handler, and the same handler on each of `tops`."""
    capture = _Capture()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.DEBUG)
    loggers = [root, *(logging.getLogger(name) for name in tops)]
    for logger in loggers:
        logger.addHandler(capture)
    try:
        yield capture
    finally:
        for logger in loggers:
            logger.removeHandler(capture)
        root.setLevel(level)


def _encodings(key: bytes) -> dict[str, str]:
    b64 = base64.b64encode(key).decode().rstrip("=")
    b64u = base64.urlsafe_b64encode(key).decode().rstrip("=")
    return {
        "raw": key.decode("latin-1"),
        "raw (escaped)": repr(key)[2:-1],
        "hex": key.hex(),
        "HEX": key.hex().upper(),
        "base64": b64,
        "base64url": b64u,
    }


def _assert_no_key_in(lines: list[str], keys: list[bytes]) -> None:
    for n, key in enumerate(keys):
        for encoding, text in _encodings(key).items():
            leaks = [line.split(" ", 1)[0] for line in lines if text in line]
            assert not leaks, f"data key {n} ({encoding}) in records from {sorted(set(leaks))}"


# --- AWS KMS ----------------------------------------------------------------------------------------


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")


def _aws_unwrap(moto_server: MotoServer, blob: bytes) -> bytes:
    admin = moto_server.client()
    try:
        plaintext: bytes = admin.decrypt(CiphertextBlob=blob, EncryptionContext=default_context())["Plaintext"]
    finally:
        admin.close()
    return plaintext


def test_aws_start_up_logs_no_data_key_at_debug(moto_server: MotoServer, aws_credentials: None) -> None:
    arn, _ = moto_server.create_key()
    supplied = secrets.token_bytes(32)
    with (
        _capture_every_record(_AWS_LOGGERS) as capture,
        AwsKmsWrapper(arn, region=REGION, endpoint_url=moto_server.endpoint) as wrapper,
    ):
        generated = new_wrapped_key(wrapper)  # GenerateDataKeyWithoutPlaintext
        wrapped = wrapper.wrap(supplied, default_context())  # Encrypt: the key is in the request body
        EnvelopeCodec(wrapper, [generated, wrapped])  # Decrypt: the key is in each response body
    # The capture works: botocore's records from building the client reached both handlers.
    assert any(name.startswith("botocore.") for name in capture.names)
    keys = [_aws_unwrap(moto_server, generated), supplied]
    assert _aws_unwrap(moto_server, wrapped) == supplied
    _assert_no_key_in(capture.lines, keys)


def test_aws_withholding_is_limited_to_sdk_loggers_in_the_calling_context(moto_server: MotoServer) -> None:
    arn, _ = moto_server.create_key()
    client = moto_server.client()
    late_names = iter(f"botocore.created-during-call-{n}" for n in range(100))

    def after_decrypt(parsed: dict[str, Any], **_: Any) -> None:
        # Inside the provider call: a logger under botocore that did not exist
        # before, a logger outside the SDK, and a botocore record from another thread.
        logging.getLogger(next(late_names)).debug("parsed %r", parsed)
        logging.getLogger("statecodec-test.app").debug("application record during the call")
        other = threading.Thread(
            target=lambda: logging.getLogger("botocore.other-thread").debug("record from another thread")
        )
        other.start()
        other.join(timeout=30)

    client.meta.events.register("after-call.kms.Decrypt", after_decrypt)
    try:
        wrapper = AwsKmsWrapper(arn, client=client)
        blob = new_wrapped_key(wrapper)
        with _capture_every_record(_AWS_LOGGERS) as capture:
            EnvelopeCodec(wrapper, [blob])
            logging.getLogger("botocore.after-the-call").debug("record after the call")
    finally:
        client.close()
    _assert_no_key_in(capture.lines, [_aws_unwrap(moto_server, blob)])
    assert not [name for name in capture.names if name.startswith("botocore.created-during-call-")]
    assert "statecodec-test.app" in capture.names
    assert "botocore.other-thread" in capture.names
    assert "botocore.after-the-call" in capture.names


def test_aws_withholding_survives_a_record_factory_set_later(moto_server: MotoServer) -> None:
    arn, _ = moto_server.create_key()
    client = moto_server.client()
    saved = logging.getLogRecordFactory()

    def after_decrypt(parsed: dict[str, Any], **_: Any) -> None:
        # A logger no record was ever withheld from, so it has no drop filter yet.
        logging.getLogger(f"botocore.created-after-the-factory-{secrets.token_hex(8)}").debug("%r", parsed)

    client.meta.events.register("after-call.kms.Decrypt", after_decrypt)
    try:
        wrapper = AwsKmsWrapper(arn, client=client)
        blob = new_wrapped_key(wrapper)  # the withholding factory is in place from here on
        logging.setLogRecordFactory(logging.LogRecord)  # an application's own factory, not chaining
        with _capture_every_record(_AWS_LOGGERS) as capture:
            EnvelopeCodec(wrapper, [blob])
    finally:
        logging.setLogRecordFactory(saved)
        client.close()
    _assert_no_key_in(capture.lines, [_aws_unwrap(moto_server, blob)])


def test_records_made_without_a_logger_name_pass_inside_a_call() -> None:
    from statecodec.providers._sdk_logs import sdk_logs_withheld

    with sdk_logs_withheld(_AWS_LOGGERS):
        # As a QueueListener or SocketHandler receiver rebuilds records.
        record = logging.makeLogRecord({"msg": "rebuilt"})
    assert record.getMessage() == "rebuilt"


# --- Google Cloud KMS -------------------------------------------------------------------------------


def _gcp_start_up(gcp_kms: FakeCloudKms, name: str) -> tuple[GcpKmsWrapper, list[bytes]]:
    """Wrapper (and its client) built here, one new wrapped key, the codec's start-up unwrap."""
    wrapper = GcpKmsWrapper(name, emulator_host=gcp_kms.address, timeout=5)
    blobs = [new_wrapped_key(wrapper), wrapper.wrap(secrets.token_bytes(32), default_context())]
    EnvelopeCodec(wrapper, blobs)
    return wrapper, blobs


def test_gcp_start_up_logs_no_data_key_with_a_handler_on_google(gcp_kms: FakeCloudKms) -> None:
    name = gcp_kms.create_key(key_name("statecodec-test", "logs", "handler"))
    with _capture_every_record(_GCP_LOGGERS) as capture:
        wrapper, blobs = _gcp_start_up(gcp_kms, name)
    try:
        # The capture works: the client's own DEBUG record from its construction arrived.
        assert any(n.startswith("google.cloud.kms_v1.") for n in capture.names)
        keys = [wrapper.unwrap(blob, default_context()) for blob in blobs]
    finally:
        wrapper.close()
    _assert_no_key_in(capture.lines, keys)


@pytest.fixture
def google_logging_switch(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``GOOGLE_SDK_PYTHON_LOGGING_SCOPE=google.cloud.kms_v1``, read afresh by the next client built.

    google-api-core reads the variable once per process, at the first client
    construction, and then configures the scope logger (a stderr handler at
    DEBUG, not propagating) and stops ``google`` propagating; the flag is
    cleared here so the next client reads it, and the loggers are put back after.
    """
    from google.api_core import client_logging

    scope = "google.cloud.kms_v1"
    loggers = [logging.getLogger("google"), logging.getLogger(scope)]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    monkeypatch.setenv("GOOGLE_SDK_PYTHON_LOGGING_SCOPE", scope)
    monkeypatch.setattr(client_logging, "_LOGGING_INITIALIZED", False)
    try:
        yield
    finally:
        for lg, handlers, level, propagate in saved:
            for h in list(lg.handlers):
                if h not in handlers:
                    lg.removeHandler(h)
            lg.setLevel(level)
            lg.propagate = propagate


def test_gcp_start_up_logs_no_data_key_under_googles_logging_switch(
    gcp_kms: FakeCloudKms, google_logging_switch: None, capsys: pytest.CaptureFixture[str]
) -> None:
    name = gcp_kms.create_key(key_name("statecodec-test", "logs", "switch"))
    capsys.readouterr()
    with _capture_every_record(_GCP_LOGGERS) as capture:
        wrapper, blobs = _gcp_start_up(gcp_kms, name)
    switch_output = capsys.readouterr().err.splitlines()
    try:
        # The switch is on: its stderr handler printed the client's construction record.
        assert any("Created client" in line for line in switch_output)
        keys = [wrapper.unwrap(blob, default_context()) for blob in blobs]
    finally:
        wrapper.close()
    _assert_no_key_in([*switch_output, *capture.lines], keys)
