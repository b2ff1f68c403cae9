"""statecodec: seal and unseal opaque state tokens that come back from the client.

A codec seals bytes into a URL-safe token and unseals only tokens it minted unmodified; anything else raises
`InvalidToken` with a log-only reason code. Importing the package loads cryptography and the AES-GCM family only:
JOSE and configuration load on first use, and no optional package (the MCP SDK, a KMS or Vault client) is ever
imported here.
"""

from importlib import import_module as _import_module
from typing import TYPE_CHECKING

from statecodec._types import Codec
from statecodec.aead import AESGCMCodec, XAESGCMCodec
from statecodec.binding import BoundCodec
from statecodec.envelope import EnvelopeCodec, KeyWrapper
from statecodec.errors import (
    ConfigurationError,
    InvalidToken,
    ProviderError,
    Reason,
    SealError,
    StatecodecError,
    StoreError,
    StoreUnreachable,
)
from statecodec.keys import KeyRing, format_keys, generate_key, parse_keys

__version__ = "0.1.0"

__all__ = [
    "AESGCMCodec", "BoundCodec", "Codec", "ConfigurationError", "EnvelopeCodec", "InvalidToken", "JWECodec",
    "JWSCodec", "KeyRing", "KeyWrapper", "ProviderError", "Reason", "SealError", "StatecodecError", "StoreError",
    "StoreUnreachable", "XAESGCMCodec", "__version__", "codec_from_env", "codec_from_file",
    "format_keys", "generate_key", "parse_keys"
]

if TYPE_CHECKING:
    from statecodec.config import codec_from_env, codec_from_file
    from statecodec.jose import JWECodec, JWSCodec

_ON_FIRST_USE = {"JWECodec": "statecodec.jose", "JWSCodec": "statecodec.jose",
                 "codec_from_env": "statecodec.config", "codec_from_file": "statecodec.config"}


def __getattr__(name: str) -> object:
    if (module := _ON_FIRST_USE.get(name)) is None:
        raise AttributeError(f"module 'statecodec' has no attribute {name!r}")
    return getattr(_import_module(module), name)


def __dir__() -> list[str]:
    # The public names only: not the submodules imports leave behind, nor this module's own helpers.
    return sorted(__all__)
