"""`statecodec vectors verify`: every token of a vectors file opens or is refused as pinned.

Threat: a port of a token format that drifts (a label, a field order, a reason code) strands tokens and fails
open where it should fail closed. Each entry's codec is built by the public constructors from the keys the entry
holds; a token that opens proves its layout. A failure names the entry and what differs, never a key or a token.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode
from statecodec.aead import AESGCMCodec, XAESGCMCodec
from statecodec.binding import BoundCodec
from statecodec.envelope import EnvelopeCodec
from statecodec.errors import ConfigurationError, InvalidToken, ProviderError
from statecodec.jose import JWECodec, JWSCodec
from statecodec.keys import KeyRing

_SCHEMA = "statecodec-vectors/1"
_VAULT_HINT = "restore its key backups (transit/restore) into a test Vault and unseal the tokens there"
_REFUSED = {"binding": "refusals"}  # the array of texts each file refuses; "invalid" unless named here


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
    if codec == "jws":  # a ring signs with HS256
        return JWSCodec([b64u_decode(k) for k in entry["ring"]], max_token_length=cap)
    if codec != "binding":
        raise ConfigurationError('"codec" must be one of aesgcm, binding, envelope, jwe, jws, xaesgcm')
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


def _check(data: Mapping[str, Any], entry: Mapping[str, Any], valid: bool) -> str | None:
    """What is wrong with one entry, or None."""
    if data["codec"] == "binding":  # a refusal replays the valid vector it names
        vector = entry if valid else next(v for v in data["valid"] if v["name"] == entry["vector"])
        context = vector["context"] if entry["context"] == "same" else entry["context"]
        codec, bound = codec_for(data, vector, entry), {"principal": entry["principal"], "context": context}
        token, payload = vector["token"], vector["state"].encode()
    else:
        codec, bound, token = codec_for(data, entry), {}, entry["token"]
        payload = bytes.fromhex(entry["payload"]) if valid else b""
    expected = None if valid else entry["reason"]
    try:
        got = codec.unseal(token, **bound)
    except InvalidToken as exc:
        if exc.reason.value == expected:
            return None
        return f"refused with {exc.reason.value}, expected {expected or 'it to open'}"
    if expected is not None:
        return "was accepted"
    return None if got == payload else "opened to another payload"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("vectors", help="check test-vector files against this library", description=__doc__)
    actions = p.add_subparsers(dest="vectors_command", metavar="ACTION", required=True)
    verify = actions.add_parser("verify", help="check vectors files against this library")
    verify.add_argument("paths", nargs="+", metavar="PATH", help=f"vectors file(s) in the {_SCHEMA} schema")
    verify.add_argument("--json", action="store_true", help="one JSON document on stdout instead of text lines")
    verify.set_defaults(func=_verify)


def _verify(args: argparse.Namespace) -> int:
    results = [_verify_file(path) for path in args.paths]
    if args.json:
        print(json.dumps({"files": results}, indent=2))
    for result in [] if args.json else results:
        if "error" in result:
            print(f"statecodec: {result['path']}: {result['error']}", file=sys.stderr)
            continue
        counts = f"{result['to_open']} to open, {result['to_refuse']} to refuse"
        problems = [f"  - {f['entry']} {f['name']!r}: {f['problem']}" for f in result["failures"]]
        print(f"{result['path']}: {result['codec']}: {counts}: {result['verdict']}", *problems, sep="\n")
    return max((2 if "error" in r else 0 if r["verdict"] == "all hold" else 1 for r in results), default=0)


def _verify_file(path: str) -> dict[str, Any]:
    """One file's verdict: entries expected to open and to be refused, counted apart, and every failure."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if data["codec"] == "vault-transit":
            error = f"its tokens open only inside Vault: {_VAULT_HINT}"
            return {"path": path, "codec": "vault-transit", "error": error}
        arrays = {name: list(data[name]) for name in ("valid", _REFUSED.get(data["codec"], "invalid"))}
    except (OSError, ValueError, TypeError, KeyError) as exc:  # ValueError: not UTF-8 JSON
        why = f"cannot read it: {exc.strerror}" if isinstance(exc, OSError) else f"not a {_SCHEMA} file"
        return {"path": path, "error": f"{why} ({type(exc).__name__})"}
    failures = [failure for name, entries in arrays.items() for failure in _failures(data, name, entries)]
    # A refusals entry with no reason pins a token that still opens (the edge of a window): it counts as one to open.
    to_open = len(arrays["valid"]) + sum(
        1 for name, entries in arrays.items() if name != "valid" for e in entries if _expects_opening(e)
    )
    total = sum(map(len, arrays.values()))
    verdict = f"{len(failures)} failure(s)" if failures else "all hold" if total else "no vectors"
    return {
        "path": path, "codec": data["codec"], "to_open": to_open, "to_refuse": total - to_open,
        "verdict": verdict, "failures": failures,
    }


def _expects_opening(entry: object) -> bool:
    return isinstance(entry, dict) and "reason" in entry and entry["reason"] is None


def _failures(data: Mapping[str, Any], array: str, entries: list[Any]) -> Iterator[dict[str, Any]]:
    for i, entry in enumerate(entries):
        try:
            problem = _check(data, entry, array == "valid")
        except (ConfigurationError, ProviderError) as exc:  # their messages never hold key material
            problem = f"codec refused: {exc}"
        except Exception as exc:  # a malformed entry fails alone
            problem = f"not usable ({type(exc).__name__})"
        if problem:
            name = entry.get("name", entry.get("vector")) if isinstance(entry, dict) else None
            yield {"entry": f"{array}[{i}]", "name": name, "problem": problem}
