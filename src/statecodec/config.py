"""Codec kinds: build the codec the environment or a JSON file describes, at start-up, never per token.

``STATECODEC_CODEC`` picks the kind (default ``aesgcm`` when ``STATECODEC_KEYS(_FILE)`` is set); its builder
reads the other settings through `statecodec._settings` (docs/configuration.md lists them all). A kind is one
entry in `BUILDERS`: a builder, or its import path, resolved only when that kind is chosen, so an optional
dependency is imported only by those who use it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import cast

from statecodec._settings import KEYS_FILE_VAR, KEYS_VAR, named_errors, settings_from_file
from statecodec._settings import max_token_length_setting as max_token_length_setting
from statecodec._settings import setting as setting
from statecodec._types import Codec as Codec
from statecodec.aead import AESGCMCodec, XAESGCMCodec
from statecodec.errors import ConfigurationError
from statecodec.keys import ring_from_settings as ring_from_settings

CODEC_VAR = "STATECODEC_CODEC"
DEFAULT_KIND = "aesgcm"

Builder = Callable[[Mapping[str, str]], Codec]

BUILDERS: dict[str, Builder | str] = {
    "aesgcm": AESGCMCodec.from_env,
    "xaesgcm": XAESGCMCodec.from_env,
    "aws-kms": "statecodec.providers.aws_kms:build_codec",
    "gcp-kms": "statecodec.providers.gcp_kms:build_codec",
    "vault-envelope": "statecodec.providers.vault:envelope_codec_from_settings",
    "vault-transit": "statecodec.providers.vault:transit_codec_from_settings",
    "jwe": "statecodec.jose.jwe:from_settings",
    "jws": "statecodec.jose.jws:from_settings",
}


def _resolve(kind: str, builder: Builder | str) -> Builder:
    if not isinstance(builder, str):
        return builder
    module_name, _, attr = builder.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if "statecodec[" in str(exc):  # the provider module's own guard names its extra
            raise ConfigurationError(f"{CODEC_VAR}={kind}: {exc}") from None
        raise ConfigurationError(
            f"{CODEC_VAR}={kind} needs the Python package {exc.name or module_name!r}, which is not installed; "
            "install the statecodec extra that provides it"
        ) from None
    found = getattr(module, attr, None)
    if not callable(found):
        raise ConfigurationError(f"the builder for {CODEC_VAR}={kind} ({builder}) does not exist")
    return cast(Builder, found)


def build_codec(kind: str, settings: Mapping[str, str]) -> Codec:
    """Build a codec of `kind` from `settings`; `ConfigurationError` names the valid kinds."""
    builder = BUILDERS.get(kind)
    if builder is None:
        raise ConfigurationError(f"{CODEC_VAR}={kind!r} is unknown; valid kinds: {', '.join(sorted(BUILDERS))}")
    codec = _resolve(kind, builder)(settings)
    if not isinstance(codec, Codec):
        raise ConfigurationError(f"the builder for {CODEC_VAR}={kind} did not return a codec")
    return codec


def _kind(settings: Mapping[str, str]) -> str:
    kind = setting(settings, CODEC_VAR, required=False)
    if kind is not None:
        return kind.lower()
    if setting(settings, KEYS_VAR, required=False) or setting(settings, KEYS_FILE_VAR, required=False):
        return DEFAULT_KIND
    raise ConfigurationError(
        f"no codec configured: set STATECODEC_KEYS (keys from `statecodec keygen`) for the default "
        f"{DEFAULT_KIND} codec, or {CODEC_VAR} to one of: {', '.join(sorted(BUILDERS))}"
    )


def codec_from_env(environ: Mapping[str, str] | None = None) -> Codec:
    """The codec the environment describes (see the module docstring for the variables)."""
    settings = os.environ if environ is None else environ
    return build_codec(_kind(settings), settings)


def codec_from_file(path: str | os.PathLike[str]) -> Codec:
    """The codec a JSON config file describes: an object with the environment variables as members. A member
    the kind does not read is refused: a misspelt one would pass as unused and leave a default in force."""
    with named_errors(f"config file {Path(path)}"):
        settings = settings_from_file(Path(path))
        kind = _kind(settings)
        codec = build_codec(kind, settings)
        if unused := settings.unread():
            raise ConfigurationError(
                f"{', '.join(unused)} {'is' if len(unused) == 1 else 'are'} not read by codec kind {kind!r}; "
                "check the spelling against docs/configuration.md, or remove the member"
            )
        return codec
