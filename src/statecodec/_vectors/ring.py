"""Vectors of the key-ring token formats (AES-256-GCM 0x01, XAES-256-GCM 0x02).

Threat: a format that drifts silently (a changed HKDF label, a reordered
field, another encoding) strands every token in flight and breaks every other
implementation of the format. A vectors file pins ``(keys, nonce, payload) ->
token`` byte for byte, and pins the reason code each tampered token is refused
with; `verify_vectors` unseals every valid vector, re-derives its token
exactly, and checks every invalid vector against the real codec.

Members (``docs/formats.md``, "Vector files")::

    {"schema": "statecodec-vectors/1", "codec": "aesgcm" | "xaesgcm",
     "format_version": 1 | 2, "description": "...",
     "valid": [{"name", "keys", "sealed_with", "key_id", "aead_key", "nonce", "payload", "token"}],
     "invalid": [{"name", "keys", "token", "reason", "max_token_length"?}]}

``keys`` is the ring in order (the ``STATECODEC_KEYS`` items), ``sealed_with``
the index of the key that sealed the token. Generation never touches the
public ``seal``: it runs the same layout under a caller-given nonce, and the
test suite proves that layout equal to ``seal``'s.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode, b64u_encode
from statecodec._vectors import _schema as s
from statecodec._vectors._schema import SCHEMA, VectorReport
from statecodec.aead import AESGCMCodec, XAESGCMCodec
from statecodec.errors import ConfigurationError, InvalidToken, Reason
from statecodec.keys import KEY_ID_LENGTH, derive_key

__all__ = [
    "CODECS",
    "InvalidVector",
    "ValidVector",
    "VectorFile",
    "generate_vectors",
    "parse_vectors",
    "seal_vector",
    "verify_vectors",
]

RingCodec = AESGCMCodec | XAESGCMCodec
CODECS: Mapping[str, type[AESGCMCodec] | type[XAESGCMCodec]] = {
    "aesgcm": AESGCMCodec,
    "xaesgcm": XAESGCMCodec,
}
"""Codec name in a vectors file -> the class that implements the format."""

_TAG_LENGTH = 16
_HEADER_LENGTH = 1 + KEY_ID_LENGTH
_TOP = {"schema": s.text, "codec": s.text, "valid": s.array, "invalid": s.array}
_TOP_OPTIONAL = {"format_version": s.index, "description": s.text}
_VALID = {
    "name": s.text,
    "keys": s.b64u_list,
    "sealed_with": s.index,
    "key_id": s.hex_text,
    "aead_key": s.hex_text,
    "nonce": s.hex_text,
    "payload": s.hex_text,
    "token": s.text,
}
_INVALID = {"name": s.text, "keys": s.b64u_list, "token": s.text, "reason": s.reason}
_INVALID_OPTIONAL = {"max_token_length": s.index}


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
    """One ring vectors file: the codec it is for, its valid and its invalid vectors."""

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


# -- parsing ---------------------------------------------------------------------------------------


def parse_vectors(data: object) -> VectorFile:
    """Validate decoded JSON against the ring schema; a bad file raises `ConfigurationError` naming the member."""
    top = s.members(data, "vectors file", _TOP, _TOP_OPTIONAL)
    if top["schema"] != SCHEMA:
        raise ConfigurationError(f"schema must be {SCHEMA!r}")
    codec = top["codec"]
    if codec not in CODECS:
        raise ConfigurationError(f"codec must be one of {sorted(CODECS)}")
    if top.get("format_version", CODECS[codec].VERSION) != CODECS[codec].VERSION:
        raise ConfigurationError(f"format_version of {codec} is {CODECS[codec].VERSION}")
    valid = tuple(_parse_valid(i, v) for i, v in enumerate(top["valid"]))
    invalid = tuple(_parse_invalid(i, v) for i, v in enumerate(top["invalid"]))
    s.unique_names([{"name": v.name} for v in valid], "valid")
    s.unique_names([{"name": v.name} for v in invalid], "invalid")
    return VectorFile(codec=codec, valid=valid, invalid=invalid, description=top.get("description", ""))


def _keys(obj: Mapping[str, Any]) -> tuple[bytes, ...]:
    return tuple(b64u_decode(k) for k in obj["keys"])


def _parse_valid(index: int, data: object) -> ValidVector:
    where = f"valid[{index}]"
    obj = s.members(data, where, _VALID)
    keys = _keys(obj)
    if obj["sealed_with"] >= len(keys):
        raise ConfigurationError(f"{where}.sealed_with is past the end of keys")
    return ValidVector(
        name=obj["name"],
        keys=keys,
        sealed_with=obj["sealed_with"],
        key_id=bytes.fromhex(obj["key_id"]),
        aead_key=bytes.fromhex(obj["aead_key"]),
        nonce=bytes.fromhex(obj["nonce"]),
        payload=bytes.fromhex(obj["payload"]),
        token=obj["token"],
    )


def _parse_invalid(index: int, data: object) -> InvalidVector:
    obj = s.members(data, f"invalid[{index}]", _INVALID, _INVALID_OPTIONAL)
    return InvalidVector(
        name=obj["name"],
        keys=_keys(obj),
        token=obj["token"],
        reason=Reason(obj["reason"]),
        max_token_length=obj.get("max_token_length"),
    )


# -- verifying -------------------------------------------------------------------------------------


def verify_vectors(vectors: VectorFile) -> VectorReport:
    """Check every vector against this library's codec for `vectors.codec`; never raises for a miss."""
    cls = CODECS[vectors.codec]
    report = VectorReport(codec=vectors.codec)
    for v in vectors.valid:
        report.valid += 1
        report.fail("valid", v.name, _check_valid(cls, v))
    for iv in vectors.invalid:
        report.invalid += 1
        cap = DEFAULT_MAX_TOKEN_LENGTH if iv.max_token_length is None else iv.max_token_length
        build = functools.partial(cls, list(iv.keys), max_token_length=cap)
        report.fail("invalid", iv.name, s.refusal(build, iv.token, iv.reason.value, what="ring"))
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
    problems += layout_problems(v.token, cls.VERSION, v.key_id, v.nonce, cls.NONCE_LENGTH, v.payload)
    if len(v.nonce) != cls.NONCE_LENGTH:
        return problems
    problems += s.opens(lambda: ring.unseal(v.token), v.payload)
    resealed = _seal_with_nonce(signer, v.payload, v.nonce)
    if resealed != v.token:
        problems.append(f"re-sealing payload under nonce gives another token ({s.first_difference(resealed, v.token)})")
    return problems


