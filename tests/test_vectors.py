"""The frozen vectors unseal, re-derive byte for byte through the public seal, and are refused as pinned.

The private fixed-nonce and fixed-randomness hooks that generation uses are
proven here equal to each codec's public ``seal`` under the same draws.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers import algorithms
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.cmac import CMAC
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from statecodec import AESGCMCodec, BoundCodec, ConfigurationError, EnvelopeCodec, InvalidToken, JWECodec, Reason
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.envelope import canonical_context
from statecodec.jose._jwk import load_agreement_key
from statecodec.jose.jwe import _Agreement
from statecodec.vectors import (
    CODECS,
    SCHEMA,
    InvalidVector,
    ValidVector,
    VectorFile,
    _seal_with_nonce,
    dump_vectors,
    generate_vectors,
    load_vectors,
    parse_vectors,
    seal_vector,
    verify_vectors,
)
from tests.envelope_wrappers import TableWrapper

VECTORS = Path(__file__).parent / "vectors"
NAMES = sorted(CODECS)


@pytest.fixture(params=NAMES)
def name(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def frozen(name: str) -> VectorFile:
    return load_vectors(VECTORS / f"{name}.json")


def raw_json(name: str) -> dict[str, Any]:
    return json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


# -- the committed files ---------------------------------------------------------------------------


def test_files_cover_the_cases(frozen: VectorFile) -> None:
    payloads = [v.payload for v in frozen.valid]
    assert b"" in payloads
    assert any(any(b >= 0x80 for b in p) for p in payloads)
    assert any(v.sealed_with > 0 for v in frozen.valid)
    assert {len(v.token) % 4 for v in frozen.valid} == {0, 2, 3}
    reasons = {v.reason for v in frozen.invalid}
    assert reasons >= {Reason.MALFORMED, Reason.OVERSIZED, Reason.FORMAT, Reason.UNKNOWN_KEY, Reason.SEAL}
    assert len({v.name for v in frozen.valid}) == len(frozen.valid)
    assert len({v.name for v in frozen.invalid}) == len(frozen.invalid)


def test_every_valid_vector_unseals(name: str, frozen: VectorFile) -> None:
    cls = CODECS[name]
    for v in frozen.valid:
        ring = cls(list(v.keys))
        assert ring.unseal(v.token) == v.payload, v.name
        assert ring.key_ids[v.sealed_with] == v.key_id.hex(), v.name


def test_every_token_re_derives_through_the_public_seal(
    name: str, frozen: VectorFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The only nonce hook is a patched os.urandom, here: seal itself must produce each token."""
    cls = CODECS[name]
    for v in frozen.valid:
        asked: list[int] = []

        def fixed(n: int, nonce: bytes = v.nonce, asked: list[int] = asked) -> bytes:
            asked.append(n)
            return nonce

        monkeypatch.setattr(os, "urandom", fixed)
        token = cls([v.keys[v.sealed_with]]).seal(v.payload)
        monkeypatch.undo()
        assert asked == [cls.NONCE_LENGTH], v.name
        assert token == v.token, v.name


def test_every_token_re_derives_from_the_documented_layout(name: str, frozen: VectorFile) -> None:
    """An independent implementation of docs/formats.md, built from cryptography primitives only."""
    for v in frozen.valid:
        secret = v.keys[v.sealed_with]
        label = b"statecodec/v1/aes-256-gcm" if name == "aesgcm" else b"statecodec/v1/xaes-256-gcm"
        key = HKDF(algorithm=SHA256(), length=32, salt=None, info=label).derive(secret)
        kid = HKDF(algorithm=SHA256(), length=4, salt=None, info=b"statecodec/v1/key-id").derive(secret)
        assert (key, kid) == (v.aead_key, v.key_id), v.name
        version = b"\x01" if name == "aesgcm" else b"\x02"
        header = version + kid
        if name == "aesgcm":
            sealed = AESGCM(key).encrypt(v.nonce, v.payload, header)
        else:
            sealed = AESGCM(_xaes_subkey(key, v.nonce[:12])).encrypt(v.nonce[12:], v.payload, header)
        assert b64u_encode(header + v.nonce + sealed) == v.token, v.name


