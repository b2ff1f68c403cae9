"""AES-256-GCM and XAES-256-GCM codecs over a key ring.

Threat: the token is client-held, so the client may read, alter, truncate,
extend, re-encode or forge it, or present one sealed under another key. These
codecs give confidentiality and integrity (AEAD), bind the format version and
the key id under the authentication tag, find the key by id in O(1), accept
only the exact canonical encoding `seal` produced, and cap the length before
decoding. Every refusal is `InvalidToken` with a reason code.

Both codecs share one ring core (`_AEADRing`), which `EnvelopeCodec` reuses
with data keys from a KMS: there is one implementation of the token layout.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import ClassVar, Protocol, TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from statecodec._encoding import (
    _TO_URLSAFE,
    DEFAULT_MAX_TOKEN_LENGTH,
    _b64encode,
    b64u_decode,
    b64u_len,
    check_cap,
    check_payload,
)
from statecodec.errors import ConfigurationError, InvalidToken, Reason
from statecodec.keys import DEFAULT_KEYS_ENV, KEY_ID_LENGTH, KeyRing

__all__ = ["AESGCMCodec", "XAESGCMCodec"]

_TAG_LENGTH = 16
_HEADER_LENGTH = 1 + KEY_ID_LENGTH
_AEAD_KEY_LENGTH = 32
_R_MALFORMED = Reason.MALFORMED
_R_OVERSIZED = Reason.OVERSIZED
_R_FORMAT = Reason.FORMAT
_R_UNKNOWN_KEY = Reason.UNKNOWN_KEY
_R_SEAL = Reason.SEAL


class _AEAD(Protocol):
    def encrypt(self, nonce: bytes, data: bytes, associated_data: bytes) -> bytes: ...

    def decrypt(self, nonce: bytes, data: bytes, associated_data: bytes) -> bytes: ...


_Ring = TypeVar("_Ring", bound="_AEADRing")


class _AEADRing:
    """Token layout shared by every AES-GCM-family codec here.

    ``token = base64url(version || key_id || nonce || ciphertext || tag)``,
    unpadded; ``associated data = version || key_id``. Subclasses fix
    `VERSION`, `NONCE_LENGTH` and the per-token AEAD.
    """

    VERSION: ClassVar[int]
    NONCE_LENGTH: ClassVar[int]
    KEY_INFO: ClassVar[bytes]

    __slots__ = ("_aeads", "_encrypt", "_key_ids", "_max_length", "_max_payload", "_min_raw", "_primary_header")

    def __init__(
        self,
        keys: KeyRing | Iterable[bytes | bytearray | memoryview],
        *,
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
    ) -> None:
        ring = keys if isinstance(keys, KeyRing) else KeyRing(keys)
        self._init_ring(ring.subkeys(self.KEY_INFO), max_token_length)

    @classmethod
    def _from_entries(
        cls: type[_Ring], entries: Iterable[tuple[bytes, bytes]], *, max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH
    ) -> _Ring:
        """The same layout over ready (key id, 32-byte key) entries, under `cls.VERSION`.

        For subclasses whose keys come from elsewhere (a KMS envelope): one
        implementation of the token layout, a distinct version byte per source.
        """
        self = cls.__new__(cls)
        self._init_ring(entries, max_token_length)
        return self

    @classmethod
    def ephemeral(cls: type[_Ring], *, max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH) -> _Ring:
        """A codec under a key generated now and held only by this process.

        Tokens die with the process: fine for stdio or one worker, wrong for a
        fleet or across restarts (use a shared ring from env, a file, or a KMS).
        """
        return cls(KeyRing.generate(), max_token_length=max_token_length)

    @classmethod
    def from_env(
        cls: type[_Ring],
        var: str = DEFAULT_KEYS_ENV,
        *,
        environ: Mapping[str, str] | None = None,
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
    ) -> _Ring:
        """A codec over the ring in environment variable `var` (``STATECODEC_KEYS``)."""
        return cls(KeyRing.from_env(var, environ), max_token_length=max_token_length)

    @classmethod
    def from_file(
        cls: type[_Ring], path: str | os.PathLike[str], *, max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH
    ) -> _Ring:
        """A codec over the ring in a key file."""
        return cls(KeyRing.from_file(path), max_token_length=max_token_length)

    @classmethod
    def _check_max_length(cls, max_token_length: object) -> int:
        """The per-token overhead in bytes, once `max_token_length` is a usable cap; else ConfigurationError.

        Separate so a codec whose keys come from a provider can check it before any provider call.
        """
        overhead = 1 + KEY_ID_LENGTH + cls.NONCE_LENGTH + _TAG_LENGTH
        check_cap(max_token_length, b64u_len(overhead))
        return overhead

    def _init_ring(self, entries: Iterable[tuple[bytes, bytes]], max_token_length: int) -> None:
        """`entries` are (key id, 32-byte AEAD key) in ring order; the first seals."""
        overhead = self._check_max_length(max_token_length)
        version = bytes([self.VERSION])
        aeads: dict[bytes, _AEAD] = {}
        ids: list[bytes] = []
        for kid, key in entries:
            if len(kid) != KEY_ID_LENGTH:
                raise ConfigurationError(f"key ids are {KEY_ID_LENGTH} bytes")
            if len(key) != _AEAD_KEY_LENGTH:
                # AESGCM would quietly accept a 16- or 24-byte key and run AES-128/192.
                raise ConfigurationError(f"ring keys are {_AEAD_KEY_LENGTH} bytes (AES-256)")
            if kid in aeads:
                raise ConfigurationError("two ring entries share a key id; list each key once")
            aeads[kid] = self._make_aead(key)
            ids.append(kid)
        if not ids:
            raise ConfigurationError("a key ring needs at least one key")
        self._aeads = aeads
        self._key_ids = tuple(ids)
        self._primary_header = version + ids[0]
        self._encrypt = aeads[ids[0]].encrypt  # bound once: seal is the hot path
        self._max_length = max_token_length
        self._min_raw = overhead
        # The largest payload whose token fits the cap: seal refuses what unseal would refuse.
        self._max_payload = (max_token_length * 3) // 4 - overhead

    def _make_aead(self, key: bytes) -> _AEAD:
        raise NotImplementedError

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Hex key ids in ring order; `key_ids[0]` is carried by every new token."""
        return tuple(k.hex() for k in self._key_ids)

    @property
    def primary_key_id(self) -> str:
        return self._key_ids[0].hex()

    @property
    def max_token_length(self) -> int:
        return self._max_length

    def _split(self, token: str) -> tuple[_AEAD, bytes, bytes, bytes]:
        """Bounded, positive parse: (aead, header, nonce, ciphertext) or InvalidToken."""
        if type(token) is not str:
            raise InvalidToken(_R_MALFORMED)
        if len(token) > self._max_length:
            raise InvalidToken(_R_OVERSIZED)
        raw = b64u_decode(token)
        if len(raw) < self._min_raw:
            raise InvalidToken(_R_MALFORMED)
        if raw[0] != self.VERSION:
            raise InvalidToken(_R_FORMAT)
        header = raw[:_HEADER_LENGTH]
        aead = self._aeads.get(header[1:])
        if aead is None:
            raise InvalidToken(_R_UNKNOWN_KEY)
        n = _HEADER_LENGTH + self.NONCE_LENGTH
        return aead, header, raw[_HEADER_LENGTH:n], raw[n:]

    def seal(self, payload: bytes) -> str:
        """Encrypt and authenticate `payload` under the primary key; a fresh random nonce each call."""
        if type(payload) is not bytes or len(payload) > self._max_payload:
            check_payload(payload, self._max_payload)  # bytearray and memoryview pass; anything else raises
        header = self._primary_header
        nonce = os.urandom(self.NONCE_LENGTH)
        # b64u_encode, inlined: this is the hot path of every round.
        sealed = header + nonce + self._encrypt(nonce, payload, header)
        return _b64encode(sealed, newline=False).translate(_TO_URLSAFE).rstrip(b"=").decode("ascii")

    def unseal(self, token: str) -> bytes:
        """Return the payload of a token this ring sealed, or raise `InvalidToken`."""
        aead, header, nonce, sealed = self._split(token)
        try:
            return aead.decrypt(nonce, sealed, header)
        except InvalidTag:
            raise InvalidToken(_R_SEAL) from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key_ids={list(self.key_ids)!r})"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError(f"{type(self).__name__} holds keys and is not picklable")


