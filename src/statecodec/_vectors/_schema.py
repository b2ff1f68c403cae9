"""Strict readers shared by every vectors file, and the report a verification returns.

Threat: a vectors file is input, possibly written by another implementation
or edited by hand. A misspelt member that is silently ignored would let a
check pass without running, so every member is typed, every unknown member
is an error, and every error is a `ConfigurationError` naming the member.
Nothing here prints a key.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.errors import ConfigurationError, InvalidToken, Reason

__all__ = [
    "SCHEMA",
    "Kind",
    "VectorReport",
    "array",
    "b64u",
    "b64u_list",
    "boolean",
    "first_difference",
    "flip",
    "hex_list",
    "hex_text",
    "index",
    "jwk",
    "jwk_list",
    "members",
    "nullable",
    "number",
    "opens",
    "read_json",
    "reason",
    "reason_or_null",
    "refusal",
    "refused",
    "string_map",
    "text",
    "unique_names",
]

SCHEMA = "statecodec-vectors/1"

Kind = Callable[[object, str], None]
"""A member check: raises `ConfigurationError` naming `where` when the value is not of its kind."""


@dataclass
class VectorReport:
    """What a verification found: counts and one line per failed check, nothing secret."""

    codec: str
    valid: int = 0
    invalid: int = 0
    reference: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def checked(self) -> int:
        return self.valid + self.invalid + self.reference

    @property
    def ok(self) -> bool:
        return not self.failures and self.checked > 0

    def fail(self, kind: str, name: str, problems: Iterable[str]) -> None:
        self.failures.extend(f"{kind} {name!r}: {p}" for p in problems)

    def __str__(self) -> str:
        head = f"{self.codec}: {self.checked} vectors, {len(self.failures)} failures"
        return "\n".join([head, *(f"  - {f}" for f in self.failures)])


def read_json(path: str | os.PathLike[str]) -> object:
    """The decoded JSON of a vectors file; an unreadable or non-JSON file raises `ConfigurationError`."""
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read vectors file {p}: {exc.strerror}") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        raise ConfigurationError(f"vectors file {p} is not UTF-8 JSON: {exc}") from None


def members(
    data: object, where: str, required: Mapping[str, Kind], optional: Mapping[str, Kind] | None = None
) -> dict[str, Any]:
    """`data` as an object with exactly the `required` members and any of the `optional` ones, each checked."""
    if not isinstance(data, dict):
        raise ConfigurationError(f"{where} must be a JSON object")
    obj = cast("dict[str, Any]", data)
    optional = optional or {}
    unknown = sorted(set(obj) - set(required) - set(optional))
    if unknown:
        raise ConfigurationError(f"{where}: unknown member(s) {unknown}")
    missing = sorted(set(required) - set(obj))
    if missing:
        raise ConfigurationError(f"{where}: missing member(s) {missing}")
    for name, value in obj.items():
        (required.get(name) or optional[name])(value, f"{where}.{name}")
    return obj


def unique_names(items: Iterable[Mapping[str, Any]], where: str) -> None:
    """Failures are reported by name, so two vectors may not share one."""
    seen: set[str] = set()
    for item in items:
        if item["name"] in seen:
            raise ConfigurationError(f"{where}: two vectors are named {item['name']!r}; names must be unique")
        seen.add(item["name"])


def text(value: object, where: str) -> None:
    if not isinstance(value, str):
        raise ConfigurationError(f"{where} must be a string")


def hex_text(value: object, where: str) -> None:
    text(value, where)
    assert isinstance(value, str)
    # bytes.fromhex skips whitespace; a frozen vector has exactly one spelling.
    if value != value.strip().lower() or " " in value:
        raise ConfigurationError(f"{where} must be lowercase hex without spaces")
    try:
        bytes.fromhex(value)
    except ValueError:
        raise ConfigurationError(f"{where} must be lowercase hex") from None


def b64u(value: object, where: str) -> None:
    if not isinstance(value, str):
        raise ConfigurationError(f"{where} must be a base64url string")
    try:
        b64u_decode(value)
    except InvalidToken:
        raise ConfigurationError(f"{where} is not unpadded base64url") from None


def _list_of(kind: Kind, what: str) -> Kind:
    def check(value: object, where: str) -> None:
        if not isinstance(value, list) or not value:
            raise ConfigurationError(f"{where} must be a JSON array of {what}, not empty")
        for i, item in enumerate(cast("list[object]", value)):
            kind(item, f"{where}[{i}]")

    return check


def index(value: object, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{where} must be a non-negative integer")


def number(value: object, where: str) -> None:
    # Stated positively so NaN and the infinities fail it.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigurationError(f"{where} must be a finite number")


def boolean(value: object, where: str) -> None:
    if not isinstance(value, bool):
        raise ConfigurationError(f"{where} must be true or false")


def jwk(value: object, where: str) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ConfigurationError(f"{where} must be a JWK (a JSON object)")


def string_map(value: object, where: str) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigurationError(f"{where} must be a JSON object of strings")


def reason(value: object, where: str) -> None:
    if not isinstance(value, str) or value not in {r.value for r in Reason}:
        raise ConfigurationError(f"{where} must be a statecodec reason code ({', '.join(r.value for r in Reason)})")


def nullable(kind: Kind) -> Kind:
    def check(value: object, where: str) -> None:
        if value is not None:
            kind(value, where)

    return check


def array(value: object, where: str) -> None:
    """An array whose items the format checks with its own member table."""
    if not isinstance(value, list):
        raise ConfigurationError(f"{where} must be a JSON array")


b64u_list = _list_of(b64u, "base64url strings")
hex_list = _list_of(hex_text, "hex strings")
jwk_list = _list_of(jwk, "JWKs")
reason_or_null = nullable(reason)


def opens(unseal: Callable[[], bytes], payload: bytes) -> list[str]:
    """Problems with a valid vector's unseal: refused, another payload, or an exception outside the contract."""
    try:
        got = unseal()
    except InvalidToken as exc:
        return [f"unseal refused it ({exc.reason.value})"]
    except Exception as exc:  # the contract allows nothing else; report, don't crash the run
        return [f"unseal raised {type(exc).__name__}"]
    return [] if got == payload else ["unseal returned another payload"]


