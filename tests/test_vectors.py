"""Every frozen vectors file still holds: tokens open, re-derive byte for byte, and are refused as pinned.

Each entry is one test case, its codec built by the public constructors (`codec_for`) from the keys it holds, so a
token that opens proves its layout. Given the recorded randoms, `seal` reproduces the token, and the token is rebuilt
from ``docs/formats.md`` with cryptography's primitives alone, as a port would.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519
from cryptography.hazmat.primitives.ciphers import algorithms
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.cmac import CMAC
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.concatkdf import ConcatKDFHash
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.keywrap import aes_key_wrap

from statecodec import AESGCMCodec, BoundCodec, EnvelopeCodec, InvalidToken, JWECodec, JWSCodec, KeyRing, XAESGCMCodec
from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH
from statecodec._encoding import b64u_decode as unb64u
from statecodec._encoding import b64u_encode as b64u
from statecodec.envelope import canonical_context
from statecodec.jose import derived_jwk
from tests.codecs import reason
from tests.envelope_wrappers import TableWrapper

VECTORS = Path(__file__).parent / "vectors"


def load(name: str) -> dict[str, Any]:
    return json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def json_parametrize(
    names: str, array: str, keep: Callable[[dict[str, Any]], bool] = lambda v: True
) -> pytest.MarkDecorator:
    """One case ``(data, v)`` per entry of `array` in each named file that `keep` admits."""
    cases = [(load(n), v) for n in names.split() for v in load(n)[array] if keep(v)]
    ids = [f"{d['codec']}: {v.get('name') or v['vector'] + ' -> ' + str(v['reason'])}" for d, v in cases]
    return pytest.mark.parametrize(("data", "v"), cases, ids=ids)


def hkdf(secret: bytes, info: bytes, length: int = 32) -> bytes:
    return HKDF(algorithm=SHA256(), length=length, salt=None, info=info).derive(secret)


def codec_for(data: Mapping[str, Any], entry: Mapping[str, Any], at: Mapping[str, Any] | None = None) -> Any:
    """The codec an entry names; `at`: a binding replay's clock and settings."""
    codec, cap = data["codec"], entry.get("max_token_length", DEFAULT_MAX_TOKEN_LENGTH)
    if codec in ("aesgcm", "xaesgcm"):
        ring = AESGCMCodec if codec == "aesgcm" else XAESGCMCodec
        return ring([unb64u(k) for k in entry["keys"]], max_token_length=cap)
    if codec == "envelope":
        blobs, context = [unb64u(w) for w in entry["wrapped_keys"]], canonical_context(entry["context"])
        table = TableWrapper({(b, context): unb64u(k) for b, k in zip(blobs, entry["data_keys"], strict=True)})
        return EnvelopeCodec(table, blobs, context=entry["context"], max_token_length=cap)
    if codec in ("jwe", "jws"):
        jose = JWECodec if codec == "jwe" else JWSCodec
        if "jwks" in entry:
            return jose.from_jwks(entry["jwks"], alg=entry["alg"], max_token_length=cap)
        return jose([unb64u(k) for k in entry["ring"]], alg=entry["alg"], max_token_length=cap)
    assert codec == "binding", codec
    at = entry if at is None else at  # a valid vector, replayed at another time or under other settings
    return BoundCodec(
        AESGCMCodec(KeyRing.parse(data["codec_keys"])),
        audience=at.get("audience", entry["audience"]),
        purpose=at.get("purpose", entry["purpose"]),
        ttl=entry["ttl"],
        future_skew=entry["future_skew"],
        binding_key=unb64u(data["binding_key"]),
        clock=lambda: at["now"],
        seal_version=data["format_version"],
    )


OFFLINE = "aesgcm xaesgcm envelope jwe jwe_ecdh jws"


def test_retired_version_0x05_tokens_stay_frozen_and_no_codec_opens_one() -> None:
    """Version 0x05 left with `VaultTransitCodec` (docs/formats.md): its frozen tokens are refused, never read as
    another format, by every codec here; the byte-versioned ring names the cause."""
    tokens = [v["token"] for key in load("vault_transit")["keys"] for v in key["valid"]]
    assert len(tokens) == 16
    assert all(t.startswith("BQ") for t in tokens)  # the version byte 0x05
    codecs = [ring([os.urandom(32)]) for ring in (AESGCMCodec, XAESGCMCodec, JWECodec, JWSCodec)]
    for token in tokens:
        for codec in codecs:
            with pytest.raises(InvalidToken) as refused:
                codec.unseal(token)
            assert codec is not codecs[0] or refused.value.reason == "format"