class AESGCMCodec(_AEADRing):
    """AES-256-GCM over a key ring: `keys[0]` seals, every key unseals.

    Wire format (version 0x01), unpadded base64url of::

        0x01 | key_id (4) | nonce (12, random) | ciphertext (len(payload)) | tag (16)

    The AES key of each ring secret is HKDF-SHA256(secret, info=
    ``statecodec/v1/aes-256-gcm``); the key id is HKDF-SHA256(secret, info=
    ``statecodec/v1/key-id``)[:4]. The associated data is ``0x01 | key_id``, so
    the version and key slot are bound under the tag. Overhead: 33 bytes, 44
    characters over base64url of the payload.

    Usage bound: random 96-bit nonces keep the collision probability under
    2^-32 for at most 2^32 tokens per key (NIST SP 800-38D, section 8.3).
    Rotate before a key seals four billion tokens, or use `XAESGCMCodec`.
    """

    VERSION = 0x01
    NONCE_LENGTH = 12
    KEY_INFO = b"statecodec/v1/aes-256-gcm"

    __slots__ = ()

    def _make_aead(self, key: bytes) -> AESGCM:
        return AESGCM(key)


class XAESGCMCodec(_AEADRing):
    """XAES-256-GCM (C2SP) over a key ring, for fleets past 2^32 tokens per key.

    Wire format (version 0x02), unpadded base64url of::

        0x02 | key_id (4) | nonce (24, random) | ciphertext (len(payload)) | tag (16)

    Per token, the XAES key is derived from the ring key K and the first 12
    nonce bytes with two AES-256 block encryptions (the CMAC-based KDF of the
    C2SP specification); AES-256-GCM then runs under that key with the last
    12 nonce bytes. Ring keys are HKDF-SHA256(secret, info=
    ``statecodec/v1/xaes-256-gcm``); key ids and associated data are as for
    `AESGCMCodec`. Overhead: 45 bytes, 60 characters.

    Usage bound: 192-bit random nonces allow about 2^80 tokens per key at a
    collision probability under 2^-32, which is beyond any fleet's reach.
    """

    VERSION = 0x02
    NONCE_LENGTH = 24
    KEY_INFO = b"statecodec/v1/xaes-256-gcm"

    __slots__ = ()

    def _make_aead(self, key: bytes) -> _XAES:
        return _XAES(key)


