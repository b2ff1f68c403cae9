"""Keys as JWKs: loading configured keys, RFC 7638 thumbprints, and the ephemeral ``epk``.

Threat: a key given in configuration can be the wrong type, size or curve
for the configured algorithm, and an ``epk`` received in a token is an
attacker's point (invalid-curve and small-subgroup attacks on ECDH-ES).
Configured keys are checked at construction (`ConfigurationError` saying
what a valid one looks like); a received ``epk`` must have exactly the
members of its key type, the curve the recipient's key is on, canonical
coordinates of the curve's size, and a point on the curve (P-256, checked by
OpenSSL through `cryptography`) or a canonical, non-low-order u-coordinate
(X25519); anything else is ``header``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.errors import ConfigurationError, InvalidToken, Reason
from statecodec.jose._header import MAX_KID_LENGTH

__all__ = [
    "AgreementPrivateKey",
    "AgreementPublicKey",
    "check_kid",
    "curve_name",
    "jwk_list",
    "load_agreement_key",
    "load_ed25519_key",
    "load_oct_key",
    "public_jwk",
    "read_epk",
    "thumbprint",
]

AgreementPrivateKey = ec.EllipticCurvePrivateKey | x25519.X25519PrivateKey
AgreementPublicKey = ec.EllipticCurvePublicKey | x25519.X25519PublicKey

_P256 = "P-256"
_X25519 = "X25519"
_COORD = 32
# 2^255 - 19: a u-coordinate at or above it is a non-canonical encoding (RFC 7748 section 5).
_X25519_P = 2**255 - 19
_EC_EPK = frozenset({"kty", "crv", "x", "y"})
_OKP_EPK = frozenset({"kty", "crv", "x"})


def jwk_list(jwks: object) -> list[Mapping[str, Any]]:
    """A JWK Set (``{"keys": [...]}``), a list of JWKs, or one JWK, as a non-empty list."""
    keys = jwks.get("keys", [jwks]) if isinstance(jwks, Mapping) else jwks
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise ConfigurationError('keys must be a JWK Set {"keys": [...]}, a list of JWK objects, or one JWK')
    out = list(keys)
    if not out:
        raise ConfigurationError("the JWK Set is empty; give at least one key")
    for i, jwk in enumerate(out):
        if not isinstance(jwk, Mapping):
            raise ConfigurationError(f"keys[{i}] must be a JWK object, got {type(jwk).__name__}")
    return out


def _member(jwk: Mapping[str, Any], name: str, index: int) -> bytes:
    value = jwk.get(name)
    if not isinstance(value, str):
        raise ConfigurationError(f'keys[{index}] needs a "{name}" member (unpadded base64url)')
    try:
        return b64u_decode(value)
    except InvalidToken:
        raise ConfigurationError(
            f'keys[{index}]: "{name}" is not canonical unpadded base64url (alphabet A-Z a-z 0-9 - _)'
        ) from None


def _check_use(jwk: Mapping[str, Any], index: int, use: str, algs: frozenset[str]) -> None:
    # Values are quoted only when they are short strings: a misplaced member may hold anything.
    if "use" in jwk and jwk["use"] != use:
        raise ConfigurationError(f'keys[{index}] has "use": {_quote(jwk["use"])}; this codec needs "{use}"')
    # Type first: an unhashable "alg" (a list, an object) cannot be looked up in a set.
    if "alg" in jwk and (type(jwk["alg"]) is not str or jwk["alg"] not in algs):
        raise ConfigurationError(
            f'keys[{index}] is for "alg": {_quote(jwk["alg"])}; this codec accepts {", ".join(sorted(algs))}'
        )


def _quote(value: object) -> str:
    return repr(value) if type(value) is str and len(value) <= 32 else f"<{type(value).__name__}>"


def configured_kid(jwk: Mapping[str, Any], index: int, default: str | None) -> str:
    """The JWK's ``kid``, else `default`; every token carries one, so one is required."""
    kid = jwk.get("kid", default)
    if kid is None:
        raise ConfigurationError(f'keys[{index}] needs a "kid" member: every token names its key')
    return check_kid(kid, index)