def _xaes_subkey(key: bytes, half_nonce: bytes) -> bytes:
    # NIST SP 800-108r1 counter KDF with CMAC-AES-256: i (16 bits) || "X" || 0x00 || N[:12].
    out = b""
    for counter in (1, 2):
        mac = CMAC(algorithms.AES(key))
        mac.update(counter.to_bytes(2, "big") + b"X\x00" + half_nonce)
        out += mac.finalize()
    return out


def test_every_invalid_vector_is_refused_with_its_reason(name: str, frozen: VectorFile) -> None:
    cls = CODECS[name]
    for iv in frozen.invalid:
        kwargs = {} if iv.max_token_length is None else {"max_token_length": iv.max_token_length}
        ring = cls(list(iv.keys), **kwargs)
        with pytest.raises(InvalidToken) as info:
            ring.unseal(iv.token)
        assert info.value.reason is iv.reason, iv.name


def test_verify_vectors_passes_the_committed_files(frozen: VectorFile) -> None:
    report = verify_vectors(frozen)
    assert report.ok, str(report)
    assert report.checked == len(frozen.valid) + len(frozen.invalid)


def test_generation_reproduces_the_committed_files(name: str) -> None:
    assert dump_vectors(generate_vectors(name)) == (VECTORS / f"{name}.json").read_text(encoding="utf-8")


def test_files_are_in_the_documented_schema(name: str) -> None:
    data = raw_json(name)
    assert data["schema"] == SCHEMA
    assert data["codec"] == name
    assert data["format_version"] == CODECS[name].VERSION
    assert set(data) == {"schema", "codec", "format_version", "description", "valid", "invalid"}
    assert parse_vectors(data) == load_vectors(VECTORS / f"{name}.json")


# -- the checker finds drift -----------------------------------------------------------------------


def _with(frozen: VectorFile, index: int, **changes: Any) -> VectorFile:
    valid = list(frozen.valid)
    valid[index] = dataclasses.replace(valid[index], **changes)
    return dataclasses.replace(frozen, valid=tuple(valid))


def _flip_last(token: str) -> str:
    data = b64u_decode(token)
    return b64u_encode(data[:-1] + bytes([data[-1] ^ 1]))


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda v: {"token": _flip_last(v.token)}, "unseal refused it (seal)"),
        (lambda v: {"payload": v.payload + b"!"}, "layout says"),
        (lambda v: {"nonce": bytes(len(v.nonce))}, "does not carry the vector's nonce"),
        (lambda v: {"key_id": b"\x00\x00\x00\x00"}, "key_id differs"),
        (lambda v: {"aead_key": bytes(32)}, "aead_key differs"),
        (lambda v: {"nonce": b"\x00"}, "nonce is not"),
        (lambda v: {"token": v.token + "="}, "not canonical base64url"),
        (lambda v: {"keys": (bytes(32),)}, "ring refused"),
    ],
    ids=["token", "payload", "nonce", "key_id", "aead_key", "nonce-length", "encoding", "ring"],
)
def test_verify_reports_a_drifted_valid_vector(frozen: VectorFile, change: Any, expected: str) -> None:
    report = verify_vectors(_with(frozen, 1, **change(frozen.valid[1])))
    assert not report.ok
    assert len(report.failures) >= 1
    assert any(expected in f for f in report.failures), report.failures
    assert all(frozen.valid[1].name in f for f in report.failures)


def test_verify_reports_a_drifted_invalid_vector(frozen: VectorFile) -> None:
    first = frozen.invalid[0]
    accepted = dataclasses.replace(first, token=frozen.valid[0].token, keys=frozen.valid[0].keys)
    wrong_reason = dataclasses.replace(first, reason=Reason.MALFORMED)
    bad_ring = dataclasses.replace(first, keys=(b"short",))
    report = verify_vectors(dataclasses.replace(frozen, invalid=(accepted, wrong_reason, bad_ring)))
    assert [f.split(": ", 1)[1] for f in report.failures] == [
        "was accepted",
        f"refused with {first.reason.value}, expected malformed",
        report.failures[2].split(": ", 1)[1],
    ]
    assert "ring refused" in report.failures[2]


