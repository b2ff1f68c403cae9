"""`statecodec kms`: provision wrapped data keys and check a configured envelope ring.

``check`` builds the codec a server would and prints its key ids, never a key. Each flag stands for one
``STATECODEC_*`` setting; credentials come from the environment only (a token on the command line shows in `ps`).
"""

from __future__ import annotations

import argparse
import importlib
import json
from typing import Any

from statecodec.cli.main import flag_values, flags_named, settings_from_flags
from statecodec.config import CODEC_VAR, READS, check_names, check_settings, codec_from_env, codec_from_file
from statecodec.envelope import EnvelopeCodec, format_wrapped_keys, new_wrapped_key
from statecodec.errors import ConfigurationError

_AWS = {"--key-id": "AWS_KMS_KEY_ID", "--region": "AWS_REGION", "--endpoint-url": "AWS_KMS_ENDPOINT"}
_GCP = {"--key": "GCP_KMS_KEY", "--emulator-host": "GCP_KMS_EMULATOR_HOST"}
_VAULT = {f"--vault-{name.lower()}": f"VAULT_{name}" for name in ("ADDR", "KEY", "MOUNT", "NAMESPACE")}
# --provider: (STATECODEC_CODEC, provider module, {flag: setting without its STATECODEC_ prefix})
_PROVIDERS = {
    "aws": ("aws-kms", "aws_kms", _AWS),
    "gcp": ("gcp-kms", "gcp_kms", _GCP),
    "vault": ("vault-envelope", "vault", _VAULT),
}
_COMMON = {"--context": "KMS_CONTEXT", "--audience": "KMS_AUDIENCE", "--wrapped-keys": "WRAPPED_KEYS"}
_EVERY_FLAG = {flag: f"STATECODEC_{name}" for table in (_COMMON, _AWS, _GCP, _VAULT) for flag, name in table.items()}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    kms = sub.add_parser("kms", help="provision and check KMS-wrapped data keys (envelope codecs)")
    actions = kms.add_subparsers(dest="kms_command", metavar="SUBCOMMAND", required=True)
    new = actions.add_parser("new-data-key", help="print a new wrapped data key for STATECODEC_WRAPPED_KEYS")
    new.set_defaults(func=flags_named(_EVERY_FLAG)(_new_data_key))
    check = actions.add_parser("check", help="build the configured envelope codec once and print its key ids")
    check.add_argument("--config", help="a statecodec JSON config file (instead of the environment)")
    check.add_argument("--json", action="store_true", help="print the key ids and provider as JSON on stdout")
    new.add_argument("--json", action="store_true", help="print the wrapped key as JSON on stdout")
    check.set_defaults(func=flags_named(_EVERY_FLAG)(_check))
    for parser in (new, check):
        parser.add_argument("--provider", choices=sorted(_PROVIDERS), required=parser is new, help="the KMS")
        flags = [(None, _COMMON)] + [(name, flags) for name, (_, _, flags) in _PROVIDERS.items()]
        for provider, options in flags:
            group = parser.add_argument_group(f"--provider {provider}" if provider else "settings")
            for flag, name in options.items():
                if parser is check or flag != "--wrapped-keys":
                    group.add_argument(flag, metavar="VALUE", help=f"sets STATECODEC_{name}")


def _settings(args: argparse.Namespace) -> dict[str, str]:  # the environment, the flags and --provider over it
    kind, _, flags = _PROVIDERS.get(args.provider, (None, "", {}))
    values = flag_values(args, {flag: _EVERY_FLAG[flag] for flag in {**_COMMON, **flags}})
    return settings_from_flags({"STATECODEC_CODEC": kind, **values})


def _new_data_key(args: argparse.Namespace) -> int:
    from statecodec.providers import context_from_settings

    kind = _PROVIDERS[args.provider][0]
    settings = _settings(args)
    check_names(settings)  # a typo is named before the provider is contacted
    # Only the provider's settings: a server's others (its STATECODEC_KEYS) are not this command's to judge.
    settings = {k: v for k, v in settings.items() if not k.startswith("STATECODEC_") or k in READS[kind] | {CODEC_VAR}}
    check_settings(settings, kind)
    provider = importlib.import_module(f"statecodec.providers.{_PROVIDERS[args.provider][1]}")
    with provider.wrapper_from_settings(settings) as wrapper:
        blob = new_wrapped_key(wrapper, context_from_settings(settings))
    text = format_wrapped_keys([blob])
    print(json.dumps({"STATECODEC_WRAPPED_KEYS": text}) if args.json else text)
    return 0


def _check(args: argparse.Namespace) -> int:
    codec: Any = codec_from_file(args.config) if args.config else codec_from_env(_settings(args))
    if not isinstance(codec, EnvelopeCodec):
        raise ConfigurationError(f"the configured codec is {type(codec).__name__}, not a KMS or Vault codec")
    ids, provider = list(codec.key_ids), codec.wrapper.describe()
    if args.json:
        print(json.dumps({"provider": provider, "context": dict(codec.context), "key_ids": ids,
                          "primary_key_id": ids[0]}))
        return 0
    print(f"provider: {provider}")
    print(f"context: {','.join(f'{k}={v}' for k, v in sorted(codec.context.items()))}")
    print(f"key ids: {ids[0]} (primary)" + "".join(f", {k}" for k in ids[1:]))
    print(f"unwrapped {len(ids)} data key{'s' if len(ids) != 1 else ''}: ok")
    return 0
