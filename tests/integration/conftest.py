"""Fixtures the provider integration modules share (see `tests.integration.kms_support`)."""

from __future__ import annotations

import pytest
from tests.integration.kms_support import ATTEMPTS

from statecodec.providers import RetryPolicy


@pytest.fixture
def sleeps() -> list[float]:
    """The backoff delays a test's retry policy asked for, recorded instead of slept (the suite stays fast)."""
    return []


@pytest.fixture
def policy(sleeps: list[float]) -> RetryPolicy:
    """Short bounded backoff (`ATTEMPTS` attempts) whose delays land in `sleeps`."""
    return RetryPolicy(attempts=ATTEMPTS, base_delay=0.05, max_delay=0.2, sleep=sleeps.append)


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test credentials (and no shared AWS config) for clients the code under test builds itself."""
    from tests.plugins.aws import CREDENTIALS

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", CREDENTIALS["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CREDENTIALS["aws_secret_access_key"])
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