def check_kid(kid: object, index: int) -> str:
    """`kid` if it is one a token header may carry (`MAX_KID_LENGTH`), else `ConfigurationError`."""
    if not isinstance(kid, str) or not 0 < len(kid) <= MAX_KID_LENGTH:
        raise ConfigurationError(f'keys[{index}]: "kid" must be a string of 1 to {MAX_KID_LENGTH} characters')
    return kid


def load_oct_key(
    jwk: Mapping[str, Any], index: int, *, use: str, algs: frozenset[str], exact: int | None
) -> tuple[str, bytes]:
    """(kid, k) of a symmetric JWK; `exact` is the required size in bytes, else at least 32."""
    if jwk.get("kty") != "oct":
        raise ConfigurationError(f'keys[{index}] must have "kty": "oct" (a symmetric key)')
    _check_use(jwk, index, use, algs)
    k = _member(jwk, "k", index)
    if exact is not None and len(k) != exact:
        raise ConfigurationError(
            f'keys[{index}]: "k" is {len(k)} bytes; this algorithm takes exactly {exact} bytes '
            "(generate one with python -c \"import secrets; print(secrets.token_urlsafe(32))\")"
        )
    return configured_kid(jwk, index, None), k


def load_agreement_key(
    jwk: Mapping[str, Any], index: int
) -> tuple[AgreementPrivateKey | None, AgreementPublicKey]:
    """(private key or None, public key) of a P-256 ``EC`` or X25519 ``OKP`` JWK."""
    _check_use(jwk, index, "enc", frozenset({"ECDH-ES+A256KW"}))
    kty, crv = jwk.get("kty"), jwk.get("crv")
    if kty == "EC" and crv == _P256:
        x, y = _member(jwk, "x", index), _member(jwk, "y", index)
        if len(x) != _COORD or len(y) != _COORD:
            raise ConfigurationError(f"keys[{index}]: P-256 coordinates are 32 bytes each")
        try:
            public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b"\x04" + x + y)
        except ValueError:
            raise ConfigurationError(f"keys[{index}] is not a point on P-256") from None
        if "d" not in jwk:
            return None, public
        d = _member(jwk, "d", index)
        if len(d) != _COORD:
            raise ConfigurationError(f'keys[{index}]: a P-256 "d" is 32 bytes')
        try:
            private = ec.derive_private_key(int.from_bytes(d, "big"), ec.SECP256R1())
        except ValueError:
            raise ConfigurationError(f'keys[{index}]: "d" is not a valid P-256 private scalar') from None
        if private.public_key() != public:
            raise ConfigurationError(f'keys[{index}]: "d" does not match "x" and "y"')
        return private, public
    if kty == "OKP" and crv == _X25519:
        xb = _member(jwk, "x", index)
        if len(xb) != _COORD:
            raise ConfigurationError(f'keys[{index}]: an X25519 "x" is 32 bytes')
        public_x = x25519.X25519PublicKey.from_public_bytes(xb)
        if "d" not in jwk:
            return None, public_x
        d = _member(jwk, "d", index)
        if len(d) != _COORD:
            raise ConfigurationError(f'keys[{index}]: an X25519 "d" is 32 bytes')
        private_x = x25519.X25519PrivateKey.from_private_bytes(d)
        if private_x.public_key() != public_x:
            raise ConfigurationError(f'keys[{index}]: "d" does not match "x"')
        return private_x, public_x
    raise ConfigurationError(
        f'keys[{index}] must be a P-256 key ("kty": "EC", "crv": "P-256") or an X25519 key '
        '("kty": "OKP", "crv": "X25519")'
    )