def layout_problems(
    token: str, version: int, key_id: bytes, nonce: bytes, nonce_length: int, payload: bytes
) -> list[str]:
    """How `token` departs from ``version || key_id || nonce || ciphertext || tag`` (empty when it does not)."""
    if len(nonce) != nonce_length:
        return [f"nonce is not {nonce_length} bytes"]
    try:
        raw = b64u_decode(token)
    except InvalidToken:
        return ["token is not canonical base64url"]
    expected_len = _HEADER_LENGTH + nonce_length + len(payload) + _TAG_LENGTH
    if len(raw) != expected_len:
        return [f"token decodes to {len(raw)} bytes, layout says {expected_len}"]
    if raw[0] != version or raw[1:_HEADER_LENGTH] != key_id:
        return ["token header is not version || key_id"]
    if raw[_HEADER_LENGTH : _HEADER_LENGTH + nonce_length] != nonce:
        return ["token does not carry the vector's nonce"]
    return []


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
    valid.append(seal_vector(codec, "rotation: new primary seals", [_K1, _K0], b"after rotation", _nonce(base, n)))
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
        bad("tag bit flipped", s.flip(short.token, len(raw) - 1), seal),
        bad("ciphertext bit flipped", s.flip(short.token, _HEADER_LENGTH + n, 0x80), seal),
        bad("nonce bit flipped", s.flip(short.token, _HEADER_LENGTH), seal),
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