def refused(unseal: Callable[[], object], expected: str) -> str | None:
    """The problem with an invalid vector's refusal, if any: accepted, another reason, or another exception."""
    try:
        unseal()
    except InvalidToken as exc:
        return None if exc.reason.value == expected else f"refused with {exc.reason.value}, expected {expected}"
    except Exception as exc:  # the contract allows nothing else; report, don't crash the run
        return f"raised {type(exc).__name__}, expected InvalidToken({expected})"
    return "was accepted"


def refusal(
    build: Callable[[], Any],
    token: str,
    expected: str,
    *,
    what: str = "codec",
    errors: tuple[type[Exception], ...] = (ConfigurationError,),
) -> list[str]:
    """The problems with an invalid vector: its configuration refused (`errors`), or its token not refused as pinned.

    `build` makes the codec the vector names; `what` names it in the message.
    """
    try:
        codec = build()
    except errors as exc:
        return [f"{what} refused: {exc}"]
    problem = refused(lambda: codec.unseal(token), expected)
    return [] if problem is None else [problem]


def first_difference(got: str, expected: str) -> str:
    """Where two tokens part, without printing either (they are in the file already)."""
    for i, (a, b) in enumerate(zip(got, expected, strict=False)):
        if a != b:
            return f"first difference at character {i}"
    return f"lengths {len(got)} and {len(expected)}"


def flip(token: str, index: int = -1, mask: int = 0x01) -> str:
    """`token` (base64url) with one bit of byte `index` flipped, re-encoded canonically."""
    raw = bytearray(b64u_decode(token))
    raw[index] ^= mask
    return b64u_encode(bytes(raw))
