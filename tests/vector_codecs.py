"""The public codec a vectors entry names, built by the public constructors from the keys the entry holds.

The vectors files are data: `tests/test_vectors.py` opens, re-derives and refuses every entry through these
codecs, so a token that opens proves its layout (its tag verifies only under the key derived as documented).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statecodec import AESGCMCodec, BoundCodec, EnvelopeCodec, JWECodec, JWSCodec, KeyRing, XAESGCMCodec
from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode
from statecodec.errors import ProviderError


class _Table:
    """The KMS of an envelope entry: each of its wrapped keys unwraps to the data key paired with it."""

    def __init__(self, pairs: Mapping[bytes, bytes]) -> None:
        self._pairs = pairs

    def describe(self) -> str:
        return "the data keys of a vectors entry"

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes:
        return self._pairs[blob]  # EnvelopeCodec asks only for the entry's own blobs

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes:
        raise ProviderError("a vectors entry cannot wrap keys")


def codec_for(data: Mapping[str, Any], entry: Mapping[str, Any], at: Mapping[str, Any] | None = None) -> Any:
    """The codec an entry names; `at`: a binding replay's clock and settings."""
    codec, cap = data["codec"], entry.get("max_token_length", DEFAULT_MAX_TOKEN_LENGTH)
    if codec in ("aesgcm", "xaesgcm"):
        ring = AESGCMCodec if codec == "aesgcm" else XAESGCMCodec
        return ring([b64u_decode(k) for k in entry["keys"]], max_token_length=cap)
    if codec == "envelope":
        blobs = [b64u_decode(w) for w in entry["wrapped_keys"]]
        table = _Table(dict(zip(blobs, (b64u_decode(k) for k in entry["data_keys"]), strict=True)))
        return EnvelopeCodec(table, blobs, context=entry["context"], max_token_length=cap)
    if codec in ("jwe", "jws") and "jwks" in entry:
        jose = JWECodec if codec == "jwe" else JWSCodec
        return jose.from_jwks(entry["jwks"], alg=entry["alg"], max_token_length=cap)
    if codec == "jwe":
        return JWECodec([b64u_decode(k) for k in entry["ring"]], alg=entry["alg"], max_token_length=cap)
    if codec == "jws":  # a ring signs with HS256
        return JWSCodec([b64u_decode(k) for k in entry["ring"]], max_token_length=cap)
    assert codec == "binding", codec
    at = entry if at is None else at  # a valid vector, replayed at another time or under other settings
    return BoundCodec(
        AESGCMCodec(KeyRing.parse(data["codec_keys"])),
        audience=at.get("audience", entry["audience"]),
        purpose=at.get("purpose", entry["purpose"]),
        ttl=entry["ttl"],
        future_skew=entry["future_skew"],
        binding_key=b64u_decode(data["binding_key"]),
        clock=lambda: at["now"],
        seal_version=data["format_version"],
    )
