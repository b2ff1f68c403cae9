"""`statecodec vectors verify`: the frozen files hold, a port's file is checked, any drift is named.

Threat: a port that drifts from a format, or a file that is not what it
claims, must not pass; and a file is input, so a hostile one gets a message
or a failed entry, never a crash, and no output repeats a token or a key.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from statecodec.cli.main import main
from statecodec.errors import ConfigurationError
from statecodec.vectors import verify_vectors

VECTORS = Path(__file__).parent / "vectors"
OFFLINE = sorted(p for p in VECTORS.glob("*.json") if p.name != "vault_transit.json")
SCHEMA = '"schema": "statecodec-vectors/1"'


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["vectors", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def refusals(data: dict[str, Any]) -> str:
    return "refusals" if data["codec"] == "binding" else "invalid"


def test_every_frozen_file_holds(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "verify", *map(str, OFFLINE))
    assert (code, err) == (0, "")
    expected = []
    for path in OFFLINE:
        data = load(path)
        counts = f"{len(data['valid'])} valid, {len(data[refusals(data)])} invalid"
        expected.append(f"{path}: {data['codec']}: {counts}: all hold")
    assert out.splitlines() == expected
    assert {load(p)["codec"] for p in OFFLINE} == {"aesgcm", "xaesgcm", "envelope", "binding", "jwe", "jws"}


def test_vault_transit_file_is_refused_as_needing_a_vault(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "verify", str(VECTORS / "vault_transit.json"))
    assert (code, out) == (2, "")
    assert "tokens open only inside Vault: restore the file's key backups (transit/restore)" in err


def _one_char_changed(token: str) -> str:
    # A character of the last segment, away from its end, so the text stays canonical base64url.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    pos = len(token) - 5
    return token[:pos] + alphabet[(alphabet.index(token[pos]) + 1) % 64] + token[pos + 1 :]


@pytest.mark.parametrize("path", OFFLINE, ids=lambda p: p.stem)
def test_drift_in_any_file_is_named_without_its_token(
    path: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = load(path)
    valid, key = data["valid"][-1], refusals(data)
    valid["token"] = _one_char_changed(valid["token"])
    i, refused = next((i, v) for i, v in enumerate(data[key]) if v["reason"] is not None)
    pinned, refused["reason"] = refused["reason"], "purpose" if refused["reason"] != "purpose" else "seal"
    code, out, err = run(capsys, "verify", str(write(tmp_path / path.name, data)))
    assert (code, err) == (1, "")
    lines = out.splitlines()
    assert lines[0].endswith(": 2 failures")
    n = len(data["valid"]) - 1
    assert lines[1] == f"  - valid[{n}] {valid['name']!r}: refused with seal, expected it to open"
    label = f"{key}[{i}] {refused.get('name', refused.get('vector'))!r}"
    assert lines[2] == f"  - {label}: refused with {pinned}, expected {refused['reason']}"
    assert valid["token"] not in out


def test_an_accepted_invalid_entry_and_another_payload_fail(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = load(VECTORS / "aesgcm.json")
    data["invalid"][0]["token"] = data["valid"][1]["token"]
    data["valid"][1]["payload"] += "00"
    code, out, _ = run(capsys, "verify", str(write(tmp_path / "a.json", data)))
    assert code == 1
    assert out.splitlines()[1:] == [
        f"  - valid[1] {data['valid'][1]['name']!r}: opened to another payload",
        f"  - invalid[0] {data['invalid'][0]['name']!r}: was accepted",
    ]


def test_a_jws_entry_that_does_not_re_sign_fails(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A token that opens under the ring but was not signed by ``ring[sealed_with]`` is named."""
    data = load(VECTORS / "jws.json")
    v = next(v for v in data["valid"] if v["name"] == "HS256 over a ring")
    v["ring"], v["sealed_with"] = [*v["ring"], b64u(bytes(range(64, 96)))], 1
    data["valid"] = [v]
    code, out, _ = run(capsys, "verify", str(write(tmp_path / "j.json", data)))
    assert code == 1
    assert out.splitlines()[1] == f"  - valid[0] {v['name']!r}: signing payload again gives another token"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "cannot read"),
        ("{", "is not UTF-8 JSON"),
        ("[]", 'a JSON object with "schema": "statecodec-vectors/1"'),
        ('{"schema": "statecodec-vectors/0", "codec": "aesgcm"}', '"schema": "statecodec-vectors/1"'),
        (f'{{{SCHEMA}, "codec": "rot13"}}', '"codec" must be one of aesgcm, binding'),
        (f'{{{SCHEMA}, "codec": "jws", "valid": {{}}}}', '"valid" and "invalid" must be JSON arrays'),
        (f'{{{SCHEMA}, "codec": "binding", "valid": []}}', '"valid" and "refusals" must be JSON arrays'),
    ],
)
def test_a_file_not_in_the_schema_exits_2(
    text: str | None, message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "v.json"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    code, out, err = run(capsys, "verify", str(OFFLINE[0]), str(path))
    assert code == 2
    assert out.endswith(": all hold\n")
    assert err.startswith(f"statecodec: {path}: ")
    assert message in err


def test_an_unusable_entry_is_a_named_failure(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = load(VECTORS / "envelope.json")
    del data["valid"][0]["context"]
    data["invalid"][0]["wrapped_keys"] = data["invalid"][0]["wrapped_keys"][:1]
    data["invalid"][1] = []
    code, out, _ = run(capsys, "verify", str(write(tmp_path / "e.json", data)))
    assert code == 1
    assert out.splitlines()[1:] == [
        f"  - valid[0] {data['valid'][0]['name']!r}: missing member 'context'",
        f"  - invalid[0] {data['invalid'][0]['name']!r}: not usable (ValueError)",
        "  - invalid[1]: not a JSON object",
    ]


def test_a_file_without_entries_does_not_pass(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = {**load(VECTORS / "aesgcm.json"), "valid": [], "invalid": []}
    code, out, _ = run(capsys, "verify", str(write(tmp_path / "empty.json", data)))
    assert code == 1
    assert out.endswith(": aesgcm: 0 valid, 0 invalid: no vectors\n")


ODD_VALUES: list[object] = [None, -1, 2**70, 1.5, True, "", "zz", "same", [], ["AAAA"], {}, {"kty": 5}]


@pytest.mark.parametrize("path", OFFLINE, ids=lambda p: p.stem)
def test_hostile_members_give_a_message_or_a_failure_never_a_crash(path: Path) -> None:
    data = load(path)
    targets: list[tuple[str | None, str]] = [(None, k) for k in data]
    targets += [(a, k) for a in ("valid", refusals(data)) for k in data[a][0]]
    for array, member in targets:
        for odd in ODD_VALUES:
            mutated = json.loads(json.dumps(data))
            (mutated if array is None else mutated[array][0])[member] = odd
            try:
                report = verify_vectors(mutated)
            except ConfigurationError:
                continue
            assert report.valid + report.invalid > 0, (array, member, odd)


def test_usage_and_no_generator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vectors"]) == 2
    assert "verify" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["vectors", "generate", "aesgcm"])
    assert info.value.code == 2


# -- a port written from docs/formats.md alone ----------------------------------------------------------


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _port_aesgcm(label: bytes) -> dict[str, Any]:
    """A second implementation of format 0x01 from the documented layout, as a port would write it."""
    secret, nonce = bytes(range(0x60, 0x80)), bytes(range(0x10, 0x1C))
    kid = HKDF(algorithm=SHA256(), length=4, salt=None, info=b"statecodec/v1/key-id").derive(secret)
    key = HKDF(algorithm=SHA256(), length=32, salt=None, info=label).derive(secret)
    valid, invalid = [], []
    for i, payload in enumerate([b"", b"port", "état".encode() * 40]):
        raw = b"\x01" + kid + nonce + AESGCM(key).encrypt(nonce, payload, b"\x01" + kid)
        valid.append({"name": f"port {i}", "keys": [b64u(secret)], "payload": payload.hex(), "token": b64u(raw)})
        tampered = b64u(raw[:-1] + bytes([raw[-1] ^ 1]))
        invalid.append({"name": f"port {i} tag flipped", "keys": [b64u(secret)], "token": tampered, "reason": "seal"})
    return {"schema": "statecodec-vectors/1", "codec": "aesgcm", "valid": valid, "invalid": invalid}


def test_a_port_written_from_the_docs_holds(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path / "port.json", _port_aesgcm(b"statecodec/v1/aes-256-gcm"))
    assert run(capsys, "verify", str(path)) == (0, f"{path}: aesgcm: 3 valid, 3 invalid: all hold\n", "")


def test_a_port_with_a_drifted_label_fails_on_every_valid_entry(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path / "port.json", _port_aesgcm(b"statecodec/v1/aes-256-gcm "))
    code, out, _ = run(capsys, "verify", str(path))
    assert code == 1
    # Its tampered tokens are still refused as pinned: only the valid entries expose the drift.
    assert out.splitlines() == [
        f"{path}: aesgcm: 3 valid, 3 invalid: 3 failures",
        *(f"  - valid[{i}] 'port {i}': refused with seal, expected it to open" for i in range(3)),
    ]