# -- every entry opens or is refused, through the public codec ---------------------------------------


@json_parametrize(OFFLINE, "valid")
def test_valid_entry_opens_to_its_payload(data: dict[str, Any], v: dict[str, Any]) -> None:
    assert codec_for(data, v).unseal(v["token"]) == bytes.fromhex(v["payload"])


@json_parametrize(OFFLINE, "invalid")
def test_invalid_entry_is_refused_with_its_reason(data: dict[str, Any], v: dict[str, Any]) -> None:
    assert reason(codec_for(data, v), v["token"]) == v["reason"]


SEALED = "aesgcm xaesgcm envelope jwe jws"  # jwe_ecdh: the ephemeral key is no urandom draw


@json_parametrize(SEALED, "valid", lambda v: "nonce" in v or "randoms" in v or bool(v.get("deterministic")))
def test_seal_reproduces_the_token(data: dict[str, Any], v: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the recorded nonce, IV and content key, seal emits the frozen token byte for byte: no drift."""
    slot = v.get("sealed_with", 0)
    codec = codec_for(data, {**v, **{k: v[k][slot:] for k in ("keys", "wrapped_keys", "data_keys", "ring") if k in v}})
    draws = [bytes.fromhex(r) for r in ([v["nonce"]] if "nonce" in v else v.get("randoms", []))]
    monkeypatch.setattr(os, "urandom", lambda n: draws.pop(0))
    assert codec.seal(bytes.fromhex(v["payload"])) == v["token"]
    assert draws == []
    assert codec.primary_key_id == v.get("key_id", v.get("kid", codec.primary_key_id))


@json_parametrize("jwe jws", "valid", lambda v: "derived_jwk" in v)
def test_derived_jwk_is_frozen_and_opens_the_ring_token(data: dict[str, Any], v: dict[str, Any]) -> None:
    assert derived_jwk(unb64u(v["ring"][v["sealed_with"]]), v["alg"]) == v["derived_jwk"]
    shared = codec_for(data, {"jwks": [v["derived_jwk"]], "alg": v["alg"]})
    assert shared.unseal(v["token"]) == bytes.fromhex(v["payload"])


@json_parametrize("binding binding_v2", "valid")
def test_binding_vector_opens_at_its_time(data: dict[str, Any], v: dict[str, Any]) -> None:
    codec = codec_for(data, v)
    assert codec.unseal(v["token"], principal=v["principal"], context=v["context"]) == v["state"].encode()
    assert codec.codec.unseal(v["token"]) == bytes.fromhex(v["claims"]) + v["state"].encode()


@json_parametrize("binding binding_v2", "refusals")
def test_binding_replay_is_refused_with_its_reason(data: dict[str, Any], v: dict[str, Any]) -> None:
    vector = next(x for x in data["valid"] if x["name"] == v["vector"])
    codec = codec_for(data, vector, at=v)
    kw = {"principal": v["principal"], "context": vector["context"] if v["context"] == "same" else v["context"]}
    if v["reason"] is None:  # the edge of a window: still open
        assert codec.unseal(vector["token"], **kw) == vector["state"].encode()
    else:
        assert reason(codec, vector["token"], **kw) == v["reason"]


# -- re-derived from docs/formats.md, byte for byte ---------------------------------------------------


def _xaes_subkey(key: bytes, half_nonce: bytes) -> bytes:
    # NIST SP 800-108r1 counter KDF with CMAC-AES-256: i (16 bits) || "X" || 0x00 || N[:12].
    out = b""
    for counter in (1, 2):
        mac = CMAC(algorithms.AES(key))
        mac.update(counter.to_bytes(2, "big") + b"X\x00" + half_nonce)
        out += mac.finalize()
    return out


@json_parametrize("aesgcm xaesgcm", "valid")
def test_ring_token_re_derives(data: dict[str, Any], v: dict[str, Any]) -> None:
    secret, nonce = unb64u(v["keys"][v["sealed_with"]]), bytes.fromhex(v["nonce"])
    key = hkdf(secret, b"statecodec/v1/" + {"aesgcm": b"aes-256-gcm", "xaesgcm": b"xaes-256-gcm"}[data["codec"]])
    kid = hkdf(secret, b"statecodec/v1/key-id", 4)
    assert (key.hex(), kid.hex()) == (v["aead_key"], v["key_id"])
    header = bytes([data["format_version"]]) + kid
    if data["codec"] == "aesgcm":
        sealed = AESGCM(key).encrypt(nonce, bytes.fromhex(v["payload"]), header)
    else:
        sealed = AESGCM(_xaes_subkey(key, nonce[:12])).encrypt(nonce[12:], bytes.fromhex(v["payload"]), header)
    assert b64u(header + nonce + sealed) == v["token"]


@json_parametrize("envelope", "valid")
def test_envelope_token_re_derives(data: dict[str, Any], v: dict[str, Any]) -> None:
    blob, data_key = unb64u(v["wrapped_keys"][v["sealed_with"]]), unb64u(v["data_keys"][v["sealed_with"]])
    kid = hashlib.sha256(b"statecodec/v1/envelope/key-id" + blob).digest()[:4]
    key = hkdf(data_key, b"statecodec/v1/envelope/aes-256-gcm")
    assert (key.hex(), kid.hex()) == (v["aead_key"], v["key_id"])
    header, nonce = b"\x03" + kid, bytes.fromhex(v["nonce"])
    assert b64u(header + nonce + AESGCM(key).encrypt(nonce, bytes.fromhex(v["payload"]), header)) == v["token"]


def _lp(text: str) -> bytes:
    raw = text.encode()
    return len(raw).to_bytes(4, "big") + raw


@json_parametrize("binding binding_v2", "valid")
def test_binding_token_re_derives(data: dict[str, Any], v: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 0x01 and 0x02 claims by docs/formats.md, then the inner AES-256-GCM token; `seal` writes both."""
    binding_key, principal, version = unb64u(data["binding_key"]), v["principal"], data["format_version"]
    items = sorted((v["context"] or {}).items())
    header = (
        bytes([version, principal is not None]) + int(v["now"]).to_bytes(5, "big") + v["ttl"].to_bytes(3, "big")
        + hashlib.sha256(b"statecodec/v1/binding/audience\x00" + v["audience"].encode()).digest()[:3]
        + hashlib.sha256(b"statecodec/v1/binding/purpose\x00" + v["purpose"].encode()).digest()[:3]
        + (hkdf(binding_key, b"statecodec/v1/key-id", 4) if version == 2 else b"")  # 0x02 names its key
    )  # fmt: skip
    bound = _lp(v["audience"]) + _lp(v["purpose"]) + (header if version == 2 else b"")

    def mac(label: bytes, message: bytes) -> bytes:
        return hmac.digest(hkdf(binding_key, b"statecodec/v%d/binding/" % version + label), bound + message, "sha256")

    ctx = len(items).to_bytes(4, "big") + b"".join(_lp(k) + _lp(x) for k, x in items)
    claims = header + mac(b"binding", (b"\x00" if principal is None else b"\x01" + _lp(principal)) + ctx)[:16]
    if principal is not None:
        claims += mac(b"principal", _lp(principal))[:16]
    assert (claims.hex(), header[16:20].hex()) == (v["claims"], data.get("binding_key_id", ""))
    secret, nonce = unb64u(data["codec_keys"].split(",")[0]), bytes.fromhex(v["nonce"])
    inner = b"\x01" + hkdf(secret, b"statecodec/v1/key-id", 4)
    sealed = AESGCM(hkdf(secret, b"statecodec/v1/aes-256-gcm")).encrypt(nonce, claims + v["state"].encode(), inner)
    assert b64u(inner + nonce + sealed) == v["token"]
    monkeypatch.setattr(os, "urandom", lambda n: nonce)
    assert codec_for(data, v).seal(v["state"].encode(), principal=principal, context=v["context"]) == v["token"]


def _jose_key(v: dict[str, Any], label: bytes) -> tuple[str, bytes]:
    """(kid, key) of the sealing key: derived from ``ring[sealed_with]`` under `label`, or an oct JWK as given."""
    if "ring" in v:
        secret = unb64u(v["ring"][v["sealed_with"]])
        return hkdf(secret, b"statecodec/v1/key-id", 4).hex(), hkdf(secret, label)
    return v["jwks"][0]["kid"], unb64u(v["jwks"][0]["k"])


def _thumbprint(jwk: dict[str, str]) -> str:
    # RFC 7638: SHA-256 of the required members (EC or OKP) in lexicographic order, no whitespace.
    members = json.dumps({m: jwk[m] for m in ("crv", "kty", "x", "y") if m in jwk}, separators=(",", ":"))
    return b64u(hashlib.sha256(members.encode()).digest())


def _header(**members: str) -> str:
    return b64u(json.dumps(members, separators=(",", ":")).encode())


@json_parametrize("jwe", "valid", lambda v: "randoms" in v)
def test_jwe_token_re_derives_from_its_randoms(data: dict[str, Any], v: dict[str, Any]) -> None:
    alg, draws = v["alg"], [bytes.fromhex(r) for r in v["randoms"]]
    kid, key = _jose_key(v, f"statecodec/v1/jwe/{alg}+A256GCM".encode())
    h64 = _header(alg=alg, enc="A256GCM", kid=kid)
    if alg == "dir":
        (iv,) = draws
        ek64, cek = "", key
    else:  # A256KW: the content key, then the IV
        cek, iv = draws
        ek64 = b64u(aes_key_wrap(key, cek))
    sealed = AESGCM(cek).encrypt(iv, bytes.fromhex(v["payload"]), h64.encode("ascii"))
    assert f"{h64}.{ek64}.{b64u(iv)}.{b64u(sealed[:-16])}.{b64u(sealed[-16:])}" == v["token"]


def _ecdh(ephemeral: dict[str, str], recipient: dict[str, str]) -> bytes:
    """The ECDH shared secret of the ephemeral private JWK and the recipient's public members."""
    d = unb64u(ephemeral["d"])
    if recipient["crv"] == "P-256":
        point = b"\x04" + unb64u(recipient["x"]) + unb64u(recipient["y"])
        private = ec.derive_private_key(int.from_bytes(d, "big"), ec.SECP256R1())
        return private.exchange(ec.ECDH(), ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point))
    return x25519.X25519PrivateKey.from_private_bytes(d).exchange(
        x25519.X25519PublicKey.from_public_bytes(unb64u(recipient["x"]))
    )


