"""statecodec: seal and unseal opaque state tokens that come back from the client.

Every token a client echoes is attacker-controlled input. A statecodec codec
seals bytes into a URL-safe token and unseals only tokens it minted unmodified;
anything else raises `InvalidToken` with a log-only reason code. Codecs fit
the MCP SDK's `RequestStateSecurity(codec=...)` as they are.
"""

from typing import TYPE_CHECKING

from statecodec._types import Codec
from statecodec.aead import AESGCMCodec, XAESGCMCodec
from statecodec.binding import BoundCodec
from statecodec.config import codec_from_env, codec_from_file
from statecodec.envelope import EnvelopeCodec, KeyWrapper
from statecodec.errors import (
    ConfigurationError,
    InvalidToken,
    ProviderError,
    Reason,
    SealError,
    StatecodecError,
)
from statecodec.inspect import TokenInfo, describe_token
from statecodec.jose import JWECodec, JWSCodec
from statecodec.keys import KeyRing, format_keys, generate_key, parse_keys

__version__ = "0.1.0"

__all__ = [
    "AESGCMCodec",
    "BoundCodec",
    "Codec",
    "ConfigurationError",
    "EnvelopeCodec",
    "InvalidToken",
    "JWECodec",
    "JWSCodec",
    "KeyRing",
    "KeyWrapper",
    "ProviderError",
    "Reason",
    "SealError",
    "StatecodecError",
    "TokenInfo",
    "VaultTransitCodec",
    "XAESGCMCodec",
    "__version__",
    "codec_from_env",
    "codec_from_file",
    "describe_token",
    "format_keys",
    "generate_key",
    "parse_keys",
]

if TYPE_CHECKING:
    from statecodec.providers.vault import VaultTransitCodec


def __getattr__(name: str) -> object:
    # Optional-dependency codecs load on first use, so `import statecodec` needs only cryptography.
    if name == "VaultTransitCodec":
        from statecodec.providers.vault import VaultTransitCodec

        return VaultTransitCodec
    raise AttributeError(f"module 'statecodec' has no attribute {name!r}")
