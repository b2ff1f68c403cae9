"""Vectors of the envelope token (`EnvelopeCodec`, format 0x03): data keys, wrapped blobs, context.

Threat: an envelope token that drifts from the documented layout, key-id
derivation or AES key derivation strands every token sealed under a KMS data
key. Each valid vector pins ``(data key, wrapped blob, context, nonce,
payload) -> token``; a fixed table stands in for the KMS (it maps each
``(wrapped blob, context)`` to its data key, as a provider would), so the
real `EnvelopeCodec` opens and re-derives every token without a network.

Members beyond the common ones (``docs/formats.md``, "Vector files")::

    valid:   data_keys, wrapped_keys, context, sealed_with, key_id, aead_key, nonce, payload, token
    invalid: data_keys, wrapped_keys, context, token, reason, max_token_length?
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode, b64u_encode
from statecodec._vectors import _schema as s
from statecodec._vectors.ring import _PAYLOADS, _nonce, _seal_with_nonce, layout_problems
from statecodec.envelope import ENVELOPE_KEY_INFO, EnvelopeCodec, canonical_context, envelope_key_id
from statecodec.errors import ConfigurationError, ProviderError, Reason
from statecodec.keys import derive_key

__all__ = ["generate", "verify"]

VERSION = 0x03
_NONCE_LENGTH = 12
_KEYS = {"data_keys": s.b64u_list, "wrapped_keys": s.b64u_list, "context": s.string_map}
_VALID = {
    "name": s.text,
    **_KEYS,
    "sealed_with": s.index,
    "key_id": s.hex_text,
    "aead_key": s.hex_text,
    "nonce": s.hex_text,
    "payload": s.hex_text,
    "token": s.text,
}
_INVALID = {"name": s.text, **_KEYS, "token": s.text, "reason": s.reason}
_INVALID_OPTIONAL = {"max_token_length": s.index}
_TOP = {"schema": s.text, "codec": s.text, "format_version": s.index, "description": s.text}


class _Table:
    """A `KeyWrapper` answering fixed ``(blob, context) -> data key`` pairs: the KMS of a vectors file."""

    name = "vectors"

    def __init__(self, table: Mapping[tuple[bytes, bytes], bytes]) -> None:
        self._table = dict(table)

    def describe(self) -> str:
        return "the vectors file's data-key table"

    def wrap(self, data_key: bytes, context: Mapping[str, str]) -> bytes:
        raise ProviderError("the vectors file's data-key table cannot wrap")

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes:
        try:
            return self._table[(blob, canonical_context(context))]
        except KeyError:
            raise ProviderError("the vectors file's data-key table has no such blob and context") from None

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes:
        raise ProviderError("the vectors file's data-key table cannot wrap")


def _codec(v: Mapping[str, Any], slots: slice = slice(None), cap: int = DEFAULT_MAX_TOKEN_LENGTH) -> EnvelopeCodec:
    data_keys = [b64u_decode(k) for k in v["data_keys"]]
    blobs = [b64u_decode(b) for b in v["wrapped_keys"]]
    table = _Table({(b, canonical_context(v["context"])): k for b, k in zip(blobs, data_keys, strict=True)})
    return EnvelopeCodec(table, blobs[slots], context=v["context"], max_token_length=cap)


def _parse(data: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    top = s.members(data, "vectors file", {**_TOP, "valid": s.array, "invalid": s.array})
    if top["format_version"] != VERSION:
        raise ConfigurationError(f"format_version of envelope is {VERSION}")
    valid = [s.members(v, f"valid[{i}]", _VALID) for i, v in enumerate(top["valid"])]
    invalid = [s.members(v, f"invalid[{i}]", _INVALID, _INVALID_OPTIONAL) for i, v in enumerate(top["invalid"])]
    for where, items in (("valid", valid), ("invalid", invalid)):
        s.unique_names(items, where)
        for i, v in enumerate(items):
            if len(v["data_keys"]) != len(v["wrapped_keys"]):
                raise ConfigurationError(f"{where}[{i}]: data_keys and wrapped_keys must pair up one to one")
            if where == "valid" and v["sealed_with"] >= len(v["data_keys"]):
                raise ConfigurationError(f"{where}[{i}].sealed_with is past the end of wrapped_keys")
    return valid, invalid


def verify(data: Mapping[str, Any]) -> s.VectorReport:
    """Validate the whole file, then check each vector against `EnvelopeCodec`."""
    valid, invalid = _parse(data)
    report = s.VectorReport(codec="envelope")
    for v in valid:
        report.valid += 1
        report.fail("valid", v["name"], _check_valid(v))
    for iv in invalid:
        report.invalid += 1
        report.fail("invalid", iv["name"], _check_invalid(iv))
    return report


def _check_invalid(iv: Mapping[str, Any]) -> list[str]:
    cap = iv.get("max_token_length", DEFAULT_MAX_TOKEN_LENGTH)
    return s.refusal(
        lambda: _codec(iv, cap=cap), iv["token"], iv["reason"], what="ring", errors=(ConfigurationError, ProviderError)
    )


def _check_valid(v: Mapping[str, Any]) -> list[str]:
    slot = v["sealed_with"]
    try:
        ring, signer = _codec(v), _codec(v, slice(slot, slot + 1))
    except (ConfigurationError, ProviderError) as exc:
        return [f"ring refused: {exc}"]
    key_id, nonce, payload = bytes.fromhex(v["key_id"]), bytes.fromhex(v["nonce"]), bytes.fromhex(v["payload"])
    problems: list[str] = []
    if envelope_key_id(b64u_decode(v["wrapped_keys"][slot])) != key_id or ring.key_ids[slot] != v["key_id"]:
        problems.append("key_id differs from the key id derived from the wrapped key")
    if derive_key(b64u_decode(v["data_keys"][slot]), ENVELOPE_KEY_INFO).hex() != v["aead_key"]:
        problems.append("aead_key differs from the AES key derived from the data key")
    problems += layout_problems(v["token"], VERSION, key_id, nonce, _NONCE_LENGTH, payload)
    if len(nonce) != _NONCE_LENGTH:
        return problems
    problems += s.opens(lambda: ring.unseal(v["token"]), payload)
    resealed = _seal_with_nonce(signer._codec, payload, nonce)
    if resealed != v["token"]:
        problems.append(
            f"re-sealing payload under nonce gives another token ({s.first_difference(resealed, v['token'])})"
        )
    return problems


# -- generating ------------------------------------------------------------------------------------

# Fixed, obviously non-secret data keys and stand-in wrapped blobs (a real blob is a KMS ciphertext).
_DATA_KEYS = (bytes(range(0x40, 0x60)), bytes(range(0x80, 0xA0)))
_BLOBS = (
    b"\x01\x02\x03\x00" + bytes(range(0xC0, 0xE0)) + b"wrapped-key-1",
    b"\x01\x02\x03\x00" + bytes(range(0xE0, 0x100)) + b"wrapped-key-2",
)
_CONTEXT = {"purpose": "statecodec-envelope", "audience": "vectors"}
_RING = {
    "data_keys": [b64u_encode(k) for k in _DATA_KEYS],
    "wrapped_keys": [b64u_encode(b) for b in _BLOBS],
    "context": _CONTEXT,
}


def _valid(name: str, payload: bytes, nonce: bytes, slot: int) -> dict[str, Any]:
    signer = _codec(_RING, slice(slot, slot + 1))
    return {
        "name": name,
        **_RING,
        "sealed_with": slot,
        "key_id": envelope_key_id(_BLOBS[slot]).hex(),
        "aead_key": derive_key(_DATA_KEYS[slot], ENVELOPE_KEY_INFO).hex(),
        "nonce": nonce.hex(),
        "payload": payload.hex(),
        "token": _seal_with_nonce(signer._codec, payload, nonce),
    }


def generate() -> dict[str, Any]:
    """The standard envelope set: every payload shape, both ring slots, and every reason code a token can earn."""
    valid = [_valid(name, p, _nonce(i, _NONCE_LENGTH), 0) for i, (name, p) in enumerate(_PAYLOADS)]
    valid.append(_valid("second ring slot", b"sealed before rotation", _nonce(len(valid), _NONCE_LENGTH), 1))
    ascii_token = next(v["token"] for v in valid if v["name"] == "ascii payload")
    raw = b64u_decode(ascii_token)
    big = valid[-2]["token"]

    def bad(name: str, token: str, reason: Reason, cap: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"name": name, **_RING, "token": token, "reason": reason.value}
        if cap is not None:
            out["max_token_length"] = cap
        return out

    invalid = [
        bad("tag bit flipped", s.flip(ascii_token, len(raw) - 1), Reason.SEAL),
        bad("ciphertext bit flipped", s.flip(ascii_token, 17, 0x80), Reason.SEAL),
        bad("nonce bit flipped", s.flip(ascii_token, 5), Reason.SEAL),
        bad("last byte removed", b64u_encode(raw[:-1]), Reason.SEAL),
        bad("key id bit flipped", s.flip(ascii_token, 1), Reason.UNKNOWN_KEY),
        bad("version byte 0x01 (AES-GCM ring format)", b64u_encode(b"\x01" + raw[1:]), Reason.FORMAT),
        bad("version byte 0x02 (XAES-GCM ring format)", b64u_encode(b"\x02" + raw[1:]), Reason.FORMAT),
        bad("empty string", "", Reason.MALFORMED),
        bad("shorter than the smallest token", b64u_encode(raw[:32]), Reason.MALFORMED),
        bad("padding appended", ascii_token + "=" * (-len(ascii_token) % 4 or 4), Reason.MALFORMED),
        bad("standard alphabet '+'", "+" + ascii_token[1:], Reason.MALFORMED),
        bad("one character over max_token_length", big, Reason.OVERSIZED, cap=len(big) - 1),
    ]
    return {
        "schema": s.SCHEMA,
        "codec": "envelope",
        "format_version": VERSION,
        "description": (
            "Envelope tokens (format 0x03) under fixed data keys and stand-in wrapped blobs; a verifier maps "
            "each (wrapped blob, context) to its data key in place of the KMS. Test values: never use them."
        ),
        "valid": valid,
        "invalid": invalid,
    }
