"""Configuration builders for the ``jwe`` and ``jws`` codec kinds of `statecodec.config`.

Threat: a deployment that meant ECDH-ES or EdDSA but silently got a ring
codec, or read keys from the wrong file. The algorithm is named explicitly,
JWKs come from one file, and every mistake is a `ConfigurationError` at
start-up that names the variable and never echoes key material.

Variables (besides ``STATECODEC_CODEC=jwe|jws`` and ``STATECODEC_MAX_TOKEN_LENGTH``):

``STATECODEC_JWE_ALG``
    ``dir`` (default), ``A256KW`` or ``ECDH-ES+A256KW``; ``enc`` is always ``A256GCM``.
``STATECODEC_JWS_ALG``
    ``HS256`` (default), ``EdDSA`` or ``Ed25519`` (RFC 9864's name for EdDSA over Ed25519).
``STATECODEC_JWKS_FILE``
    Path of a JSON JWK Set (``{"keys": [...]}``) shared with another JOSE
    stack; the first key seals. Required for ``ECDH-ES+A256KW``, ``EdDSA``
    and ``Ed25519``; for the symmetric algorithms it replaces the key ring, and each
    ``k`` is used as given. Secret.
``STATECODEC_KEYS`` / ``STATECODEC_KEYS_FILE``
    The key ring, for ``dir``, ``A256KW`` and ``HS256`` when no JWK Set is
    given: keys and ``kid`` are derived from each secret (`statecodec.jose.derived_jwk`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, cast

from statecodec._files import load_json_setting
from statecodec.config import max_token_length_setting, read_settings_file, ring_from_settings, setting
from statecodec.errors import ConfigurationError
from statecodec.jose.jwe import JWEAlgorithm, JWECodec
from statecodec.jose.jws import JWSAlgorithm, JWSCodec

__all__ = ["JWE_ALG_VAR", "JWKS_FILE_VAR", "JWS_ALG_VAR", "build_jwe", "build_jws"]

JWE_ALG_VAR = "STATECODEC_JWE_ALG"
JWS_ALG_VAR = "STATECODEC_JWS_ALG"
JWKS_FILE_VAR = "STATECODEC_JWKS_FILE"
_MAX_JWKS_BYTES = 1024 * 1024


def _jwks(settings: Mapping[str, str]) -> Any:
    path = setting(settings, JWKS_FILE_VAR, required=False)
    if path is None:
        return None
    p = Path(path)
    raw = read_settings_file(p, _MAX_JWKS_BYTES, f"{JWKS_FILE_VAR} {p}", "is it a JWK Set?")
    return load_json_setting(raw, f"{JWKS_FILE_VAR} {p}")


def _alg(settings: Mapping[str, str], var: str, allowed: tuple[str, ...]) -> str:
    alg = setting(settings, var, required=False) or allowed[0]
    if alg not in allowed:
        raise ConfigurationError(f"{var} must be one of {', '.join(allowed)} (case-sensitive)")
    return alg


def build_jwe(settings: Mapping[str, str]) -> JWECodec:
    """``STATECODEC_CODEC=jwe``: a `JWECodec` from a JWK Set file or the key ring."""
    alg = _alg(settings, JWE_ALG_VAR, ("dir", "A256KW", "ECDH-ES+A256KW"))
    limit = max_token_length_setting(settings)
    jwks = _jwks(settings)
    if jwks is not None:
        try:
            return JWECodec.from_jwks(jwks, alg=cast(JWEAlgorithm, alg), max_token_length=limit)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{JWKS_FILE_VAR}: {exc}") from None
    if alg == "ECDH-ES+A256KW":
        raise ConfigurationError(f"{JWE_ALG_VAR}={alg} needs {JWKS_FILE_VAR}: a JWK Set of P-256 or X25519 keys")
    ring_alg = cast(Literal["dir", "A256KW"], alg)
    return JWECodec(ring_from_settings(settings), alg=ring_alg, max_token_length=limit)


def build_jws(settings: Mapping[str, str]) -> JWSCodec:
    """``STATECODEC_CODEC=jws``: a `JWSCodec` from a JWK Set file or the key ring."""
    alg = _alg(settings, JWS_ALG_VAR, ("HS256", "EdDSA", "Ed25519"))
    limit = max_token_length_setting(settings)
    jwks = _jwks(settings)
    if jwks is not None:
        try:
            return JWSCodec.from_jwks(jwks, alg=cast(JWSAlgorithm, alg), max_token_length=limit)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{JWKS_FILE_VAR}: {exc}") from None
    if alg != "HS256":
        raise ConfigurationError(f"{JWS_ALG_VAR}={alg} needs {JWKS_FILE_VAR}: a JWK Set of Ed25519 keys")
    return JWSCodec(ring_from_settings(settings), max_token_length=limit)
