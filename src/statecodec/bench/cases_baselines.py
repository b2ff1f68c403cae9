"""Baselines: the floor, the MCP SDK's built-in protection, and peer libraries.

Each factory builds a fresh key and the most direct use of its library for
sealing opaque bytes into a URL-safe token; where a library is sign-only the
description says so, because such a token leaves the payload readable.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
from typing import Any

from statecodec.bench.cases import Built, Case, Skip

__all__ = ["CASES", "FloorCodec"]

_AUDIENCE = "bench"
# The request a boundary-style case binds to: a tools/call with small arguments.
MCP_METHOD = "tools/call"
MCP_TARGET = "provision"
MCP_ARGUMENTS: dict[str, Any] = {"name": "orders", "tier": "standard", "replicas": 3}


def _b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64u_decode(text: str | bytes) -> bytes:
    if isinstance(text, bytes):
        text = text.decode()
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class FloorCodec:
    """The least an AES-GCM token can cost: encrypt, a random 96-bit nonce, base64url.

    No version, key id, associated data, size cap or strict decoding: a
    reference for cost only, never for use.
    """

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(key)

    def seal(self, payload: bytes) -> str:
        nonce = os.urandom(12)
        return base64.urlsafe_b64encode(nonce + self._aead.encrypt(nonce, payload, None)).rstrip(b"=").decode()

    def unseal(self, token: str) -> bytes:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        return self._aead.decrypt(raw[:12], raw[12:], None)


def _floor() -> FloorCodec:
    return FloorCodec(os.urandom(32))


def _sdk_codec() -> Any:
    from mcp.server.request_state import AESGCMRequestStateCodec

    return AESGCMRequestStateCodec([os.urandom(32)])


def _sdk_boundary() -> Built:
    from mcp.server.context import ServerRequestContext
    from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity

    boundary = RequestStateBoundary(RequestStateSecurity(keys=[os.urandom(32)]), default_audience=_AUDIENCE)
    seal_state = getattr(boundary, "_seal", None)
    unseal_state = getattr(boundary, "_unseal", None)
    if not callable(seal_state) or not callable(unseal_state):
        raise Skip("this mcp version has no RequestStateBoundary._seal/_unseal to drive")
    params: dict[str, Any] = {"name": MCP_TARGET, "arguments": MCP_ARGUMENTS}
    ctx: Any = ServerRequestContext(
        session=None,  # type: ignore[arg-type]  # the seal/unseal path never touches the session
        lifespan_context={},
        protocol_version="2026-07-28",
        method=MCP_METHOD,
        params=params,
    )

    # The round's binding, which the boundary computes in its unseal and hands to its seal.
    binding = unseal_state(dataclasses.replace(ctx, params={**params, "requestState": seal_state(ctx, "")}))[1]

    def seal(payload: bytes) -> str:
        token: str = seal_state(ctx, payload.decode("ascii"), binding)
        return token

    def unseal(token: str) -> bytes:
        # The boundary itself rebuilds the context around the echoed state, so this copy is its cost too.
        inbound = dataclasses.replace(ctx, params={**params, "requestState": token})
        inner, _binding = unseal_state(inbound)
        return str(inner).encode("ascii")

    return Built(
        seal=seal,
        unseal=unseal,
        kind="boundary",
        note=(
            "RequestStateBoundary._seal/_unseal on a tools/call context: JSON claims (expiry, method, "
            "target, arguments digest, audience; no principal on an unauthenticated request) "
            "around the built-in AES-GCM codec; unseal derives the request identity, seal reuses it"
        ),
    )


def _fernet() -> Any:
    from cryptography.fernet import Fernet

    return _BytesTokenCodec(Fernet(Fernet.generate_key()))


def _multifernet() -> Any:
    from cryptography.fernet import Fernet, MultiFernet

    return _BytesTokenCodec(MultiFernet([Fernet(Fernet.generate_key()), Fernet(Fernet.generate_key())]))


class _BytesTokenCodec:
    """Adapts encrypt/decrypt returning bytes tokens (Fernet) to the str contract."""

    def __init__(self, impl: Any) -> None:
        self._encrypt = impl.encrypt
        self._decrypt = impl.decrypt

    def seal(self, payload: bytes) -> str:
        token: bytes = self._encrypt(payload)
        return token.decode("ascii")

    def unseal(self, token: str) -> bytes:
        payload: bytes = self._decrypt(token)
        return payload


def _itsdangerous() -> Built:
    from itsdangerous import Signer

    signer = Signer(os.urandom(32), salt="statecodec-bench", digest_method=hashlib.sha256)

    def seal(payload: bytes) -> str:
        token: bytes = signer.sign(_b64u(payload))
        return token.decode("ascii")

    def unseal(token: str) -> bytes:
        return _b64u_decode(signer.unsign(token))

    return Built(seal=seal, unseal=unseal, note="Signer, HMAC-SHA256 over base64url(payload): sign-only")


def _pyjwt() -> Built:
    import jwt

    key = os.urandom(32)

    def seal(payload: bytes) -> str:
        return jwt.api_jws.encode(payload, key, algorithm="HS256")

    def unseal(token: str) -> bytes:
        payload: bytes = jwt.api_jws.decode(token, key, algorithms=["HS256"])
        return payload

    return Built(seal=seal, unseal=unseal, note="compact JWS HS256 over the raw payload: sign-only")


def _jwcrypto() -> Built:
    from jwcrypto import jwe, jwk

    key = jwk.JWK.generate(kty="oct", size=256)
    header = json.dumps({"alg": "dir", "enc": "A256GCM"})

    def seal(payload: bytes) -> str:
        e = jwe.JWE(payload, protected=header)
        e.add_recipient(key)
        token: str = e.serialize(compact=True)
        return token

    def unseal(token: str) -> bytes:
        e = jwe.JWE()
        e.deserialize(token, key=key)
        payload: bytes = e.payload
        return payload

    return Built(seal=seal, unseal=unseal, note="compact JWE dir + A256GCM")


def _joserfc() -> Built:
    from joserfc import jwe
    from joserfc.jwk import OctKey

    key = OctKey.import_key(os.urandom(32))
    header = {"alg": "dir", "enc": "A256GCM"}
    registry = jwe.JWERegistry(algorithms=["dir", "A256GCM"])
    # joserfc caps ciphertext at 64 KiB by default; raised so the 64 KiB payload can be measured.
    registry.max_ciphertext_length = 128 * 1024

    def seal(payload: bytes) -> str:
        return jwe.encrypt_compact(header, payload, key, registry=registry)

    def unseal(token: str) -> bytes:
        plaintext = jwe.decrypt_compact(token, key, registry=registry).plaintext
        assert isinstance(plaintext, bytes)
        return plaintext

    return Built(
        seal=seal, unseal=unseal, note="compact JWE dir + A256GCM (ciphertext cap raised to 128 KiB)"
    )


def _pyseto() -> Built:
    import pyseto

    key = pyseto.Key.new(version=4, purpose="local", key=os.urandom(32))

    def seal(payload: bytes) -> str:
        token: bytes = pyseto.encode(key, payload)
        return token.decode("ascii")

    def unseal(token: str) -> bytes:
        payload = pyseto.decode(key, token).payload
        assert isinstance(payload, bytes)
        return payload

    return Built(seal=seal, unseal=unseal, note="PASETO v4.local (XChaCha20 + BLAKE2b)")


def _tink() -> Built:
    import tink
    from tink import aead

    aead.register()
    primitive = tink.new_keyset_handle(aead.aead_key_templates.AES256_GCM).primitive(aead.Aead)

    def seal(payload: bytes) -> str:
        return _b64u(primitive.encrypt(payload, b""))

    def unseal(token: str) -> bytes:
        payload: bytes = primitive.decrypt(_b64u_decode(token), b"")
        return payload

    return Built(seal=seal, unseal=unseal, note="Aead AES256_GCM keyset (5-byte key prefix) + base64url")


CASES: tuple[Case, ...] = (
    Case(
        "floor",
        "floor",
        _floor,
        "AES-256-GCM + os.urandom(12) + base64url in plain Python; no checks",
        requires=("cryptography",),
        install_hint="pip install cryptography",
        loop=True,
    ),
    Case(
        "sdk.AESGCMRequestStateCodec",
        "sdk",
        _sdk_codec,
        "the MCP SDK's built-in codec",
        requires=("mcp.server.request_state",),
        install_hint="pip install 'statecodec[mcp]'",
        loop=True,
    ),
    Case(
        "sdk.RequestStateBoundary",
        "sdk",
        _sdk_boundary,
        "the SDK boundary's claims + built-in codec",
        requires=("mcp.server.request_state",),
        install_hint="pip install 'statecodec[mcp]'",
        tags=("boundary", "bound"),
    ),
    Case(
        "Fernet",
        "peer",
        _fernet,
        "cryptography Fernet: AES-128-CBC + HMAC-SHA256",
        requires=("cryptography.fernet",),
        install_hint="pip install cryptography",
    ),
    Case(
        "MultiFernet",
        "peer",
        _multifernet,
        "cryptography MultiFernet, two keys, token under the first",
        requires=("cryptography.fernet",),
        install_hint="pip install cryptography",
        quick=False,
    ),
    Case(
        "itsdangerous",
        "peer",
        _itsdangerous,
        "itsdangerous Signer HMAC-SHA256 (sign-only)",
        requires=("itsdangerous",),
        install_hint="pip install itsdangerous",
    ),
    Case(
        "PyJWT",
        "peer",
        _pyjwt,
        "PyJWT compact JWS HS256 (sign-only)",
        requires=("jwt",),
        install_hint="pip install pyjwt",
    ),
    Case(
        "jwcrypto",
        "peer",
        _jwcrypto,
        "jwcrypto compact JWE dir/A256GCM",
        requires=("jwcrypto",),
        install_hint="pip install jwcrypto",
        tags=("jose", "jwe"),
    ),
    Case(
        "joserfc",
        "peer",
        _joserfc,
        "joserfc compact JWE dir/A256GCM",
        requires=("joserfc",),
        install_hint="pip install joserfc",
        tags=("jose", "jwe"),
    ),
    Case(
        "pyseto",
        "peer",
        _pyseto,
        "pyseto PASETO v4.local",
        requires=("pyseto",),
        install_hint="pip install pyseto",
    ),
    Case(
        "tink",
        "peer",
        _tink,
        "tink AEAD AES256_GCM",
        requires=("tink",),
        install_hint="pip install tink",
    ),
)
