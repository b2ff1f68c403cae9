"""The cases of `statecodec bench`: the floor, statecodec's codecs, the MCP SDK and peer libraries.

Each case is the most direct use of its library to seal bytes into a URL-safe
token under a fresh key; its factory imports the library when called, so a
missing package is a skipped case, never an error. The floor is what every
AES-GCM token codec must do (a random 96-bit nonce, `cryptography`'s AESGCM,
base64url of the same bytes) and nothing more: every ratio is taken against it.
Sign-only formats (itsdangerous, PyJWT, `JWSCodec`) leave the payload readable.
"""

from __future__ import annotations

import base64
import hashlib
import os
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, cast

from statecodec import AESGCMCodec, BoundCodec, Codec, JWECodec, JWSCodec, KeyRing, XAESGCMCodec, codec_from_env
from statecodec.binding import mcp_request_context

__all__ = ["INSTALL", "PAYLOADS", "Case", "Codec", "binding_rounds", "cases"]

INSTALL = "pip install 'statecodec[bench]'"
Pair = tuple[Callable[[bytes], str], Callable[[str], bytes]]


def _payload(size: int) -> bytes:
    # ASCII JSON, as a server's requestState is text; seeded, so every run seals the same bytes.
    fill = base64.urlsafe_b64encode(random.Random(size).randbytes(size)).decode()
    head = '{"flow":"provision","step":2,"cursor":"'
    return (head + fill[: size - len(head) - 2] + '"}').encode("ascii")


PAYLOADS: dict[str, bytes] = {"state": _payload(300), "4k": _payload(4096), "64k": _payload(65536)}
"""The payloads by name: an MCP-style 300-byte state, 4 KiB and 64 KiB."""


@dataclass(frozen=True)
class Case:
    name: str
    group: str  # floor, statecodec, sdk, peer or remote
    build: Callable[[], Pair]


def _b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64u_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _floor() -> Pair:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    aead = AESGCM(os.urandom(32))

    def seal(payload: bytes) -> str:
        nonce = os.urandom(12)
        return _b64u(nonce + aead.encrypt(nonce, payload, None))

    def unseal(token: str) -> bytes:
        raw = _b64u_decode(token)
        return aead.decrypt(raw[:12], raw[12:], None)

    return seal, unseal


def _codec(codec: Codec) -> Pair:
    return codec.seal, codec.unseal


def _ring() -> KeyRing:
    return KeyRing([os.urandom(32)])


def _sdk_codec() -> Pair:
    from mcp.server.request_state import AESGCMRequestStateCodec

    return _codec(AESGCMRequestStateCodec([os.urandom(32)]))


def _fernet() -> Pair:
    from cryptography.fernet import Fernet

    fernet = Fernet(Fernet.generate_key())
    return (lambda p: fernet.encrypt(p).decode("ascii")), fernet.decrypt


def _itsdangerous() -> Pair:
    from itsdangerous import Signer

    signer = Signer(os.urandom(32), salt="statecodec-bench", digest_method=hashlib.sha256)
    return (lambda p: signer.sign(_b64u(p)).decode("ascii")), (lambda t: _b64u_decode(signer.unsign(t).decode()))


def _pyjwt() -> Pair:
    import jwt

    key = os.urandom(32)
    return (lambda p: jwt.api_jws.encode(p, key, algorithm="HS256")), (
        lambda t: jwt.api_jws.decode(t, key, algorithms=["HS256"])
    )


def _jwcrypto() -> Pair:
    from jwcrypto import jwe, jwk

    key = jwk.JWK.generate(kty="oct", size=256)

    def seal(payload: bytes) -> str:
        token = jwe.JWE(payload, protected='{"alg":"dir","enc":"A256GCM"}')
        token.add_recipient(key)
        return cast(str, token.serialize(compact=True))

    def unseal(text: str) -> bytes:
        token = jwe.JWE()
        token.deserialize(text, key=key)
        return cast(bytes, token.payload)

    return seal, unseal


def _joserfc() -> Pair:
    from joserfc import jwe
    from joserfc.jwk import OctKey

    key = OctKey.import_key(os.urandom(32))
    registry = jwe.JWERegistry(algorithms=["dir", "A256GCM"])
    registry.max_ciphertext_length = 128 * 1024  # its default 64 KiB cap would refuse the 64k payload
    header = {"alg": "dir", "enc": "A256GCM"}
    return (lambda p: jwe.encrypt_compact(header, p, key, registry=registry)), (
        lambda t: cast(bytes, jwe.decrypt_compact(t, key, registry=registry).plaintext)
    )


def _pyseto() -> Pair:
    import pyseto

    key = pyseto.Key.new(version=4, purpose="local", key=os.urandom(32))
    return (lambda p: pyseto.encode(key, p).decode("ascii")), (lambda t: cast(bytes, pyseto.decode(key, t).payload))


