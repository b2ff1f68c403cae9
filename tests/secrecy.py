"""Test helpers for secret handling: exception chains that must not reach a secret."""

from __future__ import annotations

from collections.abc import Iterator

from statecodec._encoding import b64u_encode


def chain_texts(exc: BaseException) -> Iterator[str]:
    """The repr of every exception in the chain of `exc` and of every attribute each one holds.

    Follows `__cause__` and `__context__` both (``raise ... from None`` only hides
    the context from tracebacks), and reads every non-callable attribute, which
    covers what parsers keep of their input: `UnicodeDecodeError.object`,
    `json.JSONDecodeError.doc`.
    """
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending:
        cur = pending.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        yield str(cur)
        yield repr(cur)
        for name in dir(cur):
            if name.startswith("__"):
                continue
            value = getattr(cur, name, None)
            if not callable(value):
                yield repr(value)
        pending.extend(e for e in (cur.__cause__, cur.__context__) if e is not None)


def assert_unreachable(exc: BaseException, *secrets: bytes) -> None:
    """No exception reachable from `exc` shows any of `secrets`, raw or in the key text format."""
    for text in chain_texts(exc):
        for secret in secrets:
            for spelling in (b64u_encode(secret), secret.hex(), repr(secret)[2:-1]):
                assert spelling not in text, f"{type(exc).__name__} chain reaches a secret"

