"""`statecodec check`: is this instance ready to seal and unseal, and under which keys? Its report holds no secret.

Builds what a server would from its settings (contacting no store) and seals and unseals a probe; ``--json`` is what
`statecodec rotate check` reads (docs/cli.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from statecodec import _settings as cfg
from statecodec._settings import setting
from statecodec.cli._output import show
from statecodec.config import codec_from_env, configured_codec, missing_package
from statecodec.errors import ConfigurationError, InvalidToken, StatecodecError

__all__ = ["register", "run_check"]

SCHEMA = "statecodec-check/1"
_PROBE = b"statecodec check probe"
# The setting, without its STATECODEC_ prefix, that names the key a provider holds (a name, never key material).
_KEY_NAME = {"aws-kms": "AWS_KMS_KEY_ID", "gcp-kms": "GCP_KMS_KEY", "vault-envelope": "VAULT_KEY"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("check", func=_check, help="build the configured codec, seal and unseal a probe, report kind "
                       "and key ids (exit 0 ready)", epilog="Exit status: 0 ready, 1 not ready (the probe failed, the "
                       "provider is unreachable), 2 misconfigured.")
    p.add_argument("--config", metavar="FILE", help="a JSON file of STATECODEC_* settings instead of the environment")
    p.add_argument("--instance", metavar="NAME", help="this instance's name in the report (for rotate check)")
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")


def run_check(config: str | None, instance: str | None) -> tuple[int, dict[str, Any]]:
    """(exit status, report): the report holds the status, and on failure the one-line error (never a secret)."""
    report: dict[str, Any] = {"schema": SCHEMA, "instance": instance, "ready": False}
    try:
        # What a server reads from the environment besides its codec, by the functions it calls, so a setting that
        # stops the server at start-up stops this check too: the MCP ttl and, when any store setting is given, the
        # single-use guard, its retry-safe mode and its store (built, not contacted: a Redis store connects at its
        # first call), or, for a reloading codec given only the store's address, the store of its fleet registry.
        from statecodec.mcp import single_use_from_env, store_from_env

        cfg.ttl(os.environ)
        if (guarded := cfg.single_use_wanted(os.environ)) or cfg.store_url(os.environ)[0] is not None:
            import asyncio  # here: only a store setting needs it, and every command's start-up imports this module

            asyncio.run((single_use_from_env(os.environ).guard if guarded else store_from_env(os.environ)).aclose())
        if config is None and cfg.reload_interval(os.environ) is not None:
            codec_from_env(os.environ)
        kind, codec, settings = configured_codec(path=config)
    except (ConfigurationError, ImportError) as exc:  # ImportError: the extra a configured store or provider needs
        why = missing_package(exc) if isinstance(exc, ImportError) else str(exc)
        return 2, {**report, "status": "misconfigured", "error": why}
    except StatecodecError as exc:  # ProviderError: unreachable, or refused the configured key
        return 1, {**report, "status": "not ready", "error": str(exc)}
    ids = [str(kid) for kid in getattr(codec, "key_ids", ())]
    wrapper, name, context = getattr(codec, "wrapper", None), _KEY_NAME.get(kind), getattr(codec, "context", None)
    report |= {
        "kind": kind,
        "codec": type(codec).__name__,
        "key_ids": ids,
        "primary_key_id": str(getattr(codec, "primary_key_id", None) or (ids[0] if ids else "")) or None,
        "provider": None if wrapper is None else wrapper.describe(),
        "key_name": None if name is None else setting(settings, f"STATECODEC_{name}", required=False),
        "context": None if context is None else dict(context),  # what every wrapped key is bound to
    }
    try:
        error = None if codec.unseal(codec.seal(_PROBE)) == _PROBE else "the probe unsealed to other bytes"
    except InvalidToken as exc:
        error = f"the probe token was refused: {exc}"
    except StatecodecError as exc:
        error = f"the probe failed: {exc}"
    if error is not None:
        return 1, {**report, "status": "not ready", "error": error}
    return 0, {**report, "ready": True, "status": "ready", "error": None}


def _check(args: argparse.Namespace) -> int:
    code, report = run_check(args.config, args.instance)
    if report["error"] is not None:
        print(f"statecodec check: {report['error']}", file=sys.stderr)
    lines = []
    for name in ("instance", "status", "kind", "codec", "key_ids", "primary_key_id", "provider", "key_name", "context"):
        value = report.get(name)
        if isinstance(value, dict):
            value = ",".join(f"{k}={v}" for k, v in sorted(value.items()))
        if value is not None:
            lines.append(f"{name:<15} {', '.join(value) if isinstance(value, list) else value}")
    return show(args, report, "\n".join(lines), code, indent=2)
