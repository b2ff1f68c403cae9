"""Frozen test vectors for the key-ring token formats: load, verify, generate.

Threat: a format that drifts silently (a changed HKDF label, a reordered
field, another encoding) strands every token in flight and breaks every other
implementation of the format. A vectors file pins ``(keys, nonce, payload) ->
token`` byte for byte, and pins the reason code each tampered token is refused
with; `verify_vectors` unseals every valid vector, re-derives its token
exactly, and checks every invalid vector against the real codec.

File schema (JSON, UTF-8; specified in ``docs/formats.md``)::

    {
      "schema": "statecodec-vectors/1",
      "codec": "aesgcm",                 # or "xaesgcm"
      "format_version": 1,               # the token's first byte
      "description": "...",
      "valid": [
        {"name": "...", "keys": ["<base64url secret>", ...], "sealed_with": 0,
         "key_id": "<hex>", "aead_key": "<hex>", "nonce": "<hex>",
         "payload": "<hex>", "token": "<token>"}
      ],
      "invalid": [
        {"name": "...", "keys": ["<base64url secret>", ...], "token": "<text>",
         "reason": "seal", "max_token_length": 131072}   # max_token_length optional
      ]
    }

``keys`` is the ring in order (the ``STATECODEC_KEYS`` items), ``sealed_with``
the index of the key that sealed the token. Generation never touches the
public ``seal``: it runs the same layout under a caller-given nonce, and the
test suite proves that layout equal to ``seal``'s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, cast

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode, b64u_encode
from statecodec.aead import AESGCMCodec, XAESGCMCodec
from statecodec.errors import ConfigurationError, InvalidToken, Reason
from statecodec.keys import KEY_ID_LENGTH, derive_key

__all__ = [
    "CODECS",
    "SCHEMA",
    "InvalidVector",
    "ValidVector",
    "VectorFile",
    "VectorReport",
    "dump_vectors",
    "generate_vectors",
    "load_vectors",
    "parse_vectors",
    "seal_vector",
    "verify_vectors",
]

SCHEMA = "statecodec-vectors/1"

RingCodec = AESGCMCodec | XAESGCMCodec
CODECS: Mapping[str, type[AESGCMCodec] | type[XAESGCMCodec]] = {
    "aesgcm": AESGCMCodec,
    "xaesgcm": XAESGCMCodec,
}
"""Codec name in a vectors file -> the class that implements the format."""

_TAG_LENGTH = 16
_HEADER_LENGTH = 1 + KEY_ID_LENGTH
_TOP_MEMBERS = {"schema", "codec", "format_version", "description", "valid", "invalid"}
_VALID_MEMBERS = {"name", "keys", "sealed_with", "key_id", "aead_key", "nonce", "payload", "token"}
_INVALID_REQUIRED = {"name", "keys", "token", "reason"}
_INVALID_MEMBERS = _INVALID_REQUIRED | {"max_token_length"}


class _Encryptor(Protocol):
    def encrypt(self, nonce: bytes, data: bytes, aad: bytes) -> bytes: ...


@dataclass(frozen=True)
class ValidVector:
    """A token the ring must unseal to `payload`, and re-derive exactly from `nonce`."""

    name: str
    keys: tuple[bytes, ...]
    sealed_with: int
    key_id: bytes
    aead_key: bytes
    nonce: bytes
    payload: bytes
    token: str

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "keys": [b64u_encode(k) for k in self.keys],
            "sealed_with": self.sealed_with,
            "key_id": self.key_id.hex(),
            "aead_key": self.aead_key.hex(),
            "nonce": self.nonce.hex(),
            "payload": self.payload.hex(),
            "token": self.token,
        }


@dataclass(frozen=True)
class InvalidVector:
    """Text the ring must refuse with exactly `reason`."""

    name: str
    keys: tuple[bytes, ...]
    token: str
    reason: Reason
    max_token_length: int | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "keys": [b64u_encode(k) for k in self.keys],
            "token": self.token,
            "reason": self.reason.value,
        }
        if self.max_token_length is not None:
            out["max_token_length"] = self.max_token_length
        return out


@dataclass(frozen=True)
class VectorFile:
    """One vectors file: the codec it is for, its valid and its invalid vectors."""

    codec: str
    valid: tuple[ValidVector, ...]
    invalid: tuple[InvalidVector, ...]
    description: str = ""

    @property
    def format_version(self) -> int:
        return CODECS[self.codec].VERSION

    def to_json(self) -> dict[str, object]:
        return {
            "schema": SCHEMA,
            "codec": self.codec,
            "format_version": self.format_version,
            "description": self.description,
            "valid": [v.to_json() for v in self.valid],
            "invalid": [v.to_json() for v in self.invalid],
        }


@dataclass
class VectorReport:
    """What `verify_vectors` found: one line per failed vector check, nothing secret."""

    codec: str
    checked: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures and self.checked > 0

    def __str__(self) -> str:
        head = f"{self.codec}: {self.checked} vectors, {len(self.failures)} failures"
        return "\n".join([head, *(f"  - {f}" for f in self.failures)])


# -- loading ---------------------------------------------------------------------------------------


def load_vectors(path: str | os.PathLike[str]) -> VectorFile:
    """Read and validate a vectors file; a bad file raises `ConfigurationError` naming the member."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read vectors file {p}: {exc.strerror}") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        raise ConfigurationError(f"vectors file {p} is not UTF-8 JSON: {exc}") from None
    return parse_vectors(data)


