"""AESGCMCodec and XAESGCMCodec: every token they did not mint unmodified is refused with InvalidToken."""

from __future__ import annotations

import copy
import hashlib
import os
import pickle
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st

from statecodec import (
    AESGCMCodec,
    ConfigurationError,
    InvalidToken,
    KeyRing,
    Reason,
    SealError,
    XAESGCMCodec,
    generate_key,
)
from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode, b64u_encode, b64u_len
from statecodec.aead import _XAES

Codec = AESGCMCodec | XAESGCMCodec
CodecClass = type[AESGCMCodec] | type[XAESGCMCodec]
CODECS: list[CodecClass] = [AESGCMCodec, XAESGCMCodec]
OVERHEAD = {AESGCMCodec: 1 + 4 + 12 + 16, XAESGCMCodec: 1 + 4 + 24 + 16}
K0 = bytes(range(32))
K1 = bytes(range(32, 64))
K2 = bytes(range(64, 96))
URL_SAFE = re.compile(r"[A-Za-z0-9_-]+")
PROPS = settings(max_examples=60, deadline=None)
MARKER = b"TOP-SECRET-PAYLOAD-MARKER"


@pytest.fixture(params=CODECS, ids=["aesgcm", "xaesgcm"])
def cls(request: pytest.FixtureRequest) -> CodecClass:
    return request.param  # type: ignore[no-any-return]


def reason_of(codec: Codec, token: object) -> Reason:
    """The reason code of the refusal; anything but InvalidToken fails the test by propagating."""
    with pytest.raises(InvalidToken) as info:
        codec.unseal(token)  # type: ignore[arg-type]
    return info.value.reason


def raw(token: str) -> bytes:
    return b64u_decode(token)


# -- round trip, freshness, shape ------------------------------------------------------------------


@pytest.mark.parametrize("codec_cls", CODECS, ids=["aesgcm", "xaesgcm"])
@PROPS
@given(payload=st.binary(max_size=2048))
def test_round_trip(codec_cls: CodecClass, payload: bytes) -> None:
    codec = codec_cls([K0, K1])
    token = codec.seal(payload)
    assert codec.unseal(token) == payload
    assert URL_SAFE.fullmatch(token)
    assert len(token) == b64u_len(OVERHEAD[codec_cls] + len(payload))


def test_overhead_in_characters(cls: CodecClass) -> None:
    codec = cls([K0])
    for n in (0, 3, 300, 3000):
        payload = bytes(n)
        extra = len(codec.seal(payload)) - len(b64u_encode(payload))
        assert extra == {AESGCMCodec: 44, XAESGCMCodec: 60}[cls]


def test_fresh_nonce_per_seal(cls: CodecClass) -> None:
    codec = cls([K0])
    tokens = {codec.seal(b"same payload") for _ in range(64)}
    assert len(tokens) == 64
    nonces = {raw(t)[5 : 5 + cls.NONCE_LENGTH] for t in tokens}
    assert len(nonces) == 64


def test_bytes_like_payloads_are_accepted(cls: CodecClass) -> None:
    codec = cls([K0])
    for payload in (bytearray(b"abc"), memoryview(b"abc")):
        assert codec.unseal(codec.seal(payload)) == b"abc"  # type: ignore[arg-type]


@pytest.mark.parametrize("payload", ["text", None, 3, ["a"]])
def test_non_bytes_payload_is_a_type_error(cls: CodecClass, payload: object) -> None:
    with pytest.raises(TypeError, match="seal takes bytes"):
        cls([K0]).seal(payload)  # type: ignore[arg-type]


# -- ring semantics: keys[0] seals, every key unseals, O(1) by key id ------------------------------


def test_header_carries_version_and_primary_key_id(cls: CodecClass) -> None:
    codec = cls([K1, K0])
    data = raw(codec.seal(b"x"))
    assert data[0] == cls.VERSION
    assert data[1:5].hex() == codec.primary_key_id == codec.key_ids[0]
    assert codec.key_ids == KeyRing([K1, K0]).key_ids


