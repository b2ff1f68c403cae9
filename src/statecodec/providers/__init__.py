"""Key providers for `EnvelopeCodec`: one module per KMS, each behind its own extra.

Threat: a provider module that imports its SDK eagerly would make the SDK a
hard dependency of everyone; one that hides failures would start a server
that cannot unseal. Each provider module imports its SDK when imported and,
if the SDK is missing, raises `ImportError` naming the extra to install
(``pip install 'statecodec[aws]'``); `import statecodec` never imports them.

Modules:

- `statecodec.providers.aws_kms`: AWS KMS (``statecodec[aws]``, boto3)
- `statecodec.providers.gcp_kms`: Google Cloud KMS (``statecodec[gcp]``, google-cloud-kms)

Shared settings for envelope codecs built from the environment or a config
file (see `statecodec.config`):

``STATECODEC_WRAPPED_KEYS``
    The wrapped data keys: unpadded base64url, comma-separated, the sealing
    key first (``statecodec kms new-data-key`` prints one). Not secret
    without the KMS key, but treat it as configuration, not as public data.
``STATECODEC_WRAPPED_KEYS_FILE``
    A file holding the same text (one per line or comma-separated); set this
    or ``STATECODEC_WRAPPED_KEYS``, not both.
``STATECODEC_KMS_CONTEXT``
    Optional context bound to every wrapped key: ``key=value`` pairs,
    comma-separated, or a JSON object of strings. Default
    ``purpose=statecodec-envelope``, plus ``audience=`` when
    ``STATECODEC_KMS_AUDIENCE`` is set.
``STATECODEC_KMS_AUDIENCE``
    Optional audience added to the default context (ignored when
    ``STATECODEC_KMS_CONTEXT`` is set).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path

from statecodec.config import max_token_length_setting, read_settings_file, setting
from statecodec.envelope import EnvelopeCodec, KeyWrapper, default_context, parse_wrapped_keys
from statecodec.errors import ConfigurationError
from statecodec.providers._retry import RetryPolicy

__all__ = [
    "AUDIENCE_VAR",
    "CONTEXT_VAR",
    "WRAPPED_KEYS_FILE_VAR",
    "WRAPPED_KEYS_VAR",
    "RetryPolicy",
    "build_envelope_codec",
    "context_from_settings",
    "missing_extra",
    "parse_context",
    "wrapped_keys_from_settings",
]

WRAPPED_KEYS_VAR = "STATECODEC_WRAPPED_KEYS"
WRAPPED_KEYS_FILE_VAR = "STATECODEC_WRAPPED_KEYS_FILE"
CONTEXT_VAR = "STATECODEC_KMS_CONTEXT"
AUDIENCE_VAR = "STATECODEC_KMS_AUDIENCE"
_MAX_WRAPPED_FILE_BYTES = 256 * 1024


def missing_extra(package: str, extra: str) -> ImportError:
    """The ImportError a provider module raises when its SDK is not installed."""
    return ImportError(
        f"this key provider needs the {package!r} package; install it with: pip install 'statecodec[{extra}]'",
        name=package,
    )


def wrapped_keys_from_settings(settings: Mapping[str, str]) -> list[bytes]:
    """Wrapped blobs from exactly one of ``STATECODEC_WRAPPED_KEYS`` or ``..._FILE``."""
    text = setting(settings, WRAPPED_KEYS_VAR, required=False)
    path = setting(settings, WRAPPED_KEYS_FILE_VAR, required=False)
    if text is not None and path is not None:
        raise ConfigurationError(f"both {WRAPPED_KEYS_VAR} and {WRAPPED_KEYS_FILE_VAR} are set; set exactly one")
    if path is not None:
        p = Path(path)
        raw = read_settings_file(
            p, _MAX_WRAPPED_FILE_BYTES, f"{WRAPPED_KEYS_FILE_VAR} {p}", "is it a wrapped-key file?"
        )
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            raise ConfigurationError(f"{WRAPPED_KEYS_FILE_VAR} {p} is not base64url text") from None
        source = f"{WRAPPED_KEYS_FILE_VAR} {p}"
    elif text is not None:
        source = WRAPPED_KEYS_VAR
    else:
        raise ConfigurationError(
            f"no wrapped data keys configured: set {WRAPPED_KEYS_VAR} to the output of "
            f"`statecodec kms new-data-key`, or {WRAPPED_KEYS_FILE_VAR} to a file holding it"
        )
    try:
        return parse_wrapped_keys(text)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{source}: {exc}") from None


def parse_context(text: str) -> dict[str, str]:
    """A context from ``k=v,k=v`` or a JSON object of strings."""
    text = text.strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            raise ConfigurationError("context is not valid JSON; write k=v,k=v or a JSON object") from None
        if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
            raise ConfigurationError("a JSON context must be an object whose values are strings")
        return dict(doc)
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError("context must be comma-separated key=value pairs, e.g. purpose=x,audience=y")
        if key.strip() in out:
            raise ConfigurationError(f"context names {key.strip()!r} twice")
        out[key.strip()] = value.strip()
    return out


def context_from_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """``STATECODEC_KMS_CONTEXT``, or the default context with ``STATECODEC_KMS_AUDIENCE``."""
    text = setting(settings, CONTEXT_VAR, required=False)
    if text is not None:
        try:
            return parse_context(text)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{CONTEXT_VAR}: {exc}") from None
    return default_context(setting(settings, AUDIENCE_VAR, required=False))


def build_envelope_codec(
    settings: Mapping[str, str],
    wrapper_from_settings: Callable[[Mapping[str, str]], AbstractContextManager[KeyWrapper]],
) -> EnvelopeCodec:
    """The envelope codec the settings describe, over the wrapper `wrapper_from_settings` builds.

    Every setting is read and checked before the provider is contacted; the
    ring is unwrapped once, and the wrapper (its client, channel or
    connection pool) is closed on return: after start-up the codec needs no
    provider.
    """
    blobs = wrapped_keys_from_settings(settings)
    context = context_from_settings(settings)
    max_length = max_token_length_setting(settings)
    with wrapper_from_settings(settings) as wrapper:
        return EnvelopeCodec(wrapper, blobs, context=context, max_token_length=max_length)
