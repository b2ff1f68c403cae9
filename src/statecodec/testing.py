"""Conformance kit: prove that a codec refuses every token it did not mint unmodified.

Threat: a codec that accepts one altered, truncated, re-encoded or foreign token, or that raises an
unexpected exception type on junk, hands the client control of server state (or a traceback). The kit
attacks any object with ``seal(bytes) -> str`` and ``unseal(str) -> bytes`` and reports every failure:

=============  =========================================================================
round_trip     ``unseal(seal(p)) == p`` for payloads of 0 bytes to 64 KiB (hypothesis)
fresh_token    two seals of one payload give two tokens (skipped for ``deterministic=True``,
               a sign-only codec such as JWS, whose payload is readable anyway)
url_safe       tokens use only RFC 3986 unreserved characters
char_change    every single-character substitution is rejected
bit_flip       every single-bit flip of every character is rejected
truncation     every proper prefix and suffix is rejected
extension      appended or prepended characters are rejected
non_canonical  padding, standard alphabet, whitespace, case and look-alikes are rejected
oversized      a huge token is rejected with no allocation near its size (length first)
non_str        bytes, bytearray, memoryview, None, numbers, containers are rejected
garbage        arbitrary text, lone surrogates included (hypothesis), is rejected
foreign        a token of ``foreign=`` (the same kind of codec, other keys) is rejected
error_type     only ``error_type`` is ever raised, in every check above
no_leak        no message, repr, log record or chained exception (``__cause__`` and
               ``__context__``, with parsers' ``.doc`` and ``.object``) holds token text
=============  =========================================================================

While it runs, log records reaching the root logger go to the kit alone. It needs ``hypothesis``
(``pip install statecodec[testing]``), run derandomized, so results are deterministic::

    from statecodec.testing import assert_conformant
    assert_conformant(MyCodec(...), error_type=InvalidRequestState)
"""

from __future__ import annotations

import logging.handlers
import random
import string
import sys
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from statecodec._encoding import b64u_encode
from statecodec._types import Codec
from statecodec.errors import ConfigurationError, InvalidToken, exception_chain, needs_extra

with needs_extra("hypothesis", "testing", "statecodec.testing"):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

__all__ = ["ConformanceReport", "assert_conformant", "check_codec"]

_UNRESERVED = string.ascii_letters + string.digits + "-._~"
_MARKER = "statecodec-conformance-marker-7f3a"
_GARBAGE = st.one_of(
    st.text(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=300),
    st.text(alphabet=_UNRESERVED + "=+/.\x00", max_size=600),
    st.text(alphabet="\u0663\u06f3\u0969\u0e53\uff10\uff11" + "".join(map(chr, range(0xFF01, 0xFF5F))), max_size=200),
    st.binary(max_size=300).map(lambda b: b.hex()),
)
_MAX_DETAILS = 10  # per check: a codec that accepts everything still gives a readable report


