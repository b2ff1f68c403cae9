"""Compact JWS, sign-only: integrity without confidentiality, algorithm fixed by configuration.

Threat: the client reads the whole payload (only base64url-encoded) and may send back anything; the codec
guarantees only that a key of this codec signed it, unmodified. Attacks excluded: docs/jws.md; checks in order:
docs/formats.md.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import Literal, Self

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode, b64u_encode, b64u_len
from statecodec.errors import ConfigurationError, InvalidToken, Reason
from statecodec.jose._compact import CompactCodec, KeySlot
from statecodec.jose._jwk import Key, compact_json, key_halves
from statecodec.keys import KeyRing

__all__ = ["JWSCodec"]

JWSAlgorithm = Literal["HS256", "EdDSA", "Ed25519"]
_ED_ALGS = ("EdDSA", "Ed25519")
_compare = hmac.compare_digest  # one name for the comparison, which a test replaces to prove it is used


class _HMACKey(KeySlot):
    SIGNATURE_CHARS = b64u_len(32)

    def __init__(self, kid: str, key: bytes, header: str) -> None:
        self.kid, self.key, self.header = kid, key, header

    def sign(self, data: bytes) -> bytes:
        return hmac.digest(self.key, data, "sha256")

    def verify(self, signature: bytes, data: bytes) -> bool:
        return _compare(self.sign(data), signature)


class _EdKey(KeySlot):
    public: Ed25519PublicKey
    private: Ed25519PrivateKey | None
    SIGNATURE_CHARS = b64u_len(64)

    def __init__(self, kid: str, private: Ed25519PrivateKey | None, public: Ed25519PublicKey, header: str) -> None:
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
    """Compact JWS (RFC 7515), HS256 over a key ring or Ed25519 (named ``EdDSA``, RFC 8037, or ``Ed25519``, RFC 9864;
    the codec accepts only its own name): the first key signs, every key verifies. Anyone holding a token reads its
    payload, and any claim in it is testable offline: bind principals with a keyed MAC, never a hash. Headers and
    checks: docs/formats.md.
    """

    __slots__ = ()
    _ALG_VAR = "STATECODEC_JWS_ALG"
    _ALGS = ("HS256", *_ED_ALGS)

    @classmethod
    def ephemeral(cls, *, alg: JWSAlgorithm = "HS256", max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH) -> Self:
        """A codec under a key generated now and held only by this process."""
        if alg == "HS256":
            return cls(KeyRing.generate(), max_token_length=max_token_length)
        return cls.eddsa([Ed25519PrivateKey.generate()], alg=alg, max_token_length=max_token_length)

    @classmethod
    def eddsa(
        cls, keys: Sequence[Ed25519PrivateKey | Ed25519PublicKey], *, alg: Literal["EdDSA", "Ed25519"] = "EdDSA",
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
    ) -> Self:
        """Ed25519 over `cryptography` keys: the first (private) signs; ``kid`` = RFC 7638 thumbprint."""
        if alg not in _ED_ALGS:
            raise ConfigurationError("alg must be 'EdDSA' or 'Ed25519'")
        return cls._from_keys(alg, keys, max_token_length)

    def _slot(self, alg: str, kid: str, key: Key, index: int) -> _Key:
        if alg == "HS256":
            assert isinstance(key, bytes)  # from a ring or "oct" JWKs, the only sources of HS256 keys
            return _HMACKey(kid, key, b64u_encode(compact_json({"alg": alg, "kid": kid})))
        kid, private, public = key_halves(kid, key, index, ("Ed25519",))
        if private is None and index == 0:
            raise ConfigurationError('the first key signs, so it must be a private key (with "d")')
        return _EdKey(kid, private, public, b64u_encode(compact_json({"alg": alg, "kid": kid})))  # type: ignore[arg-type]

    def _seal(self, payload: bytes) -> str:
        signing_input = self._primary.header + "." + b64u_encode(payload)
        return signing_input + "." + b64u_encode(self._primary.sign(signing_input.encode("ascii")))

    def unseal(self, token: str) -> bytes:
        """The payload of a JWS a key of this codec signed, or `InvalidToken`."""
        (h64, p64, s64), _, key = self._parse(token, 3)
        if len(s64) != key.SIGNATURE_CHARS:
            raise InvalidToken(Reason.MALFORMED)
        payload, signature = b64u_decode(p64), b64u_decode(s64)
        # Both segments decoded canonically, so the token text is ASCII here.
        if not key.verify(signature, token[: len(h64) + 1 + len(p64)].encode("ascii")):
            raise InvalidToken(Reason.SEAL)
        return payload


from_settings = JWSCodec.from_env  # the builder of STATECODEC_CODEC=jws in statecodec.config