def test_rotation_phases(cls: CodecClass) -> None:
    old, new = K0, K1
    before = cls([old]).seal(b"minted before rotation")
    phase1 = cls([old, new])  # new is known everywhere before anyone seals with it
    phase2 = cls([new, old])  # new seals; old still unseals
    phase3 = cls([new])  # old retired after one token lifetime
    t1, t2 = phase1.seal(b"phase 1"), phase2.seal(b"phase 2")
    assert raw(t1)[1:5].hex() == phase1.primary_key_id == KeyRing([old]).key_ids[0]
    assert raw(t2)[1:5].hex() == phase2.primary_key_id == KeyRing([new]).key_ids[0]
    for codec in (phase1, phase2):
        assert codec.unseal(before) == b"minted before rotation"
        assert codec.unseal(t1) == b"phase 1"
        assert codec.unseal(t2) == b"phase 2"
    assert phase3.unseal(t2) == b"phase 2"
    assert reason_of(phase3, before) is Reason.UNKNOWN_KEY
    assert reason_of(phase3, t1) is Reason.UNKNOWN_KEY


class _CountingAES:
    """Stands in for one ring slot's AESGCM and records every decrypt."""

    def __init__(self, inner: Any, slot: int, calls: list[int]) -> None:
        self.inner, self.slot, self.calls = inner, slot, calls

    def decrypt(self, nonce: bytes, data: bytes, aad: bytes) -> bytes:
        self.calls.append(self.slot)
        return self.inner.decrypt(nonce, data, aad)  # type: ignore[no-any-return]


class _CountingXAES(_XAES):
    """An `_XAES` (so the codec's own type check passes) that records every decrypt."""

    slot: int
    calls: list[int]

    def decrypt(self, nonce: bytes, data: bytes, aad: bytes) -> bytes:
        self.calls.append(self.slot)
        return super().decrypt(nonce, data, aad)


def _instrument(codec: Codec) -> list[int]:
    calls: list[int] = []
    instrumented: dict[bytes, Any] = {}
    for slot, kid in enumerate(codec._key_ids):
        inner = codec._aeads[kid]
        if isinstance(inner, _XAES):
            counting = _CountingXAES.__new__(_CountingXAES)
            counting._cipher, counting._k1 = inner._cipher, inner._k1
            counting.slot, counting.calls = slot, calls
            instrumented[kid] = counting
        else:
            instrumented[kid] = _CountingAES(inner, slot, calls)
    codec._aeads = instrumented
    return calls


def test_lookup_by_key_id_never_tries_other_keys(cls: CodecClass) -> None:
    keys = [generate_key() for _ in range(32)]
    ring = cls(keys)
    calls = _instrument(ring)
    # A token of the 20th key: exactly one decrypt, on the 20th slot.
    token = cls([keys[20]]).seal(b"slot 20")
    assert ring.unseal(token) == b"slot 20"
    assert calls == [20]
    # A forged tag under slot 7: one decrypt on slot 7, then refused.
    forged = bytearray(raw(cls([keys[7]]).seal(b"slot 7")))
    forged[-1] ^= 1
    calls.clear()
    assert reason_of(ring, b64u_encode(bytes(forged))) is Reason.SEAL
    assert calls == [7]
    # A key id the ring does not hold: refused with no decrypt at all.
    calls.clear()
    assert reason_of(ring, cls([generate_key()]).seal(b"foreign")) is Reason.UNKNOWN_KEY
    assert calls == []


# -- every reason code is reachable, in the documented order ---------------------------------------


