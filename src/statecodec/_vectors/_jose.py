"""What the JWE and JWS vectors files share: key configuration members and forged compact tokens.

A JOSE vector names its codec configuration itself: ``alg``, and either
``ring`` (``STATECODEC_KEYS`` items, the key ring a ring codec derives its
keys from; ``sealed_with`` names the sealing key) or ``jwks`` (JWKs used as
given, the first sealing). Forged tokens here change one thing in a real
token so that exactly one documented check refuses it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from statecodec._encoding import b64u_decode, b64u_encode
from statecodec._vectors import _schema as s
from statecodec._vectors.ring import _K0, _K1
from statecodec.errors import ConfigurationError
from statecodec.jose import derived_jwk
from statecodec.jose._jwk import AgreementPrivateKey, public_jwk

__all__ = [
    "check_keys",
    "derived_jwk_problems",
    "header_segment",
    "private_jwk",
    "ring_secrets",
    "sealing_ring",
    "symmetric_keys",
]


def check_keys(v: Mapping[str, Any], where: str, algs: Sequence[str], *, valid: bool) -> None:
    """Exactly one of ``ring``/``jwks``; ``sealed_with`` and ``derived_jwk`` only beside a ring."""
    if v["alg"] not in algs:
        raise ConfigurationError(f"{where}.alg must be one of {', '.join(algs)}")
    if ("ring" in v) == ("jwks" in v):
        raise ConfigurationError(f"{where}: give exactly one of ring and jwks")
    if "ring" not in v:
        for member in ("sealed_with", "derived_jwk"):
            if member in v:
                raise ConfigurationError(f"{where}.{member} needs a ring")
    elif valid:
        if "sealed_with" not in v:
            raise ConfigurationError(f"{where}: missing member(s) ['sealed_with']")
        if v["sealed_with"] >= len(v["ring"]):
            raise ConfigurationError(f"{where}.sealed_with is past the end of ring")


KEY_MEMBERS: dict[str, s.Kind] = {"ring": s.b64u_list, "jwks": s.jwk_list}


def symmetric_keys() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The generated symmetric vectors' key members, fresh each call: a ring, a rotated ring, a raw JWK.

    The ring secrets are the ring formats' test secrets.
    """
    ring = {"ring": [b64u_encode(_K0)], "sealed_with": 0}
    rotated = {"ring": [b64u_encode(_K1), b64u_encode(_K0)], "sealed_with": 1}
    raw = {"jwks": [{"kty": "oct", "kid": "raw-1", "k": b64u_encode(bytes(range(0xA0, 0xC0)))}]}
    return ring, rotated, raw


def ring_secrets(v: Mapping[str, Any]) -> list[bytes]:
    return [b64u_decode(k) for k in v["ring"]]


def sealing_ring(v: Mapping[str, Any]) -> list[bytes]:
    """The ring from the sealing key on: its first key seals, as the vector's token was sealed."""
    return ring_secrets(v)[v["sealed_with"] :]


def derived_jwk_problems(
    v: Mapping[str, Any], payload: bytes, from_jwks: Callable[..., Any]
) -> list[str]:
    """Whether a ring vector's ``derived_jwk`` is the one derived from its sealing secret, and opens its token."""
    if "derived_jwk" not in v:
        return []
    if derived_jwk(ring_secrets(v)[v["sealed_with"]], v["alg"]) != v["derived_jwk"]:
        return ["derived_jwk differs from the JWK derived from ring[sealed_with]"]
    shared = from_jwks([v["derived_jwk"]], alg=v["alg"])
    return [f"derived_jwk: {p}" for p in s.opens(lambda: shared.unseal(v["token"]), payload)]


def private_jwk(key: AgreementPrivateKey | ed25519.Ed25519PrivateKey) -> dict[str, str]:
    """A private P-256, X25519 or Ed25519 JWK (``d`` included: test keys only)."""
    if isinstance(key, ec.EllipticCurvePrivateKey):
        d = key.private_numbers().private_value.to_bytes(32, "big")
    else:
        d = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return {**public_jwk(key.public_key()), "d": b64u_encode(d)}


def header_segment(members: Mapping[str, Any]) -> str:
    return b64u_encode(json.dumps(members, separators=(",", ":")).encode())
