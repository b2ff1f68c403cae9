"""The `statecodec` command line: inspect, seal, unseal, keygen and demo, success and failure."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path

import pytest

from statecodec import AESGCMCodec, XAESGCMCodec, format_keys, generate_key, parse_keys
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.cli.main import main

KEY = generate_key()
OTHER = generate_key()
KEY_TEXT = format_keys([KEY])
OTHER_TEXT = format_keys([OTHER])
PAYLOAD = b'{"cart": "secret-cart-contents"}'


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("STATECODEC_CODEC", "STATECODEC_KEYS", "STATECODEC_KEYS_FILE", "STATECODEC_MAX_TOKEN_LENGTH"):
        monkeypatch.delenv(var, raising=False)


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def _flip(token: str) -> str:
    raw = bytearray(b64u_decode(token))
    raw[-1] ^= 1
    return b64u_encode(bytes(raw))


def _no_secrets(text: str, *also: str) -> None:
    for secret in (KEY_TEXT, OTHER_TEXT, PAYLOAD.decode(), "secret-cart", *also):
        assert secret not in text


# keygen


def test_keygen_prints_usable_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keygen", "-n", "2"]) == 0
    keys = parse_keys(capsys.readouterr().out)
    assert len(keys) == 2
    assert AESGCMCodec(keys).unseal(AESGCMCodec(keys).seal(b"x")) == b"x"


# inspect


def test_inspect_without_keys_describes_only(capsys: pytest.CaptureFixture[str]) -> None:
    codec = AESGCMCodec([KEY])
    token = codec.seal(PAYLOAD)
    assert main(["inspect", token]) == 0
    out = capsys.readouterr()
    assert "aesgcm (version 0x01)" in out.out
    assert f"key id        {codec.primary_key_id}" in out.out
    assert f"token         {len(token)} characters" in out.out
    assert f"payload       {len(PAYLOAD)} bytes, encrypted" in out.out
    assert "not checked (no keys given)" in out.out
    assert out.err == ""
    _no_secrets(out.out)


def test_inspect_verifies_with_keys_env(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEYS", format_keys([KEY, OTHER]))
    token = AESGCMCodec([OTHER]).seal(PAYLOAD)
    assert main(["inspect", token, "--keys-env", "MY_KEYS"]) == 0
    out = capsys.readouterr()
    assert "valid (AESGCMCodec)" in out.out
    _no_secrets(out.out + out.err, format_keys([KEY, OTHER]))


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: _flip(AESGCMCodec([KEY]).seal(PAYLOAD)), "seal"),
        (lambda: AESGCMCodec([OTHER]).seal(PAYLOAD), "unknown_key"),
    ],
)
def test_inspect_reports_the_reason_and_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, make: object, reason: str
) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", KEY_TEXT)
    token = make()  # type: ignore[operator]
    assert main(["inspect", token]) == 1
    out = capsys.readouterr()
    assert f"INVALID: {reason}" in out.out
    assert out.err == f"statecodec inspect: invalid token: {reason}\n"
    _no_secrets(out.out + out.err)


def test_inspect_detects_the_format_for_a_key_ring(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", KEY_TEXT)
    token = XAESGCMCodec([KEY]).seal(PAYLOAD)
    assert main(["inspect", token]) == 0
    out = capsys.readouterr().out
    assert "xaesgcm (version 0x02)" in out
    assert "nonce         24 bytes" in out
    assert "valid (XAESGCMCodec)" in out
    # An explicit codec choice wins over detection.
    assert main(["inspect", token, "--codec", "aesgcm"]) == 1
    assert "INVALID: format" in capsys.readouterr().out


@pytest.mark.parametrize("junk", ["", "not a token", "A" * 200_000, "AQID" * 30 + "!", "a.b.c.d"])
def test_inspect_junk_exits_1_with_the_reason(capsys: pytest.CaptureFixture[str], junk: str) -> None:
    assert main(["inspect", junk]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith("statecodec inspect: invalid token: ")
    assert out.err.count("\n") == 1
    if junk:
        assert junk not in out.err


def test_inspect_show_payload(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    token = AESGCMCodec([KEY]).seal(PAYLOAD)
    assert main(["inspect", token, "--show-payload"]) == 2
    err = capsys.readouterr().err
    assert "--show-payload needs keys" in err
    monkeypatch.setenv("STATECODEC_KEYS", KEY_TEXT)
    assert main(["inspect", token]) == 0
    _no_secrets(capsys.readouterr().out)
    assert main(["inspect", token, "--show-payload"]) == 0
    assert f"payload text  {PAYLOAD.decode()}" in capsys.readouterr().out
    binary = AESGCMCodec([KEY]).seal(b"\xff\x00")
    assert main(["inspect", binary, "--show-payload"]) == 0
    assert "payload text  (hex) ff00" in capsys.readouterr().out


def test_inspect_json_and_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    codec = AESGCMCodec([KEY])
    token = codec.seal(PAYLOAD)
    _stdin(monkeypatch, token.encode() + b"\n")
    assert main(["inspect", "-", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "aesgcm"
    assert doc["key_id"] == codec.primary_key_id
    assert doc["payload_length"] == len(PAYLOAD)
    assert doc["verified"] is None
    assert "payload" not in doc
    monkeypatch.setenv("STATECODEC_KEYS", KEY_TEXT)
    assert main(["inspect", _flip(token), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert (doc["verified"], doc["reason"]) == (False, "seal")


def test_inspect_non_ascii_stdin_is_malformed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _stdin(monkeypatch, b"\xff\xfe\x00")
    assert main(["inspect", "-"]) == 1
    assert capsys.readouterr().err == "statecodec inspect: invalid token: malformed\n"


def test_inspect_jose_token_is_described(capsys: pytest.CaptureFixture[str]) -> None:
    header = b64u_encode(b'{"alg":"HS256","kid":"k1"}')
    token = f"{header}.{b64u_encode(b'{}')}.{b64u_encode(bytes(32))}"
    assert main(["inspect", token]) == 0
    out = capsys.readouterr().out
    assert "format        jws" in out
    assert "algorithm     HS256" in out
    assert "key id        k1" in out


def test_inspect_key_ring_for_an_unsupported_codec(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_KEYS", KEY_TEXT)
    envelope = b64u_encode(bytes([0x03]) + bytes(4 + 12 + 16))
    assert main(["inspect", envelope, "--keys-env", "MY_KEYS"]) == 2
    err = capsys.readouterr().err
    assert "a key ring works with --codec aesgcm or jwe or jws or xaesgcm, not 'envelope'" in err
    _no_secrets(err)


@pytest.mark.parametrize("kind", ["jwe-dir", "jwe-A256KW", "jws"])
def test_a_key_ring_verifies_jose_tokens_by_their_format(
    kind: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a ring in the environment and no codec named, a JOSE token is checked by the JOSE codec."""
    from statecodec import JWECodec, JWSCodec, KeyRing

    monkeypatch.setenv("STATECODEC_KEYS", KEY_TEXT)
    monkeypatch.delenv("STATECODEC_CODEC", raising=False)
    ring = KeyRing(parse_keys(KEY_TEXT))
    codec = JWSCodec(ring) if kind == "jws" else JWECodec(ring, alg="A256KW" if kind.endswith("KW") else "dir")
    token = codec.seal(PAYLOAD)
    assert main(["inspect", token]) == 0
    assert f"valid ({type(codec).__name__})" in capsys.readouterr().out
    assert main(["unseal", token]) == 0
    # Another ring's token of the same format is still refused by that codec.
    other = (JWSCodec if kind == "jws" else JWECodec).ephemeral()
    assert main(["inspect", other.seal(PAYLOAD)]) == 1


