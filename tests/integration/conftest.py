"""Fixtures the KMS integration modules share (see `tests.integration.kms_support`)."""

from __future__ import annotations

import pytest
from tests.integration.kms_support import Sleeps, retry_policy

from statecodec.providers._retry import RetryPolicy


@pytest.fixture
def sleeps() -> Sleeps:
    """The backoff delays a test's retry policy asked for, recorded instead of slept."""
    return Sleeps()


@pytest.fixture
def policy(sleeps: Sleeps) -> RetryPolicy:
    """A short bounded retry policy (`kms_support.ATTEMPTS` attempts) sleeping into `sleeps`."""
    return retry_policy(sleeps)
