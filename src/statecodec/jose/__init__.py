"""JOSE codecs: compact JWE (encrypted) and JWS (signed, client-readable), on `cryptography` alone.

Threat: JOSE lets a token describe how to verify itself. These codecs read a header only to compare it with
their configuration, and refuse anything else in it with a reason code.
"""

from statecodec.jose._jwk import derived_jwk as derived_jwk
from statecodec.jose.jwe import JWECodec
from statecodec.jose.jws import JWSCodec

__all__ = ["JWECodec", "JWSCodec"]
