"""The JOSE header and keys: strict header parsing, configured JWKs, ring-derived keys, the received ``epk``.

Threat: the header is attacker-chosen JSON that general JOSE libraries let steer verification (``alg``, ``p2c``,
``zip``, ``jwk``, ``jku``); here it is read with a cap, as canonical base64url of strict UTF-8 JSON (one object,
no duplicate member, no ``NaN``), and only compared with the configuration; a received ``epk`` is checked whole
(`read_epk`). Ring-derived keys (one HKDF label per algorithm, `LABELS`): docs/formats.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.errors import ConfigurationError, InvalidToken, Reason
from statecodec.keys import KeyRing

PrivateKey = ec.EllipticCurvePrivateKey | x25519.X25519PrivateKey | ed25519.Ed25519PrivateKey
PublicKey = ec.EllipticCurvePublicKey | x25519.X25519PublicKey | ed25519.Ed25519PublicKey
Key = bytes | PrivateKey | PublicKey  # a symmetric secret, a private key, or a public key (one way only)

MAX_HEADER_LENGTH = 1024  # base64url characters; our largest header (with a P-256 epk) is about 300
MAX_KID_LENGTH = 128  # configured keys are held to it too, so every token they seal opens


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # JSON parsers disagree on which duplicate wins; two readers must never see two headers, so: refused.
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise InvalidToken(Reason.HEADER)
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(name)


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_object, parse_constant=_no_constant)


def parse_header(segment: str) -> dict[str, Any]:
    """The header object of a token's first segment; else ``oversized``, ``header`` (a duplicate) or ``malformed``."""
    if len(segment) > MAX_HEADER_LENGTH:
        raise InvalidToken(Reason.OVERSIZED)
    raw = b64u_decode(segment)
    # Refused after the handler: a UnicodeDecodeError holds the decoded header and a JSONDecodeError its text
    # (`.doc`), and `raise ... from None` inside a handler would keep either reachable as __context__.
    header: object = None
    with contextlib.suppress(ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        header = _DECODER.decode(raw.decode("utf-8"))  # a duplicate member raises InvalidToken(HEADER), no ValueError
    if type(header) is not dict:
        raise InvalidToken(Reason.MALFORMED)
    return header


def compact_json(value: dict[str, Any]) -> bytes:
    """JSON with no whitespace, members in the given order, ASCII: the exact bytes a header carries."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True).encode("ascii")


# HKDF info per algorithm; frozen: changing one changes every key derived under it.
LABELS: dict[str, bytes] = {
    "dir": b"statecodec/v1/jwe/dir+A256GCM",
    "A256KW": b"statecodec/v1/jwe/A256KW+A256GCM",
    "HS256": b"statecodec/v1/jws/HS256",
}

# Per algorithm: the JWK "use", the JWK "alg" values accepted, and the key types ("oct" or a curve).
PROFILES: dict[str, tuple[str, frozenset[str], tuple[str, ...]]] = {
    "dir": ("enc", frozenset({"dir", "A256GCM"}), ("oct",)),
    "A256KW": ("enc", frozenset({"A256KW", "A256GCM"}), ("oct",)),
    "ECDH-ES+A256KW": ("enc", frozenset({"ECDH-ES+A256KW"}), ("P-256", "X25519")),
    "HS256": ("sig", frozenset({"HS256"}), ("oct",)),
    "EdDSA": ("sig", frozenset({"EdDSA", "Ed25519"}), ("Ed25519",)),
    "Ed25519": ("sig", frozenset({"EdDSA", "Ed25519"}), ("Ed25519",)),
}
_KTY = {"oct": "oct", "P-256": "EC", "X25519": "OKP", "Ed25519": "OKP"}
# Per curve: the public key from its coordinates (x, or x || y), the private key from "d"; ValueError if invalid.
_CURVES: dict[str, tuple[Callable[[bytes], PublicKey], Callable[[bytes], PrivateKey]]] = {
    "P-256": (
        lambda xy: ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b"\x04" + xy),
        lambda d: ec.derive_private_key(int.from_bytes(d, "big"), ec.SECP256R1()),
    ),
    "X25519": (x25519.X25519PublicKey.from_public_bytes, x25519.X25519PrivateKey.from_private_bytes),
    "Ed25519": (ed25519.Ed25519PublicKey.from_public_bytes, ed25519.Ed25519PrivateKey.from_private_bytes),
}


def derived_jwk(secret: bytes, alg: str) -> dict[str, str]:
    """The ``oct`` JWK (secret) another JOSE stack needs to share ring tokens of ``dir``, ``A256KW`` or ``HS256``."""
    if alg not in LABELS:
        raise ConfigurationError(f"alg must be one of {', '.join(LABELS)}")
    ((kid, key),) = KeyRing([secret]).subkeys(LABELS[alg])
    return {"kty": "oct", "kid": kid.hex(), "k": b64u_encode(key)}


def jwk_list(jwks: object) -> list[Mapping[str, Any]]:
    """A JWK Set (``{"keys": [...]}``), a list of JWKs, or one JWK, as a non-empty list."""
    keys = jwks.get("keys", [jwks]) if isinstance(jwks, Mapping) else jwks
    if not isinstance(keys, (list, tuple)) or not keys or not all(isinstance(jwk, Mapping) for jwk in keys):
        raise ConfigurationError('keys must be a JWK Set {"keys": [...]}, a non-empty list of JWK objects, or one JWK')
    return list(keys)


def load_jwk(jwk: Mapping[str, Any], index: int, alg: str) -> tuple[str, Key]:
    """(``kid``, key) of a configured JWK for `alg` (``kid`` empty when a public-key JWK has none): ``k`` as
    given (exactly 32 bytes for a JWE); with ``d``, a private key whose public half must match."""
    use, algs, kinds = PROFILES[alg]
    if "use" in jwk and jwk["use"] != use:
        raise ConfigurationError(f'keys[{index}] has a "use" other than "{use}", the one this codec needs')
    # Type first: an unhashable "alg" (a list, an object) cannot be looked up in a set.
    if "alg" in jwk and (type(jwk["alg"]) is not str or jwk["alg"] not in algs):
        raise ConfigurationError(f'keys[{index}] is for another "alg"; this codec accepts {", ".join(sorted(algs))}')
    kind = "oct" if jwk.get("kty") == "oct" else jwk.get("crv")
    if kind not in kinds or _KTY[kind] != jwk.get("kty"):
        wanted = " or ".join(f'"kty": "{_KTY[k]}"' + (f', "crv": "{k}"' if k != "oct" else "") for k in kinds)
        raise ConfigurationError(f"keys[{index}] must be a key with {wanted}")
    if kind == "oct" and "kid" not in jwk:
        raise ConfigurationError(f'keys[{index}] needs a "kid" member: every token names its key')
    kid = jwk.get("kid", "")
    if "kid" in jwk and (not isinstance(kid, str) or not 0 < len(kid) <= MAX_KID_LENGTH):
        raise ConfigurationError(f'keys[{index}]: "kid" must be a string of 1 to {MAX_KID_LENGTH} characters')
    if kind == "oct":
        return kid, _member(jwk, "k", index, 32 if use == "enc" else None)
    coordinates = _member(jwk, "x", index, 32) + (_member(jwk, "y", index, 32) if kind == "P-256" else b"")
    d = _member(jwk, "d", index, 32) if "d" in jwk else None
    make_public, make_private = _CURVES[kind]
    try:
        public = make_public(coordinates)
        private = None if d is None else make_private(d)
    except ValueError:
        raise ConfigurationError(f"keys[{index}] is not a valid {kind} key") from None
    if private is not None and private.public_key() != public:
        raise ConfigurationError(f'keys[{index}]: "d" does not match the public key')
    return kid, public if private is None else private


def _member(jwk: Mapping[str, Any], name: str, index: int, size: int | None = None) -> bytes:
    value = jwk.get(name)
    if not isinstance(value, str):
        raise ConfigurationError(f'keys[{index}] needs a "{name}" member (unpadded base64url)')
    try:
        raw = b64u_decode(value)
    except InvalidToken:
        raise ConfigurationError(f'keys[{index}]: "{name}" is not canonical unpadded base64url') from None
    if size is not None and len(raw) != size:
        raise ConfigurationError(f'keys[{index}]: "{name}" is {len(raw)} bytes; this key type takes exactly {size}')
    return raw


def key_halves(kid: str, key: object, index: int, curves: tuple[str, ...]) -> tuple[str, PrivateKey | None, PublicKey]:
    """(kid, by default the RFC 7638 thumbprint; private key or None; public key) of a key on one of `curves`."""
    private = key if isinstance(key, PrivateKey) else None
    public = key if private is None else private.public_key()
    if not isinstance(public, PublicKey) or _crv(public) not in curves:
        raise ConfigurationError(f"keys[{index}] must be a {' or '.join(curves)} private or public key")
    thumbprint = hashlib.sha256(compact_json(dict(sorted(public_jwk(public).items())))).digest()  # RFC 7638
    return kid or b64u_encode(thumbprint), private, public


def _crv(public: PublicKey) -> str:
    if isinstance(public, ec.EllipticCurvePublicKey):
        return "P-256" if isinstance(public.curve, ec.SECP256R1) else public.curve.name
    return "X25519" if isinstance(public, x25519.X25519PublicKey) else "Ed25519"


def public_jwk(key: PublicKey) -> dict[str, str]:
    """The public JWK of `key`, members in the order a JOSE header carries them: ``kty, crv, x[, y]``."""
    if isinstance(key, ec.EllipticCurvePublicKey):
        point = key.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
        return {"kty": "EC", "crv": "P-256", "x": b64u_encode(point[1:33]), "y": b64u_encode(point[33:])}
    raw = key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return {"kty": "OKP", "crv": _crv(key), "x": b64u_encode(raw)}


def private_jwk(key: PrivateKey) -> dict[str, str]:
    """The private JWK of `key`: its public members, then ``d`` (32 bytes: the P-256 scalar big-endian, or the
    X25519/Ed25519 private bytes of RFC 8037)."""
    if isinstance(key, ec.EllipticCurvePrivateKey):
        d = key.private_numbers().private_value.to_bytes(32, "big")
    else:
        d = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return {**public_jwk(key.public_key()), "d": b64u_encode(d)}


def read_epk(epk: object, crv: str) -> PublicKey:
    """The validated ephemeral public key of a received header, on curve `crv`, or ``header``."""
    members = {"kty", "crv", "x", "y"} if crv == "P-256" else {"kty", "crv", "x"}
    if type(epk) is not dict or epk.keys() != members or epk["crv"] != crv or epk["kty"] != _KTY[crv]:
        raise InvalidToken(Reason.HEADER)
    values = [epk[name] for name in ("x", "y") if name in members]
    if any(type(value) is not str or len(value) != 43 for value in values):
        raise InvalidToken(Reason.HEADER)
    coordinates = b"".join(b64u_decode(value) for value in values)
    # An X25519 u >= 2^255 - 19 (or with the top bit set) is a second encoding, which a sealer never emits.
    if crv == "X25519" and int.from_bytes(coordinates, "little") >= 2**255 - 19:
        raise InvalidToken(Reason.HEADER)
    try:
        # OpenSSL refuses a P-256 point off the curve: the invalid-curve check.
        return _CURVES[crv][0](coordinates)
    except ValueError:
        raise InvalidToken(Reason.HEADER) from None
