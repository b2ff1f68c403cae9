"""Strict reading and exact writing of a compact JOSE protected header.

Threat: the header is attacker-chosen JSON, and general JOSE libraries let it steer verification (``alg``,
``p2c``, ``zip``, ``jwk``, ``jku``). Here it is only compared with the configuration, and read with a cap
before decoding, as canonical base64url of strict UTF-8 JSON: one object, no duplicate member, no ``NaN``.
"""

from __future__ import annotations

import json
from typing import Any

from statecodec._encoding import b64u_decode
from statecodec.errors import InvalidToken, Reason

MAX_HEADER_LENGTH = 1024  # base64url characters; our largest header (with a P-256 epk) is about 300
MAX_KID_LENGTH = 128  # configured keys are held to it too, so every token they seal opens


class _DuplicateMember(ValueError):
    pass


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # JSON parsers disagree on which duplicate wins; two readers must never see two headers, so: refused.
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _DuplicateMember
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(name)


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_object, parse_constant=_no_constant)


def parse_header(segment: str) -> dict[str, Any]:
    """The header object of a token's first segment; else ``oversized``, ``header`` (a duplicate) or ``malformed``."""
    if len(segment) > MAX_HEADER_LENGTH:
        raise InvalidToken(Reason.OVERSIZED)
    raw = b64u_decode(segment)
    # Refusals are raised after the handlers: a UnicodeDecodeError holds the decoded header and a JSONDecodeError
    # its text (`.doc`), and `raise ... from None` inside a handler would keep either reachable as __context__.
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


def kid_of(header: dict[str, Any]) -> str:
    """The ``kid`` member, which every token here carries; a non-string or missing one is ``header``."""
    kid = header.get("kid")
    # Checked before any dict lookup: a list or object kid is unhashable.
    if type(kid) is not str or not 0 < len(kid) <= MAX_KID_LENGTH:
        raise InvalidToken(Reason.HEADER)
    return kid


def compact_json(value: dict[str, Any]) -> bytes:
    """JSON with no whitespace, members in the given order, ASCII: the exact bytes a header carries."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True).encode("ascii")
