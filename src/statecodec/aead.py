"""AES-256-GCM and XAES-256-GCM codecs over a key ring, and the one token layout they share.

Threat: the client may read, alter, truncate, extend, re-encode or forge the token, or present one sealed under
another key. These codecs give confidentiality and integrity (AEAD) with the format version and key id under the
tag, find the key by id in O(1), and accept only the exact canonical encoding `seal` produced, capped in length.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import ClassVar, Self

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from statecodec._encoding import (
    DEFAULT_MAX_TOKEN_LENGTH,
    b64u_decode,
    b64u_encode,
    check_cap,
    check_payload,
    check_token_text,
)
from statecodec._settings import max_token_length_setting
from statecodec._types import HoldsSecrets, OwnKeys
from statecodec.errors import InvalidToken, Reason
from statecodec.keys import KEY_ID_LENGTH, KeyRing

__all__ = ["AESGCMCodec", "XAESGCMCodec", "check_ring_cap"]

_HEADER_LENGTH = 1 + KEY_ID_LENGTH
_TAG_LENGTH = 16


def check_ring_cap(max_token_length: object, nonce_length: int) -> tuple[int, int]:
    """`check_cap` for the ring layout: (the cap, the largest payload)."""
    return check_cap(max_token_length, 0, _HEADER_LENGTH + nonce_length + _TAG_LENGTH)


class _Ring(OwnKeys):
    """The one seal and open of ``b64u(version || key_id || nonce || ciphertext || tag)``, AAD ``version || key_id``,
    of every AES-GCM codec. `entries`: (4-byte key id, AEAD) in ring order, ids unique (the callers' rule)."""

    VERSION: ClassVar[int]
    NONCE_LENGTH: ClassVar[int]
    __slots__ = ("_aeads", "_header", "_max_payload", "_min_raw", "_nonce_length", "_primary")

    def __init__(
        self, version: int, nonce_length: int, entries: Iterable[tuple[bytes, AESGCM | _XAES]], max_token_length: int
    ) -> None:
        self._max_length, self._max_payload = check_ring_cap(max_token_length, nonce_length)
        self._aeads = dict(entries)
        first = next(iter(self._aeads))
        self._key_ids = tuple(kid.hex() for kid in self._aeads)
        self._header, self._primary = bytes([version]) + first, self._aeads[first]
        self._nonce_length = nonce_length
        self._min_raw = _HEADER_LENGTH + nonce_length + _TAG_LENGTH

    def seal(self, payload: bytes) -> str:
        check_payload(payload, self._max_payload)
        nonce = os.urandom(self._nonce_length)
        return b64u_encode(self._header + nonce + self._primary.encrypt(nonce, payload, self._header))

    def unseal(self, token: str) -> bytes:
        raw = b64u_decode(check_token_text(token, self._max_length))
        if len(raw) < self._min_raw:
            raise InvalidToken(Reason.MALFORMED)
        if raw[0] != self._header[0]:
            raise InvalidToken(Reason.FORMAT)
        aead = self._aeads.get(raw[1:_HEADER_LENGTH])
        if aead is None:
            raise InvalidToken(Reason.UNKNOWN_KEY)
        n = _HEADER_LENGTH + self._nonce_length
        try:
            return aead.decrypt(raw[_HEADER_LENGTH:n], raw[n:], raw[:_HEADER_LENGTH])
        except InvalidTag:
            raise InvalidToken(Reason.SEAL) from None


class _KeyRingCodec(_Ring):
    """A ring codec whose AEAD keys are HKDF-SHA256(secret, info=`_KEY_INFO`) of a `KeyRing`'s secrets."""

    _KEY_INFO: ClassVar[bytes]
    _aead: ClassVar[type[AESGCM | _XAES]]  # the AEAD of one ring key
    __slots__ = ()

    def __init__(
        self, keys: KeyRing | Iterable[bytes | bytearray | memoryview], *,
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
    ) -> None:
        ring = keys if isinstance(keys, KeyRing) else KeyRing(keys)
        entries = [(kid, self._aead(key)) for kid, key in ring.subkeys(self._KEY_INFO)]
        super().__init__(self.VERSION, self.NONCE_LENGTH, entries, max_token_length)

    @classmethod
    def ephemeral(cls, *, max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH) -> Self:
        """A codec under a key held only by this process: fine for stdio or one worker, not for a fleet."""
        return cls(KeyRing.generate(), max_token_length=max_token_length)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self:
        """A codec over ``STATECODEC_KEYS(_FILE)`` and ``STATECODEC_MAX_TOKEN_LENGTH``, read as by `codec_from_env`."""
        settings = os.environ if environ is None else environ
        return cls(KeyRing.from_env(environ=settings), max_token_length=max_token_length_setting(settings))


class AESGCMCodec(_KeyRingCodec):
    """AES-256-GCM over a key ring: `keys[0]` seals, every key unseals. Version 0x01; 2^32 tokens per key (NIST SP
    800-38D, random 96-bit nonces), beyond which `XAESGCMCodec`. Layout, key derivation, checks: docs/formats.md."""

    VERSION = 0x01
    NONCE_LENGTH = 12
    _KEY_INFO = b"statecodec/v1/aes-256-gcm"
    _aead = AESGCM
    __slots__ = ()


class _XAES(HoldsSecrets):
    """XAES-256-GCM as specified at c2sp.org/XAES-256-GCM (24-byte nonces), in its terms (steps: docs/formats.md):
    Kx = AES-256_K(M1 xor K1) || AES-256_K(M2 xor K1), K1 the CMAC subkey of K, then AES-256-GCM under Kx with N[12:].
    """

    __slots__ = ("_cipher", "_k1")

    def __init__(self, key: bytes) -> None:
        self._cipher = Cipher(algorithms.AES(key), modes.ECB())  # noqa: S305 - single-block KDF, per spec
        lblock = int.from_bytes(self._cipher.encryptor().update(bytes(16)), "big")
        k1 = (lblock << 1) & ((1 << 128) - 1)  # L doubled in GF(2^128)
        self._k1 = k1 ^ 0x87 if lblock >> 127 else k1

    def _derive(self, nonce: bytes) -> AESGCM:
        n12 = int.from_bytes(nonce[:12], "big")
        m1 = ((0x00015800 << 96) | n12) ^ self._k1
        m2 = ((0x00025800 << 96) | n12) ^ self._k1
        return AESGCM(self._cipher.encryptor().update(m1.to_bytes(16, "big") + m2.to_bytes(16, "big")))

    def encrypt(self, nonce: bytes, data: bytes, aad: bytes) -> bytes:
        return self._derive(nonce).encrypt(nonce[12:], data, aad)

    def decrypt(self, nonce: bytes, data: bytes, aad: bytes) -> bytes:
        return self._derive(nonce).decrypt(nonce[12:], data, aad)


class XAESGCMCodec(_KeyRingCodec):
    """XAES-256-GCM (C2SP) over a key ring, for fleets past 2^32 tokens per key: 192-bit random nonces allow about
    2^80 tokens per key. Version 0x02. Layout, key derivation and checks: docs/formats.md."""

    VERSION = 0x02
    NONCE_LENGTH = 24
    _KEY_INFO = b"statecodec/v1/xaes-256-gcm"
    _aead = _XAES
    __slots__ = ()