def test_reason_codes_in_order(cls: CodecClass) -> None:
    codec = cls([K0, K1], max_token_length=400)
    token = codec.seal(b"payload")
    data = raw(token)
    min_raw = OVERHEAD[cls]
    # 1. not a str -> malformed
    assert reason_of(codec, token.encode()) is Reason.MALFORMED
    # 2. over the cap, whatever the content -> oversized, before decoding
    assert reason_of(codec, "\u00e9" * 401) is Reason.OVERSIZED
    assert reason_of(codec, "A" * 401) is Reason.OVERSIZED
    assert reason_of(codec, "A" * 400) is Reason.FORMAT  # at the cap: decoded, version byte 0x00
    # 3. not canonical base64url -> malformed
    assert reason_of(codec, token + "=") is Reason.MALFORMED
    # 4. shorter than header + nonce + tag -> malformed, even with a wrong version
    assert reason_of(codec, b64u_encode(data[: min_raw - 1])) is Reason.MALFORMED
    assert reason_of(codec, b64u_encode(b"\x7f" + data[1 : min_raw - 1])) is Reason.MALFORMED
    # 5. a version this codec does not accept -> format, before the key lookup
    assert reason_of(codec, b64u_encode(b"\x7f" + data[1:])) is Reason.FORMAT
    assert reason_of(codec, b64u_encode(b"\x7f" + b"\x00" * 4 + data[5:])) is Reason.FORMAT
    # 6. key id not in the ring -> unknown_key
    assert reason_of(codec, b64u_encode(data[:1] + b"\x00" * 4 + data[5:])) is Reason.UNKNOWN_KEY
    # 7. tag does not verify -> seal
    assert reason_of(codec, b64u_encode(data[:-1] + bytes([data[-1] ^ 0x80]))) is Reason.SEAL
    # The smallest token (empty payload) is exactly the minimum length and verifies.
    assert codec.unseal(codec.seal(b"")) == b""


def test_tokens_of_the_other_format_are_refused_with_format() -> None:
    aes, xaes = AESGCMCodec([K0]), XAESGCMCodec([K0])
    assert aes.key_ids == xaes.key_ids  # same secret, same key id: only the version tells them apart
    assert reason_of(aes, xaes.seal(b"x")) is Reason.FORMAT
    assert reason_of(xaes, aes.seal(b"twelve bytes")) is Reason.FORMAT
    assert reason_of(xaes, aes.seal(b"short")) is Reason.MALFORMED  # shorter than an XAES token


def test_version_byte_is_bound_under_the_tag() -> None:
    """A codec with another version over the same AES keys still refuses a relabelled token."""

    class OtherVersion(AESGCMCodec):
        VERSION = 0x7E

    ring = KeyRing([K0])
    other = OtherVersion._from_entries(ring.subkeys(AESGCMCodec.KEY_INFO))
    token = AESGCMCodec(ring).seal(b"bound")
    relabelled = b64u_encode(b"\x7e" + raw(token)[1:])
    assert reason_of(other, relabelled) is Reason.SEAL
    assert other.unseal(other.seal(b"bound")) == b"bound"


def test_key_id_is_bound_under_the_tag(cls: CodecClass) -> None:
    """Moving a token's header to another ring slot is refused, even when both slots hold one key."""
    ring = cls([K0, K1])
    data = raw(ring.seal(b"slot 0"))
    other_slot = bytes.fromhex(ring.key_ids[1])
    assert reason_of(ring, b64u_encode(data[:1] + other_slot + data[5:])) is Reason.SEAL
    # Two entries with the same AES key but different ids: only the AAD differs.
    aes_key = KeyRing([K0]).subkeys(cls.KEY_INFO)[0][1]
    if cls is AESGCMCodec:
        same_key = AESGCMCodec._from_entries([(b"\x00\x00\x00\x01", aes_key), (b"\x00\x00\x00\x02", aes_key)])
        data = raw(same_key.seal(b"slot 1"))
        assert reason_of(same_key, b64u_encode(data[:1] + b"\x00\x00\x00\x02" + data[5:])) is Reason.SEAL


# -- tampering: property tests ---------------------------------------------------------------------


