"""Compact JWE whose algorithms are fixed by configuration, never by the token.

Threat: every field of a received JWE is chosen by whoever sent it (the attacks excluded, with their CVEs, are
in docs/jwe.md; the checks `unseal` makes, in order, with their reason codes, in docs/formats.md).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import Any, Literal, Self

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, x25519
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.concatkdf import ConcatKDFHash
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode, b64u_encode, b64u_len
from statecodec.errors import ConfigurationError, InvalidToken, Reason
from statecodec.jose._compact import CompactCodec, KeySlot
from statecodec.jose._jwk import Key, PrivateKey, PublicKey, compact_json, key_halves, public_jwk, read_epk
from statecodec.keys import KeyRing

__all__ = ["ENC", "JWECodec", "concat_kdf"]

ENC = "A256GCM"
_ECDH = "ECDH-ES+A256KW"
_IV_CHARS, _TAG_CHARS, _WRAPPED_CHARS = b64u_len(12), b64u_len(16), b64u_len(40)  # of the IV, tag and wrapped key


def _new_key(crv: str) -> PrivateKey:
    if crv not in ("P-256", "X25519"):
        raise ConfigurationError("curve must be 'P-256' or 'X25519'")
    return ec.generate_private_key(ec.SECP256R1()) if crv == "P-256" else x25519.X25519PrivateKey.generate()


def concat_kdf(z: bytes, algorithm_id: str, bits: int, apu: bytes = b"", apv: bytes = b"") -> bytes:
    """The Concat KDF of RFC 7518 section 4.6.2 (SHA-256), with its length-prefixed OtherInfo."""
    fields = (algorithm_id.encode("ascii"), apu, apv)
    other = b"".join(struct.pack(">I", len(f)) + f for f in fields) + struct.pack(">I", bits)
    return ConcatKDFHash(hashes.SHA256(), bits // 8, other).derive(z)


def _wrapping_key(private: PrivateKey, public: PublicKey) -> bytes:
    """The ECDH-ES+A256KW key-encryption key; ``header`` if ECDH refuses the point (a low-order one gives zeros)."""
    try:
        if isinstance(private, x25519.X25519PrivateKey) and isinstance(public, x25519.X25519PublicKey):
            z = private.exchange(public)
        elif isinstance(private, ec.EllipticCurvePrivateKey) and isinstance(public, ec.EllipticCurvePublicKey):
            z = private.exchange(ec.ECDH(), public)
        else:
            raise InvalidToken(Reason.HEADER)
    except ValueError:
        raise InvalidToken(Reason.HEADER) from None
    return concat_kdf(z, _ECDH, 256)


def _unwrap(kek: bytes, wrapped: bytes) -> AESGCM:
    try:
        return AESGCM(aes_key_unwrap(kek, wrapped))
    except InvalidUnwrap:
        raise InvalidToken(Reason.SEAL) from None


class _Direct(KeySlot):
    """``dir``: the configured key is the content key; the encrypted-key segment is empty."""

    EK_CHARS = 0

    def __init__(self, alg: str, kid: str, key: bytes) -> None:
        self.kid, self.key, self.aead = kid, key, AESGCM(key)
        self.header = b64u_encode(compact_json({"alg": alg, "enc": ENC, "kid": kid}))

    def wrap(self) -> tuple[str, str, AESGCM]:
        return self.header, "", self.aead

    def open(self, header: dict[str, Any] | None, wrapped: bytes) -> AESGCM:
        return self.aead


class _KeyWrap(_Direct):
    """``A256KW``: a fresh content key per token, wrapped (RFC 3394) under the configured key."""

    EK_CHARS = _WRAPPED_CHARS

    def wrap(self) -> tuple[str, str, AESGCM]:
        cek = os.urandom(32)
        return self.header, b64u_encode(aes_key_wrap(self.key, cek)), AESGCM(cek)

    def open(self, header: dict[str, Any] | None, wrapped: bytes) -> AESGCM:
        return _unwrap(self.key, wrapped)


class _Agreement(KeySlot):
    """``ECDH-ES+A256KW``: the wrapping key comes from ECDH between an ephemeral key (``epk``) and this one."""

    public: PublicKey  # and no header of its own: each token carries its epk
    EK_CHARS = _WRAPPED_CHARS

    def __init__(self, kid: str, private: PrivateKey | None, public: PublicKey) -> None:
        self.kid, self.private, self.public, self.crv = kid, private, public, public_jwk(public)["crv"]

    def wrap(self) -> tuple[str, str, AESGCM]:
        ephemeral = _new_key(self.crv)
        kek = _wrapping_key(ephemeral, self.public)
        cek = os.urandom(32)
        epk = public_jwk(ephemeral.public_key())
        header = b64u_encode(compact_json({"alg": _ECDH, "enc": ENC, "kid": self.kid, "epk": epk}))
        return header, b64u_encode(aes_key_wrap(kek, cek)), AESGCM(cek)

    def open(self, header: dict[str, Any] | None, wrapped: bytes) -> AESGCM:
        if self.private is None or header is None:
            raise InvalidToken(Reason.UNKNOWN_KEY)
        epk = read_epk(header.get("epk"), self.crv)
        return _unwrap(_wrapping_key(self.private, epk), wrapped)


_Slot = _Direct | _KeyWrap | _Agreement


class JWECodec(CompactCodec[_Slot]):
    """Compact JWE (RFC 7516) with one configured algorithm pair (``dir``, ``A256KW`` or ``ECDH-ES+A256KW``, each with
    ``A256GCM``) and a key per ``kid``: the first key seals, every (private) key unseals. ``dir`` is bounded as
    `AESGCMCodec`, 2^32 tokens per key. Headers, key derivation and checks: docs/formats.md.
    """

    __slots__ = ()
    _ALG_VAR = "STATECODEC_JWE_ALG"
    _ALGS = ("dir", "A256KW", _ECDH)

    @classmethod
    def ephemeral(
        cls, *, alg: Literal["dir", "A256KW", "ECDH-ES+A256KW"] = "dir", curve: Literal["P-256", "X25519"] = "P-256",
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
    ) -> Self:
        """A codec under a key generated now and held only by this process."""
        if alg == "ECDH-ES+A256KW":
            return cls.ecdh([_new_key(curve)], max_token_length=max_token_length)
        return cls(KeyRing.generate(), alg=alg, max_token_length=max_token_length)

    @classmethod
    def ecdh(cls, keys: Sequence[PrivateKey | PublicKey], *, max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH) -> Self:
        """ECDH-ES+A256KW over P-256 or X25519 key objects, ``kid`` = RFC 7638 thumbprint: the first
        key's public half seals, private keys unseal (a public first key makes a sealing-only codec)."""
        return cls._from_keys(_ECDH, keys, max_token_length)

    def _slot(self, alg: str, kid: str, key: Key, index: int) -> _Slot:
        if alg != _ECDH:
            assert isinstance(key, bytes)  # from a ring or "oct" JWKs, the only sources of these algorithms
            return _Direct(alg, kid, key) if alg == "dir" else _KeyWrap(alg, kid, key)
        kid, private, public = key_halves(kid, key, index, ("P-256", "X25519"))
        if private is None and index > 0:
            raise ConfigurationError(f"keys[{index}] is public; only the first key may be public (others unseal)")
        return _Agreement(kid, private, public)

    def _seal(self, payload: bytes) -> str:
        h64, ek64, aead = self._primary.wrap()
        iv = os.urandom(12)
        sealed = aead.encrypt(iv, payload, h64.encode("ascii"))
        return f"{h64}.{ek64}.{b64u_encode(iv)}.{b64u_encode(sealed[:-16])}.{b64u_encode(sealed[-16:])}"

    def unseal(self, token: str) -> bytes:
        """The payload of a JWE this codec's keys can open under its configured algorithms, or `InvalidToken`."""
        (h64, ek64, iv64, ct64, tag64), header, slot = self._parse(token, 5)
        if len(ek64) != slot.EK_CHARS or len(iv64) != _IV_CHARS or len(tag64) != _TAG_CHARS:
            raise InvalidToken(Reason.MALFORMED)
        wrapped, iv, ct, tag = b64u_decode(ek64), b64u_decode(iv64), b64u_decode(ct64), b64u_decode(tag64)
        aead = slot.open(header, wrapped)
        try:
            return aead.decrypt(iv, ct + tag, h64.encode("ascii"))
        except InvalidTag:
            raise InvalidToken(Reason.SEAL) from None


from_settings = JWECodec.from_env  # the builder of STATECODEC_CODEC=jwe in statecodec.config
