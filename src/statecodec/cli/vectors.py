"""`statecodec vectors verify`: byte compatibility with another implementation, checked from vectors files.

Threat: a port of a token format that drifts (another label, field order or
reason code) strands tokens and fails open where it should fail closed. A
vectors file (``docs/formats.md``, "Vector files") lists tokens that must open
to their payload and texts that must be refused with a reason code, each
entry with the keys that open it. A token that opens here proves its layout:
the tag verifies only under the key derived as documented, over the header
as documented. HMAC and Ed25519 are deterministic, so a JWS entry marked
``deterministic`` is signed again and must give its token. A failure names
the entry and what differs, never a key or a token. Exit status: 0 every
entry holds, 1 some entry does not, 2 a file is unreadable or not in the schema.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode
from statecodec.aead import AESGCMCodec, XAESGCMCodec
from statecodec.binding import BoundCodec
from statecodec.envelope import EnvelopeCodec
from statecodec.errors import ConfigurationError, InvalidToken, ProviderError, StatecodecError
from statecodec.jose import JWECodec, JWSCodec
from statecodec.keys import KeyRing

_SCHEMA = "statecodec-vectors/1"
_CODECS = ("aesgcm", "binding", "envelope", "jwe", "jws", "xaesgcm")


@dataclass
class VectorReport:
    """How many entries a file holds, and one line per entry that does not hold."""

    codec: str
    valid: int
    invalid: int
    failures: list[str] = field(default_factory=list)


class _Table:
    """The KMS of an envelope entry: each of its wrapped keys unwraps to the data key paired with it."""

    name = "vectors"

    def __init__(self, pairs: Mapping[bytes, bytes]) -> None:
        self._pairs = pairs

    def describe(self) -> str:
        return "the data keys of a vectors entry"

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes:
        return self._pairs[blob]  # EnvelopeCodec asks only for the entry's own blobs

    def wrap(self, data_key: bytes, context: Mapping[str, str]) -> bytes:
        raise ProviderError("a vectors entry cannot wrap keys")

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes:
        raise ProviderError("a vectors entry cannot wrap keys")


def codec_for(data: Mapping[str, Any], entry: Mapping[str, Any], at: Mapping[str, Any] | None = None) -> Any:
    """The public codec an entry names, built from the keys it holds; `at`: a binding replay's clock and settings."""
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
    if codec == "jws":
        if entry["alg"] != "HS256":
            raise ConfigurationError("a jws ring signs with HS256 only; give jwks for EdDSA")
        return JWSCodec([b64u_decode(k) for k in entry["ring"]], max_token_length=cap)
    if codec != "binding":
        raise ConfigurationError(f'"codec" must be one of {", ".join(_CODECS)}')
    at = entry if at is None else at  # a valid vector, replayed at another time or under other settings
    return BoundCodec(
        AESGCMCodec(KeyRing.parse(data["codec_keys"])),
        audience=at.get("audience", entry["audience"]),
        purpose=at.get("purpose", entry["purpose"]),
        ttl=entry["ttl"],
        future_skew=entry["future_skew"],
        binding_key=b64u_decode(data["binding_key"]),
        clock=lambda: at["now"],
    )


