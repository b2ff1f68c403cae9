"""Key rings refuse weak, duplicated or mistyped secrets, load text keys, and never show a secret."""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import pickle
import re
import secrets as secrets_module
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecodec import ConfigurationError, KeyRing, format_keys, parse_keys
from statecodec._encoding import b64u_encode
from statecodec.keys import MIN_KEY_LENGTH, _text_refusal, derive_key, generate_key
from tests.secrecy import COLLIDING_SECRETS, assert_unreachable

K0 = bytes(range(32))
K1 = bytes(range(32, 64))
K2 = bytes(range(64, 128))  # longer than the minimum: allowed
HOW_TO = "statecodec keygen"


def hkdf_sha256(secret: bytes, info: bytes, length: int) -> bytes:
    """RFC 5869 with an all-zero salt, written independently of the library."""
    prk = hmac.new(bytes(32), secret, hashlib.sha256).digest()
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


def config_error(keys: object) -> str:
    with pytest.raises(ConfigurationError) as info:
        KeyRing(keys)  # type: ignore[arg-type]
    return str(info.value)


def secrets_absent(message: str, *secrets: bytes) -> None:
    for s in secrets:
        for spelling in (s.hex(), b64u_encode(s), repr(s), s.decode("latin-1")):
            assert spelling not in message


# -- validation ------------------------------------------------------------------------------------


def test_valid_ring_order_and_ids() -> None:
    ring = KeyRing([K0, bytearray(K1), memoryview(K2)])
    assert list(ring) == [K0, K1, K2]
    assert all(type(k) is bytes for k in ring)
    assert len(ring) == 3
    assert ring[0] == K0
    assert ring.key_ids == tuple(hkdf_sha256(k, b"statecodec/v1/key-id", 4).hex() for k in (K0, K1, K2))
    assert ring.key_ids[0] == "3d7ec38c"  # frozen: a changed label would orphan every token in flight
    assert list(KeyRing(k for k in (K0, K1))) == [K0, K1]


@pytest.mark.parametrize("length", [0, 1, 16, 31])
def test_short_key_is_refused_with_how_to_generate(length: int) -> None:
    key = bytes(range(length))
    message = config_error([K0, key])
    assert "keys[1]" in message
    assert f"{length} bytes" in message
    assert f"{MIN_KEY_LENGTH} bytes" in message
    assert HOW_TO in message
    if length:
        secrets_absent(message, key)


@pytest.mark.parametrize("key", [bytes(32), b"a" * 64, b"ab" * 16, b"password" * 4, bytes(range(7)) * 5])
def test_low_variety_key_is_refused(key: bytes) -> None:
    message = config_error([key])
    assert "keys[0]" in message
    assert "distinct" in message
    assert HOW_TO in message
    secrets_absent(message, key)


def test_duplicate_key_is_refused_naming_both_positions() -> None:
    message = config_error([K0, K1, bytearray(K0)])
    assert "keys[2] duplicates keys[0]" in message
    secrets_absent(message, K0)


def test_a_key_id_collision_is_named_as_such_with_what_to_do() -> None:
    first, second = COLLIDING_SECRETS
    assert first != second
    assert KeyRing([first]).key_ids == KeyRing([second]).key_ids
    message = config_error([K0, first, second])
    assert "keys[2] and keys[1] are different keys" in message
    assert "key ids collide" in message
    assert "duplicates" not in message
    assert "generate another key" in message
    assert HOW_TO in message
    secrets_absent(message, first, second)


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ([K0, b64u_encode(K0)], "keys[1] must be bytes, got str (parse text keys with statecodec.parse_keys"),
        ([K0, None], "keys[1] must be bytes"),
        ([K0, 32], "keys[1] must be bytes"),
        ([K0, [K0]], "keys[1] must be bytes"),
        (K0, "keys=[key]"),
        (memoryview(K0), "keys=[key]"),
        (b64u_encode(K0), "keys=[key]"),
        (None, "list of byte-string secrets"),
        (5, "list of byte-string secrets"),
    ],
)
def test_wrong_types_are_refused_saying_what_to_pass(keys: object, expected: str) -> None:
    message = config_error(keys)
    assert expected in message
    secrets_absent(message, K0)


@pytest.mark.parametrize("keys", [[], (), iter([])])
def test_empty_ring_is_refused(keys: object) -> None:
    with pytest.raises(ValueError, match="at least one key"):  # a ConfigurationError is a ValueError
        KeyRing(keys)  # type: ignore[arg-type]
    message = config_error(keys)
    assert "at least one key" in message
    assert HOW_TO in message


