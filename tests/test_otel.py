"""An instrumented codec keeps the codec contract, counts every refusal by reason, and times seal and unseal.

The metrics are read back through the OpenTelemetry SDK's in-memory reader: what an exporter would send.
"""

from __future__ import annotations

import logging
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint

from statecodec import AESGCMCodec, BoundCodec, ConfigurationError, InvalidToken, Reason
from statecodec.otel import REFUSALS, SEAL_DURATION, UNSEAL_DURATION, InstrumentedCodec, instrument
from statecodec.testing import assert_conformant
from tests.codecs import BINDING_KEY, CODECS, DETERMINISTIC, FOREIGN, SECRET
from tests.mcp_flows import assert_mcp_rejects, run_mcp_flows

FAST: dict[str, Any] = {"max_examples": 10, "max_payload": 4096, "max_mutations": 1500, "oversized_length": 1 << 20}


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def metered() -> tuple[InMemoryMetricReader, MeterProvider]:
    reader = InMemoryMetricReader()
    return reader, MeterProvider(metric_readers=[reader])


def points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    """Every data point of the metric `name` that `reader` collects now."""
    data = reader.get_metrics_data()
    if data is None:
        return []
    found: list[Any] = []
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found.extend(metric.data.data_points)
    return found


def refusal_counts(reader: InMemoryMetricReader) -> dict[tuple[str, str], int]:
    counts = {}
    for point in points(reader, REFUSALS):
        assert isinstance(point, NumberDataPoint)
        assert point.attributes is not None
        counts[(str(point.attributes["reason"]), str(point.attributes["codec"]))] = int(point.value)
    return counts


def histogram_counts(reader: InMemoryMetricReader, name: str) -> dict[tuple[tuple[str, Any], ...], int]:
    counts = {}
    for point in points(reader, name):
        assert isinstance(point, HistogramDataPoint)
        assert point.sum >= 0
        assert point.min <= point.max
        counts[tuple(sorted(dict(point.attributes or {}).items()))] = point.count
    return counts


def refuse(codec: Any, token: object, **kwargs: Any) -> InvalidToken:
    with pytest.raises(InvalidToken) as info:
        codec.unseal(token, **kwargs)
    return info.value


def test_refusals_are_counted_by_reason_and_codec() -> None:
    reader, provider = metered()
    clock = Clock()
    bound = BoundCodec(AESGCMCodec([SECRET]), audience="svc", binding_key=BINDING_KEY, clock=clock)
    codec = instrument(bound, provider.get_meter("test"), name="billing")
    token = codec.seal(b"state")
    assert codec.unseal(token) == b"state"
    refuse(codec, token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1])  # tampered tag
    refuse(codec, "not a token")
    refuse(codec, b"bytes")
    refuse(codec, AESGCMCodec.ephemeral().seal(b"x"))  # another ring's key id
    clock.now += 601
    refuse(codec, token)
    assert refusal_counts(reader) == {
        ("seal", "billing"): 1,
        ("malformed", "billing"): 2,
        ("unknown_key", "billing"): 1,
        ("expired", "billing"): 1,
    }


def test_seal_and_unseal_are_timed_with_their_outcome() -> None:
    reader, provider = metered()
    codec = instrument(AESGCMCodec([SECRET]), provider.get_meter("test"))
    tokens = [codec.seal(bytes([n])) for n in range(3)]
    for token in tokens:
        codec.unseal(token)
    refuse(codec, tokens[0] + "!")
    assert histogram_counts(reader, SEAL_DURATION) == {(("codec", "AESGCMCodec"),): 3}
    assert histogram_counts(reader, UNSEAL_DURATION) == {
        (("codec", "AESGCMCodec"), ("outcome", "accepted")): 3,
        (("codec", "AESGCMCodec"), ("outcome", "refused")): 1,
    }
    assert refusal_counts(reader) == {("malformed", "AESGCMCodec"): 1}


def test_keyword_arguments_reach_the_inner_codec_unchanged() -> None:
    reader, provider = metered()
    inner = BoundCodec(AESGCMCodec([SECRET]), audience="svc", binding_key=BINDING_KEY)
    codec = instrument(inner, provider.get_meter("t"))
    context = {"method": "tools/call", "target": "pay", "args": "{}"}
    token = codec.seal(b"state", principal="alice", context=context)
    assert codec.unseal(token, principal="alice", context=context) == b"state"
    assert refuse(codec, token, principal="mallory", context=context).reason is Reason.PRINCIPAL
    assert refuse(codec, token, principal="alice", context={**context, "target": "refund"}).reason is Reason.BINDING
    with pytest.raises(TypeError):  # the caller's bug, not a verdict on the token: not counted
        codec.unseal(token, principal=7)
    assert refusal_counts(reader) == {("principal", "BoundCodec"): 1, ("binding", "BoundCodec"): 1}