@pytest.mark.parametrize("codec_cls", CODECS, ids=["aesgcm", "xaesgcm"])
@PROPS
@given(payload=st.binary(max_size=64), data=st.data())
def test_any_single_character_change_is_refused(
    codec_cls: CodecClass, payload: bytes, data: st.DataObject
) -> None:
    codec = codec_cls([K0, K1])
    token = codec.seal(payload)
    pos = data.draw(st.integers(min_value=0, max_value=len(token) - 1))
    char = data.draw(st.characters().filter(lambda c: c != token[pos]))
    reason_of(codec, token[:pos] + char + token[pos + 1 :])


@pytest.mark.parametrize("codec_cls", CODECS, ids=["aesgcm", "xaesgcm"])
@PROPS
@given(payload=st.binary(max_size=64), data=st.data())
def test_any_bit_flip_is_refused(codec_cls: CodecClass, payload: bytes, data: st.DataObject) -> None:
    codec = codec_cls([K0, K1])
    token = codec.seal(payload)
    # In the text: flip one bit of one character.
    pos = data.draw(st.integers(min_value=0, max_value=len(token) - 1))
    bit = data.draw(st.integers(min_value=0, max_value=20))
    flipped = chr(ord(token[pos]) ^ (1 << bit))
    reason_of(codec, token[:pos] + flipped + token[pos + 1 :])
    # In the bytes, re-encoded canonically: only format, unknown_key or seal can remain.
    blob = bytearray(raw(token))
    byte = data.draw(st.integers(min_value=0, max_value=len(blob) - 1))
    blob[byte] ^= 1 << data.draw(st.integers(min_value=0, max_value=7))
    expected = Reason.FORMAT if byte == 0 else Reason.UNKNOWN_KEY if byte < 5 else Reason.SEAL
    assert reason_of(codec, b64u_encode(bytes(blob))) is expected


@pytest.mark.parametrize("codec_cls", CODECS, ids=["aesgcm", "xaesgcm"])
@PROPS
@given(payload=st.binary(max_size=64), data=st.data())
def test_truncation_and_extension_are_refused(
    codec_cls: CodecClass, payload: bytes, data: st.DataObject
) -> None:
    codec = codec_cls([K0])
    token = codec.seal(payload)
    cut = data.draw(st.integers(min_value=0, max_value=len(token) - 1))
    reason_of(codec, token[:cut])
    reason_of(codec, token[len(token) - cut :] if cut else "")
    suffix = data.draw(st.text(min_size=1, max_size=8))
    reason_of(codec, token + suffix)
    reason_of(codec, suffix + token)
    blob = raw(token)
    extra = data.draw(st.binary(min_size=1, max_size=8))
    assert reason_of(codec, b64u_encode(blob + extra)) is Reason.SEAL
    assert reason_of(codec, b64u_encode(blob[: max(len(blob) - len(extra), 0)])) in (
        Reason.SEAL,
        Reason.MALFORMED,
    )


@pytest.mark.parametrize("codec_cls", CODECS, ids=["aesgcm", "xaesgcm"])
@PROPS
@given(text=st.text(max_size=200))
def test_arbitrary_text_is_refused_with_invalid_token_only(codec_cls: CodecClass, text: str) -> None:
    reason_of(codec_cls([K0]), text)


@pytest.mark.parametrize(
    "make",
    [
        lambda t: t.encode(),
        lambda t: bytearray(t.encode()),
        lambda t: memoryview(t.encode()),
        lambda t: None,
        lambda t: 0,
        lambda t: 1.0,
        lambda t: [t],
        lambda t: type("Sub", (str,), {})(t),
    ],
    ids=["bytes", "bytearray", "memoryview", "None", "int", "float", "list", "str-subclass"],
)
def test_non_str_tokens_are_malformed(cls: CodecClass, make: Callable[[str], object]) -> None:
    codec = cls([K0])
    assert reason_of(codec, make(codec.seal(b"x"))) is Reason.MALFORMED


