"""`statecodec kms new-data-key`: provision a wrapped data key for an envelope ring (`statecodec check` checks it).

Each flag stands for one ``STATECODEC_*`` setting; credentials come from the environment only (a token on the command
line shows in `ps`).
"""

from __future__ import annotations

import argparse
import importlib

from statecodec._settings import CODEC_VAR
from statecodec.cli._output import show
from statecodec.cli.main import flag_values, settings_from_flags
from statecodec.config import KINDS, check_names, check_settings
from statecodec.envelope import format_wrapped_keys, new_wrapped_key

__all__ = ["register"]

_AWS = {"--key-id": "AWS_KMS_KEY_ID", "--region": "AWS_REGION", "--endpoint-url": "AWS_KMS_ENDPOINT"}
_GCP = {"--key": "GCP_KMS_KEY", "--emulator-host": "GCP_KMS_EMULATOR_HOST"}
_VAULT = {f"--vault-{name.lower()}": f"VAULT_{name}" for name in ("ADDR", "KEY", "MOUNT", "NAMESPACE")}
# --provider: (STATECODEC_CODEC, {flag: setting without its STATECODEC_ prefix})
_PROVIDERS = {"aws": ("aws-kms", _AWS), "gcp": ("gcp-kms", _GCP), "vault": ("vault-envelope", _VAULT)}
_COMMON = {"--context": "KMS_CONTEXT", "--audience": "KMS_AUDIENCE"}
_EVERY_FLAG = {flag: f"STATECODEC_{name}" for table in (_COMMON, _AWS, _GCP, _VAULT) for flag, name in table.items()}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    kms = sub.add_parser("kms", help="provision KMS-wrapped data keys (envelope codecs)")
    actions = kms.add_subparsers(dest="kms_command", metavar="SUBCOMMAND", required=True)
    new = actions.add_parser("new-data-key", func=_new_data_key, flags=_EVERY_FLAG,
                             help="print a new wrapped data key for STATECODEC_WRAPPED_KEYS")
    new.add_argument("--json", action="store_true", help="print the wrapped key as JSON on stdout")
    new.add_argument("--provider", choices=sorted(_PROVIDERS), required=True, help="the KMS")
    for provider, options in [(None, _COMMON)] + [(name, flags) for name, (_, flags) in _PROVIDERS.items()]:
        group = new.add_argument_group(f"--provider {provider}" if provider else "settings")
        for flag, name in options.items():
            group.add_argument(flag, metavar="VALUE", help=f"sets STATECODEC_{name}")


def _new_data_key(args: argparse.Namespace) -> int:
    from statecodec.providers import context_from_env

    kind = _PROVIDERS[args.provider][0]
    settings = settings_from_flags({CODEC_VAR: kind, **flag_values(args)})
    check_names(settings)  # a typo is named before the provider is contacted
    # Only the provider's settings (another's flags, a server's STATECODEC_KEYS) are this command's to judge.
    reads = KINDS[kind].reads | {CODEC_VAR}
    settings = {k: v for k, v in settings.items() if not k.startswith("STATECODEC_") or k in reads}
    check_settings(settings, kind)
    context = context_from_env(settings)  # named by its setting before the provider is built
    module, _, factory = str(KINDS[kind].builder).partition(":")  # the provider's wrapper_from_env
    with getattr(importlib.import_module(module), factory)(settings) as wrapper:
        blob = new_wrapped_key(wrapper, context)
    text = format_wrapped_keys([blob])
    return show(args, {"STATECODEC_WRAPPED_KEYS": text}, text)