def test_empty_file_is_not_ok(name: str) -> None:
    report = verify_vectors(VectorFile(codec=name, valid=(), invalid=()))
    assert report.checked == 0
    assert not report.ok
    assert str(report).startswith(f"{name}: 0 vectors")


# -- generating and parsing ------------------------------------------------------------------------


def test_seal_vector_matches_the_codec(name: str) -> None:
    cls = CODECS[name]
    keys = [bytes(range(100, 132)), bytes(range(32))]
    v = seal_vector(name, "custom", keys, b"payload", bytes(range(cls.NONCE_LENGTH)), sealed_with=1)
    assert isinstance(v, ValidVector)
    assert cls(keys).unseal(v.token) == b"payload"
    assert verify_vectors(VectorFile(codec=name, valid=(v,), invalid=())).ok
    with pytest.raises(ConfigurationError, match="nonce must be"):
        _seal_with_nonce(cls(keys), b"x", b"short")


def test_generate_refuses_unknown_codec() -> None:
    with pytest.raises(ConfigurationError, match="codec must be one of"):
        generate_vectors("rot13")


def test_dump_and_parse_round_trip(frozen: VectorFile) -> None:
    assert parse_vectors(json.loads(dump_vectors(frozen))) == frozen
    iv = InvalidVector("x", (bytes(range(32)),), "t", Reason.SEAL)
    assert "max_token_length" not in iv.to_json()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(schema="statecodec-vectors/2"), "schema must be"),
        (lambda d: d.update(codec="rot13"), "codec must be one of"),
        (lambda d: d.update(format_version=9), "format_version"),
        (lambda d: d.update(description=3), "description must be a string"),
        (lambda d: d.update(extra=1), "unknown member"),
        (lambda d: d.pop("valid"), "missing member"),
        (lambda d: d.update(valid={}), "valid must be a JSON array"),
        (lambda d: d["valid"][0].update(nonce="ZZ"), "valid[0].nonce must be lowercase hex"),
        (lambda d: d["valid"][0].update(nonce="A0A1"), "valid[0].nonce must be lowercase hex"),
        (lambda d: d["valid"][0].update(nonce="a0 a1"), "without spaces"),
        (lambda d: d["valid"][0].update(payload=5), "valid[0].payload must be a string"),
        (lambda d: d["valid"][0].update(sealed_with=1), "sealed_with is past the end"),
        (lambda d: d["valid"][0].update(sealed_with=True), "non-negative integer"),
        (lambda d: d["valid"][0].update(keys="k"), "valid[0].keys must be a JSON array"),
        (lambda d: d["valid"][0].update(keys=[1]), "valid[0].keys[0] must be a base64url string"),
        (lambda d: d["valid"][0].update(keys=["a="]), "valid[0].keys[0] is not unpadded base64url"),
        (lambda d: d["valid"][0].pop("token"), "valid[0]: missing member"),
        (lambda d: d["invalid"][0].update(reason="nope"), "invalid[0].reason must be"),
        (lambda d: d["invalid"][0].update(max_token_length=-1), "non-negative integer"),
        (lambda d: d["invalid"].append([]), "must be a JSON object"),
    ],
)
def test_parse_refuses_a_malformed_file(name: str, mutate: Any, message: str) -> None:
    data = raw_json(name)
    mutate(data)
    with pytest.raises(ConfigurationError) as info:
        parse_vectors(data)
    assert message in str(info.value)


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read vectors file"):
        load_vectors(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="not UTF-8 JSON"):
        load_vectors(bad)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ConfigurationError, match="not UTF-8 JSON"):
        load_vectors(binary)


