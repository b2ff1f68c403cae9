"""ECDH-ES key agreement and the Concat KDF of RFC 7518 section 4.6.

Threat: a received ephemeral key chosen to leak the recipient's private key
(invalid-curve points on P-256, low-order points on X25519). The point has
been validated by `read_epk` before it reaches `agree`; `agree` also refuses
an all-zero X25519 result, the signature of a low-order point, so a bad
point can never produce a usable key-encryption key.
"""

from __future__ import annotations

import hashlib
import struct

from cryptography.hazmat.primitives.asymmetric import ec, x25519

from statecodec.errors import InvalidToken, Reason
from statecodec.jose._jwk import AgreementPrivateKey, AgreementPublicKey

__all__ = ["agree", "concat_kdf"]

_ZERO = bytes(32)


def concat_kdf(z: bytes, algorithm_id: str, bits: int, apu: bytes = b"", apv: bytes = b"") -> bytes:
    """Concat KDF (NIST SP 800-56A, single-step, SHA-256) as JOSE profiles it.

    ``OtherInfo = len||AlgorithmID || len||PartyUInfo || len||PartyVInfo ||
    SuppPubInfo(keydatalen in bits)``, lengths as 32-bit big-endian. One
    SHA-256 round suffices for keys up to 256 bits, the only sizes used here.
    """
    if not 0 < bits <= 256 or bits % 8:
        raise ValueError("key sizes here are 8 to 256 bits, whole bytes")
    alg = algorithm_id.encode("ascii")
    other = (
        struct.pack(">I", len(alg)) + alg
        + struct.pack(">I", len(apu)) + apu
        + struct.pack(">I", len(apv)) + apv
        + struct.pack(">I", bits)
    )
    return hashlib.sha256(b"\x00\x00\x00\x01" + z + other).digest()[: bits // 8]


def agree(private: AgreementPrivateKey, public: AgreementPublicKey) -> bytes:
    """The shared secret Z of `private` and a validated `public` on the same curve, or ``header``."""
    try:
        if isinstance(private, x25519.X25519PrivateKey) and isinstance(public, x25519.X25519PublicKey):
            z = private.exchange(public)
        elif isinstance(private, ec.EllipticCurvePrivateKey) and isinstance(public, ec.EllipticCurvePublicKey):
            z = private.exchange(ec.ECDH(), public)
        else:
            raise InvalidToken(Reason.HEADER)
    except ValueError:
        # OpenSSL refuses points it cannot use, including an all-zero X25519 result.
        raise InvalidToken(Reason.HEADER) from None
    if z == _ZERO:
        raise InvalidToken(Reason.HEADER)
    return z
