"""Key material, key ids and key rings; loading keys from the environment or a file.

Threat: a weak, duplicated or leaked secret undoes every guarantee above it. A ring refuses short, low-variety and
duplicated secrets and never shows one in its `repr`; each is stretched with HKDF-SHA256 under a label per use, so the
same bytes used elsewhere yield unrelated keys. The text format: docs/formats.md.
"""

from __future__ import annotations

import hmac
import os
import secrets
import string
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from statecodec._encoding import b64u_decode, b64u_encode, b64u_len
from statecodec._settings import KEYS_VAR, load_settings_file, named_errors, text_or_file
from statecodec._types import HoldsSecrets
from statecodec.errors import ConfigurationError, InvalidToken

__all__ = ["KEY_ID_LENGTH", "MIN_KEY_LENGTH", "TAG_LENGTH", "KeyRing", "derive_key", "field", "format_keys",
           "generate_key", "lp", "mac", "parse_keys", "read_key_file"]

MIN_KEY_LENGTH = 32
KEY_ID_LENGTH = 4
TAG_LENGTH = 16  # every truncated HMAC-SHA256 tag and digest: binding tags, single-use stamps and scopes
_KEY_ID_INFO = b"statecodec/v1/key-id"
_MIN_DISTINCT_BYTES = 8
_MAX_KEY_FILE_BYTES = 64 * 1024  # over a thousand keys with comments; a key file is never read without bound
_WHAT_A_KEY_IS = ("A key is unpadded base64url (A-Z a-z 0-9 - _, no '=') of at least 32 random bytes: 43 "
                  "characters or more.")
_HOW_TO_GENERATE = (
    'Generate one with `statecodec keygen` or python -c "import secrets; print(secrets.token_urlsafe(32))"'
)


def _text_refusal(item: str) -> str | None:
    """Why a key's text is recognisably not what `statecodec keygen` prints (hex, standard base64, a path, a
    password), else None. A random 43-character key lacks a letter case with probability about 2e-10."""
    if item.startswith(("/", "./", "../", "~/")) and not item.endswith("="):
        return "looks like a file path: a file of keys is named by the setting's _FILE form (STATECODEC_KEYS_FILE)"
    if any(c in item for c in "=+/"):
        return "is not unpadded base64url: it looks like standard or padded base64 (openssl rand -base64)"
    # Hex encodes whole bytes (an even length) and has the variety of random bytes: a repeated letter is no hex.
    hexlike = len(item) % 2 == 0 and len(set(item.lower())) >= _MIN_DISTINCT_BYTES
    if hexlike and len(item) >= MIN_KEY_LENGTH and all(c in string.hexdigits for c in item):
        return "is not unpadded base64url: it looks like hex (openssl rand -hex)"
    if len(item) >= b64u_len(MIN_KEY_LENGTH) and (len(set(item)) < 16 or item.lower() == item or item.upper() == item):
        return "looks like a password or passphrase, not random bytes"
    return None


def generate_key() -> bytes:
    return secrets.token_bytes(MIN_KEY_LENGTH)


def derive_key(secret: bytes, info: bytes, length: int = 32) -> bytes:
    """HKDF-SHA256 of `secret` under a statecodec label: one key per use of a secret."""
    return HKDF(algorithm=SHA256(), length=length, salt=None, info=info).derive(secret)


def lp(text: str) -> bytes:
    """4-byte big-endian length, then the UTF-8 bytes: concatenations of fields stay unambiguous."""
    data = text.encode("utf-8", "surrogatepass")  # MAC inputs are never decoded: every str is encodable
    return len(data).to_bytes(4, "big") + data


def field(value: str | None) -> bytes:
    """An optional field: ``0x00`` when absent, else ``0x01`` then `lp` of it."""
    return b"\x00" if value is None else b"\x01" + lp(value)


def mac(keyed: hmac.HMAC, data: bytes) -> bytes:
    """HMAC-SHA256 of what `keyed` was fed then `data`, truncated."""
    # Copying an HMAC keyed once skips the key set-up `hmac.new` repeats (benchmarks/binding.py, "parts"); `keyed` is
    # never updated, so threads share it: it holds a key, never a tag or a verdict.
    copy = keyed.copy()
    copy.update(data)
    return copy.digest()[:TAG_LENGTH]


def check_unique_ids(name: str, items: Sequence[bytes], ids: Sequence[bytes], how_to: str) -> None:
    """The one duplicate rule for a ring: refuse an item listed twice, and two different items whose ids collide;
    `name` formats an item's position (``"key {}"``)."""
    first: dict[bytes, int] = {}
    for i, kid in enumerate(ids):
        j = first.setdefault(kid, i)
        if j == i:
            continue
        if hmac.compare_digest(items[i], items[j]):
            raise ConfigurationError(f"{name.format(i)} duplicates {name.format(j)}; list each key once "
                                     "(rotation is [old, new] -> [new, old] -> [new])")
        raise ConfigurationError(f"{name.format(i)} and {name.format(j)} are different keys whose {KEY_ID_LENGTH}-byte "
                                 f"key ids collide (a 1 in 2^32 chance for any two keys); tokens name their key by id, "
                                 f"so generate another key to use in place of {name.format(i)}. {how_to}")


