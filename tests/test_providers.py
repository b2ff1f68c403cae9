"""Provider plumbing without a service: settings, contexts, retry bounds, import guards, SDK log withholding."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from statecodec.envelope import default_context
from statecodec.errors import ConfigurationError
from statecodec.providers import RetryPolicy, context_from_env, parse_context, sdk_logs_withheld, wrapped_keys_from_env
from tests.integration.kms_support import capture_every_record


def test_context_forms_and_settings() -> None:
    assert parse_context("purpose=statecodec-envelope, audience=billing") == default_context("billing")
    assert parse_context('{"a": "1", "b": "x=y,z"}') == {"a": "1", "b": "x=y,z"}
    for bad in ("novalue", "=x", "a=1,a=2", '{"a": 1}', "[1]", "{not json"):
        with pytest.raises(ConfigurationError):
            parse_context(bad)
    assert context_from_env({}) == {"purpose": "statecodec-envelope"}
    assert context_from_env({"STATECODEC_KMS_AUDIENCE": "billing"}) == default_context("billing")
    assert context_from_env({"STATECODEC_KMS_CONTEXT": "app=x"}) == {"app": "x"}
    with pytest.raises(ConfigurationError, match="STATECODEC_KMS_CONTEXT"):
        context_from_env({"STATECODEC_KMS_CONTEXT": "oops"})


def test_wrapped_keys_from_env(tmp_path: Path) -> None:
    (f := tmp_path / "wrapped.txt").write_text("# ring\nAQID\nBAUG\n")
    for env in ({"STATECODEC_WRAPPED_KEYS": "AQID,BAUG"}, {"STATECODEC_WRAPPED_KEYS_FILE": str(f)}):
        assert wrapped_keys_from_env(env) == [b"\x01\x02\x03", b"\x04\x05\x06"]
    for env, match in [
        ({"STATECODEC_WRAPPED_KEYS": "AQID", "STATECODEC_WRAPPED_KEYS_FILE": str(f)}, "exactly one"),
        ({}, "new-data-key"),
        ({"STATECODEC_WRAPPED_KEYS": "AQID,A==="}, "STATECODEC_WRAPPED_KEYS: wrapped_keys\\[1\\]"),
        ({"STATECODEC_WRAPPED_KEYS_FILE": str(tmp_path / "missing")}, "cannot read"),
    ]:
        with pytest.raises(ConfigurationError, match=match):
            wrapped_keys_from_env(env)


@pytest.mark.parametrize(
    "kwargs", [{"attempts": 0}, {"attempts": 11}, {"base_delay": -1.0}, {"base_delay": 3.0, "max_delay": 2.0}]
)
def test_retry_policy_bounds(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("module", "package", "extra"),
    [("statecodec.providers.aws_kms", "boto3", "aws"), ("statecodec.providers.gcp_kms", "google", "gcp")],
)
def test_missing_sdk_names_the_extra(module: str, package: str, extra: str) -> None:
    code = f"import sys; sys.modules[{package!r}] = None; import statecodec; import {module}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60)
    assert f"pip install 'statecodec[{extra}]'" in out.stderr.splitlines()[-1]


@pytest.fixture
def seen() -> Iterator[list[str]]:
    """Names of the records reaching a handler on the root logger, at DEBUG."""
    with capture_every_record(()) as capture:
        yield capture.names


def test_withholding_is_limited_to_sdk_loggers_in_the_calling_context(seen: list[str]) -> None:
    other = threading.Thread(target=lambda: logging.getLogger("sdk.other-thread").debug("x"))
    with sdk_logs_withheld(("sdk",)):
        logging.getLogger("sdk").debug("x")
        logging.getLogger("sdk.created-during-the-call").debug("x")
        logging.getLogger("sdk-lookalike").debug("x")
        logging.getLogger("app").debug("x")
        other.start()
        other.join()
        # As a QueueListener or SocketHandler receiver rebuilds records: no logger name at the factory.
        assert logging.makeLogRecord({"msg": "rebuilt"}).getMessage() == "rebuilt"
    logging.getLogger("sdk.created-during-the-call").debug("after the call")
    assert seen == ["sdk-lookalike", "app", "sdk.other-thread", "sdk.created-during-the-call"]


def test_withholding_survives_a_record_factory_set_later(seen: list[str]) -> None:
    saved = logging.getLogRecordFactory()
    with sdk_logs_withheld(("sdk",)):
        pass  # the withholding factory is in place from here on
    logging.setLogRecordFactory(logging.LogRecord)  # an application's own factory, not chaining
    try:
        with sdk_logs_withheld(("sdk",)):
            logging.getLogger("sdk.created-after-the-factory").debug("x")
    finally:
        logging.setLogRecordFactory(saved)
    assert seen == []
