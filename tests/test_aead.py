"""The AES-GCM token layout (`_Ring`) and the codecs that hold it: AESGCMCodec, XAESGCMCodec, EnvelopeCodec.

What the codec contract (tests/test_redteam.py) proves for every codec, tampering, junk, foreign tokens,
leaks, repr and copies, caps and rotation, is not repeated here: these tests pin the layout, its refusal
order, the key lookup and XAES-256-GCM itself (tests/test_vectors.py replays the frozen vectors).
"""

from __future__ import annotations

import hashlib
import os
import pickle
from typing import Any

import pytest

from statecodec import AESGCMCodec, KeyRing, Reason, XAESGCMCodec
from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode, b64u_encode
from statecodec.aead import _XAES, _Ring
from tests.codecs import reason

RingCodec = AESGCMCodec | XAESGCMCodec
CODECS: list[type[RingCodec]] = [AESGCMCodec, XAESGCMCodec]
K0, K1 = bytes(range(32)), bytes(range(32, 64))


@pytest.fixture(params=CODECS, ids=["aesgcm", "xaesgcm"])
def cls(request: pytest.FixtureRequest) -> type[RingCodec]:
    return request.param  # type: ignore[no-any-return]


# -- the layout: header, refusal order, what the tag binds --------------------------------------------


def test_reason_codes_in_order(cls: type[RingCodec]) -> None:
    codec = cls([K0, K1], max_token_length=400)
    token = codec.seal(b"payload")
    data, min_raw = b64u_decode(token), 1 + 4 + cls.NONCE_LENGTH + 16  # version, key id, nonce, tag
    assert data[0] == cls.VERSION
    assert data[1:5].hex() == codec.primary_key_id == KeyRing([K0]).key_ids[0]
    assert reason(codec, token.encode()) is Reason.MALFORMED  # not a str
    assert reason(codec, "\u00e9" * 401) is Reason.OVERSIZED  # over the cap, before decoding
    assert reason(codec, "A" * 400) is Reason.FORMAT  # at the cap: decoded, version byte 0x00
    assert reason(codec, token + "=") is Reason.MALFORMED  # not canonical base64url
    # Shorter than header + nonce + tag: malformed, even with a wrong version.
    assert reason(codec, b64u_encode(b"\x7f" + data[1 : min_raw - 1])) is Reason.MALFORMED
    assert reason(codec, b64u_encode(b"\x7f" + b"\x00" * 4 + data[5:])) is Reason.FORMAT  # before the key
    assert reason(codec, b64u_encode(data[:1] + b"\x00" * 4 + data[5:])) is Reason.UNKNOWN_KEY
    assert reason(codec, b64u_encode(data[:-1] + bytes([data[-1] ^ 0x80]))) is Reason.SEAL
    assert codec.unseal(codec.seal(b"")) == b""  # the smallest token is exactly the minimum length


def test_version_byte_is_bound_under_the_tag() -> None:
    """A ring with another version over the same AES key still refuses a relabelled token."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    (kid, key), = KeyRing([K0]).subkeys(b"statecodec/v1/aes-256-gcm")
    other = _Ring(0x7E, 12, [(kid, AESGCM(key))], DEFAULT_MAX_TOKEN_LENGTH)
    relabelled = b64u_encode(b"\x7e" + b64u_decode(AESGCMCodec([K0]).seal(b"bound"))[1:])
    assert reason(other, relabelled) is Reason.SEAL
    assert other.unseal(other.seal(b"bound")) == b"bound"


def test_key_id_is_bound_under_the_tag(cls: type[RingCodec]) -> None:
    """Moving a token's header to another ring slot is refused, even when both slots hold one AES key."""
    ring = cls([K0, K1])
    data = b64u_decode(ring.seal(b"slot 0"))
    assert reason(ring, b64u_encode(data[:1] + bytes.fromhex(ring.key_ids[1]) + data[5:])) is Reason.SEAL
    aead = cls._aead(bytes(range(1, 33)))
    same_key = _Ring(cls.VERSION, cls.NONCE_LENGTH, [(b"id01", aead), (b"id02", aead)], 1000)
    data = b64u_decode(same_key.seal(b"slot 1"))
    assert reason(same_key, b64u_encode(data[:1] + b"id02" + data[5:])) is Reason.SEAL


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

    ring._aeads = {kid: Counting(a, i) for i, (kid, a) in enumerate(ring._aeads.items())}  # type: ignore[misc]
    assert ring.unseal(cls([keys[20]]).seal(b"slot 20")) == b"slot 20"
    assert calls == [20]
    forged = bytearray(b64u_decode(cls([keys[7]]).seal(b"slot 7")))
    forged[-1] ^= 1
    assert reason(ring, b64u_encode(bytes(forged))) is Reason.SEAL
    assert calls == [20, 7]
    assert reason(ring, cls([os.urandom(32)]).seal(b"foreign")) is Reason.UNKNOWN_KEY
    assert calls == [20, 7]  # an unknown key id costs no decryption at all


# -- constructors (from the settings: tests/test_config.py, whose codec_from_env calls from_env) ----------------


def test_ephemeral_codecs_do_not_share_keys(cls: type[RingCodec]) -> None:
    a, b = cls.ephemeral(), cls.ephemeral(max_token_length=500)
    assert b.max_token_length == 500
    assert reason(b, a.seal(b"process-local")) is Reason.UNKNOWN_KEY


# -- XAES-256-GCM against the C2SP specification ---------------------------------------------------------


XAES_VECTORS = [  # C2SP's: key, additional data, the derived K1, the ciphertext of b"XAES-256-GCM"
    ("01" * 32, b"", "e531954aca063d5b8d9c47a47d4cc6f0", "ce546ef63c9cc60765923609b33a9a1974e96e52daf2fcf7075e2271"),
    ("03" * 32, b"c2sp.org/XAES-256-GCM", "23810ec50edb99f374409466ed1f4b7b",
     "986ec1832593df5443a179437fd083bf3fdb41abd740a21f71eb769d"),
]  # fmt: skip


@pytest.mark.parametrize(("key", "aad", "k1", "ciphertext"), XAES_VECTORS, ids=["msb-0", "msb-1"])
def test_xaes_published_vectors(key: str, aad: bytes, k1: str, ciphertext: str) -> None:
    xaes, nonce = _XAES(bytes.fromhex(key)), b"ABCDEFGHIJKLMNOPQRSTUVWX"
    assert xaes._k1 == int(k1, 16)
    assert xaes.encrypt(nonce, b"XAES-256-GCM", aad) == bytes.fromhex(ciphertext)
    assert xaes.decrypt(nonce, bytes.fromhex(ciphertext), aad) == b"XAES-256-GCM"
    with pytest.raises(TypeError, match="not picklable"):  # the codec's: tests/test_redteam.py
        pickle.dumps(xaes)


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
