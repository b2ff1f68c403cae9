"""statecodec: seal and unseal opaque state tokens that come back from the client.

Every token a client echoes is attacker-controlled input. A statecodec codec
seals bytes into a URL-safe token and unseals only tokens it minted unmodified;
anything else raises `InvalidToken` with a log-only reason code. Codecs fit
the MCP SDK's `RequestStateSecurity(codec=...)` as they are.
"""

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
)
from statecodec.keys import KeyRing, format_keys, generate_key, parse_keys

__version__ = "0.1.0"

__all__ = [
    "AESGCMCodec",
    "BoundCodec",
    "ConfigurationError",
    "EnvelopeCodec",
    "InvalidToken",
    "KeyRing",
    "KeyWrapper",
    "ProviderError",
    "Reason",
    "SealError",
    "StatecodecError",
    "XAESGCMCodec",
    "__version__",
    "format_keys",
    "generate_key",
    "parse_keys",
]
