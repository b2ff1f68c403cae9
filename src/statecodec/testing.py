"""Conformance kit: prove that a codec refuses every token it did not mint unmodified.

Threat: a codec that accepts one altered, truncated, re-encoded or foreign
token, or that crashes with an unexpected exception type on junk, hands the
client control of server state (or a traceback). This kit attacks any object
with ``seal(bytes) -> str`` and ``unseal(str) -> bytes`` and reports every
failure it finds, not just the first:

=====================  ================================================================
check                  what must hold
=====================  ================================================================
round_trip             ``unseal(seal(p)) == p`` for empty to 64 KiB payloads (hypothesis)
fresh_token            sealing the same payload twice gives two different tokens (skipped for
                       ``deterministic=True``: a sign-only codec such as HS256 or Ed25519 JWS
                       repeats its token for a repeated payload, which reveals nothing the
                       readable payload does not; the SDK's claims differ on every round anyway)
url_safe               tokens use only RFC 3986 unreserved characters
char_change            every single-character substitution is rejected
bit_flip               every single-bit flip of every character is rejected
truncation             every proper prefix and suffix is rejected
extension              appended or prepended characters are rejected
non_canonical          padding, standard-alphabet, whitespace and case variants are rejected
oversized              a huge token is rejected without being copied or decoded
non_str                bytes, bytearray, memoryview, None, numbers, lists are rejected
garbage                arbitrary text (hypothesis) is rejected
foreign                tokens from another key (when ``foreign=`` is given) are rejected
error_type             only ``error_type`` is ever raised (checked in every check above)
no_leak                messages, reprs, causes and log records hold no payload or token text
=====================  ================================================================

The "oversized" check measures memory, not time: the peak Python allocation
while rejecting a multi-megabyte token must stay under a quarter of its size,
which a codec only achieves by checking the length before decoding. Results
are deterministic (hypothesis runs derandomized).

Use from a test::

    from statecodec.testing import assert_conformant
    assert_conformant(MyCodec(...), error_type=InvalidRequestState)

Requires ``hypothesis`` (``pip install statecodec[testing]``).
"""

from __future__ import annotations

import io
import logging
import random
import re
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statecodec._encoding import b64u_encode
from statecodec._types import Codec
from statecodec.errors import ConfigurationError, InvalidToken

if TYPE_CHECKING:
    from hypothesis import settings as HypothesisSettings

__all__ = ["Codec", "ConformanceReport", "Failure", "assert_conformant", "check_codec"]

_UNRESERVED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
_URL_SAFE = re.compile(r"[A-Za-z0-9._~-]*")
_MARKER = b"statecodec-conformance-marker-7f3a"
_HEADER_MARKER = "statecodec-conformance-header-5c1e"
# Hostile first segments for dot-separated tokens: invalid UTF-8 and truncated JSON, each
# carrying the marker, so a parser error that keeps its input (a UnicodeDecodeError's
# bytes, a JSONDecodeError's `.doc`) anywhere in the exception chain is caught.
_HOSTILE_HEADERS = (
    b64u_encode(b'{"alg":"' + _HEADER_MARKER.encode() + b'\xff"}'),
    b64u_encode(b'{"alg":"' + _HEADER_MARKER.encode()),
)


@dataclass(frozen=True)
class Failure:
    """One broken guarantee: which check, and a short description (no secrets)."""

    check: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.detail}"


@dataclass
class ConformanceReport:
    """Everything one `check_codec` run found."""

    codec: str
    failures: list[Failure] = field(default_factory=list)
    checks: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def failed_checks(self) -> set[str]:
        return {f.check for f in self.failures}

    def __str__(self) -> str:
        lines = [f"conformance of {self.codec}: {'PASS' if self.ok else 'FAIL'}"]
        for name, count in self.checks.items():
            bad = sum(1 for f in self.failures if f.check == name)
            lines.append(f"  {'FAIL' if bad else 'ok  '} {name} ({count} cases{f', {bad} failed' if bad else ''})")
        lines.extend(f"  - {f}" for f in self.failures[:200])
        if len(self.failures) > 200:
            lines.append(f"  ... {len(self.failures) - 200} more")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


