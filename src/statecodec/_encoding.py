"""Strict base64url and size caps shared by every token format.

Threat: lenient decoding (`base64.urlsafe_b64decode` drops characters outside the alphabet, accepts padding and
ignores trailing bits) lets many strings decode to the same bytes. Here only the canonical unpadded encoding
decodes, else `InvalidToken(MALFORMED)` (docs/formats.md, "Strict base64url"); length caps come before decoding.
"""

from __future__ import annotations

import binascii

from statecodec.errors import ConfigurationError, InvalidToken, Reason, SealError

# Default cap, in characters: room for a 64 KiB payload under every format (87,382 characters),
# small enough that a hostile token costs nothing but a length comparison.
DEFAULT_MAX_TOKEN_LENGTH = 128 * 1024
# Highest cap any codec accepts: cryptography's AES-GCM raises OverflowError on 2**31 bytes or more.
MAX_TOKEN_LENGTH_LIMIT = 2**31 - 1

_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE_STRICT = bytes.maketrans(b"-_+/=", b"+/!!!")
_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_VALUES = bytes(_ALPHABET.index(c) if c in _ALPHABET else 0 for c in range(256))
_TRAILING_MASK = (0, 0, 0x0F, 0x03)  # by length mod 4: bits the last character must not set
_PAD = (b"", b"", b"==", b"=")


def b64u_encode(data: bytes) -> str:
    """Unpadded base64url, the only encoding `b64u_decode` accepts."""
    return binascii.b2a_base64(data, newline=False).translate(_TO_URLSAFE).rstrip(b"=").decode("ascii")


def b64u_len(n: int) -> int:  # of `b64u_encode` of `n` bytes
    return (4 * n + 2) // 3


def b64u_decode(text: str) -> bytes:
    """Decode canonical unpadded base64url, or raise `InvalidToken(MALFORMED)`: only ``A-Z a-z 0-9 - _``,
    no padding, a length that is not 1 mod 4, zero trailing bits; exactly one string decodes to given bytes."""
    # Checked, not caught: a UnicodeEncodeError would hold the whole token text (as __context__ even after `from None`).
    if type(text) is not str or not text.isascii() or len(text) & 3 == 1:
        raise InvalidToken(Reason.MALFORMED)
    raw, rem = text.encode("ascii"), len(text) & 3
    # One pass: '+', '/' and '=' become '!', which strict_mode refuses with every other character outside the
    # alphabet; the last character may not carry bits beyond the encoded bytes.
    if rem and _VALUES[raw[-1]] & _TRAILING_MASK[rem]:
        raise InvalidToken(Reason.MALFORMED)
    try:
        return binascii.a2b_base64(raw.translate(_FROM_URLSAFE_STRICT) + _PAD[rem], strict_mode=True)
    except binascii.Error:
        raise InvalidToken(Reason.MALFORMED) from None


def check_token_text(token: object, max_length: int) -> str:
    """Accept only a `str` no longer than `max_length`; checked before any decoding."""
    if type(token) is not str:
        raise InvalidToken(Reason.MALFORMED)
    if len(token) > max_length:
        raise InvalidToken(Reason.OVERSIZED)
    return token


def split_segments(text: str, *counts: int) -> list[str]:
    """The dot-separated segments of `text` when there are one of `counts` of them, else ``malformed``
    (counted first: a cap-length run of dots would make `str.split` build millions of segments)."""
    if text.count(".") + 1 not in counts:
        raise InvalidToken(Reason.MALFORMED)
    return text.split(".")


def check_cap(max_token_length: object, fixed_chars: int, fixed_bytes: int = 0) -> tuple[int, int]:
    """The one cap rule, for tokens of `fixed_chars` characters then the base64url of `fixed_bytes` bytes and the
    payload: (the cap, the largest payload whose token fits it, so `seal` refuses what `unseal` would refuse)."""
    if isinstance(max_token_length, bool) or not isinstance(max_token_length, int):
        raise ConfigurationError(f"max_token_length must be an int (characters), e.g. {DEFAULT_MAX_TOKEN_LENGTH}")
    smallest = fixed_chars + b64u_len(fixed_bytes)
    if max_token_length < smallest:
        raise ConfigurationError(f"max_token_length={max_token_length} is below the smallest token ({smallest} "
                                 "characters)")
    if max_token_length > MAX_TOKEN_LENGTH_LIMIT:
        raise ConfigurationError(f"max_token_length={max_token_length} is above {MAX_TOKEN_LENGTH_LIMIT} characters, "
                                 f"more than AES-GCM here can process; the default is {DEFAULT_MAX_TOKEN_LENGTH}")
    return max_token_length, (max_token_length - fixed_chars) * 3 // 4 - fixed_bytes


def check_payload(payload: object, max_payload: int) -> None:
    """The one payload rule: `TypeError` unless bytes-like; `SealError` over `max_payload` bytes (`check_cap`)."""
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise TypeError(f"seal takes bytes, got {type(payload).__name__}")
    if len(payload) > max_payload:
        raise SealError(f"payload of {len(payload)} bytes exceeds the {max_payload}-byte maximum for this codec's "
                        "max_token_length; raise the cap or keep less state")
