"""`statecodec check` against a real KMS (moto), counting every KMS call: a ready instance costs exactly the one
unwrap a server makes at start-up. (A misspelt member never reaches the provider: tests/test_config.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.integration.kms_support import run_cli
from tests.plugins.aws import REGION, KmsProxy, MotoServer
from tests.test_config import write_json

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(moto_server: MotoServer, kms_proxy: KmsProxy, aws_credentials: None) -> dict[str, str]:
    """An aws-kms configuration through the counting proxy, with one wrapped data key provisioned."""
    arn, _ = moto_server.create_key()
    flags = ("--provider", "aws", "--key-id", arn, "--region", REGION, "--endpoint-url", kms_proxy.endpoint)
    code, out, err = run_cli("kms", "new-data-key", *flags, "--audience", "billing")
    assert code == 0, err
    kms_proxy.reset()
    return {
        "STATECODEC_CODEC": "aws-kms",
        "STATECODEC_AWS_KMS_KEY_ID": arn,
        "STATECODEC_AWS_REGION": REGION,
        "STATECODEC_AWS_KMS_ENDPOINT": kms_proxy.endpoint,
        "STATECODEC_WRAPPED_KEYS": out.strip(),
        "STATECODEC_KMS_AUDIENCE": "billing",
    }


def test_check_reports_a_ready_kms_instance(tmp_path: Path, settings: dict[str, str], kms_proxy: KmsProxy) -> None:
    config = str(write_json(tmp_path / "c.json", settings))
    code, out, err = run_cli("check", "--config", config, "--json", "--instance", "web-1")
    report = json.loads(out)
    assert (code, err, report["status"], report["kind"]) == (0, "", "ready", "aws-kms")
    assert report["codec"] == "EnvelopeCodec"
    arn = settings["STATECODEC_AWS_KMS_KEY_ID"]
    assert report["key_name"] == arn
    assert arn in report["provider"]
    assert report["primary_key_id"] == report["key_ids"][0]
    assert dict(kms_proxy.calls) == {"Decrypt": 1}  # the start-up unwrap; the probe seals locally
    assert settings["STATECODEC_WRAPPED_KEYS"] not in out


def test_check_is_not_ready_when_kms_refuses(tmp_path: Path, settings: dict[str, str], kms_proxy: KmsProxy) -> None:
    kms_proxy.fail_next(1, "AccessDeniedException", message="not allowed")
    code, out, err = run_cli("check", "--config", str(write_json(tmp_path / "c.json", settings)))
    assert code == 1
    assert "status          not ready" in out
    assert "access denied" in err