def test_ring_copies_mutable_secrets() -> None:
    mutable = bytearray(K0)
    ring = KeyRing([mutable])
    mutable[:] = bytes(32)
    assert ring[0] == K0


# -- text format -----------------------------------------------------------------------------------


def test_parse_commas_newlines_spaces_comments() -> None:
    a, b, c = (b64u_encode(k) for k in (K0, K1, K2))
    text = f"# ring for prod\n\n  {a} , {b}\r\n# retired below\n{c}\n\n"
    assert parse_keys(text) == [K0, K1, K2]
    assert KeyRing.parse(text).key_ids == KeyRing([K0, K1, K2]).key_ids


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "no keys found"),
        ("# only a comment\n\n", "no keys found"),
        ("{a},", "key 1 is empty"),
        ("{a},,{b}", "key 1 is empty"),
        ("{a},{a}=", "key 1 is not unpadded base64url"),
        ("{a}\n{b}+", "key 1 is not unpadded base64url"),
        ("{a} {b}", "key 0 is not unpadded base64url"),
        ("{a} # inline comment", "key 0 is not unpadded base64url"),
    ],
)
def test_parse_errors_name_the_position_not_the_value(text: str, expected: str) -> None:
    a, b = b64u_encode(K0), b64u_encode(K1)
    with pytest.raises(ConfigurationError) as info:
        parse_keys(text.format(a=a, b=b))
    message = str(info.value)
    assert expected in message
    assert a not in message
    assert b not in message


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(min_size=32, max_size=64), min_size=1, max_size=5))
def test_text_format_round_trip(secrets: list[bytes]) -> None:
    if any(_text_refusal(b64u_encode(k)) for k in secrets):  # zero bytes: "AAAA...", never a random key's text
        with pytest.raises(ConfigurationError, match=" looks like "):
            parse_keys(format_keys(secrets))
        return
    assert parse_keys(format_keys(secrets)) == secrets
    if len(set(secrets)) == len(secrets) and all(len(set(k)) >= 8 for k in secrets):
        assert KeyRing.parse(KeyRing(secrets).to_text()) == KeyRing(secrets)
    text = format_keys(secrets)
    assert "=" not in text
    assert text.count(",") == len(secrets) - 1


def test_from_env() -> None:
    env = {"STATECODEC_KEYS": f" {b64u_encode(K1)},{b64u_encode(K0)} "}
    assert list(KeyRing.from_env(environ=env)) == [K1, K0]
    other = {"MY_KEYS": b64u_encode(K0)}
    assert list(KeyRing.from_env("MY_KEYS", environ=other)) == [K0]


@pytest.mark.parametrize("env", [{}, {"STATECODEC_KEYS": ""}, {"STATECODEC_KEYS": "  \n "}])
def test_from_env_unset_names_the_variable(env: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError) as info:
        KeyRing.from_env(environ=env)
    assert "STATECODEC_KEYS is not set" in str(info.value)
    assert HOW_TO in str(info.value)


def test_from_env_errors_name_variable_and_position_only() -> None:
    bad = b64u_encode(K1) + "="
    with pytest.raises(ConfigurationError) as info:
        KeyRing.from_env(environ={"STATECODEC_KEYS": f"{b64u_encode(K0)},{bad}"})
    message = str(info.value)
    assert message.startswith("STATECODEC_KEYS: key 1 ")
    assert bad not in message
    secrets_absent(message, K0, K1)


def test_from_file_with_comments_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    path.write_text(
        f"# statecodec ring\n{b64u_encode(K1)}\n\n# previous\n{b64u_encode(K0)},{b64u_encode(K2)}\n",
        encoding="utf-8",
    )
    assert list(KeyRing.from_file(path)) == [K1, K0, K2]
    assert list(KeyRing.from_file(str(path))) == [K1, K0, K2]


def test_from_file_errors(tmp_path: Path) -> None:
    missing = tmp_path / "missing.txt"
    with pytest.raises(ConfigurationError, match="cannot read key file"):
        KeyRing.from_file(missing)
    bad = tmp_path / "bad.txt"
    secret_text = b64u_encode(K0)
    bad.write_text(f"{secret_text}\nnot a key!\n", encoding="utf-8")
    with pytest.raises(ConfigurationError) as info:
        KeyRing.from_file(bad)
    assert str(bad) in str(info.value)
    assert "key 1" in str(info.value)
    assert secret_text not in str(info.value)
    with pytest.raises(ConfigurationError, match="cannot read key file"):
        KeyRing.from_file(tmp_path)  # a directory


