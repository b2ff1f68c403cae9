"""Test helpers for secret handling: exception chains that must not reach a secret, colliding key ids."""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable, Iterator

import pytest

from statecodec import ConfigurationError
from statecodec.errors import exception_chain
from tests.integration.kms_support import assert_no_secret_in


def chain_texts(exc: BaseException) -> Iterator[str]:
    """str, repr and every non-callable attribute of each exception chained to `exc` (`exception_chain`: through
    `__cause__` and `__context__` both), which covers what parsers keep of their input: `UnicodeDecodeError.object`,
    `json.JSONDecodeError.doc`."""
    for cur in exception_chain(exc):
        yield str(cur)
        yield repr(cur)
        with warnings.catch_warnings():  # reading a deprecated attribute (urllib3's .pool) warns
            warnings.simplefilter("ignore")
            values = [getattr(cur, name, None) for name in dir(cur) if not name.startswith("__")]
        yield from (repr(value) for value in values if not callable(value))


def assert_unreachable(exc: BaseException, *secrets: bytes) -> None:
    """No exception reachable from `exc` shows any of `secrets`, raw or encoded (the key text format included)."""
    assert_no_secret_in(chain_texts(exc), secrets)


def refused(build: Callable[[], object], *secrets: bytes) -> str:
    """The message of the ConfigurationError `build()` raises, its chain reaching none of `secrets`."""
    with pytest.raises(ConfigurationError) as info:
        build()
    assert_unreachable(info.value, *secrets)
    return str(info.value)


# Two different secrets whose 4-byte key ids collide (both 6f667173), for the refusal messages of a
# collision (about one pair among 2^16 keys). Found once by a birthday search over
# SHA-256(b"statecodec key id collision %d" % i) for i = 0, 1, 2, ...: the first key id seen twice is
# that of i = 958 and i = 33890. The search hashes some 34,000 keys, so only its result is kept here.
COLLIDING_SECRETS = tuple(hashlib.sha256(b"statecodec key id collision %d" % i).digest() for i in (958, 33890))
