"""Build a codec from the environment or a JSON file, failing at start-up, never per token.

Threat: a misread configuration (a typo in a variable name, a key file that
is not there, a kind nobody implements) must not start a server that seals
under the wrong key or silently under none. Every problem raises
`ConfigurationError` before any token is sealed, with a message that names
the variable and says how to fix it, and never echoes a secret.

Environment variables (a config file takes the same names as JSON keys):

``STATECODEC_CODEC``
    Which codec to build: one of the kinds in `BUILDERS` (``aesgcm``,
    ``xaesgcm``, ...). Optional when ``STATECODEC_KEYS`` or
    ``STATECODEC_KEYS_FILE`` is set, in which case it defaults to ``aesgcm``.
``STATECODEC_KEYS``
    The key ring in the text format of `statecodec.keys`: unpadded base64url
    secrets of at least 32 bytes, comma-separated, the sealing key first
    (``statecodec keygen`` prints one). Secret.
``STATECODEC_KEYS_FILE``
    Path of a file holding the key ring in the same format (one key per line
    or comma-separated; ``#`` comments and blank lines ignored). Set this or
    ``STATECODEC_KEYS``, not both.
``STATECODEC_MAX_TOKEN_LENGTH``
    Optional cap, in characters, on any token the codec will look at; a
    decimal integer. Defaults to 131072 (128 Ki characters, room for a 64 KiB
    payload).

Codecs backed by a KMS, Vault or JOSE read further ``STATECODEC_*``
variables, documented by their builders.

Config file (`codec_from_file`): one JSON object whose members are the
variables above, for example::

    {"STATECODEC_CODEC": "xaesgcm", "STATECODEC_KEYS_FILE": "keys.txt",
     "STATECODEC_MAX_TOKEN_LENGTH": 65536}

Values are strings; integers are accepted for numeric settings and a list of
strings for ``STATECODEC_KEYS``. A relative path in a member whose name ends
in ``_FILE`` is resolved against the config file's directory. Members that
do not start with ``STATECODEC_``, and members the chosen kind's builder does
not read, are refused, so a typo cannot pass for an unused setting.

Adding a codec kind is one entry in `BUILDERS`: the kind maps to a builder,
a callable ``(settings: Mapping[str, str]) -> codec``, or to its import path
``"package.module:function"``, resolved only when that kind is chosen so an
optional dependency is imported only by those who use it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH
from statecodec._files import load_json_setting, read_settings_file
from statecodec._types import Codec
from statecodec.aead import AESGCMCodec, XAESGCMCodec
from statecodec.errors import ConfigurationError
from statecodec.keys import KeyRing

__all__ = [
    "BUILDERS",
    "CODEC_VAR",
    "DEFAULT_KIND",
    "KEYS_FILE_VAR",
    "KEYS_VAR",
    "MAX_TOKEN_LENGTH_VAR",
    "Builder",
    "Codec",
    "build_codec",
    "codec_from_env",
    "codec_from_file",
    "keys_configured",
    "max_token_length_setting",
    "read_settings_file",
    "ring_from_settings",
    "setting",
]

CODEC_VAR = "STATECODEC_CODEC"
KEYS_VAR = "STATECODEC_KEYS"
KEYS_FILE_VAR = "STATECODEC_KEYS_FILE"
MAX_TOKEN_LENGTH_VAR = "STATECODEC_MAX_TOKEN_LENGTH"  # noqa: S105 - a variable name, not a secret
DEFAULT_KIND = "aesgcm"
_PREFIX = "STATECODEC_"
_MAX_CONFIG_FILE_BYTES = 1024 * 1024


Builder = Callable[[Mapping[str, str]], Codec]
"""Builds a codec from settings (the environment, or a config file's members)."""


def _build_aesgcm(settings: Mapping[str, str]) -> AESGCMCodec:
    return AESGCMCodec(ring_from_settings(settings), max_token_length=max_token_length_setting(settings))


def _build_xaesgcm(settings: Mapping[str, str]) -> XAESGCMCodec:
    return XAESGCMCodec(ring_from_settings(settings), max_token_length=max_token_length_setting(settings))


BUILDERS: dict[str, Builder | str] = {
    "aesgcm": _build_aesgcm,
    "xaesgcm": _build_xaesgcm,
    "aws-kms": "statecodec.providers.aws_kms:build_codec",
    "gcp-kms": "statecodec.providers.gcp_kms:build_codec",
    "vault-envelope": "statecodec.providers.vault:envelope_codec_from_settings",
    "vault-transit": "statecodec.providers.vault:transit_codec_from_settings",
    "jwe": "statecodec.jose.jwe:from_settings",
    "jws": "statecodec.jose.jws:from_settings",
}
"""Codec kinds (values of ``STATECODEC_CODEC``) and their builders or import paths."""


def setting(settings: Mapping[str, str], name: str, *, required: bool = True) -> str | None:
    """The stripped value of `name`, or None when unset and optional.

    Raises `ConfigurationError` naming the variable when it is required and
    unset or blank; the message never contains a value.
    """
    value = settings.get(name)
    if value is None or not value.strip():
        if required:
            raise ConfigurationError(f"{name} is not set; it is required for this codec kind")
        return None
    return value.strip()


def keys_configured(settings: Mapping[str, str]) -> bool:
    """Whether a key ring is configured (``STATECODEC_KEYS`` or ``STATECODEC_KEYS_FILE``)."""
    return any(setting(settings, var, required=False) is not None for var in (KEYS_VAR, KEYS_FILE_VAR))


def ring_from_settings(settings: Mapping[str, str]) -> KeyRing:
    """The key ring from exactly one of ``STATECODEC_KEYS`` or ``STATECODEC_KEYS_FILE``."""
    text = setting(settings, KEYS_VAR, required=False)
    path = setting(settings, KEYS_FILE_VAR, required=False)
    if text is not None and path is not None:
        raise ConfigurationError(
            f"both {KEYS_VAR} and {KEYS_FILE_VAR} are set; set exactly one so there is one source of keys"
        )
    if path is not None:
        return KeyRing.from_file(path)
    if text is not None:
        return KeyRing.from_env(KEYS_VAR, settings)
    raise ConfigurationError(
        f"no keys configured: set {KEYS_VAR} to comma-separated base64url keys (generate one with "
        f"`statecodec keygen`) or {KEYS_FILE_VAR} to the path of a key file"
    )


def max_token_length_setting(settings: Mapping[str, str]) -> int:
    """``STATECODEC_MAX_TOKEN_LENGTH`` as a positive int, or the library default when unset."""
    text = setting(settings, MAX_TOKEN_LENGTH_VAR, required=False)
    if text is None:
        return DEFAULT_MAX_TOKEN_LENGTH
    # isdecimal() first: int() also accepts '+5', '1_000' and non-ASCII digits.
    if not (text.isascii() and text.isdecimal()) or int(text) < 1:
        raise ConfigurationError(
            f"{MAX_TOKEN_LENGTH_VAR} must be a positive decimal integer (characters), "
            f"for example {DEFAULT_MAX_TOKEN_LENGTH}"
        )
    return int(text)


def _valid_kinds() -> str:
    return ", ".join(sorted(BUILDERS))


def _resolve(kind: str, builder: Builder | str) -> Builder:
    if not isinstance(builder, str):
        return builder
    module_name, _, attr = builder.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if "statecodec[" in str(exc):  # the provider module's own guard names its extra
            raise ConfigurationError(f"{CODEC_VAR}={kind}: {exc}") from None
        missing = exc.name or module_name
        raise ConfigurationError(
            f"{CODEC_VAR}={kind} needs the Python package {missing!r}, which is not installed; "
            f"install the statecodec extra that provides it"
        ) from None
    found = getattr(module, attr, None)
    if not callable(found):
        raise ConfigurationError(f"the builder for {CODEC_VAR}={kind} ({builder}) does not exist")
    resolved: Builder = found
    return resolved


def build_codec(kind: str, settings: Mapping[str, str]) -> Codec:
    """Build a codec of `kind` from `settings`; `ConfigurationError` names the valid kinds."""
    builder = BUILDERS.get(kind)
    if builder is None:
        raise ConfigurationError(f"{CODEC_VAR}={kind!r} is not a codec kind; valid kinds: {_valid_kinds()}")
    codec = _resolve(kind, builder)(settings)
    if not isinstance(codec, Codec):
        raise ConfigurationError(f"the builder for {CODEC_VAR}={kind} did not return a codec")
    return codec


def _kind(settings: Mapping[str, str]) -> str:
    kind = setting(settings, CODEC_VAR, required=False)
    if kind is not None:
        return kind.lower()
    if keys_configured(settings):
        return DEFAULT_KIND
    raise ConfigurationError(
        f"no codec configured: set {KEYS_VAR} (keys from `statecodec keygen`) for the default "
        f"{DEFAULT_KIND} codec, or {CODEC_VAR} to one of: {_valid_kinds()}"
    )


def codec_from_env(environ: Mapping[str, str] | None = None) -> Codec:
    """The codec the environment describes (see the module docstring for the variables)."""
    settings = os.environ if environ is None else environ
    return build_codec(_kind(settings), settings)


def _setting_text(name: str, value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if name == KEYS_VAR and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    raise ConfigurationError(f"{name} must be a JSON string, got {type(value).__name__}")


def codec_from_file(path: str | os.PathLike[str]) -> Codec:
    """The codec a JSON config file describes: an object with the environment variables as members."""
    p = Path(path)
    raw = read_settings_file(p, _MAX_CONFIG_FILE_BYTES, f"config file {p}", "is it the right file?")
    doc = load_json_setting(raw, f"config file {p}")
    if not isinstance(doc, dict):
        raise ConfigurationError(f"config file {p} must hold a JSON object of {_PREFIX}* settings")
    try:
        settings = _ReadTracker(_settings_from_document(doc, p.parent))
        kind = _kind(settings)
        codec = build_codec(kind, settings)
        # A misspelt member would otherwise pass as an unused setting and leave a default in force.
        unused = sorted(name for name in settings if name not in settings.read)
        if unused:
            raise ConfigurationError(
                f"{', '.join(unused)} {'is' if len(unused) == 1 else 'are'} not read by codec kind {kind!r}; "
                "check the spelling against docs/configuration.md, or remove the member"
            )
        return codec
    except ConfigurationError as exc:
        raise ConfigurationError(f"config file {p}: {exc}") from None


class _ReadTracker(Mapping[str, str]):
    """Settings that remember which names the builders looked up; they may hold keys, so no pickling."""

    def __init__(self, settings: dict[str, str]) -> None:
        self._settings = settings
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.read.add(name)
        return self._settings[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._settings)

    def __len__(self) -> int:
        return len(self._settings)

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("the settings hold secrets and are not picklable")


def _settings_from_document(doc: dict[str, object], base: Path) -> dict[str, str]:
    settings: dict[str, str] = {}
    for name, value in doc.items():
        if not name.startswith(_PREFIX):
            raise ConfigurationError(f"member {name!r} is not a setting; every member starts with {_PREFIX}")
        text = _setting_text(name, value)
        if name.endswith("_FILE") and text.strip() and not Path(text.strip()).is_absolute():
            text = str(base / text.strip())
        settings[name] = text
    return settings