def test_a_key_file_that_is_not_utf8_keeps_no_secret_in_the_exception_chain(tmp_path: Path) -> None:
    # The decoder's error holds the whole file (UnicodeDecodeError.object), keys and all.
    stray = tmp_path / "stray.key"
    stray.write_bytes(f"{b64u_encode(K0)}\n{b64u_encode(K1)}\n".encode() + b"# caf\xe9\n")
    with pytest.raises(ConfigurationError, match="not UTF-8") as info:
        KeyRing.from_file(stray)
    assert str(stray) in str(info.value)
    assert_unreachable(info.value, K0, K1)


def test_a_key_file_is_read_up_to_a_cap(tmp_path: Path) -> None:
    # A key file holds a few lines; a path to a device or a runaway file must not be read without bound.
    limit = 64 * 1024
    padded = tmp_path / "padded.key"
    line = b64u_encode(K0) + "\n"
    padded.write_text(line + "#" * (limit - len(line) - 1) + "\n", encoding="utf-8")
    assert KeyRing.from_file(padded) == KeyRing([K0])
    padded.write_text(line + "#" * (limit - len(line)) + "\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=re.escape(f"key file {padded} is over {limit} bytes")) as info:
        KeyRing.from_file(padded)
    assert_unreachable(info.value, K0)


# -- secrecy ---------------------------------------------------------------------------------------


def test_repr_and_str_show_key_ids_only() -> None:
    ring = KeyRing([K0, K1])
    for text in (repr(ring), str(ring), f"{ring}", f"{ring!r}"):
        assert text == f"KeyRing(key_ids={list(ring.key_ids)!r})"
        secrets_absent(text, K0, K1)


def test_ring_is_not_picklable_or_copyable() -> None:
    ring = KeyRing([K0])
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(TypeError, match="not picklable"):
            pickle.dumps(ring, protocol=protocol)
    with pytest.raises(TypeError):
        copy.copy(ring)
    with pytest.raises(TypeError):
        copy.deepcopy(ring)


def test_equality_by_key_ids() -> None:
    assert KeyRing([K0, K1]) == KeyRing([bytearray(K0), K1])
    assert KeyRing([K0, K1]) != KeyRing([K1, K0])
    assert hash(KeyRing([K0])) == hash(KeyRing([K0]))
    assert KeyRing([K0]) != [K0]


# -- derivation ------------------------------------------------------------------------------------


def test_derive_key_is_hkdf_sha256_and_separates_uses() -> None:
    aes = derive_key(K0, b"statecodec/v1/aes-256-gcm")
    xaes = derive_key(K0, b"statecodec/v1/xaes-256-gcm")
    assert aes == hkdf_sha256(K0, b"statecodec/v1/aes-256-gcm", 32)
    assert xaes == hkdf_sha256(K0, b"statecodec/v1/xaes-256-gcm", 32)
    assert len({aes, xaes, K0}) == 3
    assert bytes.fromhex(KeyRing([K0]).key_ids[0]) not in (aes[:4], xaes[:4])
    assert KeyRing([K0]).subkeys(b"statecodec/v1/aes-256-gcm") == [(bytes.fromhex("3d7ec38c"), aes)]
    assert derive_key(K0, b"x", 64) == hkdf_sha256(K0, b"x", 64)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (secrets_module.token_hex(32), "looks like hex"),
        (base64.b64encode(secrets_module.token_bytes(32)).decode(), "looks like standard or padded base64"),
        (base64.b64encode(bytes(range(223, 256))).decode(), "looks like standard or padded base64"),  # no '='
        ("correcthorsebatterystaplecorrecthorsebattery", "looks like a password or passphrase"),
        ("CORRECT-HORSE-BATTERY-STAPLE-CORRECT-HORSE-", "looks like a password or passphrase"),
        ("Correct Horse Battery Staple Correct Horse!", "is not unpadded base64url"),
    ],
    ids=["hex", "padded-base64", "standard-base64", "lowercase-passphrase", "uppercase-passphrase", "printable"],
)
def test_key_text_in_another_encoding_is_refused_saying_what_a_key_is(text: str, fragment: str) -> None:
    """A key in hex or standard base64 would decode to other bytes than meant; a password is not a key."""
    with pytest.raises(ConfigurationError) as info:
        KeyRing.parse(text)
    message = str(info.value)
    assert fragment in message
    assert "43 characters or more" in message
    assert "statecodec keygen" in message
    assert text not in message


def test_generated_keys_are_never_refused_as_text() -> None:
    for _ in range(2000):
        assert len(parse_keys(format_keys([generate_key()]))) == 1
