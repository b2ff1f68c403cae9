"""Compact JWS, sign-only: integrity without confidentiality, algorithm fixed by configuration.

Threat: the client reads the whole payload (it is only base64url-encoded)
and may send back anything. The codec guarantees the payload is one a key of
this codec signed, unmodified; it hides nothing. The failures it excludes:
the token choosing its algorithm (``none``, or HS256 verified with a public
key: CVE-2024-33663 and its ancestors), a JWE accepted as a JWS
(CVE-2022-3102), unencoded payloads (``b64``), ``crit`` extensions, embedded
or fetched keys, and unbounded input (CVE-2025-61920). Checks, in order,
each with its reason:

1. a ``str`` no longer than ``max_token_length`` (``malformed``, ``oversized``);
2. exactly three segments (``malformed``);
3. the protected header, when it is not byte-for-byte one this codec emits:
   at most 1024 characters of canonical base64url, strict UTF-8 JSON with no
   duplicate member (``oversized``, ``malformed``, ``header``); ``alg`` equal
   to the configured one (``alg``); no member but ``alg`` and ``kid``
   (``header``); a string ``kid`` naming a key of this codec (``header``,
   ``unknown_key``);
4. a signature of the algorithm's exact length (43 characters for HS256,
   86 for Ed25519), then payload and signature as canonical base64url
   (``malformed``);
5. the signature over the two first segments as received (``seal``), HMAC
   compared in constant time.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ed25519

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
from statecodec.jose._header import check_members, encode_header, kid_of, parse_header
from statecodec.jose._jwk import check_kid, jwk_list, load_ed25519_key, load_oct_key, public_jwk, thumbprint
from statecodec.jose._ring import ring_entries
from statecodec.keys import DEFAULT_KEYS_ENV, KeyRing

__all__ = ["JWSCodec"]

JWSAlgorithm = Literal["HS256", "EdDSA", "Ed25519"]
_ED_ALGS = ("EdDSA", "Ed25519")
_MEMBERS = frozenset({"alg", "kid"})
_R_MALFORMED = Reason.MALFORMED
_R_SEAL = Reason.SEAL
_compare = hmac.compare_digest
_hmac = hmac.digest


class _HMACKey:
    __slots__ = ("key", "kid")

    SIGNATURE_CHARS = b64u_len(32)

    def __init__(self, kid: str, key: bytes) -> None:
        self.kid = kid
        self.key = key

    def sign(self, data: bytes) -> bytes:
        return _hmac(self.key, data, "sha256")

    def verify(self, signature: bytes, data: bytes) -> bool:
        return _compare(_hmac(self.key, data, "sha256"), signature)


class _EdKey:
    __slots__ = ("kid", "private", "public")

    SIGNATURE_CHARS = b64u_len(64)

    def __init__(
        self, kid: str, private: ed25519.Ed25519PrivateKey | None, public: ed25519.Ed25519PublicKey
    ) -> None:
        self.kid = kid
        self.private = private
        self.public = public

    def sign(self, data: bytes) -> bytes:
        assert self.private is not None  # construction makes the sealing key private
        return self.private.sign(data)

    def verify(self, signature: bytes, data: bytes) -> bool:
        try:
            self.public.verify(signature, data)
        except InvalidSignature:
            return False
        return True


_Key = _HMACKey | _EdKey


class JWSCodec(CompactCodec[_Key]):
    """Compact JWS (RFC 7515), HS256 over a key ring, or Ed25519 signatures.

    Ed25519 signatures are named ``EdDSA`` (RFC 8037, the name most stacks
    know) or ``Ed25519`` (RFC 9864's fully-specified name, which deprecates
    ``EdDSA``); the codec emits and accepts exactly the one it is configured with.

    Wire format: ``BASE64URL(header) . BASE64URL(payload) . BASE64URL(signature)``,
    unpadded; the payload is readable by anyone holding the token. The
    protected header is compact JSON, members in this order::

        HS256      {"alg":"HS256","kid":KID}
        EdDSA      {"alg":"EdDSA","kid":KID}
        Ed25519    {"alg":"Ed25519","kid":KID}

    The signature is HMAC-SHA-256 (32 bytes) or Ed25519 (64 bytes) over the
    ASCII of ``segment1 . segment2``. Over a `KeyRing`, ``KID`` is the ring's
    hex key id and the HMAC key is HKDF-derived (`statecodec.jose.derived_jwk`
    gives it to another stack); over JWKs (`from_jwks`), ``k`` (at least 32
    bytes) is used as given and ``KID`` is the JWK's ``kid`` (an Ed25519
    key's RFC 7638 thumbprint when absent). The first key signs, every key
    verifies. HMAC has no usage bound; Ed25519 is deterministic.

    Because the payload is public, any claim in it (a principal, a target, an
    argument digest) is readable and testable offline: bind principals with a
    keyed MAC (the binding layer does), never with a plain hash.
    """

    __slots__ = ("_fast", "_prefix")

    def __init__(
        self,
        keys: KeyRing | Iterable[bytes],
        *,
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
    ) -> None:
        ring = keys if isinstance(keys, KeyRing) else KeyRing(keys)
        self._setup("HS256", [_HMACKey(kid, key) for kid, key in ring_entries(ring, "HS256")], max_token_length)

    @classmethod
    def ephemeral(
        cls, *, alg: JWSAlgorithm = "HS256", max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH
    ) -> JWSCodec:
        """A codec under a key generated now and held only by this process."""
        if alg in _ED_ALGS:
            key = ed25519.Ed25519PrivateKey.generate()
            return cls.eddsa([key], alg=alg, max_token_length=max_token_length)  # type: ignore[arg-type]
        if alg != "HS256":
            raise ConfigurationError("alg must be 'HS256', 'EdDSA' or 'Ed25519'")
        return cls(KeyRing.generate(), max_token_length=max_token_length)

    @classmethod
    def from_env(
        cls,
        var: str = DEFAULT_KEYS_ENV,
        *,
        environ: Mapping[str, str] | None = None,
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
    ) -> JWSCodec:
        """An HS256 codec over the key ring in environment variable `var` (``STATECODEC_KEYS``)."""
        return cls(KeyRing.from_env(var, environ), max_token_length=max_token_length)

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH
    ) -> JWSCodec:
        """An HS256 codec over the key ring in a key file."""
        return cls(KeyRing.from_file(path), max_token_length=max_token_length)

    @classmethod
    def from_jwks(
        cls, jwks: object, *, alg: JWSAlgorithm = "HS256", max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH
    ) -> JWSCodec:
        """A codec over JWKs shared with another JOSE stack: the first key signs.

        HS256 takes ``"kty": "oct"`` keys of at least 32 bytes with a ``kid``,
        used as given. EdDSA and Ed25519 take Ed25519 ``OKP`` keys; the first must be
        private (it signs), the others may be public (they verify).
        """
        keys = jwk_list(jwks)
        slots: list[_Key] = []
        if alg == "HS256":
            entries = [
                load_oct_key(jwk, i, use="sig", algs=frozenset({"HS256"}), exact=None)
                for i, jwk in enumerate(keys)
            ]
            KeyRing([k for _, k in entries])  # 32 bytes at least, not a password, no duplicates
            slots = [_HMACKey(kid, k) for kid, k in entries]
        elif alg in _ED_ALGS:
            for i, jwk in enumerate(keys):
                private, public = load_ed25519_key(jwk, i)
                slots.append(_EdKey(check_kid(jwk.get("kid", thumbprint(public)), i), private, public))
        else:
            raise ConfigurationError(f"alg must be 'HS256', 'EdDSA' or 'Ed25519', got {alg!r}")
        self = cls.__new__(cls)
        self._setup(alg, slots, max_token_length)
        return self

    @classmethod
    def eddsa(
        cls,
        keys: Sequence[ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey],
        *,
        alg: Literal["EdDSA", "Ed25519"] = "EdDSA",
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
    ) -> JWSCodec:
        """Ed25519 over `cryptography` keys: the first (private) signs; ``kid`` = RFC 7638 thumbprint."""
        if alg not in _ED_ALGS:
            raise ConfigurationError("alg must be 'EdDSA' or 'Ed25519'")
        if isinstance(keys, ed25519.Ed25519PrivateKey) or not isinstance(keys, Iterable) or not keys:
            raise ConfigurationError("keys must be a non-empty list of Ed25519 keys: write keys=[key]")
        slots: list[_Key] = []
        for i, key in enumerate(keys):
            if isinstance(key, ed25519.Ed25519PrivateKey):
                slots.append(_EdKey(thumbprint(key.public_key()), key, key.public_key()))
            elif isinstance(key, ed25519.Ed25519PublicKey):
                slots.append(_EdKey(thumbprint(key), None, key))
            else:
                raise ConfigurationError(f"keys[{i}] must be an Ed25519 private or public key")
        self = cls.__new__(cls)
        self._setup(alg, slots, max_token_length)
        return self

    def _setup(self, alg: str, slots: Sequence[_Key], max_token_length: int) -> None:
        self._check_max_length(max_token_length)
        primary = slots[0]
        if isinstance(primary, _EdKey) and primary.private is None:
            raise ConfigurationError("the first key signs, so it must be a private key (with \"d\")")
        self._index(alg, slots)
        # Our own header strings skip JSON; the strict parse accepts a superset of them.
        self._fast = {encode_header([("alg", alg), ("kid", slot.kid)]): slot for slot in slots}
        header = encode_header([("alg", alg), ("kid", primary.kid)])
        self._prefix = header + "."
        self._fit(max_token_length, len(header) + 2 + primary.SIGNATURE_CHARS)

    def public_jwks(self) -> dict[str, list[dict[str, str]]]:
        """The public JWK Set of an Ed25519 codec, for the stacks that verify its tokens."""
        keys = []
        for slot in self._by_kid.values():
            if not isinstance(slot, _EdKey):
                raise ConfigurationError(
                    "HMAC keys have no public half; share the key itself (statecodec.jose.derived_jwk)"
                )
            keys.append({**public_jwk(slot.public), "kid": slot.kid, "use": "sig", "alg": self._alg})
        return {"keys": keys}

    def seal(self, payload: bytes) -> str:
        """Sign `payload` under the first key. The payload travels readable, base64url-encoded."""
        if not isinstance(payload, bytes) or len(payload) > self._max_payload:
            self._check_payload(payload)
            payload = bytes(payload)
        signing_input = self._prefix + b64u_encode(payload)
        return signing_input + "." + b64u_encode(self._primary.sign(signing_input.encode("ascii")))

    def unseal(self, token: str) -> bytes:
        """The payload of a JWS a key of this codec signed, or `InvalidToken`."""
        h64, p64, s64 = split_segments(check_token_text(token, self._max_length), 3)
        key = self._fast.get(h64)
        if key is None:
            key = self._read_header(h64)
        if len(s64) != key.SIGNATURE_CHARS:
            raise InvalidToken(_R_MALFORMED)
        payload, signature = b64u_decode(p64), b64u_decode(s64)
        # Both segments decoded canonically, so the token text is ASCII here.
        if not key.verify(signature, token[: len(h64) + 1 + len(p64)].encode("ascii")):
            raise InvalidToken(_R_SEAL)
        return payload

    def _read_header(self, h64: str) -> _Key:
        header: dict[str, Any] = parse_header(h64)
        if header.get("alg") != self._alg:
            raise InvalidToken(Reason.ALG)
        check_members(header, _MEMBERS)
        key = self._by_kid.get(kid_of(header))
        if key is None:
            raise InvalidToken(Reason.UNKNOWN_KEY)
        return key

    def __repr__(self) -> str:
        return f"JWSCodec(alg={self._alg!r}, key_ids={list(self._kids)!r})"
