"""JOSE codecs: compact JWE (encrypted) and JWS (signed, client-readable) with fixed algorithms.

Threat: JOSE lets a token describe how to verify itself, and that freedom is
the root of the family's long record of vulnerabilities. These codecs read
the header only to compare it with their configuration: the algorithm pair,
the key per ``kid`` and every size are decided before the first token
arrives, and anything else in a header is refused with a reason code.

* `JWECodec`: ``dir`` + ``A256GCM`` (default), ``A256KW`` + ``A256GCM``, or
  ``ECDH-ES+A256KW`` + ``A256GCM`` on P-256 or X25519.
* `JWSCodec`: ``HS256`` over a key ring, or ``EdDSA`` / ``Ed25519``.
* ``derived_jwk(secret, alg)``: the JWK another JOSE stack needs to share a ring codec's tokens.

Only `cryptography` is needed; no general JOSE library is imported.
"""

from statecodec.jose._jwk import derived_jwk as derived_jwk
from statecodec.jose.jwe import JWECodec
from statecodec.jose.jws import JWSCodec

__all__ = ["JWECodec", "JWSCodec"]