def test_refusals_are_logged_with_the_reason_as_a_structured_field(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    _reader, provider = metered()
    codec = instrument(
        BoundCodec(AESGCMCodec([SECRET]), audience="svc", binding_key=BINDING_KEY, clock=clock), provider.get_meter("t")
    )
    token = codec.seal(b"secret-state")
    with caplog.at_level(logging.INFO, logger="statecodec.refusals"):
        refuse(codec, token + "!")
        clock.now += 3600
        refuse(codec, token)
    assert [(r.levelno, r.__dict__["statecodec_reason"], r.__dict__["statecodec_codec"]) for r in caplog.records] == [
        (logging.WARNING, "malformed", "BoundCodec"),
        (logging.INFO, "expired", "BoundCodec"),
    ]
    assert all(token[5:30] not in r.getMessage() for r in caplog.records)


def test_a_refusal_is_raised_afresh_with_no_chain() -> None:
    codec = instrument(AESGCMCodec([SECRET]), metered()[1].get_meter("t"))
    exc = refuse(codec, "\u00e9" * 40)
    assert exc.__cause__ is None
    assert exc.__context__ is None
    assert exc.__suppress_context__ is False
    assert str(exc) == "malformed"


@pytest.mark.parametrize("name", CODECS)
def test_every_instrumented_configuration_is_conformant(name: str) -> None:
    reader, provider = metered()
    codec = instrument(CODECS[name], provider.get_meter("conformance"))
    report = assert_conformant(codec, foreign=FOREIGN[name], deterministic=name in DETERMINISTIC, **FAST)
    # Every refusal the kit provoked was counted once (the kit counts what it expected to be refused).
    assert sum(refusal_counts(reader).values()) == report.checks["error_type"]


def test_without_an_sdk_the_wrapper_is_a_working_no_op() -> None:
    # The global meter provider of the API, which this suite never configures: nothing is recorded anywhere.
    codec = instrument(AESGCMCodec([SECRET]))
    assert codec.unseal(codec.seal(b"state")) == b"state"
    assert refuse(codec, "junk").reason is Reason.MALFORMED


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=64), st.booleans()), max_size=12))
def test_counts_match_what_happened(calls: list[tuple[bytes, bool]]) -> None:
    reader, provider = metered()
    codec = instrument(AESGCMCodec([SECRET]), provider.get_meter("t"), name="c")
    for payload, tamper in calls:
        token = codec.seal(payload)
        if tamper:
            refuse(codec, token[:10] + ("A" if token[10] != "A" else "B") + token[11:])
        else:
            assert codec.unseal(token) == payload
    refused = sum(tamper for _, tamper in calls)
    assert sum(refusal_counts(reader).values()) == refused
    unseals = histogram_counts(reader, UNSEAL_DURATION)
    assert unseals.get((("codec", "c"), ("outcome", "refused")), 0) == refused
    assert unseals.get((("codec", "c"), ("outcome", "accepted")), 0) == len(calls) - refused


def test_construction_checks_and_secrecy() -> None:
    with pytest.raises(ConfigurationError, match="seal"):
        InstrumentedCodec(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="name must be"):
        instrument(AESGCMCodec([SECRET]), name="")
    codec = instrument(AESGCMCodec([SECRET]), name="svc")
    assert repr(codec).startswith("InstrumentedCodec(AESGCMCodec(")
    assert "svc" in repr(codec)
    assert codec.key_ids == AESGCMCodec([SECRET]).key_ids
    assert codec.primary_key_id == codec.key_ids[0]
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(codec)


def test_an_instrumented_codec_serves_the_mcp_sdk_and_counts_what_its_boundary_refuses() -> None:
    reader, provider = metered()
    codec = instrument(AESGCMCodec([SECRET]), provider.get_meter("t"), name="mcp")
    run_mcp_flows(codec)
    assert refusal_counts(reader) == {}
    # A character of the nonce changed: always a failed tag, never a layout error.
    nonce_changed = lambda token: token[:20] + ("A" if token[20] != "A" else "B") + token[21:]  # noqa: E731
    assert assert_mcp_rejects(codec, nonce_changed) == "seal"
    assert refusal_counts(reader) == {("seal", "mcp"): 1}