def parse_vectors(data: object) -> VectorFile:
    """Validate decoded JSON against the schema in the module docstring."""
    top = _object(data, "vectors file", _TOP_MEMBERS, {"schema", "codec", "valid", "invalid"})
    if top["schema"] != SCHEMA:
        raise ConfigurationError(f"schema must be {SCHEMA!r}")
    codec = top["codec"]
    if not isinstance(codec, str) or codec not in CODECS:
        raise ConfigurationError(f"codec must be one of {sorted(CODECS)}")
    version = top.get("format_version", CODECS[codec].VERSION)
    if version != CODECS[codec].VERSION:
        raise ConfigurationError(f"format_version of {codec} is {CODECS[codec].VERSION}")
    description = top.get("description", "")
    if not isinstance(description, str):
        raise ConfigurationError("description must be a string")
    valid = tuple(_parse_valid(i, v) for i, v in enumerate(_array(top["valid"], "valid")))
    invalid = tuple(_parse_invalid(i, v) for i, v in enumerate(_array(top["invalid"], "invalid")))
    return VectorFile(codec=codec, valid=valid, invalid=invalid, description=description)


def _object(data: object, where: str, allowed: set[str], required: set[str]) -> Mapping[str, object]:
    if not isinstance(data, dict):
        raise ConfigurationError(f"{where} must be a JSON object")
    obj = cast("dict[str, object]", data)
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise ConfigurationError(f"{where}: unknown member(s) {unknown}")
    missing = sorted(required - set(obj))
    if missing:
        raise ConfigurationError(f"{where}: missing member(s) {missing}")
    return obj


def _array(data: object, where: str) -> list[object]:
    if not isinstance(data, list):
        raise ConfigurationError(f"{where} must be a JSON array")
    return cast("list[object]", data)


def _text(obj: Mapping[str, object], key: str, where: str) -> str:
    value = obj[key]
    if not isinstance(value, str):
        raise ConfigurationError(f"{where}.{key} must be a string")
    return value


def _hex(obj: Mapping[str, object], key: str, where: str) -> bytes:
    text = _text(obj, key, where)
    # bytes.fromhex skips whitespace; a frozen vector has exactly one spelling.
    if text != text.strip().lower() or " " in text:
        raise ConfigurationError(f"{where}.{key} must be lowercase hex without spaces")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise ConfigurationError(f"{where}.{key} must be lowercase hex") from None


def _int(obj: Mapping[str, object], key: str, where: str) -> int:
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{where}.{key} must be a non-negative integer")
    return value


def _keys(obj: Mapping[str, object], where: str) -> tuple[bytes, ...]:
    items = _array(obj["keys"], f"{where}.keys")
    out: list[bytes] = []
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise ConfigurationError(f"{where}.keys[{i}] must be a base64url string")
        try:
            out.append(b64u_decode(item))
        except InvalidToken:
            raise ConfigurationError(f"{where}.keys[{i}] is not unpadded base64url") from None
    return tuple(out)


