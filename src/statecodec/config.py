"""Codec kinds: build the codec the environment or a JSON file describes, at start-up, never per token.

Threat: a misspelt or ineffective setting leaves a default in force without a word, and a provider contacted with a
half-read configuration spends a call on a set-up that was wrong from the start. So the whole configuration is
checked against `READS`, the one table of what each kind reads, before any builder runs (docs/configuration.md).
A kind is one entry in `BUILDERS` (a builder or its import path, so an optional package is imported only when
that kind is chosen; an envelope kind's path names its provider's `wrapper_from_settings`) and one in `READS`.
The other objects a server builds from its settings start here too: the live codec that follows its key files
(`live_codec_from_env`, docs/rotation.md) and the single-use store (`store_from_settings`, docs/single-use.md).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

from statecodec._settings import (
    KEYS_FILE_VAR,
    KEYS_VAR,
    MAX_TOKEN_LENGTH_VAR,
    PREFIX,
    Settings,
    check_one_form,
    named_errors,
    seconds_setting,
    setting,
    settings_from_file,
    text_or_file,
)
from statecodec._types import Codec, check_codec
from statecodec.aead import AESGCMCodec, XAESGCMCodec
from statecodec.errors import ConfigurationError
from statecodec.store import REDIS_SCHEMES, MemoryStore, Store

if TYPE_CHECKING:
    from statecodec.reload import ReloadingCodec

CODEC_VAR = "STATECODEC_CODEC"
TTL_VAR = "STATECODEC_TTL"
RELOAD_VAR, SKEW_VAR, INSTANCE_VAR = "STATECODEC_RELOAD_INTERVAL", "STATECODEC_FUTURE_SKEW", "STATECODEC_INSTANCE"
STORE_URL_VAR = "STATECODEC_STORE_URL"
DEFAULT_KIND = "aesgcm"
DEFAULT_TTL = 600
MAX_TTL = 30 * 24 * 3600  # a state token lives for a conversation, not for months

Builder = Callable[[Mapping[str, str]], Codec]

BUILDERS: dict[str, Builder | str] = {
    "aesgcm": AESGCMCodec.from_env,
    "xaesgcm": XAESGCMCodec.from_env,
    "aws-kms": "statecodec.providers.aws_kms:wrapper_from_settings",
    "gcp-kms": "statecodec.providers.gcp_kms:wrapper_from_settings",
    "vault-envelope": "statecodec.providers.vault:wrapper_from_settings",
    "jwe": "statecodec.jose.jwe:from_settings",
    "jws": "statecodec.jose.jws:from_settings",
}


def _names(*names: str) -> frozenset[str]:
    return frozenset(f"{PREFIX}{name}" for name in names)


_RING = _names("KEYS", "KEYS_FILE")
_ENVELOPE = _names("WRAPPED_KEYS", "WRAPPED_KEYS_FILE", "KMS_CONTEXT", "KMS_AUDIENCE")
# What each kind reads besides STATECODEC_CODEC and STATECODEC_MAX_TOKEN_LENGTH: the one table the configuration is
# checked against before a builder runs, and the only names a builder can look up (`build_codec`): a builder that
# reads a setting its entry omits fails, so the table cannot fall behind the code. docs/configuration.md, "All
# variables at a glance", is its prose form.
READS: dict[str, frozenset[str]] = {
    "aesgcm": _RING,
    "xaesgcm": _RING,
    "aws-kms": _ENVELOPE | _names("AWS_KMS_KEY_ID", "AWS_REGION", "AWS_KMS_ENDPOINT"),
    "gcp-kms": _ENVELOPE | _names("GCP_KMS_KEY", "GCP_KMS_EMULATOR_HOST"),
    "vault-envelope": _ENVELOPE | _names(
        "VAULT_ADDR", "VAULT_TOKEN", "VAULT_TOKEN_FILE", "VAULT_NAMESPACE", "VAULT_CACERT", "VAULT_CLIENT_CERT",
        "VAULT_CLIENT_KEY", "VAULT_SKIP_VERIFY", "VAULT_MOUNT", "VAULT_KEY", "VAULT_TIMEOUT",
    ),
    "jwe": _RING | _names("JWE_ALG", "JWKS_FILE"),
    "jws": _RING | _names("JWS_ALG", "JWKS_FILE"),
}
_EVERY_KIND = frozenset({CODEC_VAR, MAX_TOKEN_LENGTH_VAR})
# Read from the environment by `statecodec.single_use` and `statecodec.mcp`, whatever the codec kind: never from a
# codec's config file.
ENVIRONMENT_ONLY = _names(
    "TTL", "STORE_URL", "STORE_URL_FILE", "STORE_KEY", "STORE_KEY_FILE", "STORE_TIMEOUT", "STORE_NAMESPACE",
    "STORE_ON_ERROR", "RETRY_SAFE", "RETRY_RESULT_MAX", "RELOAD_INTERVAL", "FUTURE_SKEW", "INSTANCE",
)
# (setting, the settings that make it ineffective when set, how to fix): a kind reads the first only without them.
SHADOWED: tuple[tuple[str, frozenset[str], str], ...] = (
    (f"{PREFIX}KMS_AUDIENCE", _names("KMS_CONTEXT"), "put audience=... in the context, or unset one of them"),
    *((ring, _names("JWKS_FILE"), "the JWK Set replaces the key ring; unset one of them") for ring in sorted(_RING)),
)
# Removed kinds and settings: refused at start-up with what replaces them, not as unknown.
_AGENT = "AppRole login is removed; let Vault Agent log in and write the token file STATECODEC_VAULT_TOKEN_FILE names"
REMOVED = {
    "vault-transit": "removed; set vault-envelope over the same transit key (docs/vault.md, migrating)",
    f"{PREFIX}VAULT_CONTEXT": "removed with vault-transit; vault-envelope reads STATECODEC_KMS_CONTEXT",
    f"{PREFIX}REVOCATION_STALENESS": "removed with the revocation view: each claim answers revocation; unset it",
    **dict.fromkeys(_names("VAULT_ROLE_ID", "VAULT_SECRET_ID", "VAULT_SECRET_ID_FILE", "VAULT_APPROLE_MOUNT"), _AGENT),
}


def known_settings() -> frozenset[str]:  # every STATECODEC_* name statecodec reads, whatever the kind
    return frozenset().union(_EVERY_KIND, ENVIRONMENT_ONLY, *READS.values())


def check_names(settings: Mapping[str, str]) -> None:
    """Refuse an unknown ``STATECODEC_*`` name (naming the closest valid one), and a setting given both as ``X``
    and as ``X_FILE``: one of the two would be ignored."""
    known = known_settings()
    for name in sorted(settings):
        if not name.startswith(PREFIX) or name in known:
            continue
        if name in REMOVED:
            raise ConfigurationError(f"{name} is no longer read: {REMOVED[name]}")
        # Compared without the prefix every name shares, which would make any two names look alike.
        close = difflib.get_close_matches(name.removeprefix(PREFIX), [k.removeprefix(PREFIX) for k in known], n=1)
        hint = f"did you mean {PREFIX}{close[0]}?" if close else "docs/configuration.md lists every setting"
        raise ConfigurationError(f"unknown setting {name}; {hint}")
    for name in sorted(known):
        if name.endswith("_FILE"):
            check_one_form(settings, name.removesuffix("_FILE"))


def check_settings(settings: Mapping[str, str], kind: str, *, file: bool = False) -> None:
    """Refuse, after `check_names` and before any builder runs, what `kind` would not read: a setting of another
    kind, one another setting makes ineffective (`SHADOWED`) and, in a config `file`, one read from the
    environment only (`ENVIRONMENT_ONLY`)."""
    _builder(kind)  # an unknown kind is named as such, before its settings are judged
    reads = READS.get(kind, frozenset()) | _EVERY_KIND
    given = {name for name in settings if name.startswith(PREFIX) and setting(settings, name, required=False)}
    for name in sorted(given - reads):
        if name in ENVIRONMENT_ONLY:
            if file:
                raise ConfigurationError(
                    f"{name} is read from the environment (single use, the MCP ttl), not from a codec's config file"
                )
            continue
        readers = sorted(k for k, names in READS.items() if name in names)
        raise ConfigurationError(f"{name} is set but codec kind {kind!r} does not read it (it is read by "
                                 f"{', '.join(readers)}); unset it, or set {CODEC_VAR} to the kind it belongs to")
    for name, by, fix in SHADOWED:
        shadows = sorted(other for other in by if other in given)
        if name in given and name in reads and shadows:
            raise ConfigurationError(f"{name} has no effect beside {' and '.join(shadows)}: {fix}")


def ttl_setting(settings: Mapping[str, str]) -> int:
    """``STATECODEC_TTL``: the seconds a token stays valid, 1 to `MAX_TTL`, default `DEFAULT_TTL`; the one reader
    for the MCP security policy and the single-use guard, so their lifetimes cannot disagree."""
    return int(seconds_setting(settings, TTL_VAR, default=DEFAULT_TTL, low=1, high=MAX_TTL, integer=True))


def missing_package(exc: ImportError) -> str:
    """One line for an optional package that is not installed: the guard's own message where it names the extra
    (every provider module and the Redis store have one), else the package."""
    if "statecodec[" in str(exc):
        return str(exc)
    return f"the Python package {exc.name!r} is not installed; install the statecodec extra that provides it"


def _builder(kind: str) -> Builder | str:
    builder = BUILDERS.get(kind)
    if kind in REMOVED:
        raise ConfigurationError(f"{CODEC_VAR}={kind} is {REMOVED[kind]}")
    if builder is None:
        raise ConfigurationError(f"{CODEC_VAR}={kind!r} is unknown; valid kinds: {', '.join(sorted(BUILDERS))}")
    return builder


def build_codec(kind: str, settings: Mapping[str, str]) -> Codec:
    """Build a codec of `kind` from `settings`, its builder seeing only what `READS` lists for it; `ConfigurationError`
    names the valid kinds."""
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
            raise ConfigurationError(f"the builder for {CODEC_VAR}={kind} ({BUILDERS[kind]}) does not exist")
        if attr == "wrapper_from_settings":  # an envelope kind: the one envelope builder, over its provider
            from statecodec.providers import build_envelope_codec

            builder = functools.partial(build_envelope_codec, wrapper_from_settings=builder)
    view = Settings(settings, READS.get(kind, frozenset()) | _EVERY_KIND, what)
    return check_codec(cast(Builder, builder)(view), f"{what}'s result")


def _kind(settings: Mapping[str, str]) -> str:
    kind = setting(settings, CODEC_VAR, required=False)
    if kind is not None:
        return kind.lower()
    if setting(settings, KEYS_VAR, required=False) or setting(settings, KEYS_FILE_VAR, required=False):
        return DEFAULT_KIND
    raise ConfigurationError(f"no codec configured: set STATECODEC_KEYS (keys from `statecodec keygen`) for the "
                             f"default {DEFAULT_KIND} codec, or {CODEC_VAR} to one of: {', '.join(sorted(BUILDERS))}")


def configured_codec(
    environ: Mapping[str, str] | None = None, *, path: str | os.PathLike[str] | None = None
) -> tuple[str, Codec, Mapping[str, str]]:
    """(kind, codec, settings) of the config file at `path`, else of the environment: checked whole
    (`check_settings`) before the builder runs, so no provider is contacted for a configuration that is wrong.
    The settings may hold keys: read a named, non-secret setting from them, never show them whole."""
    if path is None:
        return _configured(os.environ if environ is None else environ, file=False)
    with named_errors(f"config file {Path(path)}"):
        return _configured(settings_from_file(Path(path)), file=True)


def _configured(settings: Mapping[str, str], *, file: bool) -> tuple[str, Codec, Mapping[str, str]]:
    check_names(settings)  # a misspelt STATECODEC_CODEC is named before the kind is guessed without it
    kind = _kind(settings)
    check_settings(settings, kind, file=file)
    return kind, build_codec(kind, settings), settings


def codec_from_env(environ: Mapping[str, str] | None = None) -> Codec:
    """The codec the environment describes (see the module docstring for the variables); with
    ``STATECODEC_RELOAD_INTERVAL``, one that follows its key files (`live_codec_from_env`)."""
    settings = os.environ if environ is None else environ
    if setting(settings, RELOAD_VAR, required=False) is None:
        return configured_codec(settings)[1]
    return live_codec_from_env(settings)


def codec_from_file(path: str | os.PathLike[str]) -> Codec:
    """The codec a JSON config file describes: an object with the environment variables as members. A member
    the kind does not read is refused before the builder runs: a misspelt one would leave a default in force."""
    return configured_codec(path=path)[1]


def live_settings(environ: Mapping[str, str]) -> tuple[Settings, float, float, list[str], str]:
    """(settings, interval, future skew, key files, instance name), checked: what stops a reloading server at
    start-up stops `statecodec check` too."""
    from statecodec.registry import NAME

    settings = Settings(environ)  # a copy: the codec is rebuilt from the settings it started with
    interval = seconds_setting(settings, RELOAD_VAR, default=5, low=0.05, high=3600)
    future_skew = seconds_setting(settings, SKEW_VAR, default=60, low=0, high=3600)
    files = [value.strip() for name, value in settings.items() if name.startswith(PREFIX) and name.endswith("_FILE")
             and name not in ENVIRONMENT_ONLY and value.strip()]  # fmt: skip
    name = setting(settings, INSTANCE_VAR, required=False) or f"{socket.gethostname()}-{os.getpid()}"
    if not NAME.fullmatch(name):
        raise ConfigurationError(f"{INSTANCE_VAR} must be 1-128 letters, digits or _ . : @ -")
    if not files:
        raise ConfigurationError(f"{RELOAD_VAR} follows key files, and no STATECODEC_*_FILE setting names one: set "
                                 "STATECODEC_KEYS_FILE (or the kind's file setting) instead of the key itself")
    return settings, interval, future_skew, files, name


def live_codec_from_env(environ: Mapping[str, str]) -> ReloadingCodec:
    """What `codec_from_env` returns when ``STATECODEC_RELOAD_INTERVAL`` is set: the configured codec, rebuilt when a
    file a ``STATECODEC_*_FILE`` setting names changes, reporting to the fleet registry when a store is set."""
    from statecodec.registry import Reporter, registry_for
    from statecodec.reload import ReloadingCodec

    settings, interval, future_skew, files, name = live_settings(environ)
    report = None
    if any(setting(settings, var, required=False) for var in (STORE_URL_VAR, f"{STORE_URL_VAR}_FILE")):
        registry = registry_for(store_from_settings(settings))  # none beside the in-process store: no one reads it
        report = None if registry is None else Reporter(registry, name, lifetime=3 * interval + 1)  # 3 missed polls
    return ReloadingCodec(lambda: configured_codec(settings)[1], ttl=ttl_setting(settings), future_skew=future_skew,
                          files=files, interval=interval, report=report)


def store_from_settings(settings: Mapping[str, str]) -> Store:
    """The store ``STATECODEC_STORE_URL`` names: ``memory`` for one process, or a Redis URL (docs/single-use.md)."""
    url, source = text_or_file(settings, STORE_URL_VAR, 4096, "it holds one store URL")
    if url is None:
        raise ConfigurationError(f"{STORE_URL_VAR} is not set; set it to redis://host:6379/0 (a fleet) or memory")
    url, namespace = url.strip(), setting(settings, "STATECODEC_STORE_NAMESPACE", required=False) or "statecodec"
    if url == "memory":
        return MemoryStore(namespace=namespace)
    if url.partition("://")[0] not in REDIS_SCHEMES:  # no part of it is echoed: it may hold a password
        schemes = ", ".join(f"{scheme}://" for scheme in REDIS_SCHEMES)
        raise ConfigurationError(f"{source} must be memory or a URL starting {schemes} (its text is not shown)")
    timeout = seconds_setting(settings, "STATECODEC_STORE_TIMEOUT", default=0.25, low=0, high=60, low_open=True)
    from statecodec.redis_store import RedisStore  # needs the redis extra; imported only when configured

    return RedisStore.from_url(url, namespace=namespace, timeout=timeout)
