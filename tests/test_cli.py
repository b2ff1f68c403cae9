"""The `statecodec` command line: flags map onto the settings a server reads; exit 0 ok, 1 refused, 2 usage.

`rotate plan|check` is tested in test_rotation.py, `bench` and `vectors` in their own files.
"""

from __future__ import annotations

import base64
import io
import json
import os
import stat
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
        (["seal", "--keys-file", "/nonexistent/keys"], {}, "cannot read --keys-file (STATECODEC_KEYS_FILE)"),
        (["seal", "--config", "/nonexistent/c.json", "--codec", "aesgcm"], {}, "go in the --config file"),
        (["seal", "--codec", "rot13"], {"STATECODEC_KEYS": KEYS}, "valid kinds: aesgcm"),
        (["seal", "--max-token-length", "0"], {"STATECODEC_KEYS": KEYS}, "(STATECODEC_MAX_TOKEN_LENGTH) must be"),
        (["inspect", TOKEN, "--max-token-length", "+5"], {}, "--max-token-length (STATECODEC_MAX_TOKEN_LENGTH) must"),
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


def test_keygen_output_is_a_new_owner_only_file_never_overwritten(cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "new.key"
    old_umask = os.umask(0)  # the mode must not depend on the caller's umask
    try:
        code, out, err = cli("keygen", "-n", "2", "--output", str(path))
    finally:
        os.umask(old_umask)
    assert (code, out) == (0, b"")
    assert "wrote 2 key(s)" in err
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert len(KeyRing.parse(text)) == 2
    assert text not in err
    code, out, err = cli("keygen", "--output", str(path))
    assert (code, out) == (2, b"")
    assert "exists; it is never overwritten" in err
    assert path.read_text() == text
    link = tmp_path / "link.key"
    link.symlink_to(tmp_path / "elsewhere.key")  # a dangling link is not followed either
    assert cli("keygen", "--output", str(link))[0] == 2
    assert not (tmp_path / "elsewhere.key").exists()


def test_rotate_plan_output_holds_the_secret_keys_in_a_new_owner_only_file(cli: Run, tmp_path: Path) -> None:
    old = tmp_path / "old.key"
    old.write_text(KEYS)
    path = tmp_path / "plan.json"
    code, out, err = cli("rotate", "plan", "--old-file", str(old), "--generate-new", "--json", "--output", str(path))
    assert (code, out) == (0, b"")
    assert "SECRET" not in err
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert KEYS in json.loads(path.read_text())["phases"][0]["STATECODEC_KEYS"]
    assert cli("rotate", "plan", "--old-file", str(old), "--generate-new", "--output", str(path))[0] == 2


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (KEY.hex(), "looks like hex"),
        (base64.b64encode(KEY).decode(), "looks like standard or padded base64"),
        ("correcthorsebatterystaplecorrecthorsebattery", "looks like a password"),
    ],
    ids=["hex", "base64", "password"],
)
def test_a_key_in_another_encoding_names_the_variable_and_how_to_make_one(
    cli: Run, monkeypatch: pytest.MonkeyPatch, text: str, fragment: str
) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", text)
    code, out, err = cli("seal", stdin=PAYLOAD)
    assert (code, out) == (2, b"")
    assert err.startswith("statecodec seal: STATECODEC_KEYS: key 0 ")
    assert fragment in err
    assert "statecodec keygen" in err
    assert text not in err


AWS_WITH_RING = {"STATECODEC_CODEC": "aws-kms", "STATECODEC_KEYS": KEYS}


def _report(cli: Run, *argv: str) -> tuple[int, dict[str, object], str]:
    code, out, err = cli("check", "--json", *argv)
    doc = json.loads(out)
    assert isinstance(doc, dict)
    return code, doc, err