def _parse_valid(index: int, data: object) -> ValidVector:
    where = f"valid[{index}]"
    obj = _object(data, where, _VALID_MEMBERS, _VALID_MEMBERS)
    keys = _keys(obj, where)
    sealed_with = _int(obj, "sealed_with", where)
    if sealed_with >= len(keys):
        raise ConfigurationError(f"{where}.sealed_with is past the end of keys")
    return ValidVector(
        name=_text(obj, "name", where),
        keys=keys,
        sealed_with=sealed_with,
        key_id=_hex(obj, "key_id", where),
        aead_key=_hex(obj, "aead_key", where),
        nonce=_hex(obj, "nonce", where),
        payload=_hex(obj, "payload", where),
        token=_text(obj, "token", where),
    )


def _parse_invalid(index: int, data: object) -> InvalidVector:
    where = f"invalid[{index}]"
    obj = _object(data, where, _INVALID_MEMBERS, _INVALID_REQUIRED)
    reason_text = _text(obj, "reason", where)
    try:
        reason = Reason(reason_text)
    except ValueError:
        raise ConfigurationError(f"{where}.reason must be a statecodec reason code") from None
    return InvalidVector(
        name=_text(obj, "name", where),
        keys=_keys(obj, where),
        token=_text(obj, "token", where),
        reason=reason,
        max_token_length=_int(obj, "max_token_length", where) if "max_token_length" in obj else None,
    )


def dump_vectors(vectors: VectorFile) -> str:
    """The canonical JSON text of `vectors` (stable member order, 2-space indent, final newline)."""
    return json.dumps(vectors.to_json(), indent=2, ensure_ascii=False) + "\n"


# -- verifying -------------------------------------------------------------------------------------


def verify_vectors(vectors: VectorFile) -> VectorReport:
    """Check every vector against this library's codec for `vectors.codec`; never raises for a miss."""
    cls = CODECS[vectors.codec]
    report = VectorReport(codec=vectors.codec)
    for v in vectors.valid:
        report.checked += 1
        report.failures.extend(f"valid {v.name!r}: {problem}" for problem in _check_valid(cls, v))
    for iv in vectors.invalid:
        report.checked += 1
        problem = _check_invalid(cls, iv)
        if problem is not None:
            report.failures.append(f"invalid {iv.name!r}: {problem}")
    return report


def _check_valid(cls: type[AESGCMCodec] | type[XAESGCMCodec], v: ValidVector) -> list[str]:
    try:
        ring = cls(list(v.keys))
        signer = cls([v.keys[v.sealed_with]])
    except ConfigurationError as exc:
        return [f"ring refused: {exc}"]
    problems: list[str] = []
    if ring.key_ids[v.sealed_with] != v.key_id.hex():
        problems.append("key_id differs from the derived key id")
    if derive_key(v.keys[v.sealed_with], cls.KEY_INFO) != v.aead_key:
        problems.append("aead_key differs from the derived AEAD key")
    if len(v.nonce) != cls.NONCE_LENGTH:
        problems.append(f"nonce is not {cls.NONCE_LENGTH} bytes")
        return problems
    try:
        raw = b64u_decode(v.token)
    except InvalidToken:
        return [*problems, "token is not canonical base64url"]
    expected_len = _HEADER_LENGTH + cls.NONCE_LENGTH + len(v.payload) + _TAG_LENGTH
    if len(raw) != expected_len:
        problems.append(f"token decodes to {len(raw)} bytes, layout says {expected_len}")
    elif raw[0] != cls.VERSION or raw[1:_HEADER_LENGTH] != v.key_id:
        problems.append("token header is not version || key_id")
    elif raw[_HEADER_LENGTH : _HEADER_LENGTH + cls.NONCE_LENGTH] != v.nonce:
        problems.append("token does not carry the vector's nonce")
    try:
        if ring.unseal(v.token) != v.payload:
            problems.append("unseal returned another payload")
    except InvalidToken as exc:
        problems.append(f"unseal refused it ({exc.reason.value})")
    if _seal_with_nonce(signer, v.payload, v.nonce) != v.token:
        problems.append("re-sealing payload under nonce gives another token")
    return problems


