"""Codec kinds: build the codec the environment or a JSON file describes, at start-up, never per token.

Threat: a misspelt or ineffective setting leaves a default in force without a word, and a provider is contacted for a
set-up wrong from the start. So the whole configuration is checked against `KINDS`, the one table of what each kind
reads and how it is built, before any builder runs (docs/configuration.md).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple, cast

from statecodec import _settings as cfg
from statecodec._settings import CODEC_VAR, PREFIX, names, setting
from statecodec._types import Codec, require_codec
from statecodec.aead import AESGCMCodec, XAESGCMCodec
from statecodec.errors import ConfigurationError

__all__ = ["KINDS", "Kind", "codec_from_env", "codec_from_file", "configured_codec"]

DEFAULT_KIND = "aesgcm"
Builder = Callable[[Mapping[str, str]], Codec]


class Kind(NamedTuple):
    """What a codec kind reads besides ``STATECODEC_CODEC`` and ``STATECODEC_MAX_TOKEN_LENGTH`` (its builder can look
    up nothing else), and its builder or, where it needs an optional package, its import path."""

    reads: frozenset[str]
    builder: Builder | str


_RING = names("KEYS", "KEYS_FILE")
_ENVELOPE = names("WRAPPED_KEYS", "WRAPPED_KEYS_FILE", "KMS_CONTEXT", "KMS_AUDIENCE")
_VAULT = names("VAULT_ADDR", "VAULT_TOKEN", "VAULT_TOKEN_FILE", "VAULT_NAMESPACE", "VAULT_CACERT", "VAULT_CLIENT_CERT",
               "VAULT_CLIENT_KEY", "VAULT_SKIP_VERIFY", "VAULT_MOUNT", "VAULT_KEY", "VAULT_TIMEOUT")
# The one table of codec kinds; docs/configuration.md, "All variables at a glance", is its prose form.
KINDS: dict[str, Kind] = {
    "aesgcm": Kind(_RING, AESGCMCodec.from_env),
    "xaesgcm": Kind(_RING, XAESGCMCodec.from_env),
    "aws-kms": Kind(_ENVELOPE | names("AWS_KMS_KEY_ID", "AWS_REGION", "AWS_KMS_ENDPOINT"),
                    "statecodec.providers.aws_kms:wrapper_from_env"),
    "gcp-kms": Kind(_ENVELOPE | names("GCP_KMS_KEY", "GCP_KMS_EMULATOR_HOST"),
                    "statecodec.providers.gcp_kms:wrapper_from_env"),
    "vault-envelope": Kind(_ENVELOPE | _VAULT, "statecodec.providers.vault:wrapper_from_env"),
    "jwe": Kind(_RING | names("JWE_ALG", "JWKS_FILE"), "statecodec.jose.jwe:from_settings"),
    "jws": Kind(_RING | names("JWS_ALG", "JWKS_FILE"), "statecodec.jose.jws:from_settings"),
}
_EVERY_KIND = frozenset({CODEC_VAR, cfg.MAX_TOKEN_LENGTH_VAR})
# (setting, the settings that make it ineffective when set, how to fix): a kind reads the first only without them.
SHADOWED: tuple[tuple[str, frozenset[str], str], ...] = (
    (f"{PREFIX}KMS_AUDIENCE", names("KMS_CONTEXT"), "put audience=... in the context, or unset one of them"),
    *((ring, names("JWKS_FILE"), "the JWK Set replaces the key ring; unset one of them") for ring in sorted(_RING)),
)
# Removed kinds and settings: refused at start-up with what replaces them, not as unknown.
_AGENT = "AppRole login is removed; let Vault Agent log in and write the token file STATECODEC_VAULT_TOKEN_FILE names"
REMOVED = {
    "vault-transit": "removed; set vault-envelope over the same transit key (docs/vault.md, migrating)",
    f"{PREFIX}VAULT_CONTEXT": "removed with vault-transit; vault-envelope reads STATECODEC_KMS_CONTEXT",
    f"{PREFIX}REVOCATION_STALENESS": "removed with the revocation view: each claim answers revocation; unset it",
    **dict.fromkeys(names("VAULT_ROLE_ID", "VAULT_SECRET_ID", "VAULT_SECRET_ID_FILE", "VAULT_APPROLE_MOUNT"), _AGENT),
}


def known_settings() -> frozenset[str]:  # every STATECODEC_* name statecodec reads, whatever the kind
    return frozenset().union(_EVERY_KIND, cfg.ENVIRONMENT_ONLY, *(kind.reads for kind in KINDS.values()))


def check_names(settings: Mapping[str, str]) -> None:
    """Refuse an unknown ``STATECODEC_*`` name (naming the closest valid one), and ``X`` given with ``X_FILE``."""
    known = known_settings()
    for name in sorted(name for name in settings if name.startswith(PREFIX) and name not in known):
        if name in REMOVED:
            raise ConfigurationError(f"{name} is no longer read: {REMOVED[name]}")
        # Compared without the prefix every name shares, which would make any two names look alike.
        close = difflib.get_close_matches(name.removeprefix(PREFIX), [k.removeprefix(PREFIX) for k in known], n=1)
        hint = f"did you mean {PREFIX}{close[0]}?" if close else "docs/configuration.md lists every setting"
        raise ConfigurationError(f"unknown setting {name}; {hint}")
    for name in sorted(known):
        if name.endswith("_FILE"):
            cfg.check_one_form(settings, name.removesuffix("_FILE"))


def check_settings(settings: Mapping[str, str], kind: str, *, file: bool = False) -> None:
    """Refuse what `kind` would not read: another kind's setting, one made ineffective (`SHADOWED`) and, in a
    config `file`, one read from the environment only."""
    _builder(kind)  # an unknown kind is named as such, before its settings are judged
    reads = KINDS[kind].reads | _EVERY_KIND
    given = {name for name in settings if name.startswith(PREFIX) and setting(settings, name, required=False)}
    ignored = frozenset() if file else cfg.ENVIRONMENT_ONLY
    for name in sorted(given - reads - ignored):
        if name in cfg.ENVIRONMENT_ONLY:
            raise ConfigurationError(f"{name} is read from the environment (single use, the MCP ttl), not from a "
                                     "codec's config file")
        readers = sorted(k for k, entry in KINDS.items() if name in entry.reads)
        raise ConfigurationError(f"{name} is set but codec kind {kind!r} does not read it (it is read by "
                                 f"{', '.join(readers)}); unset it, or set {CODEC_VAR} to the kind it belongs to")
    for name, by, fix in SHADOWED:
        shadows = sorted(other for other in by if other in given)
        if name in given and name in reads and shadows:
            raise ConfigurationError(f"{name} has no effect beside {' and '.join(shadows)}: {fix}")


def missing_package(exc: ImportError) -> str:
    """One line for an optional package that is not installed: the message naming the extra, else the package."""
    if "statecodec[" in str(exc):
        return str(exc)
    return f"the Python package {exc.name!r} is not installed; install the statecodec extra that provides it"


def _builder(kind: str) -> Builder | str:
    if kind in REMOVED:
        raise ConfigurationError(f"{CODEC_VAR}={kind} is {REMOVED[kind]}")
    if kind not in KINDS:
        raise ConfigurationError(f"{CODEC_VAR}={kind!r} is unknown; valid kinds: {', '.join(sorted(KINDS))}")
    return KINDS[kind].builder


def build_codec(kind: str, settings: Mapping[str, str]) -> Codec:
    """Build a codec of `kind` from `settings`, its builder seeing only what `KINDS` lists for it."""
    builder: object = _builder(kind)
    what = f"the builder of {CODEC_VAR}={kind}"
    if isinstance(builder, str):  # an optional package, imported only now that its kind is chosen
        module_name, _, attr = builder.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigurationError(f"{CODEC_VAR}={kind}: {missing_package(exc)}") from None
        builder = getattr(module, attr, None)
        if not callable(builder):
            raise ConfigurationError(f"the builder for {CODEC_VAR}={kind} ({KINDS[kind].builder}) does not exist")
        if attr == "wrapper_from_env":  # an envelope kind: the one envelope builder, over its provider
            from statecodec.providers import build_envelope_codec

            builder = functools.partial(build_envelope_codec, wrapper_from_env=builder)
    view = cfg.Settings(settings, KINDS[kind].reads | _EVERY_KIND, what)
    return require_codec(cast(Builder, builder)(view), f"{what}'s result")


def _kind(settings: Mapping[str, str]) -> str:
    kind = setting(settings, CODEC_VAR, required=False)
    if kind is not None:
        return kind.lower()
    if setting(settings, cfg.KEYS_VAR, required=False) or setting(settings, cfg.KEYS_FILE_VAR, required=False):
        return DEFAULT_KIND
    raise ConfigurationError(f"no codec configured: set STATECODEC_KEYS (keys from `statecodec keygen`) for the "
                             f"default {DEFAULT_KIND} codec, or {CODEC_VAR} to one of: {', '.join(sorted(KINDS))}")


def configured_codec(
    environ: Mapping[str, str] | None = None, *, path: str | os.PathLike[str] | None = None
) -> tuple[str, Codec, Mapping[str, str]]:
    """(kind, codec, settings) of the config file at `path`, else of the environment, checked whole before the
    builder runs. The settings may hold keys: read a named, non-secret setting from them, never show them whole."""
    if path is None:
        return _configured(os.environ if environ is None else environ, file=False)
    with cfg.named_errors(f"config file {Path(path)}"):
        return _configured(cfg.settings_from_file(Path(path)), file=True)


def _configured(settings: Mapping[str, str], *, file: bool) -> tuple[str, Codec, Mapping[str, str]]:
    check_names(settings)  # a misspelt STATECODEC_CODEC is named before the kind is guessed without it
    kind = _kind(settings)
    check_settings(settings, kind, file=file)
    return kind, build_codec(kind, settings), settings


def codec_from_env(environ: Mapping[str, str] | None = None) -> Codec:
    """The codec the environment describes: a `ReloadingCodec` with ``STATECODEC_RELOAD_INTERVAL``."""
    settings = cfg.Settings(os.environ if environ is None else environ)  # a copy: a live codec rebuilds from it
    interval = cfg.reload_interval(settings)
    if interval is None:
        return configured_codec(settings)[1]
    from statecodec.reload import ReloadingCodec

    ttl, future_skew, files = cfg.ttl(settings), cfg.future_skew(settings), cfg.key_files(settings)
    cfg.instance_name(settings)  # what stops its registry reporter at start-up stops the codec, and `check`, too
    if not files:
        raise ConfigurationError(f"{cfg.RELOAD_VAR} follows key files, and no STATECODEC_*_FILE setting names one: set "
                                 "STATECODEC_KEYS_FILE (or the kind's file setting) instead of the key itself")
    return ReloadingCodec(lambda: configured_codec(settings)[1], ttl=ttl, future_skew=future_skew, files=files,
                          interval=interval)


def codec_from_file(path: str | os.PathLike[str]) -> Codec:
    """The codec a JSON config file describes: an object with the environment variables as members, each checked."""
    return configured_codec(path=path)[1]
