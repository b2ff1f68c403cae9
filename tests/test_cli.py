"""The `statecodec` command line: flags map onto the settings a server reads; exit 0 ok, 1 refused, 2 usage.

`rotate plan|check` is tested in test_rotation.py, `bench` and `vectors` in their own files.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from statecodec import AESGCMCodec, KeyRing, XAESGCMCodec, format_keys, generate_key
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.cli.main import main
from statecodec.config import codec_from_env

KEY, OTHER = generate_key(), generate_key()
KEYS = format_keys([KEY])
PAYLOAD = b'{"cart": "secret-cart-contents"}'
TOKEN = AESGCMCodec([KEY]).seal(PAYLOAD)
SECRETS = (KEYS, format_keys([OTHER]), "secret-cart")
Run = Callable[..., tuple[int, bytes, str]]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]) -> Run:
    """Runs the command line with `stdin`; returns (exit code, stdout bytes, stderr text)."""
    for name in [name for name in os.environ if name.startswith("STATECODEC_")]:
        monkeypatch.delenv(name)

    def run(*argv: str, stdin: bytes = b"") -> tuple[int, bytes, str]:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsysbinary.readouterr()
        return code, out, err.decode()

    return run


def _flip(token: str) -> str:
    raw = bytearray(b64u_decode(token))
    raw[-1] ^= 1
    return b64u_encode(bytes(raw))


def test_keygen_prints_a_usable_ring(cli: Run) -> None:
    code, out, _ = cli("keygen", "-n", "2")
    ring = KeyRing.parse(out.decode())
    assert (code, len(ring)) == (0, 2)
    assert AESGCMCodec(ring).unseal(AESGCMCodec(ring).seal(b"x")) == b"x"


@pytest.mark.parametrize("payload", [b"", PAYLOAD, b"\x00\xff\r\n trailing newline\n", bytes(range(256)) * 40])
@pytest.mark.parametrize("kind", [None, "xaesgcm", "jws"])
def test_seal_unseal_round_trip_is_byte_exact(
    cli: Run, monkeypatch: pytest.MonkeyPatch, payload: bytes, kind: str | None
) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", KEYS)
    flags = ["--codec", kind] if kind else []
    code, out, err = cli("seal", *flags, stdin=payload)
    assert (code, err, out[-1:]) == (0, "", b"\n")
    token = out.decode().strip()
    assert codec_from_env({"STATECODEC_KEYS": KEYS, "STATECODEC_CODEC": kind or "aesgcm"}).unseal(token) == payload
    assert cli("unseal", *flags, stdin=out) == (0, payload, "")
    assert cli("unseal", token, *flags) == (0, payload, "")


def test_flags_override_the_settings_a_server_reads(cli: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text(format_keys([OTHER, KEY]))
    monkeypatch.setenv("STATECODEC_KEYS", format_keys([generate_key()]))
    monkeypatch.setenv("STATECODEC_JWE_ALG", "A256KW")
    code, out, _ = cli("seal", "--keys-file", str(keys), "--codec", "jwe", stdin=PAYLOAD)
    token = out.decode().strip()
    server = {"STATECODEC_CODEC": "jwe", "STATECODEC_JWE_ALG": "A256KW", "STATECODEC_KEYS_FILE": str(keys)}
    assert (code, codec_from_env(server).unseal(token)) == (0, PAYLOAD)
    assert json.loads(b64u_decode(token.split(".")[0]))["alg"] == "A256KW"


def test_a_config_file_names_the_codec(cli: Run, tmp_path: Path) -> None:
    (tmp_path / "keys.txt").write_text(format_keys([OTHER, KEY]))
    conf = tmp_path / "statecodec.json"
    conf.write_text(json.dumps({"STATECODEC_CODEC": "xaesgcm", "STATECODEC_KEYS_FILE": "keys.txt"}))
    code, out, _ = cli("seal", "--config", str(conf), stdin=PAYLOAD)
    assert (code, XAESGCMCodec([OTHER, KEY]).unseal(out.decode().strip())) == (0, PAYLOAD)
    assert cli("unseal", "--config", str(conf), stdin=out) == (0, PAYLOAD, "")


@pytest.mark.parametrize("command", ["unseal", "inspect"])
@pytest.mark.parametrize(
    ("token", "flags", "env", "reason"),
    [
        (_flip(TOKEN), [], {}, "seal"),
        (AESGCMCodec([OTHER]).seal(PAYLOAD), [], {}, "unknown_key"),
        ("x" * 300, ["--max-token-length", "100"], {}, "oversized"),
        (TOKEN, [], {"STATECODEC_MAX_TOKEN_LENGTH": str(len(TOKEN) - 1)}, "oversized"),
        (TOKEN, ["--max-token-length", str(len(TOKEN) - 1)], {"STATECODEC_MAX_TOKEN_LENGTH": "99999"}, "oversized"),
        ("-", [], {}, "malformed"),  # stdin that is not ASCII
    ],
    ids=["tampered", "unknown-key", "flag-cap", "setting-cap", "flag-over-setting", "stdin-not-ascii"],
)
def test_a_refused_token_exits_1_with_its_reason_alone(
    cli: Run,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    token: str,
    flags: list[str],
    env: dict[str, str],
    reason: str,
) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", KEYS)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, out, err = cli(command, *flags, token, stdin=b"\xff\xfe")
    assert (code, err) == (1, f"statecodec {command}: invalid token: {reason}\n")
    assert command == "inspect" or out == b""
    assert not [secret for secret in SECRETS if secret in out.decode(errors="replace")]


@pytest.mark.parametrize(
    ("argv", "env", "fragment"),
    [
        (["seal"], {}, "no codec configured"),
        (["unseal", "not a token!"], {}, "no codec configured"),  # the configuration is reported first
        (["inspect", "not a token!", "--codec", "aesgcm"], {}, "no keys configured"),
        (["seal"], {"STATECODEC_KEYS": "secret-cart-not-base64!"}, "base64url"),
        (["seal", "--keys-file", "/nonexistent/keys"], {}, "cannot read STATECODEC_KEYS_FILE"),
        (["seal", "--config", "/nonexistent/c.json", "--codec", "aesgcm"], {}, "go in the --config file"),
        (["seal", "--codec", "rot13"], {"STATECODEC_KEYS": KEYS}, "valid kinds: aesgcm"),
        (["seal", "--max-token-length", "0"], {"STATECODEC_KEYS": KEYS}, "MAX_TOKEN_LENGTH must be a positive"),
        (["inspect", TOKEN, "--max-token-length", "+5"], {}, "MAX_TOKEN_LENGTH must be a positive"),
        (["seal", "--max-token-length", "60"], {"STATECODEC_KEYS": KEYS}, "exceeds"),  # the payload's token
        (["inspect", TOKEN, "--show-payload"], {}, "--show-payload needs keys"),
        (["keygen", "-n", "0"], {}, "--count must be at least 1"),
    ],
)
def test_configuration_errors_exit_2_with_one_line(
    cli: Run, monkeypatch: pytest.MonkeyPatch, argv: list[str], env: dict[str, str], fragment: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, out, err = cli(*argv, stdin=PAYLOAD)
    assert (code, out, err.count("\n")) == (2, b"", 1)
    assert err.startswith("statecodec")
    assert fragment in err
    assert not [secret for secret in SECRETS if secret in err]


def test_inspect_describes_without_keys_and_verifies_with_them(cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = cli("inspect", TOKEN)
    lines = out.decode().splitlines()
    assert (code, err) == (0, "")
    assert {"format          aesgcm", f"key_id          {AESGCMCodec([KEY]).primary_key_id}"} <= set(lines)
    assert {f"payload_length  {len(PAYLOAD)}", "verified        -"} <= set(lines)
    monkeypatch.setenv("STATECODEC_KEYS", KEYS)
    code, out, _ = cli("inspect", TOKEN)
    assert code == 0
    assert {"verified        True", "codec           AESGCMCodec"} <= set(out.decode().splitlines())
    assert not [secret for secret in SECRETS if secret in out.decode()]
    assert f"payload         {PAYLOAD.decode()}" in cli("inspect", "--show-payload", TOKEN)[1].decode()
    binary = AESGCMCodec([KEY]).seal(b"\xff\x00")
    assert "payload         (hex) ff00" in cli("inspect", "--show-payload", binary)[1].decode()


def test_inspect_json_from_stdin(cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = cli("inspect", "--json", "-", stdin=TOKEN.encode() + b"\n")
    doc = json.loads(out)
    assert code == 0
    assert (doc["format"], doc["payload_length"], doc["verified"]) == ("aesgcm", len(PAYLOAD), None)
    monkeypatch.setenv("STATECODEC_KEYS", KEYS)
    code, out, _ = cli("inspect", "--json", _flip(TOKEN))
    doc = json.loads(out)
    assert (code, doc["verified"], doc["reason"], "payload" in doc) == (1, False, "seal", False)


def test_demo_runs_a_two_round_flow_and_a_rejection(cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", KEYS)
    monkeypatch.setenv("STATECODEC_CODEC", "xaesgcm")
    code, out, err = cli("demo", "--from-env")
    text = out.decode()
    assert (code, err) == (0, "")
    assert f"codec: XAESGCMCodec(key_ids=['{XAESGCMCodec([KEY]).primary_key_id}'])" in text
    tokens = [line.strip() for line in text.splitlines() if line.startswith("         ") and len(line.strip()) > 100]
    sealed, tampered = tokens
    assert sum(a != b for a, b in zip(sealed, tampered, strict=True)) == 1
    assert "result: Provisioned 'orders' in eu-west-1" in text
    assert "client got error -32602: 'Invalid or expired requestState'" in text
    assert "server log: requestState rejected on tools/call: seal" in text
    assert not [secret for secret in SECRETS if secret in text]


def test_demo_without_the_sdk_names_the_extra(cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp now raises ImportError
    monkeypatch.delitem(sys.modules, "statecodec.cli.demo", raising=False)
    code, _, err = cli("demo")
    assert code == 2
    assert "pip install 'statecodec[mcp]'" in err
