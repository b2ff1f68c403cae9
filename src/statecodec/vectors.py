"""Frozen test vectors for every token format: load, verify, generate.

Threat: a format that drifts silently strands every token in flight and
breaks every other implementation of it. A vectors file pins, for one codec,
the tokens that must open (and re-derive byte for byte wherever the format is
deterministic given the nonce, IV or ephemeral key recorded beside them) and
the exact reason code each tampered or foreign token is refused with.

Every file is one JSON object in the ``statecodec-vectors/1`` schema
(``docs/formats.md``, "Vector files"): ``schema``, ``codec``, ``description``,
``valid`` and ``invalid`` (``refusals`` for binding claims), plus the members
its codec documents. `verify_vectors` dispatches on ``codec`` to that
format's verifier; `generate_vectors` writes a format's standard set from
fixed test keys and fixed randomness, through private hooks that no public
``seal`` exposes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from statecodec._vectors import binding as _binding
from statecodec._vectors import envelope as _envelope
from statecodec._vectors import jwe as _jwe
from statecodec._vectors import jws as _jws
from statecodec._vectors import ring as _ring
from statecodec._vectors._schema import SCHEMA, VectorReport, read_json
from statecodec._vectors.ring import (
    CODECS,
    InvalidVector,
    ValidVector,
    VectorFile,
    parse_vectors,
    seal_vector,
)
from statecodec._vectors.ring import _seal_with_nonce as _seal_with_nonce  # for tests proving it equals seal
from statecodec.errors import ConfigurationError

__all__ = [
    "CODECS",
    "GENERATORS",
    "SCHEMA",
    "VERIFIERS",
    "InvalidVector",
    "ValidVector",
    "VectorDocument",
    "VectorFile",
    "VectorReport",
    "dump_vectors",
    "generate_vectors",
    "load_vectors",
    "parse_vectors",
    "seal_vector",
    "verify_vectors",
]


def _verify_ring(data: Mapping[str, Any]) -> VectorReport:
    return _ring.verify_vectors(parse_vectors(data))


VERIFIERS: Mapping[str, Callable[[Mapping[str, Any]], VectorReport]] = {
    "aesgcm": _verify_ring,
    "xaesgcm": _verify_ring,
    "envelope": _envelope.verify,
    "binding": _binding.verify,
    "jwe": _jwe.verify,
    "jws": _jws.verify,
}
"""A file's ``codec`` member -> its verifier (which validates the whole file before checking any vector)."""


@dataclass(frozen=True)
class VectorDocument:
    """A generated vectors file of a format without a typed model here: its JSON, ready to dump."""

    codec: str
    data: Mapping[str, Any]

    def to_json(self) -> Mapping[str, Any]:
        return self.data


def _ring_generator(name: str) -> Callable[[], VectorFile]:
    return lambda: _ring.generate_vectors(name)


def _document(codec: str, build: Callable[[], Mapping[str, Any]]) -> Callable[[], VectorDocument]:
    return lambda: VectorDocument(codec, build())


GENERATORS: Mapping[str, Callable[[], VectorFile | VectorDocument]] = {
    "aesgcm": _ring_generator("aesgcm"),
    "xaesgcm": _ring_generator("xaesgcm"),
    "envelope": _document("envelope", _envelope.generate),
    "binding": _document("binding", _binding.generate),
    **{name: _document("jwe", build) for name, build in _jwe.GENERATORS.items()},
    **{name: _document("jws", build) for name, build in _jws.GENERATORS.items()},
}
"""Generator name -> its standard vector set. ``jwe``/``jws`` hold every configuration; ``jwe-dir`` etc. one."""


def load_vectors(path: str | os.PathLike[str]) -> VectorFile:
    """Read a ring-format vectors file; a bad file raises `ConfigurationError` naming the member."""
    return parse_vectors(read_json(path))


def verify_vectors(source: VectorFile | Mapping[str, Any] | str | os.PathLike[str]) -> VectorReport:
    """Check every vector of a file (a path, its decoded JSON, or a parsed ring file) against this library.

    A file that is not in the schema raises `ConfigurationError`; a vector
    that does not hold is a line in the report's ``failures``, never an
    exception.
    """
    if isinstance(source, VectorFile):
        return _ring.verify_vectors(source)
    data = source if isinstance(source, Mapping) else read_json(source)
    if not isinstance(data, Mapping):
        raise ConfigurationError("vectors file must be a JSON object")
    codec = data.get("codec")
    if codec == "vault-transit":
        # Its tokens open only inside Vault: an offline check would test a model of Vault, not the codec.
        raise ConfigurationError(
            "vault-transit vectors hold transit key backups that only a Vault server can open: restore each "
            "backup (transit/restore) into a test Vault and unseal the tokens there; this command checks the "
            "offline formats"
        )
    if data.get("schema") != SCHEMA:
        raise ConfigurationError(f"schema must be {SCHEMA!r}")
    verifier = VERIFIERS.get(codec) if isinstance(codec, str) else None
    if verifier is None:
        raise ConfigurationError(f"codec must be one of {sorted(VERIFIERS)}")
    return verifier(data)


def generate_vectors(name: str) -> VectorFile | VectorDocument:
    """The standard vector set `name` (see `GENERATORS`): deterministic, so regenerating changes nothing."""
    build = GENERATORS.get(name)
    if build is None:
        raise ConfigurationError(f"codec must be one of {sorted(GENERATORS)}")
    return build()


def dump_vectors(vectors: VectorFile | VectorDocument) -> str:
    """The canonical JSON text of a vectors file (stable member order, 2-space indent, final newline)."""
    return json.dumps(vectors.to_json(), indent=2, ensure_ascii=False) + "\n"
