"""EnvelopeCodec over in-memory wrappers: the wrapped-key ring, its text form and contexts, provider failures.

The contract of every provider (one unwrap per key, none per token; wrong context; secrets): tests/integration/
test_provider_contract.py; of every codec: tests/test_redteam.py; the frozen format 0x03: tests/test_vectors.py.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from statecodec import EnvelopeCodec
from statecodec._encoding import b64u_encode
from statecodec.envelope import (
    MAX_WRAPPED_KEY_LENGTH,
    canonical_context,
    default_context,
    format_wrapped_keys,
    new_wrapped_key,
    parse_wrapped_keys,
)
from statecodec.errors import ProviderError
from tests.envelope_wrappers import LocalWrapper, TableWrapper


def _ring(wrapper: LocalWrapper, n: int = 1) -> list[bytes]:
    return [wrapper.new_wrapped_key(default_context()) for _ in range(n)]


def test_text_form_round_trips_and_skips_comment_lines_even_with_commas() -> None:
    wrapper = LocalWrapper()
    blobs = _ring(wrapper, 2)
    text = format_wrapped_keys(blobs)
    assert parse_wrapped_keys(" " + text.replace(",", " ,\n") + "\n") == blobs
    primary, old = text.split(",")
    commented = f"# wrapped data keys, primary first\n{primary}\n  # previous, until expiry\n{old}"
    assert parse_wrapped_keys(commented) == blobs
    codec = EnvelopeCodec(wrapper, text.split(","))
    assert codec.wrapped_keys == tuple(blobs)
    assert format_wrapped_keys(codec.wrapped_keys) == text


def test_canonical_context_is_order_independent_and_injective() -> None:
    assert canonical_context({"a": "1", "b": "2"}) == canonical_context({"b": "2", "a": "1"})
    assert canonical_context({"a": "1,b=2"}) != canonical_context({"a": "1", "b": "2"})


def test_provider_failure_names_ring_slot_key_id_and_cause_without_secrets() -> None:
    wrapper = LocalWrapper()
    blobs = _ring(wrapper, 2)
    wrapper.fail_with = ProviderError("local test key: access denied")
    with pytest.raises(ProviderError) as exc:
        EnvelopeCodec(wrapper, blobs)
    message = str(exc.value)
    assert "wrapped_keys[0]" in message
    assert EnvelopeCodec.__name__ not in message
    assert hashlib.sha256(b"statecodec/v1/envelope/key-id" + blobs[0]).digest()[:4].hex() in message
    assert "access denied" in message
    assert b64u_encode(blobs[0]) not in message
    assert wrapper.unwraps == 1  # stops at the first failure
    wrapper.fail_with = RuntimeError("sdk bug with details")  # an unexpected answer: named by its type alone
    with pytest.raises(ProviderError, match=r"via local test key: RuntimeError$"):
        EnvelopeCodec(wrapper, blobs)
    short = TableWrapper({(b"blob", canonical_context(default_context())): b"short key"})
    with pytest.raises(ProviderError, match="32\\+ bytes"):
        EnvelopeCodec(short, [b"blob"])


def test_repr_shows_provider_and_key_ids_only_and_it_does_not_pickle() -> None:
    data_key = bytes(range(100, 132))
    blob = b"wrapped-blob-bytes"
    codec = EnvelopeCodec(TableWrapper({(blob, canonical_context(default_context())): data_key}), [blob])
    assert repr(codec) == f"EnvelopeCodec(provider='fixed test table', key_ids=['{codec.primary_key_id}'])"
    assert dict(codec.context) == default_context()
    with pytest.raises(TypeError):
        codec.context["purpose"] = "other"  # type: ignore[index]


def test_new_wrapped_key_checks_the_provider_answer() -> None:
    wrapper = LocalWrapper()
    blob = new_wrapped_key(wrapper, {"purpose": "p"})
    assert EnvelopeCodec(wrapper, [blob], context={"purpose": "p"}).seal(b"")

    class Huge(LocalWrapper):
        def new_wrapped_key(self, context: Any) -> bytes:
            return b"x" * (MAX_WRAPPED_KEY_LENGTH + 1)

    with pytest.raises(ProviderError, match="unexpected size"):
        new_wrapped_key(Huge())