def load_ed25519_key(
    jwk: Mapping[str, Any], index: int
) -> tuple[ed25519.Ed25519PrivateKey | None, ed25519.Ed25519PublicKey]:
    """(private key or None, public key) of an Ed25519 ``OKP`` JWK (RFC 8037)."""
    _check_use(jwk, index, "sig", frozenset({"EdDSA", "Ed25519"}))
    if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        raise ConfigurationError(f'keys[{index}] must be an Ed25519 key ("kty": "OKP", "crv": "Ed25519")')
    x = _member(jwk, "x", index)
    if len(x) != _COORD:
        raise ConfigurationError(f'keys[{index}]: an Ed25519 "x" is 32 bytes')
    try:
        public = ed25519.Ed25519PublicKey.from_public_bytes(x)
    except ValueError:
        raise ConfigurationError(f'keys[{index}]: "x" is not an Ed25519 public key') from None
    if "d" not in jwk:
        return None, public
    d = _member(jwk, "d", index)
    if len(d) != _COORD:
        raise ConfigurationError(f'keys[{index}]: an Ed25519 "d" is 32 bytes')
    private = ed25519.Ed25519PrivateKey.from_private_bytes(d)
    if private.public_key() != public:
        raise ConfigurationError(f'keys[{index}]: "d" does not match "x"')
    return private, public


def curve_name(key: AgreementPublicKey | AgreementPrivateKey | ed25519.Ed25519PublicKey) -> str:
    """The JWK ``crv`` of a supported key; `ConfigurationError` for any other curve."""
    if isinstance(key, (x25519.X25519PublicKey, x25519.X25519PrivateKey)):
        return _X25519
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "Ed25519"
    if isinstance(key, (ec.EllipticCurvePublicKey, ec.EllipticCurvePrivateKey)) and isinstance(
        key.curve, ec.SECP256R1
    ):
        return _P256
    raise ConfigurationError("supported keys are P-256 and X25519 (ECDH-ES+A256KW) and Ed25519 (EdDSA)")


def public_jwk(key: AgreementPublicKey | ed25519.Ed25519PublicKey) -> dict[str, str]:
    """The public JWK of `key`, members in RFC 7638 order (which is lexicographic)."""
    crv = curve_name(key)
    if isinstance(key, ec.EllipticCurvePublicKey):
        point = key.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
        return {"crv": crv, "kty": "EC", "x": b64u_encode(point[1:33]), "y": b64u_encode(point[33:])}
    raw = key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return {"crv": crv, "kty": "OKP", "x": b64u_encode(raw)}


def thumbprint(key: AgreementPublicKey | ed25519.Ed25519PublicKey) -> str:
    """The RFC 7638 SHA-256 JWK thumbprint of a public key, base64url: the default ``kid``."""
    canonical = json.dumps(public_jwk(key), separators=(",", ":"), sort_keys=True)
    return b64u_encode(hashlib.sha256(canonical.encode("ascii")).digest())


def epk_members(key: AgreementPublicKey) -> list[tuple[str, str]]:
    """The ``epk`` value a sealer emits: members in the order ``kty, crv, x[, y]``."""
    jwk = public_jwk(key)
    order = ("kty", "crv", "x", "y") if jwk["kty"] == "EC" else ("kty", "crv", "x")
    return [(name, jwk[name]) for name in order]


def read_epk(epk: object, crv: str) -> AgreementPublicKey:
    """The validated ephemeral public key of a received header, on curve `crv`, or ``header``."""
    if type(epk) is not dict:
        raise InvalidToken(Reason.HEADER)
    if epk.get("crv") != crv:
        raise InvalidToken(Reason.HEADER)
    try:
        if crv == _P256:
            if epk.keys() != _EC_EPK or epk["kty"] != "EC":
                raise InvalidToken(Reason.HEADER)
            x, y = _coordinate(epk["x"]), _coordinate(epk["y"])
            # from_encoded_point refuses any (x, y) not on P-256: the invalid-curve check.
            return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b"\x04" + x + y)
        if epk.keys() != _OKP_EPK or epk["kty"] != "OKP":
            raise InvalidToken(Reason.HEADER)
        u = _coordinate(epk["x"])
        # Non-canonical u (top bit set, or >= p) has two encodings; a sealer never emits one.
        if int.from_bytes(u, "little") >= _X25519_P:
            raise InvalidToken(Reason.HEADER)
        return x25519.X25519PublicKey.from_public_bytes(u)
    except ValueError:
        raise InvalidToken(Reason.HEADER) from None


def _coordinate(value: object) -> bytes:
    if type(value) is not str or len(value) != 43:
        raise InvalidToken(Reason.HEADER)
    return b64u_decode(value)