class _Run:
    """State for one kit run: the codec, the expected error, the failures so far."""

    def __init__(self, codec: Codec, error_type: type[BaseException], report: ConformanceReport) -> None:
        self.codec = codec
        self.error_type = error_type
        self.report = report
        self._per_check_failures: dict[str, int] = {}

    def fail(self, check: str, detail: str) -> None:
        # Cap failures per check so a codec that accepts everything still gives a readable report.
        n = self._per_check_failures.get(check, 0) + 1
        self._per_check_failures[check] = n
        if n <= 10:
            self.report.failures.append(Failure(check, detail))
        elif n == 11:
            self.report.failures.append(Failure(check, "more failures of this check omitted"))

    def count(self, check: str, n: int = 1) -> None:
        self.report.checks[check] = self.report.checks.get(check, 0) + n

    def expect_rejected(self, check: str, candidate: object, what: str) -> None:
        """`candidate` is not a token the codec minted unmodified: unseal must raise error_type."""
        self.count(check)
        try:
            self.codec.unseal(candidate)  # type: ignore[arg-type]
        except self.error_type:
            return
        except Exception as exc:
            self.fail("error_type", f"{check}: {what} raised {type(exc).__name__}, not {self.error_type.__name__}")
            return
        self.fail(check, f"{what} was accepted")


def check_codec(
    codec: Codec,
    *,
    error_type: type[BaseException] | None = None,
    max_examples: int = 50,
    max_payload: int = 64 * 1024,
    max_mutations: int = 20_000,
    oversized_length: int = 4 * 1024 * 1024,
    foreign: Codec | None = None,
    deterministic: bool = False,
) -> ConformanceReport:
    """Run every check against `codec` and return the report (never raises for a failure).

    `error_type` is the exception every rejection must raise:
    `statecodec.InvalidToken` by default; pass the MCP SDK's
    `InvalidRequestState` to check a codec written for the SDK (a statecodec
    codec reaches the SDK through `statecodec.mcp.security`). `max_mutations`
    bounds the single-character and bit-flip checks (positions are sampled
    evenly beyond it, which the report notes); lower it for codecs that make
    a remote call per unseal. `foreign` is a codec of the same kind under
    other keys: its tokens must be refused. `deterministic=True` declares a
    sign-only codec whose token is a function of the payload: the
    `fresh_token` check is then skipped and the report says so.
    """
    if max_examples < 1 or max_payload < 0 or max_mutations < 1:
        raise ConfigurationError("max_examples and max_mutations must be >= 1, max_payload >= 0")
    report = ConformanceReport(codec=type(codec).__qualname__)
    run = _Run(codec, error_type or InvalidToken, report)
    sample = _seal_or_fail(run, b'{"state":"conformance","step":1,"answers":{}}')
    if sample is None:
        return report
    _check_round_trip(run, max_examples, max_payload)
    if deterministic:
        report.notes.append("fresh_token: skipped, the codec is declared deterministic (sign-only)")
    else:
        _check_fresh(run)
    _check_url_safe(run, sample)
    _check_mutations(run, sample, max_mutations)
    _check_truncation_extension(run, sample, max_mutations)
    _check_non_canonical(run, sample)
    _check_oversized(run, sample, oversized_length)
    _check_non_str(run, sample)
    _check_garbage(run, max_examples)
    if foreign is not None:
        _check_foreign(run, foreign)
    _check_no_leak(run)
    report.checks.setdefault("error_type", sum(report.checks.values()))
    return report


def assert_conformant(codec: Codec, **kwargs: Any) -> ConformanceReport:
    """`check_codec`, raising `AssertionError` with the whole report if anything failed."""
    report = check_codec(codec, **kwargs)
    if not report.ok:
        raise AssertionError(str(report))
    return report


def _seal_or_fail(run: _Run, payload: bytes) -> str | None:
    try:
        token = run.codec.seal(payload)
    except Exception as exc:
        run.fail("round_trip", f"seal raised {type(exc).__name__} on a {len(payload)}-byte payload")
        return None
    if not isinstance(token, str):
        run.fail("round_trip", f"seal returned {type(token).__name__}, not str")
        return None
    return token


def _settings(max_examples: int) -> HypothesisSettings:
    _require_hypothesis()
    from hypothesis import HealthCheck, settings

    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


def _require_hypothesis() -> None:
    try:
        import hypothesis  # noqa: F401
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ConfigurationError("statecodec.testing needs hypothesis: pip install 'statecodec[testing]'") from None


def _check_round_trip(run: _Run, max_examples: int, max_payload: int) -> None:
    _require_hypothesis()
    from hypothesis import given
    from hypothesis import strategies as st

    rng = random.Random(0x5EA1)
    fixed = [b"", b"\x00", _MARKER, rng.randbytes(300), rng.randbytes(4096), rng.randbytes(max_payload)]
    for payload in fixed:
        if len(payload) <= max_payload:
            _round_trip_one(run, payload)
    # Sizes spread over the whole range, not only hypothesis's small-by-default binaries.
    sizes = st.one_of(st.integers(0, 64), st.integers(0, max_payload))
    payloads = sizes.flatmap(lambda n: st.binary(min_size=n, max_size=n))

    @_settings(max_examples)
    @given(payloads)
    def prop(payload: bytes) -> None:
        _round_trip_one(run, payload)

    prop()


