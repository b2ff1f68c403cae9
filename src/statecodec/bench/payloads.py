"""Benchmark payloads: an MCP-style state of about 300 bytes, 4 KiB and 64 KiB.

Payloads are ASCII JSON text, because a server's `requestState` is a string
the SDK boundary wraps in JSON claims, and deterministic, so two runs seal
the same bytes. The bulk of the larger payloads is base64 of seeded random
bytes: incompressible, like cached results or a serialized cursor.
"""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass

__all__ = ["PAYLOADS", "Payload", "payloads"]


@dataclass(frozen=True)
class Payload:
    name: str
    data: bytes
    description: str


def _state(size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    doc = {
        "v": 1,
        "flow": "provision",
        "step": 2,
        "args": {"name": "orders", "tier": "standard", "replicas": 3},
        "answers": {"region": "eu-west-1", "confirm": True},
        "pending": ["backup_window"],
        "cursor": "",
    }
    base = len(json.dumps(doc, separators=(",", ":")))
    fill = max(0, size - base)
    blob = base64.urlsafe_b64encode(rng.randbytes(fill)).decode()[:fill]
    doc["cursor"] = blob
    data = json.dumps(doc, separators=(",", ":")).encode()
    assert len(data) == size, (len(data), size)
    return data


def _build() -> dict[str, Payload]:
    return {
        "state": Payload("state", _state(300, 1), "300 B MCP-style claims state (JSON)"),
        "4k": Payload("4k", _state(4096, 2), "4 KiB state (JSON, incompressible bulk)"),
        "64k": Payload("64k", _state(65536, 3), "64 KiB state (JSON, incompressible bulk)"),
    }


PAYLOADS: dict[str, Payload] = _build()
"""Payloads by name, smallest first."""


def payloads(names: list[str] | tuple[str, ...] = ()) -> list[Payload]:
    """The named payloads in size order (all when `names` is empty); unknown names raise `KeyError`."""
    for n in names:
        if n not in PAYLOADS:
            raise KeyError(f"unknown payload {n!r}; choose from {', '.join(PAYLOADS)}")
    return [p for n, p in PAYLOADS.items() if not names or n in names]
