"""Strict reading of a compact JOSE protected header.

Threat: the protected header is attacker-chosen JSON, and general JOSE
libraries let it steer verification: ``alg`` picks the algorithm
(python-jose CVE-2024-33663), ``p2c`` sets a PBES2 work factor
(CVE-2023-6681), ``zip`` asks for decompression (CVE-2024-28102), ``jwk`` or
``jku`` supply the key. Here the header is only ever compared against a
fixed profile: the codec's configuration decides everything, and a header
that says anything else is refused.

Reading is bounded and exact: a length cap before decoding, canonical
base64url, strict UTF-8, JSON without duplicate members at any depth and
without ``NaN``/``Infinity``, and an object at the top.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.errors import InvalidToken, Reason

__all__ = [
    "FORBIDDEN_MEMBERS",
    "MAX_HEADER_LENGTH",
    "MAX_KID_LENGTH",
    "check_members",
    "encode_header",
    "kid_of",
    "parse_header",
]

MAX_HEADER_LENGTH = 1024
"""Cap, in base64url characters, on a protected header; our largest (P-256 ``epk``) is ~300."""

FORBIDDEN_MEMBERS = frozenset(
    {"zip", "crit", "jku", "jwk", "x5u", "x5c", "x5t", "x5t#S256", "p2s", "p2c", "iv", "tag", "b64"}
)
"""Members some JOSE stacks act on; named so the refusal is explicit, though any unknown member is refused."""

MAX_KID_LENGTH = 128
"""Longest ``kid`` a header may carry; configured keys are held to it so every token they seal opens."""


class _DuplicateMember(ValueError):
    pass


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # JSON parsers disagree on which duplicate wins; two readers of one header
    # must never see two different headers, so duplicates are refused outright.
    obj: dict[str, Any] = {}
    for name, value in pairs:
        if name in obj:
            raise _DuplicateMember
        obj[name] = value
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(name)


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_object, parse_constant=_no_constant)


def parse_header(segment: str) -> dict[str, Any]:
    """The header object of a compact token's first segment, or `InvalidToken`.

    Duplicate members raise ``header``; anything that is not one canonical
    base64url JSON object raises ``malformed``; an over-long segment raises
    ``oversized`` before it is decoded.
    """
    if len(segment) > MAX_HEADER_LENGTH:
        raise InvalidToken(Reason.OVERSIZED)
    raw = b64u_decode(segment)
    # Refusals are raised after the handlers: a UnicodeDecodeError holds the decoded
    # header and a JSONDecodeError its text (`.doc`), and `raise ... from None` inside
    # a handler would still keep either reachable as __context__.
    reason: Reason | None = None
    try:
        header = _DECODER.decode(raw.decode("utf-8"))
    except _DuplicateMember:
        reason = Reason.HEADER
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        reason = Reason.MALFORMED
    if reason is not None:
        raise InvalidToken(reason)
    if type(header) is not dict:
        raise InvalidToken(Reason.MALFORMED)
    return header


def check_members(header: dict[str, Any], allowed: frozenset[str]) -> None:
    """Refuse (``header``) any member outside `allowed`: deny by default."""
    for name in header:
        if name not in allowed:
            raise InvalidToken(Reason.HEADER)


def kid_of(header: dict[str, Any]) -> str:
    """The ``kid`` member, which every token here carries; a non-string or missing one is ``header``."""
    kid = header.get("kid")
    # Checked before any dict lookup: a list or object kid is unhashable.
    if type(kid) is not str or not 0 < len(kid) <= MAX_KID_LENGTH:
        raise InvalidToken(Reason.HEADER)
    return kid


def encode_header(members: Iterable[tuple[str, Any]]) -> str:
    """Compact JSON of `members` in the given order, as base64url: the exact bytes a token carries."""
    text = json.dumps(dict(members), separators=(",", ":"), ensure_ascii=True)
    return b64u_encode(text.encode("ascii"))
