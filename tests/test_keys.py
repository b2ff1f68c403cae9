"""Key rings refuse weak, duplicated or mistyped secrets, load text keys, and never show a secret."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecodec import ConfigurationError, KeyRing, format_keys, parse_keys
from statecodec._encoding import b64u_encode
from statecodec.keys import MIN_KEY_LENGTH, _text_refusal, generate_key
from tests.secrecy import COLLIDING_SECRETS, refused

K0, K1, K2 = bytes(range(32)), bytes(range(32, 64)), bytes(range(64, 128))  # K2: longer than the minimum
A, B = b64u_encode(K0), b64u_encode(K1)
HOW_TO = "statecodec keygen"


def test_valid_ring_order_and_ids() -> None:
    ring = KeyRing([K0, bytearray(K1), memoryview(K2)])
    assert (list(ring), len(ring), ring[0]) == ([K0, K1, K2], 3, K0)
    assert all(type(k) is bytes for k in ring)
    # Frozen: a changed label would orphan every token in flight (tests/test_vectors.py re-derives them).
    assert (ring.key_ids[0], len(set(ring.key_ids))) == ("3d7ec38c", 3)
    assert list(KeyRing(k for k in (K0, K1))) == [K0, K1]
    mutable = bytearray(K0)
    copied = KeyRing([mutable])
    mutable[:] = bytes(32)
    assert copied[0] == K0


PLACEHOLDERS = [bytes(32), b"a" * 64, b"ab" * 16, b"password" * 4, bytes(range(7)) * 5]  # low variety
WEAK = [([K0, bytes(range(n))], f"key 1 is {n} bytes; keys must be at least {MIN_KEY_LENGTH}") for n in (0, 1, 16, 31)]
WEAK += [([key], "key 0 has fewer than 8 distinct") for key in PLACEHOLDERS]


@pytest.mark.parametrize(("keys", "expected"), WEAK)
def test_weak_keys_are_refused_with_how_to_generate(keys: list[bytes], expected: str) -> None:
    message = refused(lambda: KeyRing(keys), *[k for k in keys if k])
    assert expected in message
    assert HOW_TO in message


def test_duplicate_key_is_refused_naming_both_positions() -> None:
    assert "key 2 duplicates key 0" in refused(lambda: KeyRing([K0, K1, bytearray(K0)]), K0)


def test_a_key_id_collision_is_named_as_such_with_what_to_do() -> None:
    first, second = COLLIDING_SECRETS
    assert first != second
    assert KeyRing([first]).key_ids == KeyRing([second]).key_ids
    message = refused(lambda: KeyRing([K0, first, second]), first, second)
    assert "key 2 and key 1 are different keys whose 4-byte key ids collide" in message
    assert "generate another key" in message
    assert HOW_TO in message
    assert "duplicates" not in message


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ([K0, A], "key 1 must be bytes, got str (parse text keys with statecodec.parse_keys"),
        *[([K0, bad], "key 1 must be bytes") for bad in (None, 32, [K0])],
        *[(bad, "keys=[key]") for bad in (K0, memoryview(K0), A)],
        *[(bad, "list of byte-string secrets") for bad in (None, 5)],
        ([], "a key ring needs at least one key"),
        (iter(()), "a key ring needs at least one key"),
    ],
)
def test_wrong_types_are_refused_saying_what_to_pass(keys: object, expected: str) -> None:
    assert expected in refused(lambda: KeyRing(keys), K0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "no keys found"),
        ("# only a comment\n\n", "no keys found"),
        (f"{A},", "key 1 is empty"),
        (f"{A},,{B}", "key 1 is empty"),
        (f"{A},{A}=", "key 1 is not unpadded base64url"),
        (f"{A}\n{B}+", "key 1 is not unpadded base64url"),
        (f"{A} {B}", "key 0 is not unpadded base64url"),
        (f"{A} # inline comment", "key 0 is not unpadded base64url"),
        (hashlib.sha256(b"hex").hexdigest(), "key 0 is not unpadded base64url: it looks like hex"),
        (base64.b64encode(hashlib.sha256(b"b64").digest()).decode(), "looks like standard or padded base64"),
        (base64.b64encode(bytes(range(223, 256))).decode(), "looks like standard or padded base64"),  # no '='
        ("correcthorsebatterystaplecorrecthorsebattery", "looks like a password or passphrase"),
        ("CORRECT-HORSE-BATTERY-STAPLE-CORRECT-HORSE-", "looks like a password or passphrase"),
        ("a" * 43, "key 0 looks like a password or passphrase"),  # all hex digits, but no hex
        ("/etc/passwd", "key 0 looks like a file path: a file of keys is named by the setting's _FILE form"),
        ("Correct Horse Battery Staple Correct Horse!", "is not unpadded base64url"),
    ],
)
def test_parse_errors_name_the_position_and_what_a_key_is_not_the_value(text: str, expected: str) -> None:
    message = refused(lambda: parse_keys(text), K0, K1)
    assert expected in message
    assert text not in message or not text
    if "looks like" in expected:  # what a key is, and how to make one
        assert "43 characters or more" in message
        assert HOW_TO in message


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(min_size=32, max_size=64), min_size=1, max_size=5))
def test_text_format_round_trip(secrets: list[bytes]) -> None:
    text = format_keys(secrets)
    assert "=" not in text
    assert text.count(",") == len(secrets) - 1
    if any(_text_refusal(b64u_encode(k)) for k in secrets):  # zero bytes: "AAAA...", never a random key's text
        with pytest.raises(ConfigurationError, match=" looks like "):
            parse_keys(text)
        return
    assert parse_keys(text) == secrets
    if len(set(secrets)) == len(secrets) and all(len(set(k)) >= 8 for k in secrets):
        assert KeyRing.parse(KeyRing(secrets).to_text()) == KeyRing(secrets)


def test_generated_keys_are_never_refused_as_text() -> None:
    assert all(len(parse_keys(format_keys([generate_key()]))) == 1 for _ in range(2000))


def test_from_env_reads_the_variable_or_its_file_form(tmp_path: Path) -> None:
    assert list(KeyRing.from_env(environ={"STATECODEC_KEYS": f" {B},{A} "})) == [K1, K0]
    (tmp_path / "k").write_text(f"# ring\n{A}\n")
    assert list(KeyRing.from_env("MY_KEYS", environ={"MY_KEYS_FILE": str(tmp_path / "k")})) == [K0]
    for env in ({}, {"STATECODEC_KEYS": ""}, {"STATECODEC_KEYS": "  \n "}):
        message = refused(lambda: KeyRing.from_env(environ=env))  # noqa: B023 - called at once
        assert message.startswith("no keys configured: set STATECODEC_KEYS to comma-separated")
        assert "STATECODEC_KEYS_FILE" in message
        assert HOW_TO in message
    message = refused(lambda: KeyRing.from_env(environ={"STATECODEC_KEYS": f"{A},{B}="}), K0, K1)
    assert message.startswith("STATECODEC_KEYS: key 1 ")
    assert "set exactly one" in refused(lambda: KeyRing.from_env(environ={"K": A, "K_FILE": "/k"}, var="K"))


def test_from_file_reads_comments_and_names_the_file_on_errors(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    text = f"# statecodec ring\n\n  {B} , {A}\r\n# previous\n{b64u_encode(K2)}\n\n"  # commas, spaces, CRLF
    path.write_bytes(text.encode())
    assert list(KeyRing.from_file(path)) == list(KeyRing.from_file(str(path))) == parse_keys(text) == [K1, K0, K2]
    assert KeyRing.parse(text) == KeyRing([K1, K0, K2])
    for missing in (tmp_path / "missing.txt", tmp_path):  # absent, a directory
        assert "cannot read key file" in refused(lambda: KeyRing.from_file(missing))  # noqa: B023
    path.write_text(f"{A}\nnot a key!\n", encoding="utf-8")
    assert f"{path}: key 1 " in refused(lambda: KeyRing.from_file(path), K0)
    # The decoder's error holds the whole file (UnicodeDecodeError.object), keys and all.
    path.write_bytes(f"{A}\n{B}\n".encode() + b"# caf\xe9\n")
    assert f"{path} is not UTF-8" in refused(lambda: KeyRing.from_file(path), K0, K1)


def test_a_key_file_is_read_up_to_a_cap(tmp_path: Path) -> None:
    # A key file holds a few lines; a path to a device or a runaway file must not be read without bound.
    limit, padded, line = 64 * 1024, tmp_path / "padded.key", A + "\n"
    padded.write_text(line + "#" * (limit - len(line) - 1) + "\n", encoding="utf-8")
    assert KeyRing.from_file(padded) == KeyRing([K0])
    padded.write_text(line + "#" * (limit - len(line)) + "\n", encoding="utf-8")
    assert f"key file {padded} is over {limit} bytes" in refused(lambda: KeyRing.from_file(padded), K0)


def test_repr_and_str_show_key_ids_only() -> None:
    ring = KeyRing([K0, K1])
    for text in (repr(ring), str(ring), f"{ring}", f"{ring!r}"):
        assert text == f"KeyRing(key_ids={list(ring.key_ids)!r})"
    assert KeyRing([K0, K1]) == KeyRing([bytearray(K0), K1]) != KeyRing([K1, K0])
    assert hash(KeyRing([K0])) == hash(KeyRing([K0]))
    assert KeyRing([K0]) != [K0]
