"""The command line's exit-code convention: 0 ok, 1 refused token or failed check, 2 usage or configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from statecodec import AESGCMCodec, KeyRing, XAESGCMCodec, format_keys, generate_key
from statecodec.cli.main import main

KEY_TEXT = format_keys([generate_key()])


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("STATECODEC_CODEC", "STATECODEC_KEYS", "STATECODEC_KEYS_FILE", "STATECODEC_MAX_TOKEN_LENGTH"):
        monkeypatch.delenv(var, raising=False)


def _exit_code(argv: list[str]) -> int:
    """`main`'s return value, or the code argparse exits with."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


@pytest.mark.parametrize("count", ["0", "-3"])
def test_keygen_count_below_one_is_a_usage_error(count: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(["keygen", "-n", count]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert "--count must be at least 1" in out.err


@pytest.mark.parametrize("value", ["0", "-1", "+5", "1_000", "abc"])
@pytest.mark.parametrize("command", ["inspect", "unseal"])
def test_a_nonsense_token_cap_is_a_usage_error_without_keys_too(
    command: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    token = AESGCMCodec(KeyRing.generate()).seal(b"state")
    # Before, a cap below one made every token "oversized" and inspect exited 1, as for a refused token.
    assert _exit_code([command, "--max-token-length", value, token]) == 2
    err = capsys.readouterr().err
    assert "--max-token-length" in err
    assert token not in err


def test_seal_with_a_nonsense_cap_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATECODEC_KEYS", KEY_TEXT)
    assert _exit_code(["seal", "--max-token-length", "0"]) == 2


def test_a_positive_cap_still_works(capsys: pytest.CaptureFixture[str]) -> None:
    token = AESGCMCodec(KeyRing.generate()).seal(b"state")
    assert _exit_code(["inspect", "--max-token-length", str(len(token)), token]) == 0
    assert _exit_code(["inspect", "--max-token-length", str(len(token) - 1), token]) == 1
    assert "oversized" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [[], ["rotate"], ["kms"], ["keygen", "-n", "x"], ["inspect"], ["seal", "--codec", "jwe"]],
    ids=["no-command", "rotate-no-action", "kms-no-subcommand", "keygen-not-int", "inspect-no-token", "bad-choice"],
)
def test_incomplete_commands_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(argv) == 2
    assert capsys.readouterr().err


def test_unseal_picks_the_ring_codec_from_the_token_as_its_help_says(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ring = KeyRing.generate()
    monkeypatch.setenv("STATECODEC_KEYS", ring.to_text())
    token = XAESGCMCodec(ring).seal(b"state")
    assert _exit_code(["unseal", token]) == 0
    assert capsys.readouterr().out == "state"
    key_file = tmp_path / "keys.txt"
    key_file.write_text(ring.to_text())
    assert _exit_code(["unseal", "--keys-file", str(key_file), token]) == 0
    assert capsys.readouterr().out == "state"
    # An explicit choice still wins, and the codec alone decides: the other format is refused.
    assert _exit_code(["unseal", "--codec", "aesgcm", token]) == 1
    assert capsys.readouterr().err.strip() == "statecodec unseal: invalid token: format"
    monkeypatch.setenv("STATECODEC_CODEC", "aesgcm")
    assert _exit_code(["unseal", token]) == 1


def test_unseal_reports_configuration_before_a_junk_token(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(["unseal", "not a token!"]) == 2
    assert "no codec configured" in capsys.readouterr().err


def test_kms_check_with_flags_reads_the_wrapped_keys_file_its_error_names(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["kms", "check", "--provider", "aws", "--key-id", "arn:aws:kms:eu-west-1:111122223333:key/x"]
    monkeypatch.delenv("STATECODEC_WRAPPED_KEYS", raising=False)
    monkeypatch.delenv("STATECODEC_WRAPPED_KEYS_FILE", raising=False)
    assert _exit_code(argv) == 2
    assert "STATECODEC_WRAPPED_KEYS_FILE to a file" in capsys.readouterr().err
    wrapped = tmp_path / "wrapped.txt"
    wrapped.write_text("not base64url!\n")
    monkeypatch.setenv("STATECODEC_WRAPPED_KEYS_FILE", str(wrapped))
    # The file is read (and refused for its content) before any KMS call is made.
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err
    assert f"STATECODEC_WRAPPED_KEYS_FILE {wrapped}" in err
    assert "not unpadded base64url" in err


@pytest.mark.parametrize("command", ["inspect", "unseal"])
def test_the_environment_token_cap_holds_when_the_token_picks_the_ring_codec(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ring = KeyRing.generate()
    token = XAESGCMCodec(ring).seal(b"state")
    monkeypatch.setenv("STATECODEC_KEYS", ring.to_text())
    monkeypatch.setenv("STATECODEC_MAX_TOKEN_LENGTH", str(len(token) - 1))
    assert _exit_code([command, token]) == 1
    assert "oversized" in capsys.readouterr().err
    # The flag still overrides the environment.
    assert _exit_code([command, "--max-token-length", str(len(token)), token]) == 0
    monkeypatch.setenv("STATECODEC_MAX_TOKEN_LENGTH", str(len(token)))
    assert _exit_code([command, token]) == 0