@json_parametrize("jwe_ecdh", "valid")
def test_ecdh_token_re_derives_from_its_ephemeral_key_and_randoms(data: dict[str, Any], v: dict[str, Any]) -> None:
    cek, iv = (bytes.fromhex(r) for r in v["randoms"])
    eph = v["ephemeral_key"]
    recipient = next(j for j in v["jwks"] if j.get("kid") == v["kid"] or "kid" not in j)
    if "kid" not in recipient:
        assert _thumbprint(recipient) == v["kid"]
    # Concat KDF (RFC 7518 4.6.2): AlgorithmID, PartyUInfo and PartyVInfo length-prefixed (both empty), 256 bits.
    other_info = (14).to_bytes(4, "big") + b"ECDH-ES+A256KW" + bytes(8) + (256).to_bytes(4, "big")
    kek = ConcatKDFHash(SHA256(), 32, other_info).derive(_ecdh(eph, recipient))
    epk = {m: eph[m] for m in ("kty", "crv", "x", "y") if m in eph}
    header = {"alg": "ECDH-ES+A256KW", "enc": "A256GCM", "kid": v["kid"], "epk": epk}
    h64 = b64u(json.dumps(header, separators=(",", ":")).encode())
    sealed = AESGCM(cek).encrypt(iv, bytes.fromhex(v["payload"]), h64.encode("ascii"))
    expected = f"{h64}.{b64u(aes_key_wrap(kek, cek))}.{b64u(iv)}.{b64u(sealed[:-16])}.{b64u(sealed[-16:])}"
    assert expected == v["token"]
    # The codec's own tokens carry the same header layout, its fresh ephemeral key in place of this one.
    own = codec_for(data, v)
    if v["kid"] == own.primary_key_id:
        h64 = own.seal(b"")
        fresh = json.loads(unb64u(h64[: h64.index(".")]))
        assert h64.startswith(b64u(json.dumps({**header, "epk": fresh["epk"]}, separators=(",", ":")).encode()) + ".")


@json_parametrize("jws", "valid", lambda v: v["deterministic"])
def test_jws_token_re_derives(data: dict[str, Any], v: dict[str, Any]) -> None:
    payload = bytes.fromhex(v["payload"])
    if v["alg"] == "HS256":
        kid, key = _jose_key(v, b"statecodec/v1/jws/HS256")
        signing_input = f"{_header(alg='HS256', kid=kid)}.{b64u(payload)}".encode()
        signature = hmac.digest(key, signing_input, "sha256")
    else:
        jwk = v["jwks"][0]
        kid = jwk.get("kid", _thumbprint(jwk))
        assert kid == v["kid"]
        signing_input = f"{_header(alg=v['alg'], kid=kid)}.{b64u(payload)}".encode()
        signature = ed25519.Ed25519PrivateKey.from_private_bytes(unb64u(jwk["d"])).sign(signing_input)
    assert f"{signing_input.decode()}.{b64u(signature)}" == v["token"]

