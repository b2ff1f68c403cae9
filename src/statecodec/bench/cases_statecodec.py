"""statecodec's own codecs, one case each, written against their public API.

A codec that this installation does not ship (an older version, or an extra
not installed) is skipped with the command that installs it. Remote codecs
(Vault) run only when ``STATECODEC_BENCH_VAULT_ADDR`` is set: the case is
then built with `statecodec.config.codec_from_env` from the process
environment, exactly as a server would build it, plus
``STATECODEC_CODEC=vault-envelope`` or ``vault-transit``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from statecodec.bench.cases import Built, Case, Skip
from statecodec.bench.cases_baselines import MCP_ARGUMENTS, MCP_METHOD, MCP_TARGET

__all__ = ["CASES", "VAULT_ADDR_ENV", "LocalKeyWrapper"]

VAULT_ADDR_ENV = "STATECODEC_BENCH_VAULT_ADDR"
_AUDIENCE = "bench"


def _ring_codec(cls: Any, **options: Any) -> Any:
    """A codec under a fresh single-key ring, through `ephemeral()` when the class offers it."""
    ephemeral = getattr(cls, "ephemeral", None)
    if callable(ephemeral):
        return ephemeral(**options)
    from statecodec.keys import KeyRing

    return cls(KeyRing.generate(), **options)


def _aesgcm() -> Any:
    from statecodec import AESGCMCodec

    return AESGCMCodec.ephemeral()


def _xaesgcm() -> Any:
    from statecodec import XAESGCMCodec

    return XAESGCMCodec.ephemeral()


def _bound() -> Built:
    from statecodec import AESGCMCodec
    from statecodec.binding import BoundCodec, mcp_request_context

    bound: Any = BoundCodec(AESGCMCodec.ephemeral(), audience=_AUDIENCE, binding_key=os.urandom(32))
    # A round derives its request context once and passes it to both its unseal and its
    # seal, as the SDK boundary hands its unseal's binding to its seal.
    context = mcp_request_context(MCP_METHOD, {"name": MCP_TARGET, "arguments": MCP_ARGUMENTS})

    def seal(payload: bytes) -> str:
        token: str = bound.seal(payload, context=context)
        return token

    def unseal(token: str) -> bytes:
        payload: bytes = bound.unseal(token, context=context)
        return payload

    return Built(
        seal=seal,
        unseal=unseal,
        kind="boundary",
        note=(
            "BoundCodec(AESGCMCodec): binary claims (expiry, audience, request context with the "
            "canonical JSON of the arguments, derived once per round and passed to both directions; "
            "no principal)"
        ),
    )


class LocalKeyWrapper:
    """An in-process `KeyWrapper` (AES-256-GCM under a process key), for measuring only.

    `EnvelopeCodec` calls its wrapper once per data key at construction and
    never per token, so the per-token cost does not depend on the provider.
    """

    name = "local"

    def __init__(self) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(os.urandom(32))
        self.calls = 0

    def describe(self) -> str:
        return "local in-process wrapper (benchmark)"

    def _aad(self, context: Mapping[str, str]) -> bytes:
        from statecodec.envelope import canonical_context

        return canonical_context(context)

    def wrap(self, data_key: bytes, context: Mapping[str, str]) -> bytes:
        self.calls += 1
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, data_key, self._aad(context))

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes:
        self.calls += 1
        out: bytes = self._aead.decrypt(blob[:12], blob[12:], self._aad(context))
        return out

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes:
        return self.wrap(os.urandom(32), context)


def _envelope() -> Built:
    from statecodec.envelope import EnvelopeCodec, default_context

    wrapper = LocalKeyWrapper()
    context = default_context(_AUDIENCE)
    codec: Any = EnvelopeCodec(wrapper, [wrapper.new_wrapped_key(context)], context=context)
    start_calls = wrapper.calls

    def provider_calls() -> str:
        return f"start-up {start_calls} provider calls (1 wrap, 1 unwrap); per token 0"

    return Built(
        seal=codec.seal,
        unseal=codec.unseal,
        codec=codec,
        note="EnvelopeCodec over an in-process KeyWrapper: " + provider_calls(),
    )


def _jwe_dir() -> Any:
    from statecodec.jose import JWECodec

    return _ring_codec(JWECodec)


def _jwe_a256kw() -> Any:
    from statecodec.jose import JWECodec

    return _ring_codec(JWECodec, alg="A256KW")


def _jwe_ecdh() -> Any:
    from statecodec.jose import JWECodec

    return JWECodec.ephemeral(alg="ECDH-ES+A256KW", curve="P-256")


def _jws_hs256() -> Any:
    from statecodec.jose import JWSCodec

    return _ring_codec(JWSCodec)


def _vault(kind: str) -> Built:
    addr = os.environ.get(VAULT_ADDR_ENV)
    if not addr:
        raise Skip(f"set {VAULT_ADDR_ENV} (and the STATECODEC_VAULT_* settings) to measure Vault")
    from statecodec.config import BUILDERS, codec_from_env

    if kind not in BUILDERS:
        raise Skip(f"this statecodec has no {kind} codec")
    environ = dict(os.environ)
    if kind == "vault-envelope" and not (
        environ.get("STATECODEC_WRAPPED_KEYS") or environ.get("STATECODEC_WRAPPED_KEYS_FILE")
    ):
        raise Skip("set STATECODEC_WRAPPED_KEYS (create one with `statecodec kms new-data-key --provider vault`)")
    environ["STATECODEC_CODEC"] = kind
    environ.setdefault("STATECODEC_VAULT_ADDR", addr)
    codec: Any = codec_from_env(environ)
    close = getattr(codec, "close", None)
    return Built(
        seal=codec.seal,
        unseal=codec.unseal,
        codec=codec,
        close=close if callable(close) else None,
        note=f"{kind} against {addr}",
    )


def _vault_envelope() -> Built:
    return _vault("vault-envelope")


def _vault_transit() -> Built:
    return _vault("vault-transit")


CASES: tuple[Case, ...] = (
    Case(
        "AESGCMCodec",
        "statecodec",
        _aesgcm,
        "AES-256-GCM key ring, strict base64url",
        requires=("statecodec.aead",),
        install_hint="pip install statecodec",
        loop=True,
        tags=("core", "aead"),
    ),
    Case(
        "XAESGCMCodec",
        "statecodec",
        _xaesgcm,
        "XAES-256-GCM (192-bit nonces) key ring",
        requires=("statecodec.aead",),
        install_hint="pip install statecodec",
        loop=True,
        tags=("aead",),
    ),
    Case(
        "BoundCodec(AESGCMCodec)",
        "statecodec",
        _bound,
        "binary claims + AESGCMCodec",
        requires=("statecodec.binding",),
        install_hint="pip install -U statecodec (statecodec.binding)",
        tags=("boundary", "bound", "binding"),
    ),
    Case(
        "EnvelopeCodec",
        "statecodec",
        _envelope,
        "KMS envelope codec, data key unwrapped at start-up",
        requires=("statecodec.envelope",),
        install_hint="pip install -U statecodec (statecodec.envelope)",
        loop=True,
        tags=("envelope", "kms"),
    ),
    Case(
        "JWECodec(dir)",
        "statecodec",
        _jwe_dir,
        "compact JWE dir + A256GCM",
        requires=("statecodec.jose",),
        install_hint="pip install -U statecodec (statecodec.jose)",
        loop=True,
        tags=("jose", "jwe"),
    ),
    Case(
        "JWECodec(A256KW)",
        "statecodec",
        _jwe_a256kw,
        "compact JWE A256KW + A256GCM",
        requires=("statecodec.jose",),
        install_hint="pip install -U statecodec (statecodec.jose)",
        quick=False,
        tags=("jose", "jwe"),
    ),
    Case(
        "JWECodec(ECDH-ES+A256KW)",
        "statecodec",
        _jwe_ecdh,
        "compact JWE ECDH-ES+A256KW (P-256) + A256GCM",
        requires=("statecodec.jose",),
        install_hint="pip install -U statecodec (statecodec.jose)",
        quick=False,
        tags=("jose", "jwe"),
    ),
    Case(
        "JWSCodec(HS256)",
        "statecodec",
        _jws_hs256,
        "compact JWS HS256 (sign-only)",
        requires=("statecodec.jose",),
        install_hint="pip install -U 'statecodec[jws]' (statecodec.jose)",
        tags=("jose", "jws"),
    ),
    Case(
        "VaultEnvelope",
        "remote",
        _vault_envelope,
        "EnvelopeCodec with a Vault transit data key",
        requires=("hvac",),
        install_hint="pip install 'statecodec[vault]'",
        loop=True,
        tags=("vault",),
        env=(VAULT_ADDR_ENV,),
    ),
    Case(
        "VaultTransitCodec",
        "remote",
        _vault_transit,
        "Vault transit encrypt/decrypt per token (one HTTP call each)",
        requires=("hvac",),
        install_hint="pip install 'statecodec[vault]'",
        loop=True,
        tags=("vault",),
        env=(VAULT_ADDR_ENV,),
    ),
)