def test_check_reports_a_ready_instance_in_text_and_json(cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", format_keys([KEY, OTHER]))
    ids = list(AESGCMCodec([KEY, OTHER]).key_ids)
    code, doc, err = _report(cli, "--instance", "web-1")
    assert (code, err) == (0, "")
    assert doc == {
        "schema": "statecodec-check/1",
        "instance": "web-1",
        "ready": True,
        "status": "ready",
        "kind": "aesgcm",
        "codec": "AESGCMCodec",
        "key_ids": ids,
        "primary_key_id": ids[0],
        "provider": None,
        "key_name": None,
        "error": None,
    }
    code, out, err = cli("check")
    assert (code, err) == (0, "")
    lines = out.decode().splitlines()
    assert {"status          ready", "kind            aesgcm", f"key_ids         {', '.join(ids)}"} <= set(lines)
    assert not [secret for secret in SECRETS if secret in out.decode()]


def test_check_exits_2_when_misconfigured_and_names_the_setting(cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", KEYS)
    monkeypatch.setenv("STATECODEC_CODE", "jws")
    code, doc, err = _report(cli, "--instance", "web-1")
    expected = "unknown setting STATECODEC_CODE; did you mean STATECODEC_CODEC?"
    assert (code, doc["ready"], doc["status"], doc["error"]) == (2, False, "misconfigured", expected)
    assert err == f"statecodec check: {expected}\n"
    assert cli("check")[0] == 2


def test_check_exits_1_when_the_provider_is_unreachable(cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("hvac")
    settings = {
        "STATECODEC_CODEC": "vault-transit",
        "STATECODEC_VAULT_ADDR": "http://127.0.0.1:9",  # nothing listens there
        "STATECODEC_VAULT_TOKEN": "s.statecodec-test-token",
        "STATECODEC_VAULT_KEY": "statecodec",
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    code, doc, err = _report(cli, "--instance", "web-1")
    assert (code, doc["ready"], doc["status"]) == (1, False, "not ready")
    assert "cannot connect to Vault" in str(doc["error"])
    assert "s.statecodec-test-token" not in json.dumps(doc) + err


def test_check_probe_failure_is_not_ready(cli: Run, tmp_path: Path) -> None:
    """A sealing-only JWE codec (a public first key) cannot open its own probe: it is not ready to serve."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    public = X25519PrivateKey.generate().public_key().public_bytes_raw()
    jwks = tmp_path / "set.json"
    jwks.write_text(json.dumps({"keys": [{"kty": "OKP", "crv": "X25519", "x": b64u_encode(public), "kid": "p"}]}))
    conf = tmp_path / "c.json"
    settings = {"STATECODEC_CODEC": "jwe", "STATECODEC_JWE_ALG": "ECDH-ES+A256KW", "STATECODEC_JWKS_FILE": "set.json"}
    conf.write_text(json.dumps(settings))
    code, doc, _ = _report(cli, "--config", str(conf))
    assert (code, doc["status"], doc["kind"]) == (1, "not ready", "jwe")
    assert str(doc["error"]).startswith("the probe token was refused: ")


def test_rotate_check_reads_the_check_reports_of_a_fleet(
    cli: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    reports = {}
    for name, ring in (("web-1", [KEY, OTHER]), ("web-2", [OTHER, KEY]), ("web-3", [KEY])):
        monkeypatch.setenv("STATECODEC_KEYS", format_keys(ring))
        code, out, _ = cli("check", "--json", "--instance", name)
        assert code == 0
        reports[name] = out
    files = []
    for name, out in reports.items():
        files.append(tmp_path / f"{name}.json")
        files[-1].write_bytes(out)
    # web-2 seals under OTHER, which web-3 cannot open: unsafe, and exit 1.
    code, out, _ = cli("rotate", "check", *map(str, files), "--json")
    doc = json.loads(out)
    assert (code, doc["safe"], doc["instances"], doc["unsafe_instances"]) == (1, False, list(reports), ["web-2"])
    # The same reports concatenated on stdin (ssh each host, pipe the lot); the first two alone are safe.
    assert cli("rotate", "check", "-", stdin=reports["web-1"] + reports["web-2"])[0] == 0
    assert cli("rotate", "check", "-", stdin=b"[" + reports["web-1"] + b"," + reports["web-3"] + b"]")[0] == 0


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: d.update(instance=None), "without an instance name"),
        (lambda d: d.update(ready=False, status="not ready", error="down"), "instance 'web-1' is not ready (down)"),
        (lambda d: d.update(schema="other/1"), "expected a report of `statecodec check --json`"),
    ],
    ids=["no-instance", "not-ready", "not-a-report"],
)
def test_rotate_check_refuses_a_report_it_cannot_judge(
    cli: Run, monkeypatch: pytest.MonkeyPatch, mutate: Callable[[dict[str, object]], None], fragment: str
) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", KEYS)
    doc = json.loads(cli("check", "--json", "--instance", "web-1")[1])
    mutate(doc)
    code, out, err = cli("rotate", "check", "-", stdin=json.dumps(doc).encode())
    assert (code, out) == (2, b"")
    assert fragment in err
    twice = cli("check", "--json", "--instance", "web-1")[1] * 2
    code, _, err = cli("rotate", "check", "-", stdin=twice)
    assert code == 2
    assert "instance 'web-1' is reported twice" in err


@pytest.mark.parametrize(
    ("argv", "env", "error", "reason", "status"),
    [
        (["inspect", "--json", "not a token!"], {}, "invalid_token", "malformed", 1),
        (["inspect", "--json", TOKEN, "--codec", "aesgcm"], {}, "configuration", None, 2),
        (["rotate", "check", "-", "--json"], {}, "configuration", None, 2),
        (["kms", "check", "--json"], {**AWS_WITH_RING}, "configuration", None, 2),
    ],
    ids=["inspect-junk", "inspect-config", "rotate-check-empty", "kms-check-config"],
)
def test_errors_with_json_are_one_json_object_on_stdout(
    cli: Run,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
    error: str,
    reason: str | None,
    status: int,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, out, err = cli(*argv)
    doc = json.loads(out)
    assert (code, doc["error"], doc["reason"], doc["exit_status"], doc["command"]) == (
        status,
        error,
        reason,
        status,
        argv[0],
    )
    assert err == f"statecodec {argv[0]}: {doc['message']}\n"
    assert not [secret for secret in SECRETS if secret in out.decode()]


def test_rotate_plan_takes_the_servers_ttl_from_the_environment(cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ("rotate", "plan", "--old-id", "a1b2c3d4", "--new-id", "e5f6a7b8", "--json")
    monkeypatch.setenv("STATECODEC_TTL", "120")
    assert json.loads(cli(*argv)[1])["ttl"] == 120
    assert json.loads(cli(*argv, "--ttl", "30")[1])["ttl"] == 30
    monkeypatch.setenv("STATECODEC_TTL", "soon")
    code, _, err = cli(*argv)
    assert code == 2
    assert "STATECODEC_TTL must be whole seconds" in err


@pytest.mark.parametrize(
    "argv",
    [["inspect", TOKEN], ["kms", "new-data-key", "--provider", "aws", "--key-id", "alias/state"], ["store", "check"]],
    ids=["inspect-without-codec", "kms-new-data-key", "store-check"],
)
def test_every_command_names_a_misspelt_setting(cli: Run, monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    monkeypatch.setenv("STATECODEC_KMS_AUDIENSE", "billing")
    code, out, err = cli(*argv)
    assert (code, out) == (2, b"")
    assert "unknown setting STATECODEC_KMS_AUDIENSE; did you mean STATECODEC_KMS_AUDIENCE?" in err


WRAPPED = ("--wrapped-keys", "AAAA")


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["seal", "--codec", "rot13"], "--codec (STATECODEC_CODEC)='rot13' is unknown"),
        (["seal", "--max-token-length", "+5"], "--max-token-length (STATECODEC_MAX_TOKEN_LENGTH) must be a positive"),
        (["unseal", "--keys-file", "/nonexistent/k", TOKEN], "cannot read --keys-file (STATECODEC_KEYS_FILE) /nonex"),
        (
            ["kms", "check", "--provider", "aws", "--key-id", "k", *WRAPPED, "--context", "x"],
            "--context (STATECODEC_KMS_CONTEXT): context must be comma-separated key=value pairs",
        ),
        (
            ["kms", "check", "--provider", "vault", "--vault-addr", "vault:8200", "--vault-key", "k", *WRAPPED],
            "--vault-addr (STATECODEC_VAULT_ADDR) (or VAULT_ADDR): the Vault address must be http(s)://host[:port]",
        ),
    ],
    ids=["codec", "max-token-length", "keys-file", "kms-context", "vault-addr"],
)
def test_an_error_names_the_flag_the_user_wrote(
    cli: Run, monkeypatch: pytest.MonkeyPatch, argv: list[str], fragment: str
) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", KEYS)
    if argv[0] == "kms":
        monkeypatch.delenv("STATECODEC_KEYS")
        pytest.importorskip("boto3" if "aws" in argv else "hvac")
    code, out, err = cli(*argv, stdin=PAYLOAD)
    assert (code, out) == (2, b"")
    assert fragment in err