class _XAES:
    """XAES-256-GCM as specified at c2sp.org/XAES-256-GCM (24-byte nonces).

    Holds a ring key (in its AES cipher) and the CMAC subkey derived from it, so it refuses pickling.
    """

    __slots__ = ("_cipher", "_k1")

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ConfigurationError("XAES-256-GCM keys are 32 bytes")
        self._cipher = Cipher(algorithms.AES(key), modes.ECB())  # noqa: S305 - single-block KDF, per spec
        enc = self._cipher.encryptor()
        lblock = int.from_bytes(enc.update(bytes(16)), "big")
        # K1 is the CMAC subkey: L doubled in GF(2^128).
        k1 = (lblock << 1) & ((1 << 128) - 1)
        if lblock >> 127:
            k1 ^= 0x87
        self._k1 = k1

    def _derive(self, nonce: bytes) -> AESGCM:
        n12 = int.from_bytes(nonce[:12], "big")
        # M1 = 0x00 0x01 'X' 0x00 || N[:12], M2 = 0x00 0x02 'X' 0x00 || N[:12]; each XOR K1.
        m1 = ((0x00015800 << 96) | n12) ^ self._k1
        m2 = ((0x00025800 << 96) | n12) ^ self._k1
        enc = self._cipher.encryptor()
        derived = enc.update(m1.to_bytes(16, "big") + m2.to_bytes(16, "big"))
        return AESGCM(derived)

    def encrypt(self, nonce: bytes, data: bytes, aad: bytes) -> bytes:
        return self._derive(nonce).encrypt(nonce[12:], data, aad)

    def decrypt(self, nonce: bytes, data: bytes, aad: bytes) -> bytes:
        return self._derive(nonce).decrypt(nonce[12:], data, aad)

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("the XAES-256-GCM key object holds a ring key and is not picklable")
