"""Compact JWE whose algorithms are fixed by configuration, never by the token.

Threat: a JWE arrives from the client, and every field of it is chosen by
whoever sent it. The JOSE failures this codec is built to exclude: the token
choosing its algorithm (CVE-2024-33663), a JWS accepted where a JWE is
expected (CVE-2022-3102), PBES2 work factors and ``zip`` bombs
(CVE-2023-6681, CVE-2024-28102), invalid-curve ephemeral keys on ECDH-ES,
and unbounded input (CVE-2025-61920). The codec reads a token in this
order, and the first failure is the reason reported:

1. a ``str`` no longer than ``max_token_length`` (``malformed``, ``oversized``);
2. exactly five segments (``malformed``);
3. the protected header, when it is not byte-for-byte one this codec emits:
   at most 1024 characters, canonical base64url of strict UTF-8 JSON with no
   duplicate member (``oversized``, ``malformed``, ``header``); ``alg`` and
   ``enc`` equal to the configured pair (``alg``); no member outside
   ``alg, enc, kid`` (plus ``epk`` for ECDH-ES+A256KW) (``header``); a
   string ``kid`` naming a key of this codec (``header``, ``unknown_key``);
4. an IV of 16 and a tag of 22 characters, then IV, ciphertext and tag as
   canonical base64url (``malformed``);
5. the content key: none for ``dir`` (an empty second segment), an AES key
   unwrap of exactly 40 bytes for ``A256KW`` and ``ECDH-ES+A256KW``, the
   private key and the ``epk`` checked before the agreement (``malformed``,
   ``unknown_key``, ``header``, ``seal``);
6. AES-256-GCM decryption with the protected header segment, exactly as
   received, as the associated data (``seal``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric import ec, x25519
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap

from statecodec._encoding import (
    DEFAULT_MAX_TOKEN_LENGTH,
    b64u_decode,
    b64u_encode,
    b64u_len,
    check_token_text,
    split_segments,
)
from statecodec.errors import ConfigurationError, InvalidToken, Reason
from statecodec.jose._compact import CompactCodec
from statecodec.jose._ecdh import agree, concat_kdf
from statecodec.jose._header import check_members, encode_header, kid_of, parse_header
from statecodec.jose._jwk import (
    AgreementPrivateKey,
    AgreementPublicKey,
    check_kid,
    curve_name,
    epk_members,
    jwk_list,
    load_agreement_key,
    load_oct_key,
    public_jwk,
    read_epk,
    thumbprint,
)
from statecodec.jose._ring import ring_entries
from statecodec.keys import DEFAULT_KEYS_ENV, KeyRing

__all__ = ["JWECodec"]

JWEAlgorithm = Literal["dir", "A256KW", "ECDH-ES+A256KW"]
ENC = "A256GCM"
_ECDH = "ECDH-ES+A256KW"
_IV_CHARS = b64u_len(12)
_TAG_CHARS = b64u_len(16)
_WRAPPED_CHARS = b64u_len(40)
_SYMMETRIC_MEMBERS = frozenset({"alg", "enc", "kid"})
_ECDH_MEMBERS = frozenset({"alg", "enc", "kid", "epk"})
# A fresh private key per curve name: one way to make a key, for the codec's own and every ephemeral one.
_NEW_KEY: dict[str, Callable[[], AgreementPrivateKey]] = {
    "P-256": functools.partial(ec.generate_private_key, ec.SECP256R1()),
    "X25519": x25519.X25519PrivateKey.generate,
}
_R_MALFORMED = Reason.MALFORMED
_R_SEAL = Reason.SEAL


class _Direct:
    """``dir``: the configured key is the content key; the encrypted-key segment is empty."""

    __slots__ = ("aead", "kid")

    def __init__(self, kid: str, key: bytes) -> None:
        self.kid = kid
        self.aead = AESGCM(key)

    def open(self, header: dict[str, Any] | None, ek64: str) -> AESGCM:
        if ek64:
            raise InvalidToken(_R_MALFORMED)
        return self.aead


class _KeyWrap:
    """``A256KW``: a fresh content key per token, wrapped (RFC 3394) under the configured key."""

    __slots__ = ("kek", "kid")

    def __init__(self, kid: str, kek: bytes) -> None:
        self.kid = kid
        self.kek = kek

    def open(self, header: dict[str, Any] | None, ek64: str) -> AESGCM:
        return _unwrap(self.kek, _wrapped_key(ek64))

    def new_content_key(self) -> tuple[str, AESGCM]:
        cek = os.urandom(32)
        return b64u_encode(aes_key_wrap(self.kek, cek)), AESGCM(cek)


class _Agreement:
    """``ECDH-ES+A256KW``: the wrapping key comes from ECDH with the token's ``epk``."""

    __slots__ = ("crv", "kid", "private", "public")

    def __init__(self, kid: str, private: AgreementPrivateKey | None, public: AgreementPublicKey) -> None:
        self.kid = kid
        self.private = private
        self.public = public
        self.crv = curve_name(public)

    def open(self, header: dict[str, Any] | None, ek64: str) -> AESGCM:
        wrapped = _wrapped_key(ek64)
        if self.private is None or header is None:
            raise InvalidToken(Reason.UNKNOWN_KEY)
        epk = read_epk(header.get("epk"), self.crv)
        kek = concat_kdf(agree(self.private, epk), _ECDH, 256)
        return _unwrap(kek, wrapped)

    def ephemeral(self) -> AgreementPrivateKey:
        return _NEW_KEY[self.crv]()