# seal / unseal


@pytest.mark.parametrize("payload", [b"", PAYLOAD, b"\x00\xff\r\n trailing newline\n", bytes(range(256)) * 40])
@pytest.mark.parametrize("codec", [None, "xaesgcm"])
def test_seal_unseal_round_trip_is_byte_exact(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch, payload: bytes, codec: str | None
) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", KEY_TEXT)
    extra = ["--codec", codec] if codec else []
    _stdin(monkeypatch, payload)
    assert main(["seal", *extra]) == 0
    out = capsysbinary.readouterr()
    assert out.out.endswith(b"\n")
    token = out.out.decode("ascii").strip()
    expected = XAESGCMCodec if codec == "xaesgcm" else AESGCMCodec
    assert b64u_decode(token)[0] == expected.VERSION
    assert expected([KEY]).unseal(token) == payload
    _stdin(monkeypatch, out.out)
    assert main(["unseal", *extra]) == 0
    assert capsysbinary.readouterr().out == payload
    assert main(["unseal", token, *extra]) == 0
    assert capsysbinary.readouterr().out == payload


def test_seal_unseal_with_key_file_and_config(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text(format_keys([KEY, OTHER]) + "\n")
    conf = tmp_path / "statecodec.json"
    conf.write_text(json.dumps({"STATECODEC_CODEC": "xaesgcm", "STATECODEC_KEYS_FILE": "keys.txt"}))
    _stdin(monkeypatch, PAYLOAD)
    assert main(["seal", "--config", str(conf)]) == 0
    token = capsysbinary.readouterr().out.decode().strip()
    assert XAESGCMCodec([OTHER, KEY]).unseal(token) == PAYLOAD
    assert main(["unseal", token, "--keys-file", str(keys), "--codec", "xaesgcm"]) == 0
    assert capsysbinary.readouterr().out == PAYLOAD


def test_unseal_refused_token_exits_1_and_prints_nothing(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", KEY_TEXT)
    token = _flip(AESGCMCodec([KEY]).seal(PAYLOAD))
    assert main(["unseal", token]) == 1
    out = capsysbinary.readouterr()
    assert out.out == b""
    assert out.err == b"statecodec unseal: invalid token: seal\n"
    assert main(["unseal", AESGCMCodec([OTHER]).seal(PAYLOAD)]) == 1
    assert capsysbinary.readouterr().err == b"statecodec unseal: invalid token: unknown_key\n"
    assert main(["unseal", "x" * 300, "--max-token-length", "100"]) == 1
    assert capsysbinary.readouterr().err == b"statecodec unseal: invalid token: oversized\n"


@pytest.mark.parametrize(
    ("argv", "env", "fragment"),
    [
        (["seal"], {}, "no codec configured"),
        (["unseal", "AAAA"], {}, "no codec configured"),
        (["seal"], {"STATECODEC_KEYS": "secret-cart-not-base64!"}, "not unpadded base64url"),
        (["seal"], {"STATECODEC_KEYS": format_keys([bytes(range(20))])}, "at least 32 bytes"),
        (["seal", "--keys-env", "NOPE_UNSET"], {}, "NOPE_UNSET is not set"),
        (["seal", "--keys-file", "/nonexistent/keys"], {}, "cannot read key file"),
        (["seal", "--config", "/nonexistent/c.json", "--codec", "aesgcm"], {}, "go in the --config file"),
        (["seal"], {"STATECODEC_KEYS": KEY_TEXT, "STATECODEC_CODEC": "rot13"}, "valid kinds: aesgcm"),
        (["seal", "--max-token-length", "5"], {"STATECODEC_KEYS": KEY_TEXT}, "below the smallest token"),
        (["inspect", "AAAA", "--keys-env", "NOPE_UNSET"], {}, "NOPE_UNSET is not set"),
    ],
)
def test_configuration_errors_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
    fragment: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _stdin(monkeypatch, PAYLOAD)
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert fragment in out.err
    assert out.err.startswith("statecodec")
    assert out.err.count("\n") == 1
    _no_secrets(out.err, *(v for k, v in env.items() if k == "STATECODEC_KEYS"))


def test_seal_payload_over_the_cap_exits_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", KEY_TEXT)
    _stdin(monkeypatch, PAYLOAD * 10)
    assert main(["seal", "--max-token-length", "100"]) == 2
    out = capsys.readouterr()
    assert "exceeds" in out.err
    _no_secrets(out.err)


def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["seal", "--codec", "rot13"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["seal", "--keys-env", "A", "--keys-file", "B"])
    assert info.value.code == 2
    assert main([]) == 2


# demo


def test_demo_runs_a_two_round_flow_and_a_rejection(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert out.err == ""
    assert any(line.startswith("round 1  tools/call provision") for line in lines)
    assert any("server asks [region]: Which region" in line for line in lines)
    tokens = [line.strip() for line in lines if line.startswith("         ") and len(line.strip()) > 100]
    assert len(tokens) == 2
    sealed, tampered = tokens
    assert sum(a != b for a, b in zip(sealed, tampered, strict=True)) == 1
    assert b64u_decode(sealed)[0] == 0x01
    assert "result: Provisioned 'orders' in eu-west-1" in out.out
    assert "client got error -32602: 'Invalid or expired requestState'" in out.out
    assert "server log: requestState rejected on tools/call: seal" in out.out
    assert "ask-region" not in sealed


def test_demo_from_env(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", KEY_TEXT)
    monkeypatch.setenv("STATECODEC_CODEC", "xaesgcm")
    assert main(["demo", "--from-env"]) == 0
    out = capsys.readouterr().out
    assert f"codec: XAESGCMCodec(key_ids=['{XAESGCMCodec([KEY]).primary_key_id}'])" in out
    assert "xaesgcm, key id" in out
    assert "server log: requestState rejected on tools/call: seal" in out
    _no_secrets(out)


def test_demo_without_the_sdk_names_the_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        return None if name == "mcp" else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert main(["demo"]) == 2
    assert "pip install 'statecodec[mcp]'" in capsys.readouterr().err
