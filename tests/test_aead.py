"""The AES-GCM token layout (`_Ring`) and the codecs that hold it: AESGCMCodec, XAESGCMCodec, EnvelopeCodec.

What the conformance suite (tests/test_redteam.py) proves for every codec, tampering, junk, foreign
tokens and leaks, is not repeated here: these tests pin the layout, its refusal order, the ring and
the caps, and replay the frozen vectors through `seal` itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecodec import AESGCMCodec, ConfigurationError, InvalidToken, KeyRing, Reason, SealError, XAESGCMCodec
from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode, b64u_encode, b64u_len
from statecodec.aead import _XAES, _Ring
from tests.vector_codecs import codec_for

RingCodec = AESGCMCodec | XAESGCMCodec
CODECS: list[type[RingCodec]] = [AESGCMCodec, XAESGCMCodec]
K0, K1 = bytes(range(32)), bytes(range(32, 64))
VECTORS = Path(__file__).parent / "vectors"


def overhead(cls: type[RingCodec]) -> int:
    return 1 + 4 + cls.NONCE_LENGTH + 16


def reason_of(codec: Any, token: object) -> Reason:
    with pytest.raises(InvalidToken) as info:
        codec.unseal(token)
    return info.value.reason


@pytest.fixture(params=CODECS, ids=["aesgcm", "xaesgcm"])
def cls(request: pytest.FixtureRequest) -> type[RingCodec]:
    return request.param  # type: ignore[no-any-return]


def json_parametrize(*names: str) -> pytest.MarkDecorator:
    """One case ``(data, v)`` per valid entry of each named vectors file, as cryptography reads its vectors."""
    files = [json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8")) for name in names]
    cases = [(data, v) for data in files for v in data["valid"]]
    return pytest.mark.parametrize(("data", "v"), cases, ids=[f"{d['codec']}: {v['name']}" for d, v in cases])


@json_parametrize("aesgcm", "xaesgcm", "envelope")
def test_seal_reproduces_every_frozen_token(data: dict[str, Any], v: dict[str, Any], monkeypatch: Any) -> None:
    slot = v["sealed_with"]
    primary_first: dict[str, Any] = {k: v[k][slot:] for k in ("keys", "wrapped_keys", "data_keys") if k in v}
    codec = codec_for(data, {**v, **primary_first})
    monkeypatch.setattr(os, "urandom", lambda n: bytes.fromhex(v["nonce"]))
    assert codec.seal(bytes.fromhex(v["payload"])) == v["token"]
    assert codec.primary_key_id == v["key_id"]


# -- the layout: header, refusal order, what the tag binds --------------------------------------------


def test_reason_codes_in_order(cls: type[RingCodec]) -> None:
    codec = cls([K0, K1], max_token_length=400)
    token = codec.seal(b"payload")
    data, min_raw = b64u_decode(token), overhead(cls)
    assert data[0] == cls.VERSION
    assert data[1:5].hex() == codec.primary_key_id == KeyRing([K0]).key_ids[0]
    assert reason_of(codec, token.encode()) is Reason.MALFORMED  # not a str
    assert reason_of(codec, "\u00e9" * 401) is Reason.OVERSIZED  # over the cap, before decoding
    assert reason_of(codec, "A" * 400) is Reason.FORMAT  # at the cap: decoded, version byte 0x00
    assert reason_of(codec, token + "=") is Reason.MALFORMED  # not canonical base64url
    # Shorter than header + nonce + tag: malformed, even with a wrong version.
    assert reason_of(codec, b64u_encode(b"\x7f" + data[1 : min_raw - 1])) is Reason.MALFORMED
    assert reason_of(codec, b64u_encode(b"\x7f" + b"\x00" * 4 + data[5:])) is Reason.FORMAT  # before the key
    assert reason_of(codec, b64u_encode(data[:1] + b"\x00" * 4 + data[5:])) is Reason.UNKNOWN_KEY
    assert reason_of(codec, b64u_encode(data[:-1] + bytes([data[-1] ^ 0x80]))) is Reason.SEAL
    assert codec.unseal(codec.seal(b"")) == b""  # the smallest token is exactly the minimum length


def test_tokens_of_the_other_format_are_refused_with_format() -> None:
    aes, xaes = AESGCMCodec([K0]), XAESGCMCodec([K0])
    assert aes.key_ids == xaes.key_ids  # same secret, same key id: only the version tells them apart
    assert reason_of(aes, xaes.seal(b"x")) is Reason.FORMAT
    assert reason_of(xaes, aes.seal(b"twelve bytes")) is Reason.FORMAT


def test_version_byte_is_bound_under_the_tag() -> None:
    """A ring with another version over the same AES key still refuses a relabelled token."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    (kid, key), = KeyRing([K0]).subkeys(b"statecodec/v1/aes-256-gcm")
    other = _Ring(0x7E, 12, [(kid, AESGCM(key))], DEFAULT_MAX_TOKEN_LENGTH)
    relabelled = b64u_encode(b"\x7e" + b64u_decode(AESGCMCodec([K0]).seal(b"bound"))[1:])
    assert reason_of(other, relabelled) is Reason.SEAL
    assert other.unseal(other.seal(b"bound")) == b"bound"