def verify_vectors(data: object) -> VectorReport:
    """Check every entry of a decoded vectors file; a file not in the schema raises `ConfigurationError`."""
    if isinstance(data, dict) and data.get("codec") == "vault-transit":
        raise ConfigurationError(
            "vault-transit tokens open only inside Vault: restore the file's key backups (transit/restore) "
            "into a test Vault and unseal the tokens there"
        )
    if not isinstance(data, dict) or data.get("schema") != _SCHEMA:
        raise ConfigurationError(f'a vectors file is a JSON object with "schema": "{_SCHEMA}"')
    codec = data.get("codec")
    if codec not in _CODECS:
        raise ConfigurationError(f'"codec" must be one of {", ".join(_CODECS)}')
    arrays = ("valid", "refusals" if codec == "binding" else "invalid")
    if not all(isinstance(data.get(a), list) for a in arrays):
        raise ConfigurationError(f'"{arrays[0]}" and "{arrays[1]}" must be JSON arrays')
    report = VectorReport(codec, len(data[arrays[0]]), len(data[arrays[1]]))
    for array in arrays:
        for i, entry in enumerate(data[array]):
            try:
                problem = _check(data, array, entry)
            except KeyError as exc:
                problem = f"missing member {exc.args[0]!r}"
            except (ConfigurationError, ProviderError) as exc:  # their messages never hold key material
                problem = f"codec refused: {exc}"
            except (StatecodecError, TypeError, ValueError, AttributeError) as exc:
                problem = f"not usable ({type(exc).__name__})"
            if problem:
                name = entry.get("name", entry.get("vector")) if isinstance(entry, dict) else None
                report.failures.append(f"{array}[{i}]{'' if name is None else f' {name!r}'}: {problem}")
    return report


def _check(data: Mapping[str, Any], array: str, entry: object) -> str | None:
    """What is wrong with one entry, or None; raises when the entry cannot be used at all."""
    if not isinstance(entry, dict):
        return "not a JSON object"
    expected = None if array == "valid" else entry["reason"]
    if data["codec"] == "binding":  # a refusal replays the valid vector it names
        named = (v for v in data["valid"] if isinstance(v, dict) and v.get("name") == entry.get("vector"))
        vector = entry if array == "valid" else next(named, None)
        if vector is None:
            return "names no valid vector"
        codec, token, payload = codec_for(data, vector, entry), vector["token"], vector["state"].encode()
        context = vector["context"] if entry["context"] == "same" else entry["context"]
        bound = {"principal": entry["principal"], "context": context}
    else:
        codec, token, bound = codec_for(data, entry), entry["token"], {}
        payload = bytes.fromhex(entry["payload"]) if array == "valid" else b""
    try:
        got = codec.unseal(token, **bound)
    except InvalidToken as exc:
        if exc.reason.value == expected:
            return None
        return f"refused with {exc.reason.value}, expected {expected or 'it to open'}"
    if expected is not None:
        return "was accepted"
    if got != payload:
        return "opened to another payload"
    if data["codec"] == "jws" and entry.get("deterministic") is True:
        signer = codec if "jwks" in entry else codec_for(data, {**entry, "ring": entry["ring"][entry["sealed_with"] :]})
        if signer.seal(payload) != token:
            return "signing payload again gives another token"
    return None


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("vectors", help="check test-vector files against this library", description=__doc__)
    actions = p.add_subparsers(dest="vectors_command", metavar="ACTION", required=True)
    verify = actions.add_parser("verify", help="check vectors files against this library")
    verify.add_argument("paths", nargs="+", metavar="PATH", help=f"vectors file(s) in the {_SCHEMA} schema")
    verify.set_defaults(func=_verify)


def _verify(args: argparse.Namespace) -> int:
    status = 0
    for path in args.paths:
        try:
            report = verify_vectors(json.loads(Path(path).read_text(encoding="utf-8")))
        except ConfigurationError as exc:
            report, problem = None, str(exc)
        except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            report, problem = None, f"cannot read it: {exc.strerror}" if isinstance(exc, OSError) else "not UTF-8 JSON"
        if report is None:
            print(f"statecodec: {path}: {problem}", file=sys.stderr)
            status = 2
            continue
        n, ok = len(report.failures), report.valid + report.invalid > 0 and not report.failures
        verdict = "all hold" if ok else f"{n} failure{'' if n == 1 else 's'}" if n else "no vectors"
        print(f"{path}: {report.codec}: {report.valid} valid, {report.invalid} invalid: {verdict}")
        print("".join(f"  - {failure}\n" for failure in report.failures), end="")
        status = max(status, 0 if ok else 1)
    return status
