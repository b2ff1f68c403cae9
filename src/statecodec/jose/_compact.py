"""What `JWECodec` and `JWSCodec` share: keys by ``kid``, the header check, the caps, JWK Sets and settings.

Threat: a refusal that holds for one format and not the other. Both build keys through one path, hold a
received header to the profile of the one they emit, and seal exactly the payloads whose tokens they open.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, Self, TypeVar

from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, check_cap, check_payload, check_token_text, split_segments
from statecodec._settings import load_settings_file, max_token_length_setting, named_errors, setting
from statecodec._types import HoldsSecrets, OwnKeys
from statecodec.errors import ConfigurationError, InvalidToken, Reason
from statecodec.jose import _jwk
from statecodec.keys import KeyRing

JWKS_FILE_VAR = "STATECODEC_JWKS_FILE"


class KeySlot(HoldsSecrets):
    """A configured key: its ``kid``, the header segment it emits ("" if made per token), its public half."""

    kid: str
    header = ""
    public: _jwk.PublicKey | None = None
    private: _jwk.PrivateKey | None = None


_K = TypeVar("_K", bound=KeySlot)


class CompactCodec(OwnKeys, Generic[_K]):
    """The configuration and checks common to the compact codecs; `_K` is the per-``kid`` key object."""

    __slots__ = ("_alg", "_by_kid", "_expect", "_fast", "_max_payload", "_members", "_primary")
    _ALG_VAR: ClassVar[str]  # the setting that names the algorithm
    _ALGS: ClassVar[tuple[str, ...]]  # every algorithm the codec implements, the default first
    _slot: Callable[[str, str, _jwk.Key, int], _K]  # (alg, kid, key, position) -> the key object; `kid` may be ""
    _seal: Callable[[bytes], str]  # the token of a payload already checked, under the sealing key

    def __init__(
        self, keys: KeyRing | Iterable[bytes], *, alg: str = "", max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH
    ) -> None:
        """A codec over a key ring, its keys derived per ``alg`` (`statecodec.jose.derived_jwk`): ``dir`` (the
        default) or ``A256KW`` for a JWE, ``HS256`` for a JWS."""
        alg = alg or self._ALGS[0]
        if alg not in self._ALGS or alg not in _jwk.LABELS:
            raise ConfigurationError(f"a key ring does not serve alg {alg!r}; from_jwks takes {', '.join(self._ALGS)}")
        ring = keys if isinstance(keys, KeyRing) else KeyRing(keys)
        self._setup(alg, [(kid.hex(), key) for kid, key in ring.subkeys(_jwk.LABELS[alg])], max_token_length)

    def _setup(self, alg: str, entries: Sequence[tuple[str, _jwk.Key]], max_token_length: object) -> Self:
        """Keys by ``kid`` (the first seals), the header profile, and the caps; `ConfigurationError` otherwise."""
        by_kid: dict[str, _K] = {}
        for i, (kid, key) in enumerate(entries):
            slot = self._slot(alg, kid, key, i)
            if slot.kid in by_kid:
                raise ConfigurationError(f"two keys share the kid {slot.kid!r}; list each key once")
            by_kid[slot.kid] = slot
        self._alg, self._by_kid, self._key_ids, self._primary = alg, by_kid, tuple(by_kid), next(iter(by_kid.values()))
        # Our own header segments map straight to their key: no JSON, and nothing the strict parse refuses.
        self._fast = {slot.header: slot for slot in by_kid.values() if slot.header}
        # A received header must match the one this codec's own token carries: the same members,
        # and the same "alg" and "enc". That token, of an empty payload, is also the smallest.
        own = self._seal(b"")
        headers = [own[: own.index(".")], *(slot.header for slot in by_kid.values())]
        if max(map(len, headers)) > _jwk.MAX_HEADER_LENGTH:  # a long kid, once escaped as JSON
            raise ConfigurationError(f"a header is over {_jwk.MAX_HEADER_LENGTH} characters: use a shorter, ASCII kid")
        header = _jwk.parse_header(headers[0])
        self._members = frozenset(header)
        self._expect = {name: value for name, value in header.items() if name in ("alg", "enc")}
        self._max_length, self._max_payload = check_cap(max_token_length, len(own))
        return self

    @classmethod
    def _from_keys(cls, alg: str, keys: object, max_token_length: object) -> Self:
        if not isinstance(keys, (list, tuple)) or not keys:
            raise ConfigurationError("keys must be a non-empty list of keys: write keys=[key]")
        return cls.__new__(cls)._setup(alg, [("", key) for key in keys], max_token_length)

    @classmethod
    def from_jwks(cls, jwks: object, *, alg: str = "", max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH) -> Self:
        """A codec over JWKs shared with another JOSE stack (a JWK Set, a list, or one JWK): the first key seals.
        Without `alg`, the first key's ``alg`` member, else the default (docs/jwe.md, docs/jws.md)."""
        named = _jwk.jwk_list(jwks)[0].get("alg")
        alg = alg or (named if isinstance(named, str) and named in cls._ALGS else cls._ALGS[0])
        if alg not in cls._ALGS:
            raise ConfigurationError(f"alg must be one of {', '.join(cls._ALGS)}")
        entries = [_jwk.load_jwk(jwk, i, alg) for i, jwk in enumerate(_jwk.jwk_list(jwks))]
        secrets = [key for _, key in entries if isinstance(key, bytes)]
        if secrets:
            KeyRing(secrets)  # a ring's checks: 32 bytes at least, not a password, no duplicates
        return cls.__new__(cls)._setup(alg, entries, max_token_length)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self:
        """A codec from ``STATECODEC_JWE_ALG``/``_JWS_ALG``, the keys of ``STATECODEC_JWKS_FILE`` (a JWK Set)
        or else the key ring (``STATECODEC_KEYS``/``_KEYS_FILE``), and ``STATECODEC_MAX_TOKEN_LENGTH``."""
        settings = os.environ if environ is None else environ
        alg = setting(settings, cls._ALG_VAR, required=False) or cls._ALGS[0]
        if alg not in cls._ALGS:
            raise ConfigurationError(f"{cls._ALG_VAR} must be one of {', '.join(cls._ALGS)} (case-sensitive)")
        limit = max_token_length_setting(settings)
        path = setting(settings, JWKS_FILE_VAR, required=False)
        if path is not None:
            jwks = load_settings_file(Path(path), 2**20, f"{JWKS_FILE_VAR} {path}", "is it a JWK Set?", as_json=True)
            with named_errors(JWKS_FILE_VAR):
                return cls.from_jwks(jwks, alg=alg, max_token_length=limit)
        if alg not in _jwk.LABELS:
            raise ConfigurationError(f"{cls._ALG_VAR}={alg} needs {JWKS_FILE_VAR}: a key ring does not serve it")
        return cls(KeyRing.from_env(environ=settings), alg=alg, max_token_length=limit)

    @property
    def alg(self) -> str:
        """The configured algorithm, the only one this codec emits or accepts."""
        return self._alg

    def public_jwks(self) -> dict[str, list[dict[str, str]]]:
        """The public JWK Set of an ECDH-ES+A256KW or Ed25519 codec, for the stacks that seal to it or verify it."""
        return self._jwks(private=False)

    def private_jwks(self) -> dict[str, list[dict[str, str]]]:
        """The JWK Set (secret: private keys with ``d``) another JOSE stack needs to do everything this
        ECDH-ES+A256KW or Ed25519 codec does; `from_jwks` rebuilds this codec from it."""
        return self._jwks(private=True)

    def _jwks(self, *, private: bool) -> dict[str, list[dict[str, str]]]:
        if self._alg in _jwk.LABELS:
            raise ConfigurationError("symmetric keys have no public half; share the key (statecodec.jose.derived_jwk)")
        use, alg, keys = _jwk.PROFILES[self._alg][0], self._alg, []
        for slot in self._by_kid.values():
            assert slot.public is not None  # every slot of an ECDH-ES+A256KW or Ed25519 codec has its public half
            jwk = _jwk.private_jwk(slot.private) if private and slot.private else _jwk.public_jwk(slot.public)
            keys.append({**jwk, "kid": slot.kid, "use": use, "alg": alg})
        return {"keys": keys}

    def seal(self, payload: bytes) -> str:
        """The token of `payload` under the first key (readable by anyone for a JWS)."""
        check_payload(payload, self._max_payload)
        return self._seal(bytes(payload))

    def _parse(self, token: object, count: int) -> tuple[list[str], dict[str, Any] | None, _K]:
        """The segments, header (None if byte for byte one we emit) and key of a token, checked in this order: the
        cap, the dot count, a strict parse, ``alg`` and ``enc``, the members, the ``kid`` (``unknown_key``)."""
        segments = split_segments(check_token_text(token, self._max_length), count)
        slot = self._fast.get(segments[0])
        if slot is not None:
            return segments, None, slot
        header = _jwk.parse_header(segments[0])
        # Compared, never dispatched on: the configuration alone chose the algorithm.
        if any(header.get(name) != value for name, value in self._expect.items()):
            raise InvalidToken(Reason.ALG)
        if not self._members.issuperset(header):
            raise InvalidToken(Reason.HEADER)
        kid = header.get("kid")  # every token here carries one
        # Checked before any dict lookup: a list or object kid is unhashable.
        if type(kid) is not str or not 0 < len(kid) <= _jwk.MAX_KID_LENGTH:
            raise InvalidToken(Reason.HEADER)
        slot = self._by_kid.get(kid)
        if slot is None:
            raise InvalidToken(Reason.UNKNOWN_KEY)
        return segments, header, slot

    def __repr__(self) -> str:
        enc = f", enc={self._expect['enc']!r}" if "enc" in self._expect else ""
        return f"{type(self).__name__}(alg={self._alg!r}{enc}, key_ids={list(self._by_kid)!r})"