def test_key_id_is_bound_under_the_tag(cls: type[RingCodec]) -> None:
    """Moving a token's header to another ring slot is refused, even when both slots hold one AES key."""
    ring = cls([K0, K1])
    data = b64u_decode(ring.seal(b"slot 0"))
    assert reason_of(ring, b64u_encode(data[:1] + bytes.fromhex(ring.key_ids[1]) + data[5:])) is Reason.SEAL
    aead = cls._aead(bytes(range(1, 33)))
    same_key = _Ring(cls.VERSION, cls.NONCE_LENGTH, [(b"id01", aead), (b"id02", aead)], 1000)
    data = b64u_decode(same_key.seal(b"slot 1"))
    assert reason_of(same_key, b64u_encode(data[:1] + b"id02" + data[5:])) is Reason.SEAL


# -- the ring: keys[0] seals, every key unseals, found by key id ---------------------------------------


def test_rotation_phases(cls: type[RingCodec]) -> None:
    old, new = K0, K1
    before = cls([old]).seal(b"minted before rotation")
    phase1, phase2, phase3 = cls([old, new]), cls([new, old]), cls([new])
    t1, t2 = phase1.seal(b"phase 1"), phase2.seal(b"phase 2")
    assert phase2.primary_key_id == KeyRing([new]).key_ids[0]
    for codec in (phase1, phase2):
        assert [codec.unseal(t) for t in (before, t1, t2)] == [b"minted before rotation", b"phase 1", b"phase 2"]
    assert phase3.unseal(t2) == b"phase 2"
    assert reason_of(phase3, before) is reason_of(phase3, t1) is Reason.UNKNOWN_KEY


def test_lookup_by_key_id_never_tries_other_keys(cls: type[RingCodec]) -> None:
    keys = [os.urandom(32) for _ in range(32)]
    ring = cls(keys)
    calls: list[int] = []

    class Counting:
        def __init__(self, inner: Any, slot: int) -> None:
            self.inner, self.slot = inner, slot

        def decrypt(self, nonce: bytes, data: bytes, aad: bytes) -> bytes:
            calls.append(self.slot)
            return self.inner.decrypt(nonce, data, aad)  # type: ignore[no-any-return]

    ring._ring._aeads = {kid: Counting(a, i) for i, (kid, a) in enumerate(ring._ring._aeads.items())}  # type: ignore[misc]
    assert ring.unseal(cls([keys[20]]).seal(b"slot 20")) == b"slot 20"
    assert calls == [20]
    forged = bytearray(b64u_decode(cls([keys[7]]).seal(b"slot 7")))
    forged[-1] ^= 1
    assert reason_of(ring, b64u_encode(bytes(forged))) is Reason.SEAL
    assert calls == [20, 7]
    assert reason_of(ring, cls([os.urandom(32)]).seal(b"foreign")) is Reason.UNKNOWN_KEY
    assert calls == [20, 7]  # an unknown key id costs no decryption at all


# -- caps --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec_cls", CODECS, ids=["aesgcm", "xaesgcm"])
@settings(max_examples=40, deadline=None)
@given(extra=st.integers(min_value=0, max_value=600))
def test_seal_and_unseal_caps_agree(codec_cls: type[RingCodec], extra: int) -> None:
    cap = b64u_len(overhead(codec_cls)) + extra
    codec = codec_cls([K0], max_token_length=cap)
    largest = max(n for n in range(cap) if b64u_len(overhead(codec_cls) + n) <= cap)
    token = codec.seal(bytes(largest))
    assert len(token) <= cap
    assert codec.unseal(token) == bytes(largest)
    with pytest.raises(SealError, match=str(largest)):
        codec.seal(bytes(largest + 1))
    if len(token) - 1 >= b64u_len(overhead(codec_cls)):
        assert reason_of(codec_cls([K0], max_token_length=len(token) - 1), token) is Reason.OVERSIZED


def test_default_cap_holds_a_64_kib_payload(cls: type[RingCodec]) -> None:
    codec = cls([K0])
    assert codec.max_token_length == DEFAULT_MAX_TOKEN_LENGTH
    token = codec.seal(bytearray(64 * 1024))  # type: ignore[arg-type]
    assert codec.unseal(token) == bytes(64 * 1024)
    with pytest.raises(TypeError, match="seal takes bytes"):
        codec.seal("text")  # type: ignore[arg-type]


