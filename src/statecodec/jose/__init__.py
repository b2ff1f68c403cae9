"""JOSE codecs: compact JWE (encrypted) and JWS (signed, client-readable), on `cryptography` alone.

Threat: JOSE lets a token describe how to verify itself, the root of the family's long record of
vulnerabilities. These codecs read a header only to compare it with their configuration (algorithms, key per
``kid``, sizes), and refuse anything else in it with a reason code. ``derived_jwk(secret, alg)`` gives another
JOSE stack the key of a ring codec.
"""

from statecodec.jose._jwk import derived_jwk as derived_jwk
from statecodec.jose.jwe import JWECodec
from statecodec.jose.jws import JWSCodec

__all__ = ["JWECodec", "JWSCodec"]