def _check_invalid(cls: type[AESGCMCodec] | type[XAESGCMCodec], iv: InvalidVector) -> str | None:
    cap = DEFAULT_MAX_TOKEN_LENGTH if iv.max_token_length is None else iv.max_token_length
    try:
        ring = cls(list(iv.keys), max_token_length=cap)
    except ConfigurationError as exc:
        return f"ring refused: {exc}"
    try:
        ring.unseal(iv.token)
    except InvalidToken as exc:
        if exc.reason is not iv.reason:
            return f"refused with {exc.reason.value}, expected {iv.reason.value}"
        return None
    except Exception as exc:  # the contract allows nothing else; report, don't crash the run
        return f"raised {type(exc).__name__}, expected InvalidToken({iv.reason.value})"
    return "was accepted"


def _seal_with_nonce(codec: RingCodec, payload: bytes, nonce: bytes) -> str:
    """`codec.seal(payload)` with `nonce` in place of a random one. For vectors only.

    A nonce must never repeat under a key; this exists so fixed vectors can be
    derived, and is deliberately not part of any codec's public API.
    """
    if len(nonce) != codec.NONCE_LENGTH:
        raise ConfigurationError(f"nonce must be {codec.NONCE_LENGTH} bytes")
    header = codec._primary_header
    aead = cast("_Encryptor", codec._aeads[codec._key_ids[0]])
    return b64u_encode(header + nonce + aead.encrypt(nonce, payload, header))


# -- generating ------------------------------------------------------------------------------------


def seal_vector(
    codec: str,
    name: str,
    keys: Sequence[bytes],
    payload: bytes,
    nonce: bytes,
    *,
    sealed_with: int = 0,
) -> ValidVector:
    """A valid vector: `payload` sealed by `keys[sealed_with]` under the fixed `nonce`."""
    cls = CODECS[codec]
    ring = cls(list(keys))
    signer = cls([keys[sealed_with]])
    token = _seal_with_nonce(signer, payload, nonce)
    return ValidVector(
        name=name,
        keys=tuple(bytes(k) for k in keys),
        sealed_with=sealed_with,
        key_id=bytes.fromhex(ring.key_ids[sealed_with]),
        aead_key=derive_key(bytes(keys[sealed_with]), cls.KEY_INFO),
        nonce=bytes(nonce),
        payload=bytes(payload),
        token=token,
    )


# Fixed, obviously non-secret ring secrets: 32 consecutive byte values each.
_K0 = bytes(range(0x20))
_K1 = bytes(range(0x20, 0x40))
_K2 = bytes(range(0x40, 0x60))
_STATE = (
    b'{"v":1,"iat":1767225600.0,"exp":1767226200.0,"m":"tools/call","t":"book_flight",'
    b'"a":"3q2-7wAAAAAAAAAAAAAAAA","aud":"travel-agent","s":"{\\"step\\":2,\\"answers\\":'
    b'{\\"origin\\":\\"LIS\\",\\"destination\\":\\"GRU\\",\\"date\\":\\"2026-03-14\\"},'
    b'\\"pending\\":[\\"seat\\",\\"meal\\"],\\"quote\\":{\\"fare\\":812.4,\\"currency\\":\\"EUR\\"}}"}'
)
_PAYLOADS: tuple[tuple[str, bytes], ...] = (
    ("empty payload", b""),
    ("ascii payload", b"statecodec"),
    ("one AES block", b"0123456789abcdef"),
    ("one block and one byte", b"0123456789abcdef!"),
    ("non-ASCII bytes", "état ✓ 状態 🔐".encode() + b"\x00\x7f\x80\xfe\xff"),
    ("every byte value", bytes(range(256))),
    ("request-state envelope", _STATE),
)


def _nonce(index: int, length: int) -> bytes:
    return bytes((0xA0 + 7 * index + j) & 0xFF for j in range(length))