def _tink() -> Pair:
    import tink
    from tink import aead

    aead.register()
    primitive = tink.new_keyset_handle(aead.aead_key_templates.AES256_GCM).primitive(aead.Aead)
    return (lambda p: _b64u(primitive.encrypt(p, b""))), (
        lambda t: cast(bytes, primitive.decrypt(_b64u_decode(t), b""))
    )


def _vault(addr: str) -> Pair:
    # Built as a server builds it: the STATECODEC_VAULT_* settings of this environment.
    return _codec(codec_from_env({**os.environ, "STATECODEC_CODEC": "vault-transit", "STATECODEC_VAULT_ADDR": addr}))


def cases(vault_addr: str | None = None) -> list[Case]:
    """Every case, the floor first; VaultTransitCodec (one HTTP call per operation) only given an address."""
    found = [
        Case("floor", "floor", _floor),
        Case("AESGCMCodec", "statecodec", lambda: _codec(AESGCMCodec(_ring()))),
        Case("XAESGCMCodec", "statecodec", lambda: _codec(XAESGCMCodec(_ring()))),
        Case("JWECodec(dir)", "statecodec", lambda: _codec(JWECodec(_ring()))),
        Case("JWSCodec(HS256)", "statecodec", lambda: _codec(JWSCodec(_ring()))),
        Case("AESGCMRequestStateCodec", "sdk", _sdk_codec),
        Case("Fernet", "peer", _fernet),
        Case("itsdangerous", "peer", _itsdangerous),
        Case("PyJWT", "peer", _pyjwt),
        Case("jwcrypto", "peer", _jwcrypto),
        Case("joserfc", "peer", _joserfc),
        Case("pyseto", "peer", _pyseto),
        Case("tink", "peer", _tink),
    ]
    if vault_addr:
        found.append(Case("VaultTransitCodec", "remote", lambda: _vault(vault_addr)))
    return found


# The round both sides serve: a retried tools/call by an authenticated client.
METHOD = "tools/call"
PARAMS: dict[str, Any] = {"name": "provision", "arguments": {"name": "orders", "tier": "standard", "replicas": 3}}
PRINCIPAL = '{"client_id":"app-1","issuer":"https://id.example.com","subject":"user-42"}'


def _finish(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """The result of a coroutine that never suspends, without an event loop's cost in the figure."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("the boundary suspended; it cannot be timed without an event loop")


def binding_rounds(state: bytes) -> dict[str, Callable[[], object]]:
    """One MCP round each, around one `AESGCMCodec`, on the same state, request and principal.

    A round is what a server does with a retried request: derive its
    identity, unseal the echoed state, seal the next one. ``BoundCodec``:
    `mcp_request_context`, then `BoundCodec.unseal` and `seal` given it.
    ``RequestStateBoundary``: the SDK's middleware called as the server calls
    it (its public ``__call__``, which does all three) around a handler that
    answers ``input_required``; ``handler`` is that handler alone, so the
    boundary's own cost is its round minus the handler's. ``bare`` is the
    codec's own unseal and seal: what each side adds is its round minus that.
    """
    from mcp.server.context import ServerRequestContext
    from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity

    codec = AESGCMCodec(_ring())
    answer = {"resultType": "input_required", "requestState": state.decode("ascii")}

    async def handler(ctx: object) -> dict[str, str]:
        return answer

    def request(params: dict[str, Any]) -> Any:
        return ServerRequestContext(
            session=cast(Any, None), lifespan_context={}, protocol_version="2026-07-28", method=METHOD, params=params
        )  # the boundary reads only the method and the params

    security = RequestStateSecurity(codec=codec, bind_principal=lambda ctx: PRINCIPAL)
    boundary = RequestStateBoundary(security, default_audience="bench")
    retry = request({**PARAMS, "requestState": _finish(boundary(request(PARAMS), handler))["requestState"]})
    bound = BoundCodec(codec, audience="bench", binding_key=os.urandom(32))
    bound_token = bound.seal(state, principal=PRINCIPAL, context=mcp_request_context(METHOD, retry.params))
    bare_token = codec.seal(state)

    def bound_round() -> str:
        context = mcp_request_context(METHOD, retry.params)
        bound.unseal(bound_token, principal=PRINCIPAL, context=context)
        return bound.seal(state, principal=PRINCIPAL, context=context)

    return {
        "bare": lambda: (codec.unseal(bare_token), codec.seal(state)),
        "BoundCodec": bound_round,
        "handler": lambda: _finish(handler(retry)),
        "RequestStateBoundary": lambda: _finish(boundary(retry, handler)),
    }
