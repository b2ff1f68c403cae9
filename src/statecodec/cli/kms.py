"""`statecodec kms`: provision wrapped data keys and check a configured envelope ring.

``statecodec kms new-data-key --provider aws|gcp|vault ...`` asks the KMS for a new
data key and prints it wrapped, in the ``STATECODEC_WRAPPED_KEYS`` text form;
the plaintext key never reaches this process for AWS (GenerateDataKeyWithoutPlaintext)
or Vault (transit/datakey/wrapped) and is dropped right after wrapping for Cloud KMS. ``statecodec kms check``
unwraps a ring (from flags, the environment or a config file) exactly as a
server would at start-up and prints its key ids, never a key.

Providers are entries of `PROVIDERS`: a name, its own command-line options
and a function building its `KeyWrapper` from the parsed arguments (which
imports the provider's SDK only when chosen). Adding one is one entry.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from statecodec.envelope import EnvelopeCodec, KeyWrapper, default_context, format_wrapped_keys, new_wrapped_key
from statecodec.errors import ConfigurationError

__all__ = ["PROVIDERS", "KmsProvider", "register"]


@dataclass(frozen=True)
class KmsProvider:
    """One `--provider` choice: its options and how to build its wrapper from them."""

    help: str
    add_arguments: Callable[[argparse._ArgumentGroup], None]
    make_wrapper: Callable[[argparse.Namespace], KeyWrapper]


def _aws_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--key-id", help="AWS KMS key ARN, key id or alias (prefer the key ARN)")
    group.add_argument("--region", help="AWS region (default: the AWS SDK's configuration)")
    group.add_argument("--endpoint-url", help="KMS endpoint URL (default: the region's KMS endpoint)")
    group.add_argument("--profile", help="AWS shared-config profile")


def _aws_wrapper(args: argparse.Namespace) -> KeyWrapper:
    if not args.key_id:
        raise ConfigurationError("--provider aws needs --key-id (the KMS key ARN)")
    from statecodec.providers.aws_kms import AwsKmsWrapper

    return AwsKmsWrapper(args.key_id, region=args.region, endpoint_url=args.endpoint_url, profile=args.profile)


def _gcp_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--key", help="Cloud KMS key: projects/P/locations/L/keyRings/R/cryptoKeys/K")
    group.add_argument("--emulator-host", help="loopback HOST:PORT of a local Cloud KMS test server")


def _gcp_wrapper(args: argparse.Namespace) -> KeyWrapper:
    if not args.key:
        raise ConfigurationError("--provider gcp needs --key (projects/P/locations/L/keyRings/R/cryptoKeys/K)")
    from statecodec.providers.gcp_kms import GcpKmsWrapper

    return GcpKmsWrapper(args.key, emulator_host=args.emulator_host)


def _vault_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--vault-addr", help="Vault address (default: STATECODEC_VAULT_ADDR or VAULT_ADDR)")
    group.add_argument("--vault-key", help="transit key name (default: STATECODEC_VAULT_KEY)")
    group.add_argument("--vault-mount", help="transit mount path (default: STATECODEC_VAULT_MOUNT or transit)")
    group.add_argument("--vault-namespace", help="Vault namespace (default: STATECODEC_VAULT_NAMESPACE)")


def _vault_wrapper(args: argparse.Namespace) -> KeyWrapper:
    # Credentials come from the environment only: a token on the command line shows in `ps`.
    from statecodec.providers.vault import wrapper_from_settings

    settings = dict(os.environ)
    for flag, var in (
        ("vault_addr", "STATECODEC_VAULT_ADDR"),
        ("vault_key", "STATECODEC_VAULT_KEY"),
        ("vault_mount", "STATECODEC_VAULT_MOUNT"),
        ("vault_namespace", "STATECODEC_VAULT_NAMESPACE"),
    ):
        if getattr(args, flag, None):
            settings[var] = getattr(args, flag)
    return wrapper_from_settings(settings)


PROVIDERS: dict[str, KmsProvider] = {
    "aws": KmsProvider("AWS KMS (pip install 'statecodec[aws]')", _aws_arguments, _aws_wrapper),
    "gcp": KmsProvider("Google Cloud KMS (pip install 'statecodec[gcp]')", _gcp_arguments, _gcp_wrapper),
    "vault": KmsProvider(
        "Vault / OpenBao transit; token or AppRole from STATECODEC_VAULT_* (pip install 'statecodec[vault]')",
        _vault_arguments,
        _vault_wrapper,
    ),
}
"""`--provider` choices."""


def _common(parser: argparse.ArgumentParser, *, provider_required: bool) -> None:
    parser.add_argument(
        "--provider",
        choices=sorted(PROVIDERS),
        required=provider_required,
        help="the KMS" + ("" if provider_required else " (default: the environment or --config)"),
    )
    parser.add_argument("--context", help="bound context as key=value,... (default: purpose=statecodec-envelope)")
    parser.add_argument("--audience", help="audience added to the default context")
    for name in sorted(PROVIDERS):
        PROVIDERS[name].add_arguments(parser.add_argument_group(f"--provider {name}: {PROVIDERS[name].help}"))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    kms = sub.add_parser("kms", help="provision and check KMS-wrapped data keys (envelope codecs)")
    kms_sub = kms.add_subparsers(dest="kms_command", metavar="SUBCOMMAND", required=True)

    new = kms_sub.add_parser("new-data-key", help="print a new wrapped data key for STATECODEC_WRAPPED_KEYS")
    _common(new, provider_required=True)
    new.set_defaults(func=_new_data_key)

    check = kms_sub.add_parser("check", help="unwrap a configured ring once and print its key ids")
    _common(check, provider_required=False)
    check.add_argument(
        "--wrapped-keys", help="wrapped keys text (default: STATECODEC_WRAPPED_KEYS or STATECODEC_WRAPPED_KEYS_FILE)"
    )
    check.add_argument("--config", help="a statecodec JSON config file describing an envelope codec")
    check.set_defaults(func=_check)


def _context(args: argparse.Namespace) -> dict[str, str]:
    from statecodec.providers import parse_context

    if args.context:
        return parse_context(args.context)
    return default_context(args.audience)


def _close(wrapper: Any) -> None:
    close = getattr(wrapper, "close", None)
    if callable(close):
        close()


def _new_data_key(args: argparse.Namespace) -> int:
    wrapper = PROVIDERS[args.provider].make_wrapper(args)
    try:
        blob = new_wrapped_key(wrapper, _context(args))
    finally:
        _close(wrapper)
    print(format_wrapped_keys([blob]))
    return 0


def _check(args: argparse.Namespace) -> int:
    codec: object
    if args.provider is not None:
        codec = _codec_from_flags(args)
    elif args.config:
        from statecodec.config import codec_from_file

        codec = codec_from_file(args.config)
    else:
        from statecodec.config import codec_from_env

        codec = codec_from_env()
    if not isinstance(codec, EnvelopeCodec):
        if callable(getattr(codec, "reseal", None)) and callable(getattr(codec, "describe", None)):
            return _check_per_token(codec)
        print(f"statecodec: the configured codec is {type(codec).__name__}, not an envelope codec", file=sys.stderr)
        return 2
    print(f"provider: {codec.wrapper.describe()}")
    print(f"context: {','.join(f'{k}={v}' for k, v in sorted(codec.context.items()))}")
    ids = list(codec.key_ids)
    print(f"key ids: {ids[0]} (primary)" + "".join(f", {k}" for k in ids[1:]))
    print(f"unwrapped {len(ids)} data key{'s' if len(ids) != 1 else ''}: ok")
    return 0


def _check_per_token(codec: Any) -> int:
    """A per-token provider codec (Vault transit): construction already probed the key."""
    try:
        print(f"provider: {codec.describe()} (one call per seal and per unseal)")
        print(f"context: {','.join(f'{k}={v}' for k, v in sorted(codec.context.items()))}")
        ids = list(codec.key_ids)
        print(f"key versions: {ids[0]} (primary)" + "".join(f", {k}" for k in ids[1:]))
        print("encrypt and decrypt probe: ok")
    finally:
        _close(codec)
    return 0


def _codec_from_flags(args: argparse.Namespace) -> EnvelopeCodec:
    from statecodec.providers import WRAPPED_KEYS_FILE_VAR, WRAPPED_KEYS_VAR, wrapped_keys_from_settings

    # The environment's file variable counts too: the error for a missing ring names it.
    names = (WRAPPED_KEYS_VAR, WRAPPED_KEYS_FILE_VAR)
    settings = {name: os.environ.get(name, "") for name in names}
    if args.wrapped_keys is not None:
        settings = {WRAPPED_KEYS_VAR: args.wrapped_keys}
    blobs = wrapped_keys_from_settings(settings)
    wrapper = PROVIDERS[args.provider].make_wrapper(args)
    try:
        return EnvelopeCodec(wrapper, blobs, context=_context(args))
    finally:
        _close(wrapper)