@pytest.mark.parametrize("cap", [True, "4096", 4096.0, None, 0, 10, 2**31])
def test_bad_max_token_length_is_a_configuration_error(cls: type[RingCodec], cap: object) -> None:
    with pytest.raises(ConfigurationError, match="max_token_length"):
        cls([K0], max_token_length=cap)  # type: ignore[arg-type]


# -- constructors, repr, pickling -------------------------------------------------------------------------


def test_from_env_reads_the_settings_codec_from_env_reads(cls: type[RingCodec], tmp_path: Path) -> None:
    text = KeyRing([K1, K0]).to_text()
    (tmp_path / "keys").write_text(f"# ring\n{text.replace(',', chr(10))}\n", encoding="utf-8")
    env = {"STATECODEC_KEYS_FILE": str(tmp_path / "keys"), "STATECODEC_MAX_TOKEN_LENGTH": "1000"}
    for codec in (cls.from_env(env), cls.from_env({"STATECODEC_KEYS": text})):
        assert codec.key_ids == cls([K1, K0]).key_ids
    assert cls.from_env(env).max_token_length == 1000
    with pytest.raises(ConfigurationError, match="STATECODEC_MAX_TOKEN_LENGTH must be"):
        cls.from_env({"STATECODEC_KEYS": text, "STATECODEC_MAX_TOKEN_LENGTH": "+5"})
    with pytest.raises(ConfigurationError, match="no keys configured"):
        cls.from_env({})


def test_ephemeral_codecs_do_not_share_keys(cls: type[RingCodec]) -> None:
    a, b = cls.ephemeral(), cls.ephemeral(max_token_length=500)
    assert b.max_token_length == 500
    assert reason_of(b, a.seal(b"process-local")) is Reason.UNKNOWN_KEY


def test_repr_shows_key_ids_only_and_pickling_is_refused(cls: type[RingCodec]) -> None:
    codec = cls([K0, K1])
    assert repr(codec) == f"{cls.__name__}(key_ids={list(codec.key_ids)!r})"
    for obj in (codec, _XAES(K0)):
        with pytest.raises(TypeError, match="not picklable"):
            pickle.dumps(obj)


# -- XAES-256-GCM against the C2SP specification ---------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "aad", "k1", "ciphertext"),
    [
        (
            "01" * 32,
            b"",
            "e531954aca063d5b8d9c47a47d4cc6f0",
            "ce546ef63c9cc60765923609b33a9a1974e96e52daf2fcf7075e2271",
        ),
        (
            "03" * 32,
            b"c2sp.org/XAES-256-GCM",
            "23810ec50edb99f374409466ed1f4b7b",
            "986ec1832593df5443a179437fd083bf3fdb41abd740a21f71eb769d",
        ),
    ],
    ids=["msb-0", "msb-1"],
)
def test_xaes_published_vectors(key: str, aad: bytes, k1: str, ciphertext: str) -> None:
    xaes, nonce = _XAES(bytes.fromhex(key)), b"ABCDEFGHIJKLMNOPQRSTUVWX"
    assert xaes._k1 == int(k1, 16)
    assert xaes.encrypt(nonce, b"XAES-256-GCM", aad) == bytes.fromhex(ciphertext)
    assert xaes.decrypt(nonce, bytes.fromhex(ciphertext), aad) == b"XAES-256-GCM"


def test_xaes_accumulated_10000() -> None:
    """The specification's accumulated test: SHAKE-128("") as the RNG, SHAKE-128 over every ciphertext;
    each case reads ``key[32] nonce[24] plaintext<0..255> aad<0..255>`` (one length byte each)."""
    stream = hashlib.shake_128(b"").digest(10_000 * (32 + 24 + 1 + 255 + 1 + 255))
    assert stream[:16].hex() == "7f9c2ba4e88f827d616045507605853e"
    pos, out = 0, hashlib.shake_128()

    def read(n: int) -> bytes:
        nonlocal pos
        pos += n
        return stream[pos - n : pos]

    for _ in range(10_000):
        key, nonce = read(32), read(24)
        plaintext = read(read(1)[0])
        aad = read(read(1)[0])
        sealed = _XAES(key).encrypt(nonce, plaintext, aad)
        assert _XAES(key).decrypt(nonce, sealed, aad) == plaintext
        out.update(sealed)
    assert out.hexdigest(32) == "e6b9edf2df6cec60c8cbd864e2211b597fb69a529160cd040d56c0c210081939"