def _round_trip_one(run: _Run, payload: bytes) -> None:
    run.count("round_trip")
    token = _seal_or_fail(run, payload)
    if token is None:
        return
    try:
        back = run.codec.unseal(token)
    except Exception as exc:
        run.fail("round_trip", f"unseal of a fresh token raised {type(exc).__name__} ({len(payload)}-byte payload)")
        return
    if back != payload:
        run.fail("round_trip", f"unseal(seal(p)) != p for a {len(payload)}-byte payload")


def _check_fresh(run: _Run) -> None:
    run.count("fresh_token")
    a, b = _seal_or_fail(run, _MARKER), _seal_or_fail(run, _MARKER)
    if a is not None and a == b:
        run.fail("fresh_token", "two seals of the same payload gave the same token")


def _check_url_safe(run: _Run, sample: str) -> None:
    run.count("url_safe")
    if not _URL_SAFE.fullmatch(sample):
        bad = sorted({c for c in sample if c not in _UNRESERVED})
        run.fail("url_safe", f"token has characters outside the unreserved set: {''.join(bad)[:20]!r}")


def _positions(length: int, per_position: int, budget: int, run: _Run, check: str) -> list[int]:
    every = list(range(length))
    if length * per_position <= budget:
        return every
    keep = max(1, budget // per_position)
    edge = [p for p in every if p < 8 or p >= length - 8]
    step = max(1, length // keep)
    picked = sorted(set(edge) | set(every[::step]))
    run.report.notes.append(f"{check}: sampled {len(picked)} of {length} positions (max_mutations)")
    return picked


def _check_mutations(run: _Run, sample: str, budget: int) -> None:
    alphabet = _UNRESERVED + "=+/ "
    for pos in _positions(len(sample), len(alphabet), budget, run, "char_change"):
        for c in alphabet:
            if c != sample[pos]:
                run.expect_rejected("char_change", sample[:pos] + c + sample[pos + 1 :], f"char {pos} -> {c!r}")
    for pos in _positions(len(sample), 8, budget, run, "bit_flip"):
        for bit in range(8):
            flipped = chr(ord(sample[pos]) ^ (1 << bit))
            run.expect_rejected("bit_flip", sample[:pos] + flipped + sample[pos + 1 :], f"char {pos} bit {bit}")


def _check_truncation_extension(run: _Run, sample: str, budget: int) -> None:
    n = len(sample)
    cuts = range(n) if 2 * n <= budget else sorted({*range(0, n, max(1, 2 * n // budget)), *range(max(0, n - 8), n)})
    for i in cuts:
        run.expect_rejected("truncation", sample[:i], f"prefix of length {i}")
        if i:
            run.expect_rejected("truncation", sample[i:], f"suffix dropping {i} chars")
    for c in _UNRESERVED + "=.":
        run.expect_rejected("extension", sample + c, f"appended {c!r}")
        run.expect_rejected("extension", c + sample, f"prepended {c!r}")
    run.expect_rejected("extension", sample + sample[-4:], "appended a repeat of the last 4 chars")
    run.expect_rejected("extension", sample + sample, "token doubled")


def _non_canonical_forms(sample: str) -> Iterator[tuple[str, str]]:
    yield sample + "=", "one '=' of padding"
    yield sample + "==", "two '=' of padding"
    yield sample + "\n", "trailing newline"
    yield " " + sample, "leading space"
    mid = len(sample) // 2
    yield sample[:mid] + "\n" + sample[mid:], "newline inside"
    yield sample[:mid] + " " + sample[mid:], "space inside"
    if "-" in sample or "_" in sample:
        yield sample.replace("-", "+").replace("_", "/"), "standard base64 alphabet"
    if sample.upper() != sample:
        yield sample.upper(), "upper-cased"
    if sample.lower() != sample:
        yield sample.lower(), "lower-cased"
    # A non-ASCII look-alike (fullwidth form) of the last character.
    last = sample[-1]
    if "!" <= last <= "~":
        yield sample[:-1] + chr(0xFF01 + ord(last) - 0x21), "fullwidth look-alike of the last character"
    yield sample + "\x00", "trailing NUL"


def _check_non_canonical(run: _Run, sample: str) -> None:
    for candidate, what in _non_canonical_forms(sample):
        if candidate != sample:
            run.expect_rejected("non_canonical", candidate, what)


def _check_oversized(run: _Run, sample: str, length: int) -> None:
    # A real token's prefix followed by valid-looking characters, so the codec
    # cannot reject it on its first byte; then the length is all that is wrong.
    pad = "A" * max(0, length - len(sample))
    huge = sample + pad
    run.count("oversized")
    # Leave tracing as found: a caller (or python -X tracemalloc) may be tracing already.
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        try:
            run.codec.unseal(huge)
            accepted = True
        except run.error_type:
            accepted = False
        except Exception as exc:
            run.fail("error_type", f"oversized: raised {type(exc).__name__}, not {run.error_type.__name__}")
            accepted = False
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        if not tracing:
            tracemalloc.stop()
    if accepted:
        run.fail("oversized", f"a {len(huge)}-character token was accepted")
    elif peak > len(huge) // 4:
        run.fail(
            "oversized",
            f"rejecting a {len(huge)}-character token allocated {peak} bytes: "
            "the length is not checked before copying or decoding",
        )


def _check_non_str(run: _Run, sample: str) -> None:
    raw = sample.encode()
    candidates: list[tuple[object, str]] = [
        (raw, "bytes"),
        (bytearray(raw), "bytearray"),
        (memoryview(raw), "memoryview"),
        (None, "None"),
        (0, "int"),
        (1.5, "float"),
        (float("nan"), "NaN"),
        ([sample], "list"),
        ({"token": sample}, "dict"),
        ("", "empty string"),
    ]
    for candidate, what in candidates:
        run.expect_rejected("non_str" if what != "empty string" else "garbage", candidate, what)


def _check_garbage(run: _Run, max_examples: int) -> None:
    _require_hypothesis()
    from hypothesis import given
    from hypothesis import strategies as st

    text = st.one_of(
        st.text(max_size=300),
        st.text(alphabet=_UNRESERVED, max_size=600),
        st.binary(max_size=300).map(lambda b: b.hex()),
    )

    @_settings(max_examples * 2)
    @given(text)
    def prop(candidate: str) -> None:
        run.expect_rejected("garbage", candidate, f"a {len(candidate)}-character string")

    prop()


def _check_foreign(run: _Run, foreign: Codec) -> None:
    try:
        token = foreign.seal(_MARKER)
    except Exception as exc:
        run.fail("foreign", f"the foreign codec could not seal ({type(exc).__name__})")
        return
    run.expect_rejected("foreign", token, "a token sealed under other keys")


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.buffer = io.StringIO()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.buffer.write(record.getMessage() + "\n")
            if record.exc_info and record.exc_info[1] is not None:
                self.buffer.write(repr(record.exc_info[1]) + "\n")
        except Exception:  # noqa: S110 - a record that cannot render cannot leak either
            pass


def _exception_texts(exc: BaseException) -> Iterator[str]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield str(cur)
        yield repr(cur)
        yield from (repr(a) for a in cur.args)
        # Parser errors keep their whole input outside args: JSONDecodeError.doc, UnicodeError.object.
        yield from (repr(getattr(cur, name)) for name in ("doc", "object") if hasattr(cur, name))
        cur = cur.__cause__ or cur.__context__


def _check_no_leak(run: _Run) -> None:
    payload = _MARKER * 4
    token = _seal_or_fail(run, payload)
    if token is None:
        return
    mid = len(token) // 2
    tampered = [
        token[:mid] + ("A" if token[mid] != "A" else "B") + token[mid + 1 :],
        token[:-1] + ("A" if token[-1] != "A" else "B"),
        token[: len(token) // 3],
        token + "x",
    ]
    if "." in token:
        rest = token[token.index(".") :]
        tampered.extend(header + rest for header in _HOSTILE_HEADERS)
    capture = _Capture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    texts: list[str] = []
    try:
        for bad in tampered:
            run.count("no_leak")
            try:
                run.codec.unseal(bad)
            except Exception as exc:
                texts.extend(_exception_texts(exc))
    finally:
        root.removeHandler(capture)
        root.setLevel(old_level)
    texts.append(capture.buffer.getvalue())
    texts.append(repr(run.codec))
    needles = [_MARKER.decode(), _HEADER_MARKER, token[8:40], *(t[8:40] for t in tampered if len(t) >= 40)]
    for text in texts:
        for needle in needles:
            if needle and needle in text:
                what = "payload text" if needle == _MARKER.decode() else "token text"
                run.fail("no_leak", f"an error message, repr or log record contains {what}")
                return
