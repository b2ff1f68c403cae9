"""Compact JWS, sign-only: integrity without confidentiality, algorithm fixed by configuration.

Threat: the client reads the whole payload (it is only base64url-encoded)
and may send back anything. The codec guarantees the payload is one a key of
this codec signed, unmodified; it hides nothing. Excluded: the token choosing
its algorithm (``none``, or HS256 keyed with a public key: CVE-2024-33663),
a JWE accepted as a JWS (CVE-2022-3102), ``b64``, ``crit``, embedded or
fetched keys, and unbounded input (CVE-2025-61920). `unseal` checks in this
order and reports the first failure:

1. a ``str`` within ``max_token_length`` (``malformed``, ``oversized``), of three segments (``malformed``);
2. the header, unless byte for byte one this codec emits: parsed strictly (``oversized``,
   ``malformed``, ``header``), ``alg`` as configured (``alg``), no member but ``alg`` and ``kid``
   (``header``), a ``kid`` of this codec (``unknown_key``);
3. a signature of its exact length (43 characters for HS256, 86 for Ed25519), all segments
   canonical base64url (``malformed``);
4. the signature over the first two segments as received (``seal``), an HMAC compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

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
from statecodec.jose._header import compact_json
from statecodec.jose._jwk import Key, key_halves, ring_entries, thumbprint
from statecodec.keys import KeyRing

JWSAlgorithm = Literal["HS256", "EdDSA", "Ed25519"]
_ED_ALGS = ("EdDSA", "Ed25519")
_compare = hmac.compare_digest


class _HMACKey:
    __slots__ = ("header", "key", "kid")
    public = None
    SIGNATURE_CHARS = b64u_len(32)

    def __init__(self, kid: str, key: bytes, header: str) -> None:
        self.kid, self.key, self.header = kid, key, header

    def sign(self, data: bytes) -> bytes:
        return hmac.digest(self.key, data, "sha256")

    def verify(self, signature: bytes, data: bytes) -> bool:
        return _compare(hmac.digest(self.key, data, "sha256"), signature)


class _EdKey:
    __slots__ = ("header", "kid", "private", "public")
    SIGNATURE_CHARS = b64u_len(64)

    def __init__(
        self, kid: str, private: ed25519.Ed25519PrivateKey | None, public: ed25519.Ed25519PublicKey, header: str
    ) -> None:
        self.kid, self.private, self.public, self.header = kid, private, public, header

    def sign(self, data: bytes) -> bytes:
        assert self.private is not None  # construction makes the signing key private
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

    __slots__ = ()
    _ALG_VAR = "STATECODEC_JWS_ALG"
    _ALGS = ("HS256", *_ED_ALGS)

    def __init__(self, keys: KeyRing | Iterable[bytes], *, max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH) -> None:
        ring = keys if isinstance(keys, KeyRing) else KeyRing(keys)
        self._setup("HS256", ring_entries(ring, "HS256"), max_token_length)

    @classmethod
    def ephemeral(cls, *, alg: JWSAlgorithm = "HS256", max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH) -> JWSCodec:
        """A codec under a key generated now and held only by this process."""
        if alg == "HS256":
            return cls(KeyRing.generate(), max_token_length=max_token_length)
        return cls.eddsa([ed25519.Ed25519PrivateKey.generate()], alg=alg, max_token_length=max_token_length)

    @classmethod
    def from_jwks(
        cls, jwks: object, *, alg: JWSAlgorithm = "HS256", max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH
    ) -> JWSCodec:
        """A codec over JWKs shared with another JOSE stack: the first key signs.

        HS256 takes ``"kty": "oct"`` keys of at least 32 bytes with a ``kid``,
        used as given. EdDSA and Ed25519 take Ed25519 ``OKP`` keys; the first must be
        private (it signs), the others may be public (they verify).
        """
        return cls._from_jwks(jwks, alg, max_token_length)

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
        if not isinstance(keys, (list, tuple)) or not keys:
            raise ConfigurationError("keys must be a non-empty list of Ed25519 keys: write keys=[key]")
        return cls._create(alg, [("", key) for key in keys], max_token_length)

    def _slot(self, alg: str, kid: str, key: Key, index: int) -> _Key:
        if alg == "HS256":
            assert isinstance(key, bytes)  # from a ring or "oct" JWKs, the only sources of HS256 keys
            return _HMACKey(kid, key, b64u_encode(compact_json({"alg": alg, "kid": kid})))
        _, private, public = key_halves(key, index, ("Ed25519",))
        if private is None and index == 0:
            raise ConfigurationError('the first key signs, so it must be a private key (with "d")')
        kid = kid or thumbprint(public)
        return _EdKey(kid, private, public, b64u_encode(compact_json({"alg": alg, "kid": kid})))  # type: ignore[arg-type]

    def _seal(self, payload: bytes) -> str:
        signing_input = self._primary.header + "." + b64u_encode(payload)
        return signing_input + "." + b64u_encode(self._primary.sign(signing_input.encode("ascii")))

    def unseal(self, token: str) -> bytes:
        """The payload of a JWS a key of this codec signed, or `InvalidToken`."""
        h64, p64, s64 = split_segments(check_token_text(token, self._max_length), 3)
        key = self._fast.get(h64)
        if key is None:
            key = self._read_header(h64)[1]
        if len(s64) != key.SIGNATURE_CHARS:
            raise InvalidToken(Reason.MALFORMED)
        payload, signature = b64u_decode(p64), b64u_decode(s64)
        # Both segments decoded canonically, so the token text is ASCII here.
        if not key.verify(signature, token[: len(h64) + 1 + len(p64)].encode("ascii")):
            raise InvalidToken(Reason.SEAL)
        return payload


def from_settings(settings: Mapping[str, str]) -> JWSCodec:
    """The builder of ``STATECODEC_CODEC=jws`` in `statecodec.config`: `JWSCodec.from_env` over `settings`."""
    return JWSCodec.from_env(settings)