_Slot = _Direct | _KeyWrap | _Agreement


def _wrapped_key(ek64: str) -> bytes:
    if len(ek64) != _WRAPPED_CHARS:
        raise InvalidToken(_R_MALFORMED)
    return b64u_decode(ek64)


def _unwrap(kek: bytes, wrapped: bytes) -> AESGCM:
    try:
        cek = aes_key_unwrap(kek, wrapped)
    except InvalidUnwrap:
        raise InvalidToken(_R_SEAL) from None
    return AESGCM(cek)


class JWECodec(CompactCodec[_Slot]):
    """Compact JWE (RFC 7516) with one configured algorithm pair and a key per ``kid``.

    Wire format: ``BASE64URL(header) . BASE64URL(encrypted key) . BASE64URL(iv)
    . BASE64URL(ciphertext) . BASE64URL(tag)``, unpadded, with a fresh random
    96-bit IV per token, AES-256-GCM content encryption and the ASCII of the
    first segment as the associated data. The protected header is compact
    JSON, members in this order::

        dir                {"alg":"dir","enc":"A256GCM","kid":KID}
        A256KW             {"alg":"A256KW","enc":"A256GCM","kid":KID}
        ECDH-ES+A256KW     {"alg":"ECDH-ES+A256KW","enc":"A256GCM","kid":KID,
                            "epk":{"kty":"EC","crv":"P-256","x":X,"y":Y}}
                           (X25519: "epk":{"kty":"OKP","crv":"X25519","x":X})

    The encrypted-key segment is empty for ``dir`` and the 40-byte RFC 3394
    wrap of a fresh 32-byte content key otherwise. No ``apu``/``apv``: the
    Concat KDF runs with empty party information.

    Keys: over a `KeyRing`, ``KID`` is the ring's hex key id and the key is
    HKDF-derived per algorithm (see `statecodec.jose.derived_jwk`); over
    JWKs (`from_jwks`), symmetric ``k`` is used as given and ``KID`` is the
    JWK's ``kid`` (for EC/OKP keys, its RFC 7638 thumbprint when absent).
    The first key seals, every key unseals (for ECDH-ES+A256KW the first
    key's public half seals, and only private keys unseal).

    Usage bound: ``dir`` uses one AES-GCM key with random IVs, so at most
    2^32 tokens per key (as `AESGCMCodec`); ``A256KW`` and ECDH-ES+A256KW
    use a fresh content key per token and are bounded by the key wrap only.
    """

    __slots__ = ("_aad", "_fast", "_members", "_prefix")

    def __init__(
        self,
        keys: KeyRing | Iterable[bytes],
        *,
        alg: Literal["dir", "A256KW"] = "dir",
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
    ) -> None:
        if alg not in ("dir", "A256KW"):
            raise ConfigurationError(
                f"alg must be 'dir' or 'A256KW' over a key ring, got {alg!r}; for ECDH-ES+A256KW use "
                "JWECodec.from_jwks(...) or JWECodec.ecdh(...)"
            )
        ring = keys if isinstance(keys, KeyRing) else KeyRing(keys)
        self._setup(alg, _symmetric_slots(alg, ring_entries(ring, alg)), max_token_length)

    @classmethod
    def ephemeral(
        cls,
        *,
        alg: JWEAlgorithm = "dir",
        curve: Literal["P-256", "X25519"] = "P-256",
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
    ) -> JWECodec:
        """A codec under a key generated now and held only by this process."""
        if alg == _ECDH:
            if curve not in _NEW_KEY:
                raise ConfigurationError("curve must be 'P-256' or 'X25519'")
            return cls.ecdh([_NEW_KEY[curve]()], max_token_length=max_token_length)
        if alg not in ("dir", "A256KW"):
            raise ConfigurationError(f"alg must be one of dir, A256KW, {_ECDH}")
        return cls(KeyRing.generate(), alg=alg, max_token_length=max_token_length)

    @classmethod
    def from_env(
        cls,
        var: str = DEFAULT_KEYS_ENV,
        *,
        alg: Literal["dir", "A256KW"] = "dir",
        environ: Mapping[str, str] | None = None,
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
    ) -> JWECodec:
        """A codec over the key ring in environment variable `var` (``STATECODEC_KEYS``)."""
        return cls(KeyRing.from_env(var, environ), alg=alg, max_token_length=max_token_length)

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        alg: Literal["dir", "A256KW"] = "dir",
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
    ) -> JWECodec:
        """A codec over the key ring in a key file."""
        return cls(KeyRing.from_file(path), alg=alg, max_token_length=max_token_length)

    @classmethod
    def from_jwks(
        cls,
        jwks: object,
        *,
        alg: JWEAlgorithm = "dir",
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
    ) -> JWECodec:
        """A codec over JWKs shared with another JOSE stack: the first key seals.

        ``dir`` and ``A256KW`` take ``"kty": "oct"`` keys whose ``k`` is exactly
        32 bytes, used as given (no derivation), each with a ``kid``.
        ``ECDH-ES+A256KW`` takes P-256 (``EC``) and X25519 (``OKP``) keys: the
        first may be public only (a sealing-only codec, whose unseal refuses
        every token with ``unknown_key``); every other key must be private.
        """
        keys = jwk_list(jwks)
        if alg == _ECDH:
            slots: list[_Slot] = []
            for i, jwk in enumerate(keys):
                private, public = load_agreement_key(jwk, i)
                if private is None and i > 0:
                    raise ConfigurationError(
                        f"keys[{i}] is a public key; only the first key may be public (it seals), "
                        "the others exist to unseal and need their private part \"d\""
                    )
                slots.append(_Agreement(check_kid(jwk.get("kid", thumbprint(public)), i), private, public))
        elif alg in ("dir", "A256KW"):
            entries = [
                load_oct_key(jwk, i, use="enc", algs=frozenset({alg, ENC}), exact=32)
                for i, jwk in enumerate(keys)
            ]
            # The same quality checks as a ring: 32 bytes, not a password, no duplicates.
            KeyRing([k for _, k in entries])
            slots = _symmetric_slots(alg, entries)
        else:
            raise ConfigurationError(f"alg must be one of dir, A256KW, {_ECDH}, got {alg!r}")
        self = cls.__new__(cls)
        self._setup(alg, slots, max_token_length)
        return self

    @classmethod
    def ecdh(
        cls,
        keys: Sequence[AgreementPrivateKey | AgreementPublicKey],
        *,
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
    ) -> JWECodec:
        """ECDH-ES+A256KW over `cryptography` key objects (P-256 or X25519); ``kid`` = RFC 7638 thumbprint.

        The first key seals (its public half); private keys unseal. A public
        first key makes a sealing-only codec.
        """
        if (
            isinstance(keys, (ec.EllipticCurvePrivateKey, x25519.X25519PrivateKey))
            or not isinstance(keys, Iterable)
            or not keys
        ):
            raise ConfigurationError("keys must be a non-empty list of keys: write keys=[key]")
        slots: list[_Slot] = []
        for i, key in enumerate(keys):
            if isinstance(key, (ec.EllipticCurvePrivateKey, x25519.X25519PrivateKey)):
                curve_name(key)
                private: AgreementPrivateKey | None = key
                public = key.public_key()
            elif isinstance(key, (ec.EllipticCurvePublicKey, x25519.X25519PublicKey)) and i == 0:
                private, public = None, key
            else:
                raise ConfigurationError(
                    f"keys[{i}] must be a P-256 or X25519 private key (only keys[0] may be public)"
                )
            slots.append(_Agreement(thumbprint(public), private, public))
        self = cls.__new__(cls)
        self._setup(_ECDH, slots, max_token_length)
        return self

    def _setup(self, alg: str, slots: Sequence[_Slot], max_token_length: int) -> None:
        self._check_max_length(max_token_length)
        self._index(alg, slots)
        primary = self._primary
        self._members = _ECDH_MEMBERS if alg == _ECDH else _SYMMETRIC_MEMBERS
        # Our own header strings map straight to their slot: the common case skips JSON
        # entirely, and accepts nothing the strict parse would refuse.
        self._fast: dict[str, _Slot] = {}
        if isinstance(primary, _Agreement):
            sample = primary.ephemeral().public_key()
            header = self._ecdh_header(primary.kid, sample)
            fixed = len(header) + _WRAPPED_CHARS
            self._prefix = ""
            self._aad = b""
        else:
            for slot in slots:
                self._fast[self._symmetric_header(slot.kid)] = slot
            header = self._symmetric_header(primary.kid)
            fixed = len(header) + (0 if alg == "dir" else _WRAPPED_CHARS)
            self._prefix = header + "."
            self._aad = header.encode("ascii")
        self._fit(max_token_length, fixed + 4 + _IV_CHARS + _TAG_CHARS)

    def _symmetric_header(self, kid: str) -> str:
        return encode_header([("alg", self._alg), ("enc", ENC), ("kid", kid)])

    def _ecdh_header(self, kid: str, epk: AgreementPublicKey) -> str:
        return encode_header([("alg", _ECDH), ("enc", ENC), ("kid", kid), ("epk", dict(epk_members(epk)))])

    def public_jwks(self) -> dict[str, list[dict[str, str]]]:
        """The public JWK Set of an ECDH-ES+A256KW codec, for the stacks that seal to it."""
        if self._alg != _ECDH:
            raise ConfigurationError(
                "symmetric keys have no public half; share the key itself (statecodec.jose.derived_jwk)"
            )
        keys = []
        for slot in self._by_kid.values():
            assert isinstance(slot, _Agreement)
            keys.append({**public_jwk(slot.public), "kid": slot.kid, "use": "enc", "alg": _ECDH})
        return {"keys": keys}

    def seal(self, payload: bytes) -> str:
        """Encrypt `payload` to the sealing key; a fresh IV (and content key unless ``dir``) each call."""
        if not isinstance(payload, bytes) or len(payload) > self._max_payload:
            self._check_payload(payload)
            payload = bytes(payload)
        primary = self._primary
        if isinstance(primary, _Direct):
            prefix, aad, aead = self._prefix + ".", self._aad, primary.aead
        elif isinstance(primary, _KeyWrap):
            ek64, aead = primary.new_content_key()
            prefix, aad = self._prefix + ek64 + ".", self._aad
        else:
            eph = primary.ephemeral()
            kek = concat_kdf(agree(eph, primary.public), _ECDH, 256)
            cek = os.urandom(32)
            header = self._ecdh_header(primary.kid, eph.public_key())
            prefix = header + "." + b64u_encode(aes_key_wrap(kek, cek)) + "."
            aad, aead = header.encode("ascii"), AESGCM(cek)
        iv = os.urandom(12)
        sealed = aead.encrypt(iv, payload, aad)
        return f"{prefix}{b64u_encode(iv)}.{b64u_encode(sealed[:-16])}.{b64u_encode(sealed[-16:])}"

    def unseal(self, token: str) -> bytes:
        """The payload of a JWE this codec's keys can open under its configured algorithms, or `InvalidToken`."""
        h64, ek64, iv64, ct64, tag64 = split_segments(check_token_text(token, self._max_length), 5)
        header: dict[str, Any] | None = None
        slot = self._fast.get(h64)
        if slot is None:
            header, slot = self._read_header(h64)
        if len(iv64) != _IV_CHARS or len(tag64) != _TAG_CHARS:
            raise InvalidToken(_R_MALFORMED)
        iv, ct, tag = b64u_decode(iv64), b64u_decode(ct64), b64u_decode(tag64)
        aead = slot.open(header, ek64)
        try:
            return aead.decrypt(iv, ct + tag, h64.encode("ascii"))
        except InvalidTag:
            raise InvalidToken(_R_SEAL) from None

    def _read_header(self, h64: str) -> tuple[dict[str, Any], _Slot]:
        header = parse_header(h64)
        # Compared, never dispatched on: the configuration alone chose the algorithm.
        if header.get("alg") != self._alg or header.get("enc") != ENC:
            raise InvalidToken(Reason.ALG)
        check_members(header, self._members)
        slot = self._by_kid.get(kid_of(header))
        if slot is None:
            raise InvalidToken(Reason.UNKNOWN_KEY)
        return header, slot

    def __repr__(self) -> str:
        return f"JWECodec(alg={self._alg!r}, enc={ENC!r}, key_ids={list(self._kids)!r})"


def _symmetric_slots(alg: str, entries: Iterable[tuple[str, bytes]]) -> list[_Slot]:
    if alg == "dir":
        return [_Direct(kid, key) for kid, key in entries]
    return [_KeyWrap(kid, key) for kid, key in entries]

