"""Seal state, get it back, watch a tampered token be refused, then protect an MCP server in one line.

Run with a key ring in the environment (``statecodec keygen`` prints a key)::

    export STATECODEC_KEYS="$(statecodec keygen)"
    python examples/quickstart.py

Without ``STATECODEC_KEYS`` it uses a key generated for this run only.
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer, RequestStateSecurity

from statecodec import AESGCMCodec, InvalidToken, KeyRing, Reason
from statecodec.mcp import security_from_env


def expect_refusal(codec: AESGCMCodec, token: str, expected: Reason) -> Reason:
    """The log-only reason `codec` gives for refusing `token` (it carries no token text)."""
    try:
        codec.unseal(token)
    except InvalidToken as exc:
        if exc.reason is not expected:
            raise SystemExit(f"refused for {exc.reason}, expected {expected}") from None
        return exc.reason
    raise SystemExit("a token that should be refused was accepted")


def main() -> None:
    # A shared ring (every instance of a fleet reads the same one); ephemeral only for a single process.
    codec = AESGCMCodec.from_env() if os.environ.get("STATECODEC_KEYS") else AESGCMCodec.ephemeral()
    print("sealing key id:", codec.primary_key_id)

    token = codec.seal(b'{"step": 2, "cart": "c-1042"}')
    print("token:", token)
    assert codec.unseal(token) == b'{"step": 2, "cart": "c-1042"}'

    # Flip one character: the client holds the token, so this is what an attacker can do.
    middle = len(token) // 2
    flipped = token[:middle] + ("A" if token[middle] != "A" else "B") + token[middle + 1 :]
    print("tampered token refused:", expect_refusal(codec, flipped, Reason.SEAL))

    # A token from another ring names a key this ring does not have.
    stranger = AESGCMCodec(KeyRing.generate())
    print("foreign token refused:", expect_refusal(codec, stranger.seal(b"state"), Reason.UNKNOWN_KEY))

    # The MCP one-liner: RequestStateSecurity around the codec the environment describes ...
    policy = security_from_env() if os.environ.get("STATECODEC_KEYS") else RequestStateSecurity(codec=codec)
    # ... or around any codec you built yourself, as it is: the SDK logs our reason code for a refused token.
    server = MCPServer("billing", request_state_security=policy)
    print("MCP server", repr(server.name), "seals requestState with", policy.codec)


if __name__ == "__main__":
    main()
