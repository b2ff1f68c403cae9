"""`statecodec vectors`: every committed file verifies, every generated file verifies, tampering is named."""

from __future__ import annotations

import base64
import hmac
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from statecodec._encoding import b64u_decode
from statecodec.cli.main import main
from statecodec.errors import ConfigurationError, Reason
from statecodec.jose import derived_jwk
from statecodec.vectors import GENERATORS, VERIFIERS, dump_vectors, generate_vectors, verify_vectors

VECTORS = Path(__file__).parent / "vectors"
OFFLINE = sorted(p for p in VECTORS.glob("*.json") if p.name != "vault_transit.json")
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["vectors", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    return path


def invalid_key(data: dict[str, Any]) -> str:
    return "refusals" if data["codec"] == "binding" else "invalid"


# -- the committed files ---------------------------------------------------------------------------


def test_offline_files_cover_every_verifier() -> None:
    assert {load(p)["codec"] for p in OFFLINE} == set(VERIFIERS)


def test_every_committed_file_verifies(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "verify", *map(str, OFFLINE))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == len(OFFLINE)
    for path, line in zip(OFFLINE, lines, strict=True):
        data = load(path)
        valid, invalid = len(data["valid"]), len(data[invalid_key(data)])
        assert line.startswith(f"{path}: {data['codec']}: {valid} valid, {invalid} invalid")
        assert line.endswith(": all hold")


def test_vault_transit_file_is_refused_as_needing_a_vault(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "verify", str(VECTORS / "vault_transit.json"))
    assert (code, out) == (2, "")
    assert "only a Vault server can open" in err
    assert "transit/restore" in err


def test_one_bad_file_among_good_ones(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    code, out, err = run(capsys, "verify", str(OFFLINE[0]), str(bad))
    assert code == 2
    assert out.endswith(": all hold\n")
    assert f"{bad}: vectors file {bad} is not UTF-8 JSON" in err


# -- generation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generated_file_verifies(name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / f"{name}.json"
    code, out, _ = run(capsys, "generate", name, "-o", str(path))
    assert code == 0
    assert out == f"{path}: {load(path)['codec']} vectors ({name}) written\n"
    assert path.read_text(encoding="utf-8") == dump_vectors(generate_vectors(name))  # deterministic
    code, out, err = run(capsys, "verify", str(path))
    assert (code, err) == (0, "")
    assert out.endswith(": all hold\n")
    data = load(path)
    assert len(data["valid"]) >= 4
    reasons = {v["reason"] for v in data[invalid_key(data)]}
    assert len(reasons) >= 3


def test_generate_to_stdout_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "generate", "aesgcm")
    assert code == 0
    assert out == (VECTORS / "aesgcm.json").read_text(encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        main(["vectors", "generate", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for name in GENERATORS:
        assert name in text


def test_generate_refuses_an_unknown_codec_and_an_unwritable_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["vectors", "generate", "rot13"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
    code, _, err = run(capsys, "generate", "jws", "-o", str(tmp_path / "missing" / "x.json"))
    assert code == 2
    assert "cannot write" in err


def test_generated_sets_cover_every_configuration() -> None:
    jwe = load_generated("jwe")
    assert {v["alg"] for v in jwe["valid"]} == {"dir", "A256KW", "ECDH-ES+A256KW"}
    assert {v["jwks"][0]["crv"] for v in jwe["valid"] if "ephemeral_key" in v} == {"P-256", "X25519"}
    assert all("randoms" in v for v in jwe["valid"])
    jws = load_generated("jws")
    assert {v["alg"] for v in jws["valid"]} == {"HS256", "EdDSA"}
    assert all(v["deterministic"] for v in jws["valid"])
    binding = load_generated("binding")
    assert {r["reason"] for r in binding["refusals"]} == {
        None,
        "expired",
        "not_yet_valid",
        "principal",
        "binding",
        "audience",
        "purpose",
    }


@pytest.mark.parametrize(
    ("name", "reasons"),
    [
        ("aesgcm", {"malformed", "oversized", "format", "unknown_key", "seal"}),
        ("xaesgcm", {"malformed", "oversized", "format", "unknown_key", "seal"}),
        ("envelope", {"malformed", "oversized", "format", "unknown_key", "seal"}),
        ("jwe", {"malformed", "oversized", "unknown_key", "seal", "alg", "header"}),
        ("jws", {"malformed", "oversized", "unknown_key", "seal", "alg", "header"}),
        ("binding", {None, "expired", "not_yet_valid", "principal", "binding", "audience", "purpose"}),
    ],
)
def test_generated_sets_cover_the_documented_cases(name: str, reasons: set[str | None]) -> None:
    data = load_generated(name)
    assert {v["reason"] for v in data[invalid_key(data)]} == reasons
    payloads = [v["state"].encode().hex() if name == "binding" else v["payload"] for v in data["valid"]]
    assert "" in payloads
    assert any(any(b >= 0x80 for b in bytes.fromhex(p)) for p in payloads)
    ring_based = [v for v in data["valid"] if "keys" in v or "ring" in v or "wrapped_keys" in v]
    assert name == "binding" or any(v["sealed_with"] > 0 for v in ring_based)


def load_generated(name: str) -> dict[str, Any]:
    return json.loads(dump_vectors(generate_vectors(name)))  # type: ignore[no-any-return]


# -- tampering is named ----------------------------------------------------------------------------


def _change_one_char(token: str) -> str:
    # A character in the last segment, away from its end, so the text stays well formed.
    pos = len(token) - 5
    assert token[pos] in ALPHABET
    replacement = ALPHABET[(ALPHABET.index(token[pos]) + 1) % 64]
    return token[:pos] + replacement + token[pos + 1 :]


@pytest.mark.parametrize("path", OFFLINE, ids=lambda p: p.stem)
def test_a_changed_token_character_fails_naming_the_vector(
    path: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = load(path)
    vector = data["valid"][-1]
    vector["token"] = _change_one_char(vector["token"])
    code, out, err = run(capsys, "verify", str(write(tmp_path / path.name, data)))
    assert (code, err) == (1, "")
    lines = out.splitlines()
    assert lines[0].endswith((" 1 failure", " 2 failures", " 3 failures"))
    assert lines[1:]
    assert all(line.startswith(f"  - valid {vector['name']!r}: ") for line in lines[1:])
    assert any("unseal refused it" in line for line in lines[1:])


@pytest.mark.parametrize("path", OFFLINE, ids=lambda p: p.stem)
def test_a_changed_reason_code_fails_naming_the_vector(
    path: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = load(path)
    key = invalid_key(data)
    index, vector = next((i, v) for i, v in enumerate(data[key]) if v["reason"] is not None)
    original = vector["reason"]
    vector["reason"] = Reason.PURPOSE.value if original != Reason.PURPOSE.value else Reason.SEAL.value
    code, out, err = run(capsys, "verify", str(write(tmp_path / path.name, data)))
    assert (code, err) == (1, "")
    lines = out.splitlines()
    assert lines[0].endswith(": 1 failure")
    if key == "refusals":
        assert lines[1].startswith(f"  - refusal 'refusals[{index}] ({vector['vector']} -> {vector['reason']})': ")
    else:
        assert lines[1].startswith(f"  - invalid {vector['name']!r}: ")
    assert lines[1].endswith(f"refused with {original}, expected {vector['reason']}")


def test_failure_output_names_no_derived_key(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The re-derived token and derived keys stay inside: a failure says where, not what."""
    data = load(VECTORS / "jws.json")
    vector = data["valid"][0]
    vector["token"] = _change_one_char(vector["token"])
    vector["derived_jwk"]["k"] = vector["derived_jwk"]["k"][::-1]
    code, out, _ = run(capsys, "verify", str(write(tmp_path / "jws.json", data)))
    assert code == 1
    real = derived_jwk(b64u_decode(vector["ring"][0]), "HS256")["k"]
    assert real not in out
    assert b64u_decode(real).hex() not in out
    assert "derived_jwk differs" in out
    assert "first difference at character" in out


# -- malformed files -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("codec"), "codec must be one of"),
        (lambda d: d.update(codec="rot13"), "codec must be one of"),
        (lambda d: d.update(schema="statecodec-vectors/0"), "schema must be 'statecodec-vectors/1'"),
        (lambda d: d["valid"][0].pop("token"), "valid[0]: missing member(s) ['token']"),
        (lambda d: d["valid"][0].update(payload="XY"), "valid[0].payload must be lowercase hex"),
        (lambda d: d["valid"][0].update(typo=1), "valid[0]: unknown member(s) ['typo']"),
        (lambda d: d["valid"].append(d["valid"][0]), "names must be unique"),
        (lambda d: d["invalid"][0].update(reason="nope"), "invalid[0].reason must be a statecodec reason code"),
        (lambda d: d["valid"][0].pop("ring"), "valid[0]: give exactly one of ring and jwks"),
        (lambda d: d["valid"][0].update(alg="RSA1_5"), "valid[0].alg must be one of dir, A256KW, ECDH-ES+A256KW"),
        (lambda d: d["valid"][0].update(randoms=["00"]), "valid[0].randoms for dir are [12] bytes long"),
    ],
)
def test_a_malformed_file_exits_2_naming_the_member(
    mutate: Any, message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = load(VECTORS / "jwe.json")
    mutate(data)
    path = write(tmp_path / "jwe.json", data)
    code, out, err = run(capsys, "verify", str(path))
    assert (code, out) == (2, "")
    assert err.startswith(f"statecodec: {path}: ")
    assert message in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "cannot read vectors file"),
        ("[]", "vectors file must be a JSON object"),
        ('{"schema": ', "is not UTF-8 JSON"),
    ],
)
def test_an_unreadable_file_exits_2(
    text: str | None, message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "v.json"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    code, out, err = run(capsys, "verify", str(path))
    assert (code, out) == (2, "")
    assert message in err


def test_binding_refusal_naming_no_vector_is_malformed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = load(VECTORS / "binding.json")
    data["refusals"][0]["vector"] = "no such vector"
    code, _, err = run(capsys, "verify", str(write(tmp_path / "b.json", data)))
    assert code == 2
    assert "refusals[0].vector names no valid vector" in err


def test_vectors_without_action_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vectors"]) == 2
    assert "verify" in capsys.readouterr().err


ODD_VALUES: list[object] = [None, -1, 2**70, 1.5, True, "", "zz", "same", [], ["AAAA"], {}, {"kty": 5}]


@pytest.mark.parametrize("path", OFFLINE, ids=lambda p: p.stem)
def test_hostile_members_give_a_message_or_a_report_never_a_crash(path: Path) -> None:
    """A file from elsewhere is input: any member of any kind fails as a named error or a failed vector."""
    data = load(path)
    targets: list[tuple[str | None, str]] = [(None, k) for k in data]
    targets += [(a, k) for a in ("valid", invalid_key(data)) for k in data[a][0]]
    for array, member in targets:
        for odd in ODD_VALUES:
            mutated = json.loads(json.dumps(data))
            (mutated if array is None else mutated[array][0])[member] = odd
            message, checked = "", 0
            try:
                checked = verify_vectors(mutated).checked
            except ConfigurationError as exc:
                message = str(exc)
            assert message or checked > 0, (array, member, odd)


def test_a_file_without_vectors_does_not_pass(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = load(VECTORS / "aesgcm.json")
    data["valid"], data["invalid"] = [], []
    code, out, _ = run(capsys, "verify", str(write(tmp_path / "empty.json", data)))
    assert code == 1
    assert out.endswith(": aesgcm: 0 valid, 0 invalid: no vectors\n")


# -- another implementation's output ---------------------------------------------------------------


def _b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _hkdf(secret: bytes, info: bytes, length: int = 32) -> bytes:
    return HKDF(algorithm=SHA256(), length=length, salt=None, info=info).derive(secret)


def _port_aesgcm(label: bytes) -> dict[str, Any]:
    """A second implementation of the 0x01 format written from docs/formats.md alone, as a port would be."""
    secret, nonce = bytes(range(0x60, 0x80)), bytes(range(0x10, 0x1C))
    kid, key = _hkdf(secret, b"statecodec/v1/key-id", 4), _hkdf(secret, label)
    valid, invalid = [], []
    for i, payload in enumerate([b"", b"port", "état".encode() * 40]):
        header = b"\x01" + kid
        raw = header + nonce + AESGCM(key).encrypt(nonce, payload, header)
        valid.append(
            {
                "name": f"port payload {i}",
                "keys": [_b64u(secret)],
                "sealed_with": 0,
                "key_id": kid.hex(),
                "aead_key": key.hex(),
                "nonce": nonce.hex(),
                "payload": payload.hex(),
                "token": _b64u(raw),
            }
        )
        nonce = bytes(b ^ 0xFF for b in nonce)
        invalid.append(
            {
                "name": f"port tag flipped {i}",
                "keys": [_b64u(secret)],
                "token": _b64u(raw[:-1] + bytes([raw[-1] ^ 1])),
                "reason": "seal",
            }
        )
    return {"schema": "statecodec-vectors/1", "codec": "aesgcm", "valid": valid, "invalid": invalid}


def _port_jws() -> dict[str, Any]:
    """HS256 over a ring, from the documented key derivation and header, with hmac and json alone."""
    secret = bytes(range(0x60, 0x80))
    kid = _hkdf(secret, b"statecodec/v1/key-id", 4).hex()
    key = _hkdf(secret, b"statecodec/v1/jws/HS256")
    h64 = _b64u(json.dumps({"alg": "HS256", "kid": kid}, separators=(",", ":")).encode())
    signing_input = f"{h64}.{_b64u(b'{}')}"
    token = f"{signing_input}.{_b64u(hmac.digest(key, signing_input.encode(), 'sha256'))}"
    ring = [_b64u(secret)]
    return {
        "schema": "statecodec-vectors/1",
        "codec": "jws",
        "description": "written by a port",
        "valid": [
            {
                "name": "port",
                "alg": "HS256",
                "ring": ring,
                "sealed_with": 0,
                "payload": b"{}".hex(),
                "token": token,
                "deterministic": True,
            }
        ],
        "invalid": [
            {
                "name": "port: alg none",
                "alg": "HS256",
                "ring": ring,
                "reason": "alg",
                "token": _b64u(b'{"alg":"none"}') + token[len(h64) :],
            }
        ],
    }


def test_a_port_written_from_the_docs_verifies(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ring = write(tmp_path / "port-aesgcm.json", _port_aesgcm(b"statecodec/v1/aes-256-gcm"))
    jws = write(tmp_path / "port-jws.json", _port_jws())
    code, out, err = run(capsys, "verify", str(ring), str(jws))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"{ring}: aesgcm: 3 valid, 3 invalid: all hold",
        f"{jws}: jws: 1 valid, 1 invalid: all hold",
    ]


def test_a_port_with_a_drifted_label_fails_on_every_valid_vector(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ring = write(tmp_path / "port-aesgcm.json", _port_aesgcm(b"statecodec/v1/aes-256-gcm "))
    code, out, _ = run(capsys, "verify", str(ring))
    assert code == 1
    assert out.splitlines()[0] == f"{ring}: aesgcm: 3 valid, 3 invalid: 9 failures"
    # Its tampered tokens are still refused for the pinned reason: only the valid vectors expose the drift.
    named = {line.split("'")[1] for line in out.splitlines()[1:]}
    assert named == {f"port payload {i}" for i in range(3)}
    for i in range(3):
        assert f"  - valid 'port payload {i}': aead_key differs from the derived AEAD key" in out
        assert f"  - valid 'port payload {i}': unseal refused it (seal)" in out