@dataclass
class ConformanceReport:
    """Everything one `check_codec` run found: (check, detail) failures, cases run per check, and notes."""

    codec: str
    failures: list[tuple[str, str]] = field(default_factory=list)
    checks: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def failed_checks(self) -> set[str]:
        return {check for check, _ in self.failures}

    def __str__(self) -> str:
        cases = ", ".join(f"{name} {count}" for name, count in self.checks.items())
        lines = [f"conformance of {self.codec}: {'PASS' if self.ok else 'FAIL'} (cases: {cases})"]
        lines += [f"  - {check}: {detail}" for check, detail in self.failures] + [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def check_codec(
    codec: Codec, *, error_type: type[BaseException] = InvalidToken, max_examples: int = 50,
    max_payload: int = 64 * 1024, max_mutations: int = 20_000, oversized_length: int = 4 * 1024 * 1024,
    foreign: Codec | None = None, deterministic: bool = False,
) -> ConformanceReport:
    """Run every check against `codec` and return the report (never raises for a failure). `error_type` is what
    every rejection must raise (the SDK's `InvalidRequestState` for an SDK codec); `max_mutations` bounds the
    character, bit-flip and truncation checks (beyond it, positions are sampled evenly)."""
    if max_examples < 1 or max_payload < 0 or max_mutations < 1:
        raise ConfigurationError("max_examples and max_mutations must be >= 1, max_payload >= 0")
    kit = _Kit(codec, error_type)
    root, probe = logging.getLogger(), logging.handlers.BufferingHandler(capacity=sys.maxsize)
    level, handlers = root.level, root.handlers
    # The probe alone hears the kit's junk (lone surrogates among it): no other handler ever sees it.
    root.handlers = [probe]
    root.setLevel(logging.DEBUG)
    try:
        sample = kit.seal(b'{"state":"' + _MARKER.encode() + b'","step":1}')
        if sample is None:
            return kit.report
        for payload in (b"", b"\x00", random.Random(0x5EA1).randbytes(max_payload)):
            kit.round_trip(payload[:max_payload])
        sizes = st.one_of(st.integers(0, 64), st.integers(0, max_payload))  # the whole range, not only small
        _for_all(sizes.flatmap(lambda n: st.binary(min_size=n, max_size=n)), max_examples, kit.round_trip)
        if deterministic:
            kit.report.notes.append("fresh_token: skipped, the codec is declared deterministic (sign-only)")
        else:
            kit.report.checks["fresh_token"] += 1
            if kit.seal(_MARKER.encode()) == kit.seal(_MARKER.encode()):
                kit.fail("fresh_token", "two seals of the same payload gave the same token")
        kit.report.checks["url_safe"] += 1
        if bad := "".join(sorted({c for c in sample if c not in _UNRESERVED})):
            kit.fail("url_safe", f"token has characters outside the unreserved set: {bad[:20]!r}")
        for check, candidate, what in _altered(sample, max_mutations):
            if candidate != sample:  # upper-casing, say, may leave a token unchanged
                kit.refuses(check, candidate, what)
        kit.refuses_oversized(sample + "A" * max(0, oversized_length - len(sample)))
        _for_all(_GARBAGE, 2 * max_examples, lambda text: kit.refuses("garbage", text, f"{len(text)} characters"))
        if foreign is not None:
            kit.refuses("foreign", foreign.seal(_MARKER.encode()), "a token sealed under other keys")
    finally:
        root.handlers = handlers
        root.setLevel(level)
    logged = [t for r in probe.buffer for t in (str(r.msg), repr(r.args), *_chain_texts(r.exc_info and r.exc_info[1]))]
    if any(needle in text for text in [repr(codec), *logged] for needle in _needles(sample)):
        kit.fail("no_leak", "a log record or the codec's repr holds payload or token text")
    kit.report.checks["error_type"] = kit.report.checks["no_leak"] = kit.refusals
    return kit.report


def assert_conformant(codec: Codec, **kwargs: Any) -> ConformanceReport:
    """`check_codec`, raising `AssertionError` with the whole report if anything failed."""
    report = check_codec(codec, **kwargs)
    if not report.ok:
        raise AssertionError(str(report))
    return report


class _Kit:
    def __init__(self, codec: Codec, error_type: type[BaseException]) -> None:
        self.codec, self.error_type = codec, error_type
        self.report = ConformanceReport(codec=type(codec).__qualname__)
        self.refusals = 0

    def fail(self, check: str, detail: str) -> None:
        shown = sum(1 for name, _ in self.report.failures if name == check)
        if shown <= _MAX_DETAILS:
            self.report.failures.append((check, detail if shown < _MAX_DETAILS else "more failures omitted"))

    def seal(self, payload: bytes) -> str | None:
        try:
            token: object = self.codec.seal(payload)
        except Exception as exc:
            token = exc
        if isinstance(token, str) and token:
            return token
        self.fail("round_trip", f"seal gave {type(token).__name__}, not a token, for a {len(payload)}-byte payload")
        return None

    def round_trip(self, payload: bytes) -> None:
        self.report.checks["round_trip"] += 1
        if (token := self.seal(payload)) is None:
            return
        try:
            if self.codec.unseal(token) != payload:
                self.fail("round_trip", f"unseal(seal(p)) != p for a {len(payload)}-byte payload")
        except Exception as exc:
            self.fail("round_trip", f"unseal of a fresh token raised {type(exc).__name__} ({len(payload)} bytes)")

    def refuses(self, check: str, candidate: object, what: str) -> bool:
        """`candidate` is no token the codec minted: unseal raises `error_type`, chaining none of its text."""
        self.report.checks[check] += 1
        self.refusals += 1
        try:
            self.codec.unseal(candidate)  # type: ignore[arg-type]
        except Exception as exc:
            if not isinstance(exc, self.error_type):
                self.fail("error_type", f"{check}: {what} raised {type(exc).__name__}, not {self.error_type.__name__}")
            if any(needle in text for text in _chain_texts(exc) for needle in _needles(candidate)):
                self.fail("no_leak", f"{check}: the refusal of {what} holds payload or token text")
            return True
        self.fail(check, f"{what} was accepted")
        return False

    def refuses_oversized(self, huge: str) -> None:
        # A real token's prefix followed by valid-looking characters: only the length is wrong.
        tracing = tracemalloc.is_tracing()  # a caller (or python -X tracemalloc) may be tracing already
        tracemalloc.start()  # does nothing when tracing already
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        try:
            refused = self.refuses("oversized", huge, f"a {len(huge)}-character token")
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            if not tracing:
                tracemalloc.stop()
        if refused and peak > len(huge) // 4:
            self.fail("oversized", f"refusing {len(huge)} characters allocated {peak} bytes: no length check first")


def _positions(length: int, per_position: int, budget: int) -> list[int]:
    """Every position, or, over the budget, both ends and an even spread between them."""
    step = max(1, -(-length * per_position // budget))
    return sorted({*range(min(8, length)), *range(max(0, length - 8), length), *range(0, length, step)})


def _altered(sample: str, budget: int) -> Iterator[tuple[str, object, str]]:
    """(check, candidate, description) for every altered form of `sample`, and every non-token, the kit tries."""
    alphabet = _UNRESERVED + "=+/ "
    for pos in _positions(len(sample), len(alphabet), budget):
        for c in alphabet.replace(sample[pos], ""):
            yield "char_change", sample[:pos] + c + sample[pos + 1 :], f"char {pos} -> {c!r}"
    for pos in _positions(len(sample), 8, budget):
        for bit in range(8):
            flipped = chr(ord(sample[pos]) ^ (1 << bit))
            yield "bit_flip", sample[:pos] + flipped + sample[pos + 1 :], f"char {pos} bit {bit}"
    for i in _positions(len(sample), 2, budget):
        yield "truncation", sample[:i], f"prefix of length {i}"
        if i:
            yield "truncation", sample[i:], f"suffix dropping {i} chars"
    for c in _UNRESERVED + "=. \n\x00":
        yield "extension", sample + c, f"appended {c!r}"
        yield "extension", c + sample, f"prepended {c!r}"
    yield "extension", sample + sample, "token doubled"
    mid = len(sample) // 2
    yield "non_canonical", sample + "==", "'==' padding"
    yield "non_canonical", sample[:mid] + "\n" + sample[mid:], "a newline inside"
    yield "non_canonical", sample[:mid] + " " + sample[mid:], "a space inside"
    yield "non_canonical", sample.replace("-", "+").replace("_", "/"), "the standard base64 alphabet"
    yield "non_canonical", sample.upper(), "upper case"
    yield "non_canonical", sample.lower(), "lower case"
    if "!" <= sample[-1] <= "~":
        yield "non_canonical", sample[:-1] + chr(0xFF01 + ord(sample[-1]) - 0x21), "a fullwidth look-alike"
    raw = sample.encode()
    for junk in (raw, bytearray(raw), memoryview(raw), None, 0, 1.5, float("nan"), [sample], object()):
        yield "non_str", junk, type(junk).__name__
    for text in ("", "\x00" * 64, "\ud800" * 64, "." * 4, _MARKER + "\u00e9", b64u_encode(raw) + "\u00e9"):
        yield "garbage", text, f"fixed junk of {len(text)} characters"  # an encoder's error keeps its input
    if "." in sample:  # first segments whose parse errors keep their input (.object, .doc): bad UTF-8, cut JSON
        for header in (b'{"alg":"' + _MARKER.encode() + b'\xff"}', b'{"alg":"' + _MARKER.encode()):
            yield "garbage", b64u_encode(header) + sample[sample.index(".") :], "a hostile first segment"


def _needles(text: object) -> list[str]:
    """What no refusal may show: the payload marker, and a stretch from the middle of a long token."""
    return [_MARKER, text[8:40]] if isinstance(text, str) and len(text) >= 40 else [_MARKER]


def _for_all(strategy: st.SearchStrategy[Any], n: int, test: Callable[[Any], object]) -> None:
    @settings(max_examples=n, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(value: Any) -> None:
        test(value)

    run()


def _chain_texts(exc: BaseException | None) -> Iterator[str]:
    """What each exception chained to `exc` shows: str, repr, attributes."""
    for cur in exception_chain(exc):
        # Parsers keep their input beyond args: JSONDecodeError.doc (an attribute), UnicodeError.object.
        yield from (str(cur), repr(cur), repr(getattr(cur, "object", None)), *map(repr, vars(cur).values()))