# -- size caps -------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec_cls", CODECS, ids=["aesgcm", "xaesgcm"])
@settings(max_examples=40, deadline=None)
@given(extra=st.integers(min_value=0, max_value=600))
def test_seal_and_unseal_caps_agree(codec_cls: CodecClass, extra: int) -> None:
    cap = b64u_len(OVERHEAD[codec_cls]) + extra
    codec = codec_cls([K0], max_token_length=cap)
    largest = max(n for n in range(cap) if b64u_len(OVERHEAD[codec_cls] + n) <= cap)
    token = codec.seal(bytes(largest))
    assert len(token) <= cap
    assert codec.unseal(token) == bytes(largest)
    with pytest.raises(SealError) as info:
        codec.seal(MARKER[:1] * (largest + 1))
    assert str(largest) in str(info.value)
    assert MARKER[:1].decode() * 3 not in str(info.value)
    # The same token is oversized for a codec one character tighter, and refused as such.
    if len(token) - 1 >= b64u_len(OVERHEAD[codec_cls]):
        tighter = codec_cls([K0], max_token_length=len(token) - 1)
        assert reason_of(tighter, token) is Reason.OVERSIZED


def test_default_cap_holds_a_64_kib_payload(cls: CodecClass) -> None:
    codec = cls([K0])
    assert codec.max_token_length == DEFAULT_MAX_TOKEN_LENGTH
    assert codec.unseal(codec.seal(bytes(64 * 1024))) == bytes(64 * 1024)
    with pytest.raises(SealError):
        codec.seal(bytes(DEFAULT_MAX_TOKEN_LENGTH))


@pytest.mark.parametrize("cap", [True, "4096", 4096.0, None, 0, 10, 2**31])
def test_bad_max_token_length_is_a_configuration_error(cls: CodecClass, cap: object) -> None:
    with pytest.raises(ConfigurationError, match="max_token_length"):
        cls([K0], max_token_length=cap)  # type: ignore[arg-type]


def test_ring_entries_must_be_aes_256_keys() -> None:
    with pytest.raises(ConfigurationError, match="32 bytes"):
        AESGCMCodec._from_entries([(b"\x00\x00\x00\x01", bytes(16))])
    with pytest.raises(ConfigurationError, match="key ids are 4 bytes"):
        AESGCMCodec._from_entries([(b"\x01", bytes(32))])
    with pytest.raises(ConfigurationError, match="share a key id"):
        AESGCMCodec._from_entries([(b"\x00\x00\x00\x01", bytes(32)), (b"\x00\x00\x00\x01", bytes(32))])
    with pytest.raises(ConfigurationError, match="at least one key"):
        AESGCMCodec._from_entries([])


# -- secrecy ---------------------------------------------------------------------------------------


def _texts(exc: BaseException) -> list[str]:
    out: list[str] = []
    cur: BaseException | None = exc
    while cur is not None:
        out += [str(cur), repr(cur), *(repr(a) for a in cur.args)]
        cur = cur.__cause__ or cur.__context__
    return out


def test_refusals_carry_only_the_reason_code(cls: CodecClass) -> None:
    codec = cls([K0])
    token = codec.seal(MARKER)
    data = raw(token)
    tampered = [
        token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1],
        token[:-1] + "\u00e9",
        token + "=",
        b64u_encode(b"\x7f" + data[1:]),
        b64u_encode(data[:1] + b"\xff" * 4 + data[5:]),
        token[:20],
    ]
    for bad in tampered:
        with pytest.raises(InvalidToken) as info:
            codec.unseal(bad)
        exc = info.value
        assert str(exc) == exc.reason.value
        assert exc.args == (exc.reason.value,)
        assert repr(exc) == f"InvalidToken({exc.reason.value!r})"
        for text in _texts(exc):
            assert bad not in text
            assert token[8:40] not in text
            assert MARKER.decode() not in text
            assert K0.hex() not in text


def test_codec_repr_shows_key_ids_only_and_pickling_is_refused(cls: CodecClass) -> None:
    codec = cls([K0, K1])
    assert repr(codec) == f"{cls.__name__}(key_ids={list(codec.key_ids)!r})"
    for secret in (K0, K1, *(k for _, k in KeyRing([K0, K1]).subkeys(cls.KEY_INFO))):
        assert secret.hex() not in repr(codec)
        assert b64u_encode(secret) not in repr(codec)
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(codec)