def test_documented_examples_are_frozen_vectors() -> None:
    """The worked examples in docs/formats.md are vectors from these files, so the page cannot drift."""
    page = (Path(__file__).parent.parent / "docs" / "formats.md").read_text(encoding="utf-8")
    # The two ring-format sections only: other formats document their own examples.
    text = page.split("## AES-256-GCM (", 1)[1].split("## Vector files", 1)[0]
    documented = re.findall(r"^token\s+(\S+)$", text, flags=re.MULTILINE)
    frozen = {v.token for name in NAMES for v in load_vectors(VECTORS / f"{name}.json").valid}
    assert len(documented) >= 2
    assert set(documented) <= frozen
    for name in NAMES:
        v = next(v for v in load_vectors(VECTORS / f"{name}.json").valid if v.name == "ascii payload")
        assert v.aead_key.hex() in text
        assert v.nonce.hex() in text


# -- the other formats' private hooks are the public seal --------------------------------------------


def _generated(name: str) -> dict[str, Any]:
    return json.loads(dump_vectors(generate_vectors(name)))  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", ["jwe-dir", "jwe-a256kw", "jwe-ecdh-es-p256", "jwe-ecdh-es-x25519"])
def test_jwe_randoms_hook_is_the_public_seal(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With os.urandom (and the ephemeral key) patched to the recorded draws, JWECodec.seal gives each token."""
    for v in _generated(name)["valid"]:
        draws = [bytes.fromhex(r) for r in v["randoms"]]
        if "ephemeral_key" in v:
            ephemeral, _ = load_agreement_key(v["ephemeral_key"], 0)
            monkeypatch.setattr(_Agreement, "ephemeral", lambda self, e=ephemeral: e)
        if "ring" in v:
            codec = JWECodec([b64u_decode(k) for k in v["ring"][v["sealed_with"] :]], alg=v["alg"])
        else:
            codec = JWECodec.from_jwks(v["jwks"], alg=v["alg"])
        monkeypatch.setattr(os, "urandom", lambda n, d=draws: d.pop(0))
        token = codec.seal(bytes.fromhex(v["payload"]))
        monkeypatch.undo()
        assert token == v["token"], v["name"]
        assert draws == [], v["name"]


def test_envelope_nonce_hook_is_the_public_seal(monkeypatch: pytest.MonkeyPatch) -> None:
    for v in _generated("envelope")["valid"]:
        slot = v["sealed_with"]
        blob, data_key = b64u_decode(v["wrapped_keys"][slot]), b64u_decode(v["data_keys"][slot])
        wrapper = TableWrapper({(blob, canonical_context(v["context"])): data_key})
        codec = EnvelopeCodec(wrapper, [blob], context=v["context"])
        nonce = bytes.fromhex(v["nonce"])
        monkeypatch.setattr(os, "urandom", lambda n, nonce=nonce: nonce)
        token = codec.seal(bytes.fromhex(v["payload"]))
        monkeypatch.undo()
        assert token == v["token"], v["name"]


def test_binding_nonce_hook_is_the_public_seal(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _generated("binding")
    for v in data["valid"]:
        now: float = v["now"]
        codec = BoundCodec(
            AESGCMCodec.from_env(environ={"STATECODEC_KEYS": data["codec_keys"]}),
            audience=v["audience"],
            purpose=v["purpose"],
            ttl=v["ttl"],
            future_skew=v["future_skew"],
            binding_key=b64u_decode(data["binding_key"]),
            clock=functools.partial(float, now),
        )
        nonce = bytes.fromhex(v["nonce"])
        monkeypatch.setattr(os, "urandom", lambda n, nonce=nonce: nonce)
        token = codec.seal(v["state"].encode(), principal=v["principal"], context=v["context"])
        monkeypatch.undo()
        assert token == v["token"], v["name"]
        assert AESGCMCodec.from_env(environ={"STATECODEC_KEYS": data["codec_keys"]}).unseal(token) == bytes.fromhex(
            v["claims"]
        ) + v["state"].encode()


def test_verify_accepts_a_path_a_mapping_and_a_parsed_ring_file() -> None:
    path = VECTORS / "aesgcm.json"
    reports = [verify_vectors(path), verify_vectors(raw_json("aesgcm")), verify_vectors(load_vectors(path))]
    assert [r.ok for r in reports] == [True, True, True]
    assert [r.checked for r in reports] == [30, 30, 30]
