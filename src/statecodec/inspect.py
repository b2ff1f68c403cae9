"""Describe a token's visible structure without verifying it, for debugging and support.

Threat: an inspection tool is pointed at whatever someone pasted, so it is a
parser of hostile input like `unseal`. `describe_token` reads only what the
format leaves in the clear (version byte, key id, lengths; a JOSE protected
header's ``alg``, ``enc`` and ``kid``), caps the length before decoding, and
raises nothing but `InvalidToken` on any input. It never decrypts, never
verifies, and never returns payload bytes: a description says what a token
claims to be, not that it is genuine (verify with the codec for that).

Binary formats (unpadded base64url whose first byte is the version) are
listed in `BINARY_FORMATS`; a codec with a new version byte adds one entry.
Compact JOSE tokens are recognised by their dot-separated segments.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode, check_token_text, split_segments
from statecodec.errors import InvalidToken, Reason
from statecodec.keys import KEY_ID_LENGTH

__all__ = ["BINARY_FORMATS", "MAX_JOSE_HEADER_LENGTH", "BinaryFormat", "TokenInfo", "describe_token"]

MAX_JOSE_HEADER_LENGTH = 1024
"""Cap, in characters, on a JOSE protected header this module will decode."""

_JOSE_MEMBERS = ("alg", "enc", "kid")
_MAX_MEMBER_TEXT = 128


@dataclass(frozen=True)
class BinaryFormat:
    """``version (1) | key_id (4) | nonce | ciphertext | tag`` under one version byte."""

    name: str
    nonce_length: int
    tag_length: int = 16
    description: str = ""


BINARY_FORMATS: dict[int, BinaryFormat] = {
    0x01: BinaryFormat("aesgcm", 12, description="AES-256-GCM over a key ring"),
    0x02: BinaryFormat("xaesgcm", 24, description="XAES-256-GCM over a key ring"),
    0x03: BinaryFormat("envelope", 12, description="AES-256-GCM under a KMS-wrapped data key"),
    0x05: BinaryFormat("vault-transit", 12, description="Vault transit ciphertext; key id = key version"),
}
"""Version byte to layout, for every statecodec binary token format."""


@dataclass(frozen=True)
class TokenInfo:
    """What a token shows without keys. Holds no payload bytes and no key material.

    `payload_length` is the plaintext length for the AEAD formats (GCM adds
    no padding) and the length of the encrypted or signed content otherwise.
    """

    format: str
    token_length: int
    decoded_length: int
    payload_length: int
    encrypted: bool
    version: int | None = None
    key_id: str | None = None
    nonce_length: int | None = None
    tag_length: int | None = None
    algorithm: str | None = None
    encryption: str | None = None
    description: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def describe_token(token: object, *, max_length: int = DEFAULT_MAX_TOKEN_LENGTH) -> TokenInfo:
    """The visible structure of `token`, or `InvalidToken` with a reason code; never verifies."""
    text = check_token_text(token, max_length)
    info: TokenInfo | None = None
    try:
        info = _describe_jose(text) if "." in text else _describe_binary(text)
    except InvalidToken:
        raise
    except Exception:  # a description must fail the same way as unseal, whatever the input
        info = None
    # Raised outside the handler: the caught exception may hold token text, and
    # `from None` would still keep it reachable as __context__.
    if info is None:
        raise InvalidToken(Reason.MALFORMED)
    return info


def _describe_binary(text: str) -> TokenInfo:
    raw = b64u_decode(text)
    if not raw:
        raise InvalidToken(Reason.MALFORMED)
    layout = BINARY_FORMATS.get(raw[0])
    if layout is None:
        raise InvalidToken(Reason.FORMAT)
    header = 1 + KEY_ID_LENGTH
    payload = len(raw) - header - layout.nonce_length - layout.tag_length
    if payload < 0:
        raise InvalidToken(Reason.MALFORMED)
    return TokenInfo(
        format=layout.name,
        version=raw[0],
        key_id=raw[1:header].hex(),
        token_length=len(text),
        decoded_length=len(raw),
        nonce_length=layout.nonce_length,
        tag_length=layout.tag_length,
        payload_length=payload,
        encrypted=True,
        description=layout.description,
    )


def _describe_jose(text: str) -> TokenInfo:
    segments = split_segments(text, 3, 5)
    header = _jose_header(segments[0])
    decoded = [b64u_decode(s) for s in segments]
    if len(segments) == 5:
        fmt, content, encrypted, tag = "jwe", decoded[3], True, len(decoded[4])
        if "enc" not in header:
            raise InvalidToken(Reason.HEADER)
    else:
        fmt, content, encrypted, tag = "jws", decoded[1], False, len(decoded[2])
        if "enc" in header:
            raise InvalidToken(Reason.HEADER)
    return TokenInfo(
        format=fmt,
        token_length=len(text),
        decoded_length=sum(len(d) for d in decoded),
        payload_length=len(content),
        encrypted=encrypted,
        key_id=header.get("kid"),
        nonce_length=len(decoded[2]) if fmt == "jwe" else None,
        tag_length=tag,
        algorithm=header.get("alg"),
        encryption=header.get("enc"),
        description="compact JWE" if encrypted else "compact JWS (payload readable without keys)",
    )


def _jose_header(segment: str) -> dict[str, str]:
    """The ``alg``, ``enc`` and ``kid`` members of a protected header, each a short string."""
    if len(segment) > MAX_JOSE_HEADER_LENGTH:
        raise InvalidToken(Reason.OVERSIZED)
    raw = b64u_decode(segment)
    parsed = True
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        # Refused below, outside the handler: the decode and JSON errors hold the header text.
        parsed = False
    if not parsed:
        raise InvalidToken(Reason.MALFORMED)
    if not isinstance(obj, dict) or not isinstance(obj.get("alg"), str):
        raise InvalidToken(Reason.HEADER)
    found: dict[str, str] = {}
    for name in _JOSE_MEMBERS:
        value = obj.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or not 0 < len(value) <= _MAX_MEMBER_TEXT or not value.isprintable():
            raise InvalidToken(Reason.HEADER)
        found[name] = value
    return found