def test_the_xaes_key_object_does_not_pickle_or_copy() -> None:
    # It holds the ring key (inside its AES cipher) and the CMAC subkey derived from it.
    xaes = _XAES(K0)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(TypeError, match="not picklable"):
            pickle.dumps(xaes, protocol=protocol)
    with pytest.raises(TypeError):
        copy.deepcopy(xaes)


def test_invalid_token_pickles_with_its_reason() -> None:
    exc = pickle.loads(pickle.dumps(InvalidToken(Reason.SEAL)))  # noqa: S301 - our own bytes
    assert isinstance(exc, InvalidToken)
    assert exc.reason is Reason.SEAL


# -- constructors ----------------------------------------------------------------------------------


def test_constructors(cls: CodecClass, tmp_path: Path) -> None:
    text = KeyRing([K1, K0]).to_text()
    from_env = cls.from_env(environ={"STATECODEC_KEYS": text})
    path = tmp_path / "keys"
    path.write_text(f"# ring\n{text.replace(',', chr(10))}\n", encoding="utf-8")
    from_file = cls.from_file(path, max_token_length=1000)
    from_list = cls([K1, K0])
    from_ring = cls(KeyRing([K1, K0]))
    for codec in (from_env, from_file, from_list, from_ring):
        assert codec.key_ids == from_list.key_ids
        assert from_list.unseal(codec.seal(b"interchangeable")) == b"interchangeable"
    assert from_file.max_token_length == 1000
    with pytest.raises(ConfigurationError, match="STATECODEC_KEYS"):
        cls.from_env(environ={})
    with pytest.raises(ConfigurationError, match="keys=\\[key\\]"):
        cls(K0)  # type: ignore[arg-type]


def test_ephemeral_codecs_do_not_share_keys(cls: CodecClass) -> None:
    a, b = cls.ephemeral(), cls.ephemeral(max_token_length=500)
    assert a.key_ids != b.key_ids
    assert b.max_token_length == 500
    assert reason_of(b, a.seal(b"process-local")) is Reason.UNKNOWN_KEY


# -- the codec contract through the SDK (the conformance kit runs in tests/test_redteam.py) ------------