def _check_secret(index: int, secret: object) -> bytes:
    if not isinstance(secret, (bytes, bytearray, memoryview)):
        # Never coerce: bytes(32) is 32 zero bytes, and a str has no single meaning.
        hint = " (parse text keys with statecodec.parse_keys or KeyRing.from_env)" if isinstance(secret, str) else ""
        raise ConfigurationError(f"key {index} must be bytes, got {type(secret).__name__}{hint}")
    material = bytes(secret)
    if len(material) < MIN_KEY_LENGTH:
        raise ConfigurationError(f"key {index} is {len(material)} bytes; keys must be at least {MIN_KEY_LENGTH} bytes "
                                 f"of secret randomness. {_HOW_TO_GENERATE}")
    if len(set(material)) < _MIN_DISTINCT_BYTES:
        raise ConfigurationError(f"key {index} has fewer than {_MIN_DISTINCT_BYTES} distinct byte values, which no "
                                 f"random secret has; it looks like a password or a placeholder. {_HOW_TO_GENERATE}")
    return material


class KeyRing(HoldsSecrets, Sequence[bytes]):
    """An ordered, validated list of secrets: `ring[0]` seals, every key unseals; it shows only key ids (4-byte,
    non-secret HKDF fingerprints, hex)."""

    __slots__ = ("_ids", "_secrets")

    def __init__(self, keys: Iterable[bytes | bytearray | memoryview]) -> None:
        if isinstance(keys, (bytes, bytearray, memoryview, str)):
            raise ConfigurationError("keys must be a list of secrets, not a single key: write keys=[key]")
        if not isinstance(keys, Iterable):
            raise ConfigurationError(f"keys must be a list of byte-string secrets, got {type(keys).__name__}. "
                                     f"{_HOW_TO_GENERATE}")
        material = [_check_secret(i, k) for i, k in enumerate(keys)]
        if not material:
            raise ConfigurationError(f"a key ring needs at least one key. {_HOW_TO_GENERATE}")
        # Key ids are non-secret fingerprints: HKDF output under its own label reveals nothing of the subkeys.
        ids = [derive_key(secret, _KEY_ID_INFO, KEY_ID_LENGTH) for secret in material]
        check_unique_ids("key {}", material, ids, _HOW_TO_GENERATE)
        self._secrets, self._ids = tuple(material), tuple(ids)

    @classmethod
    def generate(cls) -> KeyRing:
        """A ring of one fresh random key (single-process use)."""
        return cls([generate_key()])

    @classmethod
    def parse(cls, text: str) -> KeyRing:
        return cls(parse_keys(text))

    @classmethod
    def from_env(cls, var: str = KEYS_VAR, environ: Mapping[str, str] | None = None) -> KeyRing:
        """The one key reader of settings: a ring from exactly one of `var` or ``<var>_FILE``, errors naming it."""
        settings = os.environ if environ is None else environ
        text, source = text_or_file(settings, var, _MAX_KEY_FILE_BYTES, "it should hold a few lines of keys")
        if text is None:
            keys = "comma-separated base64url keys" if var == KEYS_VAR else "one base64url key"  # a ring, or one key
            raise ConfigurationError(f"no keys configured: set {var} to {keys} (generate one with `statecodec keygen`) "
                                     f"or {var}_FILE to the path of a key file")
        with named_errors(source):
            return cls.parse(text)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> KeyRing:
        """A ring from a file in the text format (one key per line or comma-separated), at most 64 KiB."""
        p = Path(path)
        text = read_key_file(p)
        with named_errors(str(p)):
            return cls.parse(text)

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Hex key ids in ring order; the first is the id new tokens carry."""
        return tuple(kid.hex() for kid in self._ids)

    def subkeys(self, info: bytes) -> list[tuple[bytes, bytes]]:
        """(key id, HKDF subkey under `info`) for every key, in ring order."""
        return [(kid, derive_key(s, info)) for kid, s in zip(self._ids, self._secrets, strict=True)]

    def to_text(self) -> str:
        """The ring in the text format. Secret: for writing a key file or an env value."""
        return format_keys(self._secrets)

    def __getitem__(self, index: int) -> bytes:  # type: ignore[override]
        return self._secrets[index]

    def __len__(self) -> int:
        return len(self._secrets)

    def __repr__(self) -> str:
        return f"KeyRing(key_ids={list(self.key_ids)!r})"

    def __eq__(self, other: object) -> bool:
        return self._ids == other._ids if isinstance(other, KeyRing) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._ids)


def read_key_file(path: Path) -> str:
    """The text of a key file, at most 64 KiB: the one reader of key files (`KeyRing.from_file`, `rotate`)."""
    return str(load_settings_file(path, _MAX_KEY_FILE_BYTES, f"key file {path}", "it should hold a few lines of keys"))


def parse_keys(text: str) -> list[bytes]:
    """Parse the text format into secrets; errors name the key by position, never by value."""
    lines = [line.strip() for line in text.splitlines()]
    items = [part.strip() for line in lines if line and not line.startswith("#") for part in line.split(",")]
    out: list[bytes] = []
    for i, item in enumerate(items):
        if not item:
            raise ConfigurationError(f"key {i} is empty (stray comma?)")
        why = _text_refusal(item)
        try:
            if why is None:
                out.append(b64u_decode(item))
        except InvalidToken:
            why = "is not unpadded base64url"
        if why is not None:
            raise ConfigurationError(f"key {i} {why}. {_WHAT_A_KEY_IS} {_HOW_TO_GENERATE}") from None
    if not out:
        raise ConfigurationError(f"no keys found. {_HOW_TO_GENERATE}")
    return out


def format_keys(keys: Iterable[bytes]) -> str:
    """The text format of `keys`, comma-separated (secret)."""
    return ",".join(b64u_encode(bytes(k)) for k in keys)