def generate_vectors(codec: str) -> VectorFile:
    """The standard vector set of `codec`: deterministic, so regenerating it changes nothing."""
    if codec not in CODECS:
        raise ConfigurationError(f"codec must be one of {sorted(CODECS)}")
    cls = CODECS[codec]
    n = cls.NONCE_LENGTH
    valid = [seal_vector(codec, name, [_K0], p, _nonce(i, n)) for i, (name, p) in enumerate(_PAYLOADS)]
    base = len(valid)
    valid.append(
        seal_vector(codec, "rotation: new primary seals", [_K1, _K0], b"after rotation", _nonce(base, n))
    )
    valid.append(
        seal_vector(
            codec,
            "rotation: previous key still unseals",
            [_K1, _K0],
            b"before rotation",
            _nonce(base + 1, n),
            sealed_with=1,
        )
    )
    other = "xaesgcm" if codec == "aesgcm" else "aesgcm"
    foreign_nonce = _nonce(0, CODECS[other].NONCE_LENGTH)
    foreign = seal_vector(other, "other format", [_K0], b"sealed by the other format", foreign_nonce)
    return VectorFile(
        codec=codec,
        valid=tuple(valid),
        invalid=tuple(_invalid_vectors(cls, valid, foreign.token)),
        description=(
            f"Frozen {'AES-256-GCM' if codec == 'aesgcm' else 'XAES-256-GCM'} key-ring tokens "
            f"(format 0x{cls.VERSION:02x}). Secrets are test values: never use them."
        ),
    )


def _invalid_vectors(
    cls: type[AESGCMCodec] | type[XAESGCMCodec], valid: Sequence[ValidVector], foreign: str
) -> list[InvalidVector]:
    by_name = {v.name: v for v in valid}
    short = by_name["ascii payload"]
    mid = by_name["one block and one byte"]  # token length 2 or 3 mod 4: has trailing bits
    big = by_name["request-state envelope"]
    keys = short.keys
    raw = b64u_decode(short.token)
    n = cls.NONCE_LENGTH

    def flip(data: bytes, pos: int, mask: int = 0x01) -> str:
        return b64u_encode(data[:pos] + bytes([data[pos] ^ mask]) + data[pos + 1 :])

    def bad(
        name: str, token: str, reason: Reason, ring: Sequence[bytes] = keys, cap: int | None = None
    ) -> InvalidVector:
        return InvalidVector(name, tuple(ring), token, reason, cap)

    seal, malformed, fmt = Reason.SEAL, Reason.MALFORMED, Reason.FORMAT
    swap_ring = (_K0, _K1)
    kid1 = bytes.fromhex(cls(list(swap_ring)).key_ids[1])
    mid_tok = mid.token
    last = mid_tok[-1]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    trailing = alphabet[alphabet.index(last) + 1]  # sets a low bit the decoder must refuse
    return [
        bad("tag bit flipped", flip(raw, len(raw) - 1), seal),
        bad("ciphertext bit flipped", flip(raw, _HEADER_LENGTH + n, 0x80), seal),
        bad("nonce bit flipped", flip(raw, _HEADER_LENGTH), seal),
        bad("last byte removed", b64u_encode(raw[:-1]), seal),
        bad("zero byte appended", b64u_encode(raw + b"\x00"), seal),
        bad("header moved to another ring slot", b64u_encode(raw[:1] + kid1 + raw[_HEADER_LENGTH:]), seal, swap_ring),
        bad("token sealed under a key not in the ring", short.token, Reason.UNKNOWN_KEY, (_K1, _K2)),
        bad("version byte 0x00", b64u_encode(b"\x00" + raw[1:]), fmt),
        bad("version byte 0xff", b64u_encode(b"\xff" + raw[1:]), fmt),
        bad("token of the other format under the same secret", foreign, fmt),
        bad("empty string", "", malformed),
        bad("shorter than the smallest token", b64u_encode(raw[: _HEADER_LENGTH + n + _TAG_LENGTH - 1]), malformed),
        bad("padding appended", mid_tok + "=" * (-len(mid_tok) % 4), malformed),
        bad("non-zero trailing bits", mid_tok[:-1] + trailing, malformed),
        bad("standard alphabet '+'", "+" + short.token[1:], malformed),
        bad("standard alphabet '/'", short.token[:10] + "/" + short.token[11:], malformed),
        bad("trailing newline", short.token + "\n", malformed),
        bad("inner space", short.token[:8] + " " + short.token[8:], malformed),
        bad("non-ASCII character", short.token[:-1] + "\u00e9", malformed),
        bad("length 1 mod 4", big.token + "A" * ((1 - len(big.token)) % 4), malformed),
        bad("one character over max_token_length", big.token, Reason.OVERSIZED, cap=len(big.token) - 1),
    ]