def test_imports_and_works_without_mcp() -> None:
    code = textwrap.dedent(
        """
        import sys

        class RefuseMCP:
            def find_spec(self, name, path=None, target=None):
                if name == "mcp" or name.startswith("mcp."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, RefuseMCP())
        import statecodec
        from statecodec import AESGCMCodec, InvalidToken, StatecodecError, XAESGCMCodec

        assert InvalidToken.__bases__ == (StatecodecError,), InvalidToken.__mro__
        for cls in (AESGCMCodec, XAESGCMCodec):
            codec = cls.ephemeral()
            assert codec.unseal(codec.seal(b"no mcp")) == b"no mcp"
            try:
                codec.unseal("not a token")
            except InvalidToken as exc:
                assert str(exc) == "malformed"
        assert not [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]
        print("imported without mcp")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, env={**os.environ}
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "imported without mcp"


# -- XAES-256-GCM against the C2SP specification ---------------------------------------------------


@pytest.mark.parametrize(
    ("key", "aad", "l_block", "k1", "ciphertext"),
    [
        (
            "01" * 32,
            b"",
            "7298caa565031eadc6ce23d23ea66378",
            "e531954aca063d5b8d9c47a47d4cc6f0",
            "ce546ef63c9cc60765923609b33a9a1974e96e52daf2fcf7075e2271",
        ),
        (
            "03" * 32,
            b"c2sp.org/XAES-256-GCM",
            "91c08762876dccf9ba204a33768fa5fe",
            "23810ec50edb99f374409466ed1f4b7b",
            "986ec1832593df5443a179437fd083bf3fdb41abd740a21f71eb769d",
        ),
    ],
    ids=["msb-0", "msb-1"],
)
def test_xaes_published_vectors(key: str, aad: bytes, l_block: str, k1: str, ciphertext: str) -> None:
    xaes = _XAES(bytes.fromhex(key))
    nonce = b"ABCDEFGHIJKLMNOPQRSTUVWX"
    assert xaes._k1 == int(k1, 16)
    assert int(l_block, 16) >> 127 == (0 if key == "01" * 32 else 1)
    assert xaes.encrypt(nonce, b"XAES-256-GCM", aad) == bytes.fromhex(ciphertext)
    assert xaes.decrypt(nonce, bytes.fromhex(ciphertext), aad) == b"XAES-256-GCM"


def test_xaes_derived_key_matches_the_published_kx() -> None:
    """Kx for the first vector, checked by encrypting with plain AES-GCM under it."""
    kx = bytes.fromhex("c8612c9ed53fe43e8e005b828a1631a0bbcb6ab2f46514ec4f439fcfd0fa969b")
    nx = bytes.fromhex("4d4e4f505152535455565758")
    expected = AESGCM(kx).encrypt(nx, b"XAES-256-GCM", b"")
    assert expected == bytes.fromhex("ce546ef63c9cc60765923609b33a9a1974e96e52daf2fcf7075e2271")


class _Shake128Stream:
    """SHAKE-128 of the empty input, read as a stream (the specification's deterministic RNG).

    Squeezed incrementally where cryptography offers it (45+); otherwise the
    whole output the test can need is computed once with hashlib.
    """

    def __init__(self, max_bytes: int) -> None:
        self._xof: Any = None
        self._buf = b""
        self._pos = 0
        if hasattr(hashes, "XOFHash"):
            self._xof = hashes.XOFHash(hashes.SHAKE128(digest_size=sys.maxsize))
            self._xof.update(b"")
        else:  # pragma: no cover - older cryptography
            self._buf = hashlib.shake_128(b"").digest(max_bytes)

    def read(self, n: int) -> bytes:
        if self._xof is not None:
            return self._xof.squeeze(n)  # type: ignore[no-any-return]
        out = self._buf[self._pos : self._pos + n]  # pragma: no cover - older cryptography
        self._pos += n  # pragma: no cover
        return out  # pragma: no cover


def _accumulated(iterations: int) -> str:
    """The specification's accumulated test: SHAKE-128 of the empty string as the RNG,
    a second SHAKE-128 over every ciphertext, each case read as RFC 8446 structures
    ``key[32] nonce[24] plaintext<0..255> aad<0..255>`` (one length byte each)."""
    rng = _Shake128Stream(iterations * (32 + 24 + 1 + 255 + 1 + 255))
    out = hashlib.shake_128()
    for _ in range(iterations):
        key = rng.read(32)
        nonce = rng.read(24)
        plaintext = rng.read(rng.read(1)[0])
        aad = rng.read(rng.read(1)[0])
        xaes = _XAES(key)
        sealed = xaes.encrypt(nonce, plaintext, aad)
        assert xaes.decrypt(nonce, sealed, aad) == plaintext
        out.update(sealed)
    return out.hexdigest(32)


def test_xaes_accumulated_rng_starts_as_published() -> None:
    assert _Shake128Stream(16).read(16).hex() == "7f9c2ba4e88f827d616045507605853e"


def test_xaes_accumulated_10000() -> None:
    assert _accumulated(10_000) == "e6b9edf2df6cec60c8cbd864e2211b597fb69a529160cd040d56c0c210081939"


@pytest.mark.skipif(
    os.environ.get("STATECODEC_SLOW_VECTORS") != "1" or not hasattr(hashes, "XOFHash"),
    reason="1,000,000 iterations take minutes; set STATECODEC_SLOW_VECTORS=1 to run (cryptography 45+)",
)
def test_xaes_accumulated_1000000() -> None:
    assert _accumulated(1_000_000) == "2163ae1445985a30b60585ee67daa55674df06901b890593e824b8a7c885ab15"
