"""Symmetric JOSE keys from a statecodec key ring, and how another stack obtains the same key.

Threat: one secret reused across formats lets a token of one format be read
as another. Each ring secret is stretched with HKDF-SHA256 under a label per
JOSE algorithm, so the ``dir`` key, the ``A256KW`` key and the ``HS256``
key of one secret are unrelated to each other and to the `AESGCMCodec` key.

For another stack to open or mint the same tokens it needs, per secret S:

* ``kid`` = hex(HKDF-SHA256(IKM=S, salt=none, info="statecodec/v1/key-id", L=4))
  (the ring's key id, 8 lowercase hex characters);
* ``k`` = HKDF-SHA256(IKM=S, salt=none, info=LABELS[alg], L=32).

`derived_jwk` computes that JWK; or configure both sides with one raw JWK
(`JWECodec.from_jwks`), whose ``k`` is then used as it is.
"""

from __future__ import annotations

from statecodec._encoding import b64u_encode
from statecodec.errors import ConfigurationError
from statecodec.keys import KeyRing

__all__ = ["LABELS", "derived_jwk", "ring_entries"]

LABELS: dict[str, bytes] = {
    "dir": b"statecodec/v1/jwe/dir+A256GCM",
    "A256KW": b"statecodec/v1/jwe/A256KW+A256GCM",
    "HS256": b"statecodec/v1/jws/HS256",
}
"""HKDF ``info`` per algorithm; frozen: changing one changes every key derived under it."""


def ring_entries(ring: KeyRing, alg: str) -> list[tuple[str, bytes]]:
    """(kid, 32-byte key) for every ring secret under `alg`'s label, in ring order."""
    return [(kid.hex(), key) for kid, key in ring.subkeys(LABELS[alg])]


def derived_jwk(secret: bytes, alg: str) -> dict[str, str]:
    """The symmetric JWK another JOSE stack needs to share tokens with a ring codec. Secret.

    ``alg`` is ``"dir"`` or ``"A256KW"`` (`JWECodec`) or ``"HS256"`` (`JWSCodec`).
    """
    if alg not in LABELS:
        raise ConfigurationError(f"alg must be one of {', '.join(LABELS)}")
    ring = KeyRing([secret])
    ((kid, key),) = ring_entries(ring, alg)
    return {"kty": "oct", "kid": kid, "k": b64u_encode(key)}
