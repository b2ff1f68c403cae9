"""Describe a token's visible structure without verifying it, for debugging and support.

Threat: an inspection tool parses whatever someone pasted, so like `unseal` it caps the length before decoding
and raises nothing but `InvalidToken`. It reads only what the format leaves in the clear (version byte, key id,
lengths; a JOSE header's ``alg``, ``enc`` and ``kid``), never verifies, and never returns payload bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode, check_token_text, split_segments
from statecodec.aead import _TAG_LENGTH, AESGCMCodec, XAESGCMCodec
from statecodec.envelope import EnvelopeCodec
from statecodec.errors import InvalidToken, Reason
from statecodec.jose._jwk import parse_header
from statecodec.keys import KEY_ID_LENGTH

_MAX_MEMBER_TEXT = 128  # alg, enc and kid are printed: short, printable text only
# Every binary layout, version (1) | key id (4) | nonce | ciphertext | tag (16): version -> (format, nonce, text)
_BINARY = {
    AESGCMCodec.VERSION: ("aesgcm", AESGCMCodec.NONCE_LENGTH, "AES-256-GCM over a key ring"),
    XAESGCMCodec.VERSION: ("xaesgcm", XAESGCMCodec.NONCE_LENGTH, "XAES-256-GCM over a key ring"),
    EnvelopeCodec.VERSION: ("envelope", AESGCMCodec.NONCE_LENGTH, "AES-256-GCM under a KMS-wrapped data key"),
}


@dataclass(frozen=True)
class TokenInfo:
    """What a token claims to be, not that it is genuine; `payload_length` is the plaintext length for the AEAD
    formats (GCM adds no padding) and the length of the encrypted or signed content otherwise."""

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


def describe_token(token: object, *, max_length: int = DEFAULT_MAX_TOKEN_LENGTH) -> TokenInfo:
    """The visible structure of `token`, or `InvalidToken` with a reason code; never verifies."""
    text = check_token_text(token, max_length)
    if "." in text:
        return _describe_jose(text)
    raw = b64u_decode(text)
    if not raw:
        raise InvalidToken(Reason.MALFORMED)
    if raw[0] not in _BINARY:
        raise InvalidToken(Reason.FORMAT)
    name, nonce, description = _BINARY[raw[0]]
    payload = len(raw) - 1 - KEY_ID_LENGTH - nonce - _TAG_LENGTH
    if payload < 0:
        raise InvalidToken(Reason.MALFORMED)
    return TokenInfo(
        format=name,
        version=raw[0],
        key_id=raw[1 : 1 + KEY_ID_LENGTH].hex(),
        token_length=len(text),
        decoded_length=len(raw),
        nonce_length=nonce,
        tag_length=_TAG_LENGTH,
        payload_length=payload,
        encrypted=True,
        description=description,
    )


def _describe_jose(text: str) -> TokenInfo:
    segments = split_segments(text, 3, 5)
    header = parse_header(segments[0])
    shown = [header[name] for name in ("alg", "enc", "kid") if header.get(name) is not None]
    if any(type(v) is not str or not 0 < len(v) <= _MAX_MEMBER_TEXT or not v.isprintable() for v in shown):
        raise InvalidToken(Reason.HEADER)
    encrypted = len(segments) == 5
    if "alg" not in header or ("enc" in header) != encrypted:
        raise InvalidToken(Reason.HEADER)
    decoded = [b64u_decode(s) for s in segments]
    return TokenInfo(
        format="jwe" if encrypted else "jws",
        token_length=len(text),
        decoded_length=sum(len(d) for d in decoded),
        payload_length=len(decoded[3] if encrypted else decoded[1]),
        encrypted=encrypted,
        key_id=header.get("kid"),
        nonce_length=len(decoded[2]) if encrypted else None,
        tag_length=len(decoded[-1]),
        algorithm=header.get("alg"),
        encryption=header.get("enc"),
        description="compact JWE" if encrypted else "compact JWS (payload readable without keys)",
    )
