"""Every codec configuration the suites attack, listed once (Vault and KMS ones: the provider suite).

`FOREIGN[name]` is `CODECS[name]`'s configuration under other keys, whose tokens it must refuse. The
ring codecs share one secret on purpose: key reuse across formats is the hardest case for format separation.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519

from statecodec import AESGCMCodec, BoundCodec, Codec, EnvelopeCodec, JWECodec, JWSCodec, XAESGCMCodec
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.envelope import new_wrapped_key
from statecodec.errors import InvalidToken, Reason
from tests.envelope_wrappers import LocalWrapper

SECRET = bytes(range(7, 39))
OTHER = bytes(range(200, 232))
BINDING_KEY = bytes(range(101, 133))
# The configurations built from a list of secrets, primary first (keyword: max_token_length).
RINGS: dict[str, Callable[..., Codec]] = {
    "aesgcm": AESGCMCodec,
    "xaesgcm": XAESGCMCodec,
    "jwe-dir": JWECodec,
    "jwe-a256kw": partial(JWECodec, alg="A256KW"),
    "jws-hs256": JWSCodec,
}


def reason(codec: Any, token: object, **kw: Any) -> Reason:
    """Why `codec.unseal(token, **kw)` refuses: its InvalidToken's reason (any other outcome fails the test)."""
    with pytest.raises(InvalidToken) as info:
        codec.unseal(token, **kw)
    return info.value.reason


def flip(token: str, at: int = -1) -> str:
    """`token` with one bit flipped: in its tag (the last byte of a ring token), or at byte `at`."""
    raw = bytearray(b64u_decode(token))
    raw[at] ^= 0x01
    return b64u_encode(bytes(raw))


def _configurations() -> dict[str, tuple[Codec, Codec]]:
    wrapper, ed_key = LocalWrapper(bytes(range(50, 82))), ed25519.Ed25519PrivateKey.generate()
    p256, x25519_key = ec.generate_private_key(ec.SECP256R1()), x25519.X25519PrivateKey.generate()
    bound = partial(BoundCodec, audience="svc", binding_key=BINDING_KEY)
    mine, foreign = (EnvelopeCodec(wrapper, [new_wrapped_key(wrapper)]) for _ in range(2))  # one KMS key, two rings
    return {
        **{name: (ring([SECRET]), ring([OTHER])) for name, ring in RINGS.items()},
        "envelope": (mine, foreign),
        "bound-aesgcm": (bound(AESGCMCodec([SECRET])), bound(AESGCMCodec([OTHER]))),
        "bound-jws": (bound(JWSCodec([SECRET])), bound(JWSCodec([OTHER]))),
        "jwe-ecdh-p256": (JWECodec.ecdh([p256]), JWECodec.ephemeral(alg="ECDH-ES+A256KW", curve="P-256")),
        "jwe-ecdh-x25519": (JWECodec.ecdh([x25519_key]), JWECodec.ephemeral(alg="ECDH-ES+A256KW", curve="X25519")),
        "jws-eddsa": (JWSCodec.eddsa([ed_key]), JWSCodec.ephemeral(alg="EdDSA")),
        "jws-ed25519": (JWSCodec.eddsa([ed_key], alg="Ed25519"), JWSCodec.ephemeral(alg="Ed25519")),
    }


_PAIRS = _configurations()
CODECS: dict[str, Codec] = {name: pair[0] for name, pair in _PAIRS.items()}
FOREIGN: dict[str, Codec] = {name: pair[1] for name, pair in _PAIRS.items()}
# Sign-only: the token is a function of the payload (and, bound, of the second), which travels readable.
DETERMINISTIC = frozenset({"bound-jws", "jws-hs256", "jws-eddsa", "jws-ed25519"})
