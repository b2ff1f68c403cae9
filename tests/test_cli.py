"""The `statecodec` command line: flags map onto the settings a server reads; exit 0 ok, 1 refused, 2 usage.

What `rotate plan|check` computes: test_rotation.py; `bench`: test_bench.py; docs/cli.md and docs/rotation.md run
their examples of every command.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statecodec import AESGCMCodec, KeyRing, XAESGCMCodec, format_keys, generate_key
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.cli.main import build_parser, main
from statecodec.config import codec_from_env
from tests.codecs import flip

KEY, OTHER = generate_key(), generate_key()
KEYS = format_keys([KEY])
PAYLOAD = b'{"cart": "secret-cart-contents"}'
TOKEN = AESGCMCodec([KEY]).seal(PAYLOAD)
SECRETS = (KEYS, format_keys([OTHER]), "secret-cart")
RING = {"STATECODEC_KEYS": KEYS}
NO_KMS = ("--endpoint-url", "http://127.0.0.1:9")
STATECODEC = str(Path(sys.executable).with_name("statecodec"))
Run = Callable[..., tuple[int, bytes, str]]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]) -> Run:
    """Runs the command line with `stdin` and `env`; returns (exit code, stdout bytes, stderr text)."""
    for name in [name for name in os.environ if name.startswith("STATECODEC_")]:
        monkeypatch.delenv(name)

    def run(*argv: str, stdin: bytes | None = b"", env: dict[str, str] | None = None) -> tuple[int, bytes, str]:
        """`stdin` None: a terminal."""
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin or b"")))
        monkeypatch.setattr(sys.stdin, "isatty", lambda: stdin is None)
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsysbinary.readouterr()
        assert not [secret for secret in SECRETS if secret in err.decode()]  # status and errors never show one
        return code, out, err.decode()

    return run


@pytest.mark.parametrize("payload", [b"", PAYLOAD, b"\x00\xff\r\n trailing newline\n", bytes(range(256)) * 40])
@pytest.mark.parametrize("kind", [None, "xaesgcm", "jws"])
def test_seal_unseal_round_trip_is_byte_exact(cli: Run, payload: bytes, kind: str | None) -> None:
    flags = ["--codec", kind] if kind else []
    code, out, err = cli("seal", *flags, stdin=payload, env={"STATECODEC_KEYS": KEYS})
    assert (code, err, out[-1:]) == (0, "", b"\n")
    token = out.decode().strip()
    assert codec_from_env({"STATECODEC_KEYS": KEYS, "STATECODEC_CODEC": kind or "aesgcm"}).unseal(token) == payload
    assert cli("unseal", *flags, stdin=out) == (0, payload, "")
    assert cli("unseal", token, *flags) == (0, payload, "")
    # --json, as every command takes it: one object; the payload exactly, and as text when it is UTF-8.
    code, out, _ = cli("seal", "--json", *flags, stdin=payload)
    doc = json.loads(cli("unseal", "--json", json.loads(out)["token"], *flags)[1])
    assert b64u_decode(doc["payload_base64url"]) == payload
    assert doc["payload"] == (None if b"\xff" in payload else payload.decode())


def test_flags_and_config_files_override_the_settings_a_server_reads(cli: Run, tmp_path: Path) -> None:
    (tmp_path / "keys.txt").write_text(format_keys([OTHER, KEY]))
    env = {"STATECODEC_KEYS": format_keys([generate_key()]), "STATECODEC_JWE_ALG": "A256KW"}
    code, out, _ = cli("seal", "--keys-file", str(tmp_path / "keys.txt"), "--codec", "jwe", stdin=PAYLOAD, env=env)
    server = {"STATECODEC_CODEC": "jwe", "STATECODEC_JWE_ALG": "A256KW", "STATECODEC_KEYS_FILE": f"{tmp_path}/keys.txt"}
    assert (code, codec_from_env(server).unseal(out.decode().strip())) == (0, PAYLOAD)
    assert json.loads(b64u_decode(out.decode().split(".")[0]))["alg"] == "A256KW"
    conf = tmp_path / "statecodec.json"
    conf.write_text(json.dumps({"STATECODEC_CODEC": "xaesgcm", "STATECODEC_KEYS_FILE": "keys.txt"}))
    code, out, _ = cli("seal", "--config", str(conf), stdin=PAYLOAD)
    assert (code, XAESGCMCodec([OTHER, KEY]).unseal(out.decode().strip())) == (0, PAYLOAD)
    assert cli("unseal", "--config", str(conf), stdin=out) == (0, PAYLOAD, "")


@pytest.mark.parametrize(
    ("token", "flags", "env", "reason"),
    [
        (flip(TOKEN), [], {}, "seal"),
        (AESGCMCodec([OTHER]).seal(PAYLOAD), [], {}, "unknown_key"),
        ("x" * 300, ["--max-token-length", "100"], {}, "oversized"),
        (TOKEN, [], {"STATECODEC_MAX_TOKEN_LENGTH": str(len(TOKEN) - 1)}, "oversized"),
        (TOKEN, ["--max-token-length", str(len(TOKEN) - 1)], {"STATECODEC_MAX_TOKEN_LENGTH": "99999"}, "oversized"),
        ("-", [], {}, "malformed"),  # stdin that is not ASCII
    ],
    ids=["tampered", "unknown-key", "flag-cap", "setting-cap", "flag-over-setting", "stdin-not-ascii"],
)
def test_a_refused_token_exits_1_with_its_reason_alone(
    cli: Run, token: str, flags: list[str], env: dict[str, str], reason: str
) -> None:
    code, out, err = cli("unseal", *flags, token, stdin=b"\xff\xfe", env={"STATECODEC_KEYS": KEYS, **env})
    assert (code, out, err) == (1, b"", f"statecodec unseal: invalid token: {reason}\n")


@pytest.mark.parametrize(
    ("argv", "env", "fragment"),
    [
        (["seal"], {}, "no codec configured"),
        (["unseal", "not a token!"], {}, "no codec configured"),  # the configuration is reported first
        (["unseal", "not a token!", "--codec", "aesgcm"], {}, "no keys configured"),
        (["seal"], {"STATECODEC_KEYS": "secret-cart-not-base64!"}, "base64url"),
        (["seal"], {"STATECODEC_KEYS": KEY.hex()}, "seal: STATECODEC_KEYS: key 0 is not unpadded base64url: it looks"),
        (["seal", "--keys-file", "/nonexistent/keys"], {}, "cannot read --keys-file (STATECODEC_KEYS_FILE)"),
        (["seal", "--config", "/nonexistent/c.json", "--codec", "aesgcm"], {}, "go in the --config file"),
        (["seal", "--codec", "rot13"], {"STATECODEC_KEYS": KEYS}, "--codec (STATECODEC_CODEC)='rot13' is unknown"),
        (["seal", "--max-token-length", "0"], {"STATECODEC_KEYS": KEYS}, "(STATECODEC_MAX_TOKEN_LENGTH) must be"),
        (["unseal", TOKEN, "--max-token-length", "+5"], {"STATECODEC_KEYS": KEYS},
         "--max-token-length (STATECODEC_MAX_TOKEN_LENGTH) must"),
        (["seal", "--max-token-length", "60"], {"STATECODEC_KEYS": KEYS}, "exceeds"),  # the payload's token
        (["keygen", "-n", "0"], {}, "--count must be at least 1"),
        (["unseal", "--keys-file", "/nonexistent/k", TOKEN], {}, "cannot read --keys-file (STATECODEC_KEYS_FILE) /non"),
        *[
            (argv, {"STATECODEC_KMS_AUDIENSE": "billing"}, "unknown setting STATECODEC_KMS_AUDIENSE; did you mean")
            for argv in (["unseal", TOKEN], ["kms", "new-data-key", "--provider", "aws", "--key-id", "k"])
        ],
        (["rotate", "plan", "--generate-new"], {"STATECODEC_KEYS": format_keys([KEY, OTHER])}, "holds 2 keys"),
        # `--opt=VALUE`: a key may begin with "-", which argparse would read as an option
        (["rotate", "plan", f"--old-key={KEYS}", "--generate-new", "--ids-only"], {}, "keygen > new.key"),
        (["rotate", "plan", "--old-key", "not a key", f"--new-key={KEYS}"], {}, "base64url"),
        (["rotate", "plan", "--old-id", "3d7ec38c", "--generate-new"], {}, "--old-id and --new-id go together"),
        (["rotate", "check", "missing.json"], {}, "cannot read"),
        (["revoke", "--all"], {"STATECODEC_STORE_URL": "redis://127.0.0.1:1/0"},
         "no keys configured: set STATECODEC_STORE_KEY to one base64url key (generate one with `statecodec keygen`)"),
        (["kms", "new-data-key", "--provider", "aws", "--key-id", "k", "--context", "x"], {},
         "--context (STATECODEC_KMS_CONTEXT): context must be comma-separated key=value pairs"),
        (["kms", "new-data-key", "--provider", "vault", "--vault-addr", "vault:8200", "--vault-key", "k"], {},
         "--vault-addr (STATECODEC_VAULT_ADDR) (or VAULT_ADDR): the Vault address must be http(s)://host[:port]"),
        # The ring a server reads is not this command's: it reaches the (absent) KMS.
        (["kms", "new-data-key", "--provider", "aws", "--key-id", "alias/k", "--region", "eu-west-1", *NO_KMS],
         {**RING, "AWS_ACCESS_KEY_ID": "AKIATEST", "AWS_SECRET_ACCESS_KEY": "x"}, "in eu-west-1: KMS unreachable"),
    ],
)
def test_configuration_errors_exit_2_with_one_line_naming_what_the_user_wrote(
    cli: Run, argv: list[str], env: dict[str, str], fragment: str
) -> None:
    code, out, err = cli(*argv, stdin=PAYLOAD, env=env)
    assert (code, out, err.count("\n")) == (2, b"", 1), err
    assert err.startswith(f"statecodec {argv[0]}: ")
    assert fragment in err


@pytest.mark.parametrize(
    ("argv", "command"),
    [(["unseal", TOKEN, "extra"], "unseal"), (["rotate", "status", "--bogus"], "rotate status"),
     (["keygen", "x"], "keygen")],
)
def test_a_stray_argument_is_reported_with_the_usage_of_the_command_it_follows(
    cli: Run, argv: list[str], command: str
) -> None:
    code, out, err = cli(*argv, env=RING)
    assert (code, out) == (2, b"")
    assert err.startswith(f"usage: statecodec {command} [-h]"), err
    assert err.endswith(f"statecodec {command}: error: unrecognized arguments: {argv[-1]}\n")


def test_rotate_status_without_a_store_asks_for_the_fleets_redis_url_not_memory(cli: Run, tmp_path: Path) -> None:
    (keys := tmp_path / "keys.txt").write_text(KEYS)
    for env in ({}, {"STATECODEC_STORE_URL": "memory"}):
        code, out, err = cli("rotate", "status", "--keys-file", str(keys), env=env)
        assert (code, out) == (2, b"")
        assert err.startswith("statecodec rotate: STATECODEC_STORE_URL"), err
        assert err.endswith("; set it to the redis:// URL the servers use\n")
        assert "or memory" not in err


def test_seal_reports_the_payload_size_it_was_given_and_unseal_on_a_terminal_what_it_needs(cli: Run) -> None:
    code, _, err = cli("seal", stdin=b"x" * 1_000_000, env={"STATECODEC_KEYS": KEYS})
    assert (code, err.startswith("statecodec seal: payload of 1000000 bytes exceeds the ")) == (2, True)
    code, out, err = cli("unseal", stdin=None)
    assert (code, out) == (2, b"")
    assert err == "statecodec unseal: no TOKEN given and stdin is a terminal: pass the token, or pipe it in\n"


STORE = {"STATECODEC_STORE_URL": "redis://127.0.0.1:1/0", "STATECODEC_STORE_KEY": format_keys([OTHER])}
AWS = {"STATECODEC_CODEC": "aws-kms", "STATECODEC_AWS_KMS_KEY_ID": "alias/k", "STATECODEC_WRAPPED_KEYS": "AAAA"}


@pytest.mark.parametrize(
    ("argv", "env", "package", "extra"),
    [
        (["kms", "new-data-key", "--provider", "aws", "--key-id", "alias/k"], {}, "boto3", "aws"),
        (["check"], AWS, "boto3", "aws"),
        (["check"], {"STATECODEC_KEYS": KEYS, **STORE}, "redis", "redis"),
        (["check"], {"STATECODEC_KEYS": KEYS, **STORE, "STATECODEC_RETRY_SAFE": "on"}, "rfc8785", "mcp"),
        (["revoke", "--all"], STORE, "redis", "redis"),
        (["store", "check"], STORE, "redis", "redis"),
    ],
)
def test_an_optional_extra_missing_is_one_line_naming_it_and_exit_2(
    cli: Run, monkeypatch: pytest.MonkeyPatch, argv: list[str], env: dict[str, str], package: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # as if not installed, and the modules that import it unloaded
    loaded = ("statecodec.providers.", "statecodec.redis")
    for name in [m for m in sys.modules if m.startswith(loaded)]:
        monkeypatch.delitem(sys.modules, name)
    code, _, err = cli(*argv, env=env)
    assert (code, err.count("\n")) == (2, 1), err
    assert f"pip install 'statecodec[{extra}]'" in err


@pytest.mark.parametrize(
    "pipeline", ["statecodec rotate plan --generate-new | head -1", "statecodec keygen -n 100000 | head -c 10"]
)
def test_a_reader_that_goes_away_stops_the_command_quietly(pipeline: str, tmp_path: Path) -> None:
    env = {**os.environ, "STATECODEC_KEYS": KEYS, "PATH": f"{Path(STATECODEC).parent}{os.pathsep}{os.environ['PATH']}"}
    script = f"{pipeline} > /dev/null; echo $((PIPESTATUS[0]))"
    result = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert "Traceback" not in result.stderr
    assert "Error" not in result.stderr
    assert result.stdout.strip() in {"0", "141"}  # done before the reader left, or stopped as `yes | head` is


def _parsers(parser: argparse.ArgumentParser, path: str = "statecodec") -> Iterator[tuple[str, Any]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{path} {name}", sub
                yield from _parsers(sub, f"{path} {name}")


PARSERS = list(_parsers(build_parser()))


@pytest.mark.parametrize(("command", "parser"), PARSERS, ids=[command for command, _ in PARSERS])
def test_every_command_help_opens_with_a_description_for_its_user(command: str, parser: Any) -> None:
    text = parser.format_help()
    assert parser.description, command
    assert "``" not in text, command


def test_output_files_are_new_owner_only_and_never_overwritten(cli: Run, tmp_path: Path) -> None:
    path, old = tmp_path / "new.key", tmp_path / "old.key"
    old_umask = os.umask(0)  # the mode must not depend on the caller's umask
    try:
        code, out, err = cli("keygen", "-n", "2", "--output", str(path))
    finally:
        os.umask(old_umask)
    text = path.read_text()  # an existing path (docs/cli.md runs that case) and a dangling link are refused
    assert (code, out, stat.S_IMODE(path.stat().st_mode), len(KeyRing.parse(text))) == (0, b"", 0o600, 2)
    assert "wrote 2 key(s)" in err
    assert text not in err
    (tmp_path / "link.key").symlink_to(tmp_path / "elsewhere.key")
    assert cli("keygen", "--output", str(tmp_path / "link.key"))[0] == 2
    assert not (tmp_path / "elsewhere.key").exists()
    old.write_text(KEYS)
    plan = tmp_path / "plan.json"
    code, out, err = cli("rotate", "plan", "--old-file", str(old), "--generate-new", "--json", "--output", str(plan))
    assert (code, out, "SECRET" in err, stat.S_IMODE(plan.stat().st_mode)) == (0, b"", False, 0o600)
    assert KEYS in json.loads(plan.read_text())["phases"][0]["STATECODEC_KEYS"]
    assert cli("rotate", "plan", "--old-file", str(old), "--generate-new", "--output", str(plan))[0] == 2


def _report(cli: Run, *argv: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, object], str]:
    code, out, err = cli("check", "--json", *argv, env=env)
    return code, json.loads(out), err


def test_check_reports_a_ready_instance_in_text_and_json(cli: Run) -> None:
    ids = list(AESGCMCodec([KEY, OTHER]).key_ids)
    code, doc, err = _report(cli, "--instance", "web-1", env={"STATECODEC_KEYS": format_keys([KEY, OTHER])})
    assert (code, err) == (0, "")
    expected = {"schema": "statecodec-check/1", "instance": "web-1", "ready": True, "status": "ready"}
    expected |= {"kind": "aesgcm", "codec": "AESGCMCodec", "key_ids": ids, "primary_key_id": ids[0]}
    assert doc == {**expected, "provider": None, "key_name": None, "context": None, "error": None}
    code, out, err = cli("check")
    assert (code, err) == (0, "")
    assert {"status          ready", "kind            aesgcm", f"key_ids         {', '.join(ids)}"} <= set(
        out.decode().splitlines()
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({**STORE, "STATECODEC_STORE_TIMEOUT": "abc"}, "STORE_TIMEOUT must be a number of seconds more than 0"),
        ({**STORE, "STATECODEC_STORE_KEY": "short"}, "STATECODEC_STORE_KEY: key 0 is not unpadded base64url"),
        ({**STORE, "STATECODEC_STORE_URL": "http://store:6379"}, "STORE_URL must be memory or a URL starting redis://"),
        ({**STORE, "STATECODEC_STORE_ON_ERROR": "maybe"}, "STORE_ON_ERROR) must be refuse (the default) or accept"),
        ({"STATECODEC_STORE_KEY": format_keys([OTHER])}, "STATECODEC_STORE_URL is not set"),
        ({"STATECODEC_RELOAD_INTERVAL": "5"}, "STATECODEC_RELOAD_INTERVAL follows key files"),  # an inline ring
        ({**STORE, "STATECODEC_RETRY_SAFE": "yes"}, "STATECODEC_RETRY_SAFE must be on or off"),
        ({**STORE, "STATECODEC_RETRY_RESULT_MAX": "0"}, "STATECODEC_RETRY_RESULT_MAX must be a whole number"),
    ],
    ids=["store-timeout", "store-key", "store-url", "on-error", "half-a-store", "reload-no-file", "retry", "cap"],
)
def test_check_exits_2_on_what_would_stop_the_server_at_start_up(
    cli: Run, env: dict[str, str], expected: str
) -> None:
    pytest.importorskip("redis")  # a typo and a bad STATECODEC_TTL: docs/cli.md runs them
    code, doc, err = _report(cli, "--instance", "web-1", env={"STATECODEC_KEYS": KEYS, **env})
    assert (code, doc["ready"], doc["status"]) == (2, False, "misconfigured")
    assert err == f"statecodec check: {doc['error']}\n"
    assert expected in str(doc["error"])
    assert cli("check")[0] == 2
    if "STATECODEC_STORE_URL" in env:  # the same settings, spelt right: ready, the store never contacted
        assert cli("check", env={**STORE, **dict.fromkeys(set(env) - set(STORE), "")})[0] == 0


def test_check_of_a_reloading_codec_reporting_to_a_store_needs_no_store_key(cli: Run, tmp_path: Path) -> None:
    (ring := tmp_path / "ring").write_text(KEYS)  # its fleet registry reads the store's address alone, as it starts
    env = {"STATECODEC_KEYS_FILE": str(ring), "STATECODEC_RELOAD_INTERVAL": "5", "STATECODEC_STORE_URL": "memory"}
    assert cli("check", env=env)[0] == 0
    assert cli("check", env={"STATECODEC_STORE_URL": "http://store:6379"})[0] == 2  # which is still checked


def test_check_is_not_ready_when_the_probe_fails(cli: Run, tmp_path: Path) -> None:
    # When the provider refuses: tests/integration/test_check_aws.py.
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    # A sealing-only JWE codec (a public first key) cannot open its own probe: it is not ready to serve.
    public = X25519PrivateKey.generate().public_key().public_bytes_raw()
    jwk = {"kty": "OKP", "crv": "X25519", "x": b64u_encode(public), "kid": "p"}
    (tmp_path / "set.json").write_text(json.dumps({"keys": [jwk]}))
    conf = tmp_path / "c.json"
    settings = {"STATECODEC_CODEC": "jwe", "STATECODEC_JWE_ALG": "ECDH-ES+A256KW", "STATECODEC_JWKS_FILE": "set.json"}
    conf.write_text(json.dumps(settings))
    code, doc, _ = _report(cli, "--config", str(conf))
    assert (code, doc["status"], doc["kind"]) == (1, "not ready", "jwe")
    assert str(doc["error"]).startswith("the probe token was refused: ")


def test_rotate_check_reads_the_check_reports_of_a_fleet(cli: Run, tmp_path: Path) -> None:
    """Files, concatenated reports, a report twice: docs/cli.md and docs/rotation.md run them; here the rest."""
    (tmp_path / "fleet.json").write_text(json.dumps({"instances": {"web-1": ["01", "02"], "web-2": ["01"]}}))
    code, out, _ = cli("rotate", "check", str(tmp_path / "fleet.json"), "--in-flight", "03", "--json")
    finding = {"instance": None, "key_id": "03", "refused_by": ["web-1", "web-2"], "in_flight": True}
    assert (code, json.loads(out)["findings"]) == (1, [finding])
    reports = {}
    for name, ring in (("web-1", [KEY, OTHER]), ("web-2", [OTHER, KEY]), ("web-3", [KEY])):
        code, reports[name], _ = cli("check", "--json", "--instance", name, env={"STATECODEC_KEYS": format_keys(ring)})
    # A JSON array of reports; web-2 seals under OTHER, which web-3 cannot open: unsafe, and exit 1.
    code, out, _ = cli("rotate", "check", "-", "--json", stdin=b"[" + b",".join(reports.values()) + b"]")
    doc = json.loads(out)
    assert (code, doc["safe"], doc["instances"], doc["unsafe_instances"]) == (1, False, list(reports), ["web-2"])
    changes: list[tuple[dict[str, object], str]] = [
        ({"instance": None}, "without an instance name"),
        ({"ready": False, "status": "not ready", "error": "down"}, "instance 'web-1' is not ready (down)"),
        ({"schema": "other/1"}, "expected a report of `statecodec check --json`"),
    ]
    for change, fragment in changes:
        report = json.dumps({**json.loads(reports["web-1"]), **change}).encode()
        code, out, err = cli("rotate", "check", "-", stdin=report)
        assert (code, out, fragment in err) == (2, b"", True)


@pytest.mark.parametrize(
    ("argv", "env", "error", "reason", "status"),
    [
        (["unseal", "--json", "not a token!"], {"STATECODEC_KEYS": KEYS}, "invalid_token", "malformed", 1),
        (["unseal", "--json", TOKEN, "--codec", "aesgcm"], {}, "configuration", None, 2),
        (["rotate", "check", "-", "--json"], {}, "configuration", None, 2),
        (["unseal", "--json", flip(TOKEN)], {"STATECODEC_KEYS": KEYS}, "invalid_token", "seal", 1),
        (["seal", "--json", "--max-token-length", "60"], {"STATECODEC_KEYS": KEYS}, "seal", None, 2),
    ],
)
def test_errors_with_json_are_one_json_object_on_stdout(
    cli: Run, argv: list[str], env: dict[str, str], error: str, reason: str | None, status: int
) -> None:
    code, out, err = cli(*argv, env=env, stdin=PAYLOAD)
    doc = json.loads(out)
    assert (code, doc["error"], doc["reason"], doc["exit_status"]) == (status, error, reason, status)
    assert doc["command"] == argv[0]
    assert err == f"statecodec {argv[0]}: {doc['message']}\n"


def test_rotate_plan_takes_the_servers_ttl_and_prints_secrets_only_with_a_warning(cli: Run, tmp_path: Path) -> None:
    (tmp_path / "new.key").write_text(format_keys([OTHER]) + "\n")
    env = {**RING, "STATECODEC_TTL": "600"}
    code, out, err = cli("rotate", "plan", "--new-file", str(tmp_path / "new.key"), env=env)
    assert (code, "SECRET" in err, "660 s" in out.decode()) == (0, True, True)
    values = [line.split("=", 1)[1] for line in out.decode().splitlines() if "STATECODEC_KEYS=" in line]
    assert [KeyRing.parse(v) for v in values] == [KeyRing([KEY, OTHER]), KeyRing([OTHER, KEY]), KeyRing([OTHER])]
    argv = ("rotate", "plan", "--old-id", "a1b2c3d4", "--new-id", "E5F6A7B8", "--json")
    code, out, err = cli(*argv, env={"STATECODEC_TTL": "120"})
    assert (code, err, json.loads(out)["ttl"], json.loads(out)["phases"][1]["key_ids"]) == (
        0, "", 120, ["e5f6a7b8", "a1b2c3d4"])  # no secrets: no warning
    assert json.loads(cli(*argv, "--ttl", "30")[1])["ttl"] == 30
    code, _, err = cli(*argv, env={"STATECODEC_TTL": "soon"})
    assert (code, "STATECODEC_TTL must be whole seconds" in err) == (2, True)
