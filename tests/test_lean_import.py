"""`import statecodec` and the command line load no optional package, each checked in a fresh interpreter.

An import-time dependency on the MCP SDK (or a KMS client) costs every process that only seals tokens, and every CLI
command, seconds of start-up; the library's behaviour would depend on what else is installed.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

OPTIONAL_PACKAGES = frozenset(
    {"mcp", "mcp_types", "pydantic", "anyio", "starlette", "httpx", "boto3", "botocore", "google", "grpc", "hvac"}
    | {"requests", "jwcrypto", "jwt", "joserfc", "itsdangerous", "tink", "matplotlib", "hypothesis", "redis", "tqdm"}
    | {"opentelemetry", "pyperf", "rfc8785", "fastmcp"}
)
MODULE_BUDGET = 200
"""Modules `import statecodec` may leave loaded, the interpreter's own and cryptography's included."""


def _loaded_after(code: str) -> list[str]:
    """Run `code` in a fresh interpreter; the module names loaded when it is done."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    loaded: list[str] = json.loads(result.stderr.strip().splitlines()[-1])
    return loaded


def _optional(modules: list[str]) -> set[str]:
    return {name for name in modules if name.split(".")[0] in OPTIONAL_PACKAGES}


INSTALLED = ["boto3", "botocore", "google.cloud.kms", "hvac", "jwcrypto", "mcp", "opentelemetry.trace", "fastmcp"]


@pytest.mark.parametrize("name", INSTALLED)
def test_every_listed_optional_package_is_installed(name: str) -> None:
    # Otherwise the checks below could pass only because a package is missing. Found, not imported: no import cost.
    assert importlib.util.find_spec(name) is not None


def test_import_statecodec_loads_no_optional_package_and_stays_within_budget() -> None:
    loaded = _loaded_after("import statecodec")
    assert _optional(loaded) == set()
    assert len(loaded) <= MODULE_BUDGET, f"{len(loaded)} modules loaded"


def test_cli_commands_and_the_mcp_helpers_modules_load_no_optional_package() -> None:
    # One interpreter for all: what they load together is what each loads alone, and more.
    code = "import statecodec.mcp, statecodec.sdk_migration\nfrom statecodec.cli.main import main\n"
    code += "for argv in (['keygen'], ['--version']):\n  try:\n    main(argv)\n  except SystemExit:\n    pass"
    assert _optional(_loaded_after(code)) == set()


def test_heavier_modules_load_on_first_use_and_every_exported_name_resolves() -> None:
    code = (
        "import sys, statecodec\n"
        "lazy = ['statecodec.jose', 'statecodec.config', 'statecodec.providers.vault']\n"
        "assert not [m for m in lazy if m in sys.modules], [m for m in lazy if m in sys.modules]\n"
        "for name in statecodec.__all__:\n"
        "    assert getattr(statecodec, name) is not None, name\n"
        "from statecodec import JWECodec\n"
        "from statecodec.jose import JWECodec as direct\n"
        "assert JWECodec is direct"
    )
    loaded = _loaded_after(code)
    assert "statecodec.jose" in loaded
