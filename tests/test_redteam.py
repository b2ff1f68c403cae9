"""The codec contract: every configuration of tests/codecs.py runs it; only InvalidToken escapes, nothing leaks.

The conformance kit runs once per configuration; the tests after it cover what it cannot know: reason codes,
format separation under one secret, repr and copies, the caps seal and unseal share, rotation, the JOSE
layout, construction refusals. A codec's own file tests only what is its own.
"""

from __future__ import annotations

import datetime
import hmac
import importlib
import itertools
import json
import os
import pickle
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, cast

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519, x25519
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.server.request_state import InvalidRequestState

from statecodec import AESGCMCodec, ConfigurationError, InvalidToken, JWECodec, JWSCodec, KeyRing, Reason, SealError
from statecodec._encoding import DEFAULT_MAX_TOKEN_LENGTH, b64u_decode, b64u_encode
from statecodec._types import HoldsSecrets
from statecodec.binding import BoundCodec
from statecodec.envelope import MAX_WRAPPED_KEY_LENGTH, EnvelopeCodec, new_wrapped_key
from statecodec.testing import assert_conformant
from tests.codecs import BINDING_KEY, CODECS, DETERMINISTIC, FOREIGN, OTHER, RINGS, SECRET, reason
from tests.envelope_wrappers import LocalWrapper
from tests.integration.kms_support import assert_no_secret_in
from tests.plugins import assert_not_copyable

MARKER = "redteam-marker-do-not-log-4b1d"
PAYLOAD = b'{"state":"redteam"}'
TOKENS = {name: codec.seal(PAYLOAD) for name, codec in CODECS.items()}
JOSE = [name for name in CODECS if name.startswith(("jwe", "jws", "bound-jws"))]
# Layering, not confusion: a BoundCodec's token is its inner codec's token.
LAYERED = {("bound-aesgcm", "aesgcm"), ("bound-jws", "jws-hs256")}
FUZZ = settings(max_examples=40, derandomize=True, database=None, deadline=None, suppress_health_check=[*HealthCheck])


class _TokenStr(str):
    """A str subclass that lies about its length: parsing must never trust it."""

    def __len__(self) -> int:
        return 0


# --- every configuration: the contract ------------------------------------------------------------------------


@pytest.mark.parametrize("name", CODECS)
def test_conformance(name: str) -> None:
    # Every refusal is the MCP SDK's own error too, so its boundary logs the reason alone (tests/test_mcp.py).
    fast: dict[str, Any] = {"max_examples": 15, "max_mutations": 3000, "oversized_length": 1 << 20}
    kw: dict[str, Any] = {"foreign": FOREIGN[name], "deterministic": name in DETERMINISTIC, **fast}
    assert_conformant(CODECS[name], error_type=InvalidRequestState, **kw)
    with pytest.raises(InvalidRequestState) as refused:  # still our InvalidToken: its reason alone, picklable
        CODECS[name].unseal("A" * 300_000 if name.startswith("a") else "v1.AAAA")
    assert isinstance(refused.value, InvalidToken)
    assert (str(refused.value), refused.value.__cause__) == (refused.value.reason.value, None)
    assert pickle.loads(pickle.dumps(refused.value)).reason is refused.value.reason  # noqa: S301 - our own bytes


@pytest.mark.parametrize("name", CODECS)
def test_the_default_cap_holds_a_64_kib_payload_and_only_a_plain_str_is_read(name: str) -> None:
    codec, token = CODECS[name], TOKENS[name]
    limit = cast(Any, getattr(codec, "codec", codec)).max_token_length  # a BoundCodec's cap is its inner one's
    assert limit == DEFAULT_MAX_TOKEN_LENGTH
    assert codec.unseal(codec.seal(cast(Any, bytearray(64 * 1024)))) == bytes(64 * 1024)
    assert reason(codec, token + "A" * (limit + 1 - len(token))) is Reason.OVERSIZED
    with pytest.raises(TypeError):
        codec.seal(cast(Any, "text"))
    # Tokens from the wire are plain str; a subclass can override len, split and encode.
    assert reason(codec, _TokenStr(token)) is Reason.MALFORMED


def _layout(name: str) -> tuple[str, str | None]:
    """("binary", None), or the JOSE class and alg of a configuration (a BoundCodec's is its inner codec's)."""
    inner: Any = getattr(CODECS[name], "codec", CODECS[name])
    return ("binary", None) if not isinstance(inner, JWECodec | JWSCodec) else (type(inner).__name__, inner.alg)


@pytest.mark.parametrize("target", CODECS)
def test_a_token_of_one_codec_never_opens_in_another_and_never_reaches_its_tag(target: str) -> None:
    """Refused by the format (version byte, segment count, alg) before any key is tried, under one shared secret."""
    assert len({cast(Any, CODECS[name]).key_ids for name in RINGS}) == 1  # one secret, one key id, five formats
    kind, alg = _layout(target)
    for source, token in TOKENS.items():
        if source != target and (source, target) not in LAYERED:
            theirs = _layout(source)
            expected = (
                Reason.MALFORMED if (target, source) in LAYERED  # the inner codec opens it: no claims inside
                else Reason.FORMAT if kind == theirs[0] == "binary"
                else Reason.MALFORMED if kind != theirs[0]
                else Reason.ALG if alg != theirs[1]
                else Reason.UNKNOWN_KEY  # two ECDH-ES recipients: another key of the same format
            )  # fmt: skip
            assert reason(CODECS[target], token) is expected, source


@pytest.mark.parametrize("name", CODECS)
def test_repr_names_key_ids_only_and_no_copy_of_the_codec_or_its_keys_can_be_made(name: str) -> None:
    codec, inner = CODECS[name], cast(Any, getattr(CODECS[name], "codec", CODECS[name]))
    assert repr(codec).startswith(f"{type(codec).__name__}(")
    assert f"key_ids={list(inner.key_ids)!r}" in repr(codec)
    private = [b64u_decode(k["d"]) for k in inner.private_jwks()["keys"]] if "ecdh" in name or "ed" in name else []
    assert_no_secret_in([repr(codec)], [SECRET, BINDING_KEY, *private])
    names = {n for cls in type(inner).__mro__ for n in getattr(cls, "__slots__", ())}
    names |= set(getattr(inner, "__dict__", ()))
    held = [v for n in names if isinstance(v := getattr(inner, n, None), HoldsSecrets)]  # key slots, rings
    for holder in [codec, *held]:
        assert_not_copyable(holder)


CAPPED: dict[str, Callable[..., Any]] = {name: partial(ring, [SECRET]) for name, ring in RINGS.items()}
CAPPED |= {
    "envelope": partial(EnvelopeCodec, _WRAPS := LocalWrapper(), [new_wrapped_key(_WRAPS)]),
    "jwe-ecdh-x25519": partial(JWECodec.ecdh, [x25519.X25519PrivateKey.generate()]),
    "jws-eddsa": partial(JWSCodec.eddsa, [ed25519.Ed25519PrivateKey.generate()]),
}


@pytest.mark.parametrize("name", CAPPED)
@settings(max_examples=15, deadline=None, derandomize=True, database=None)
@given(extra=st.integers(min_value=0, max_value=600))
def test_seal_refuses_exactly_what_unseal_would_refuse(name: str, extra: int) -> None:
    """At any cap, the largest payload that seals opens, one byte more is a SealError, and its token (from a
    codec with a higher cap) is OVERSIZED here, as is the largest token under a cap one character lower."""
    smallest = len(CAPPED[name]().seal(b""))
    cap = smallest + extra
    codec, roomy = CAPPED[name](max_token_length=cap), CAPPED[name](max_token_length=2 * cap)
    low, high = 0, cap  # the largest payload length whose token fits: seal fits n bytes, not n + 1
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if len(roomy.seal(bytes(mid))) <= cap else (low, mid - 1)
    token = codec.seal(bytes(low))
    assert codec.unseal(token) == bytes(low)
    with pytest.raises(SealError):
        codec.seal(bytes(low + 1))
    assert reason(codec, roomy.seal(bytes(low + 1))) is Reason.OVERSIZED
    if len(token) > smallest:  # a cap below the smallest token is refused at construction
        lower = CAPPED[name](max_token_length=len(token) - 1)
        assert reason(lower, token) is Reason.OVERSIZED


@pytest.mark.parametrize("name", RINGS)
def test_rotation_phases_keep_every_token_in_flight_until_the_old_key_is_retired(name: str) -> None:
    ring = RINGS[name]
    before = ring([SECRET]).seal(PAYLOAD)
    phase1, phase2, phase3 = ring([SECRET, OTHER]), ring([OTHER, SECRET]), ring([OTHER])
    t1, t2 = phase1.seal(PAYLOAD), phase2.seal(PAYLOAD)
    assert cast(Any, phase2).key_ids == (*KeyRing([OTHER]).key_ids, *KeyRing([SECRET]).key_ids)
    assert all(codec.unseal(t) == PAYLOAD for codec in (phase1, phase2) for t in (before, t1, t2))
    assert phase3.unseal(t2) == PAYLOAD
    assert reason(phase3, before) is reason(phase3, t1) is Reason.UNKNOWN_KEY


# --- BoundCodec ---------------------------------------------------------------------------------


class _TalkativeCodec:
    """A foreign inner codec whose refusal quotes the token, as some libraries' errors do."""

    def seal(self, payload: bytes) -> str:
        return b64u_encode(payload)

    def unseal(self, token: str) -> bytes:
        raise ValueError(f"cannot decode token {token!r}")


def test_bound_foreign_inner_refusal_keeps_no_token_text_in_the_chain() -> None:
    with pytest.raises(InvalidToken) as info:
        BoundCodec(_TalkativeCodec(), audience="svc", binding_key=BINDING_KEY).unseal(MARKER)
    assert (info.value.reason, info.value.__context__, info.value.__cause__) == (Reason.SEAL, None, None)


def test_tag_comparisons_are_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import statecodec.binding
    import statecodec.jose.jws

    calls: list[object] = []

    def counting(a: Any, b: Any) -> bool:
        calls.append(a)
        return hmac.compare_digest(a, b)

    monkeypatch.setattr(statecodec.binding, "compare_digest", counting)
    monkeypatch.setattr(statecodec.jose.jws, "_compare", counting)
    bound: Any = CODECS["bound-aesgcm"]
    reason(bound, bound.seal(b"s", principal="alice"), principal="mallory")
    assert len(calls) >= 2  # the binding tag, then the principal tag
    calls.clear()
    token = TOKENS["jws-hs256"]
    token = token[:-2] + ("AA" if token[-2:] != "AA" else "BA")
    assert reason(CODECS["jws-hs256"], token) is Reason.SEAL
    assert len(calls) == 1


# --- JWECodec and JWSCodec: the protected header --------------------------------------------------


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(min_value=-(2**200), max_value=2**200),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=20),
        st.sampled_from(["dir", "A256KW", "ECDH-ES+A256KW", "A256GCM", "HS256", "EdDSA", "Ed25519", "none"]),
    )  # fmt: skip
    keys = st.sampled_from(["alg", "enc", "kid", "epk", "kty", "crv", "x", "y", "zip"])
    children = lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner))  # noqa: E731
    return st.recursive(scalars, children, max_leaves=12)


RAW_HEADERS = [
    "[" * 700 + "]" * 700,
    "{" * 300,
    '{"a":' * 200 + "1" + "}" * 200,
    '{"alg":' + "9" * 700 + "}",
    *(f'{{"alg":{number}}}' for number in ("1e999", "NaN", "Infinity", "-Infinity")),
    '{"alg":"dir","alg":"dir"}',
    '{"alg":"dir","enc":"A256GCM","kid":"x","kid":"x"}',
    '{"epk":{"x":"a","x":"a"}}',
    '{"kid":"\\ud800"}',
    '{"kid":"\\u0000"}',
    *("[]", '"dir"', "null", "0", "\ufeff{}", "{}"),
]
EC, OKP, A43, FF43 = {"kty": "EC", "crv": "P-256"}, {"kty": "OKP", "crv": "X25519"}, "A" * 43, "_" * 43
HOSTILE_EPKS: list[object] = [
    *(None, [], "x", {}),
    *({**EC, "x": x, "y": y} for x, y in ((A43, A43), (FF43, FF43), (A43, A43[:-1]), (1, 2))),
    *({**OKP, "x": x} for x in (A43, FF43, b64u_encode(b"\x01" + bytes(31)))),
    {**OKP, "x": A43, "d": A43},
    {**OKP, "crv": "X448", "x": A43},
    {"kty": "oct", "crv": "X25519", "k": A43},
]


def _header(text: str) -> str:
    return b64u_encode(text.encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("name", JOSE)
def test_header_rewrites_raise_only_invalid_token(name: str) -> None:
    parts = TOKENS[name].split(".")
    genuine: dict[str, Any] = json.loads(b64u_decode(parts[0]))
    for text in [*RAW_HEADERS, *(json.dumps({**genuine, "epk": epk}) for epk in HOSTILE_EPKS)]:
        reason(CODECS[name], ".".join([_header(text), *parts[1:]]))

    @FUZZ
    @given(st.one_of(_json_values(), st.dictionaries(st.sampled_from(sorted(genuine)), _json_values())))
    def prop(value: Any) -> None:
        header = {**genuine, **value} if isinstance(value, dict) else value
        reason(CODECS[name], ".".join([_header(json.dumps(header)), *parts[1:]]))

    prop()


@pytest.mark.parametrize("name", JOSE)
def test_segment_swaps_drops_and_duplicates_raise_only_invalid_token(name: str) -> None:
    parts = TOKENS[name].split(".")
    for i in range(len(parts)):
        for j in range(len(parts)):
            if parts[i] != parts[j]:
                swapped = list(parts)
                swapped[i], swapped[j] = swapped[j], swapped[i]
                reason(CODECS[name], ".".join(swapped))
        reason(CODECS[name], ".".join(parts[:i] + parts[i + 1 :]))
        reason(CODECS[name], ".".join(parts[: i + 1] + parts[i:]))
        if parts[i]:  # a dir JWE's encrypted key is already empty
            reason(CODECS[name], ".".join([*parts[:i], "", *parts[i + 1 :]]))


# --- misconfiguration: refused at construction, saying how to fix it, echoing no secret ----------


def _late(module: str, name: str, *args: Any, **kwargs: Any) -> object:
    """`statecodec.<module>.<name>(*args, **kwargs)`, imported only when called (an optional extra)."""
    return getattr(importlib.import_module(f"statecodec.{module}"), name)(*args, **kwargs)


WRAPPER = LocalWrapper()  # counts unwraps: a configuration error is found before any provider call


def _misconfigurations() -> Iterator[tuple[str, str | None, Callable[[], object], str]]:
    """(id, the extra it needs, a construction that must fail, what the message must say)."""
    five, clock = cast(Any, 5), cast(Any, datetime.datetime.now)
    huge, must = [b"x" * (MAX_WRAPPED_KEY_LENGTH + 1)], "wrapped_keys must be"
    for ring, match in [
        *((bad, must) for bad in (None, 5, 1.5)), (b"single", "a list"), ("single", "a list"), ([], "at least one"),
        ([b""], "empty"), (huge, "maximum"), (["not base64!"], "base64url"), (["AB=="], "base64url"),
        ([b"same", b"same"], "duplicates"), ([42], "bytes or base64url"),
    ]:  # fmt: skip
        yield f"envelope-keys-{ring!r:.20}", None, partial(EnvelopeCodec, WRAPPER, cast(Any, ring)), match
    contexts: list[tuple[Any, str]] = [({}, "empty"), ({"": "x"}, "non-empty"), ({"k": 1}, "str"), ("a=b", "mapping")]
    for context, match in [*contexts, ({"k": "x" * 300}, "at most")]:
        yield f"envelope-context-{context!r:.20}", None, partial(EnvelopeCodec, WRAPPER, [b"b"], context=context), match
    yield "envelope-wrapper", None, partial(EnvelopeCodec, cast(Any, object()), [b"b"]), "KeyWrapper"
    for ring, cap in itertools.product(("envelope", "aesgcm", "xaesgcm"), ("4096", True, 4096.0, None, 0, 10, 2**31)):
        build = CAPPED[ring] if ring != "envelope" else partial(EnvelopeCodec, WRAPPER, [new_wrapped_key(WRAPPER)])
        yield f"{ring}-cap-{cap!r}", None, partial(build, max_token_length=cast(Any, cap)), "max_token_length"
    yield "ecdh-keys", None, partial(JWECodec.ecdh, five), "non-empty list"
    yield "eddsa-keys", None, partial(JWSCodec.eddsa, five), "non-empty list"
    for alg in (["HS256"], {"k": MARKER}, 7, MARKER * 4):
        jwk = {"kty": "oct", "kid": "a", "k": b64u_encode(os.urandom(32)), "alg": alg}
        yield f"jws-jwk-alg-{type(alg).__name__}", None, partial(JWSCodec.from_jwks, [jwk]), "this codec accepts"
        yield f"jwe-jwk-alg-{type(alg).__name__}", None, partial(JWECodec.from_jwks, [jwk]), "this codec accepts"
    migration = partial(_late, "sdk_migration", "SDKKeysMigration", AESGCMCodec([SECRET]))
    sdk: list[tuple[dict[str, Any], str]] = [
        ({}, "sdk_tokens_until must be the epoch second"),
        ({"sdk_tokens_until": float("nan")}, "sdk_tokens_until must be"),
        ({"seal_with_sdk": True, "sdk_tokens_until": 1.0}, "takes no sdk_tokens_until"),
        ({"seal_with_sdk": True, "sdk_keys": [OTHER, b"short"]}, r"sdk_keys\[1\] is 5 bytes"),
        ({"seal_with_sdk": True, "sdk_keys": OTHER}, "sdk_keys must be the list"),
    ]
    for kw, match in sdk:
        yield f"sdk-migration-{match[:20]}", "mcp", partial(migration, **{"sdk_keys": [OTHER], **kw}), match
    no_codec = partial(_late, "sdk_migration", "SDKKeysMigration", object(), [OTHER], seal_with_sdk=True)
    yield "sdk-migration-codec", "mcp", no_codec, "codec must have seal"
    bound = partial(BoundCodec, AESGCMCodec([SECRET]), audience="svc", binding_key=BINDING_KEY, clock=clock)
    yield "bound-clock-datetime", None, bound, r"clock must .*epoch seconds .*got a clock returning datetime"
    aws = partial(_late, "providers.aws_kms", "AwsKmsWrapper", "1234abcd", region="eu-west-1")
    for kw in ({"endpoint_url": 5}, {"read_timeout": float("nan")}, {"connect_timeout": -1}, {"connect_timeout": "2"}):
        yield f"aws-{kw}", "boto3", partial(aws, **kw), "must be"
    gcp_key = "projects/p/locations/global/keyRings/r/cryptoKeys/k"
    gcp = partial(_late, "providers.gcp_kms", "GcpKmsWrapper", client=0)
    yield "gcp-retry", "google.cloud.kms", partial(gcp, gcp_key, retry=5), "RetryPolicy"
    yield "gcp-timeout", "google.cloud.kms", partial(gcp, gcp_key, timeout=True), "timeout"
    for name in ("projects/p/locations/l/keyRings/r", gcp_key + "/cryptoKeyVersions/1"):
        yield f"gcp-name-{name[-12:]}", "google.cloud.kms", partial(gcp, name), "crypto key name"
    for host in ("10.0.0.5:9000", "kms.example.com:443", "::1"):  # the emulator is loopback only
        emulated = partial(gcp, gcp_key, client=None, emulator_host=host)
        yield f"gcp-emulator-{host}", "google.cloud.kms", emulated, "loopback"
    vault = partial(_late, "providers.vault", "vault_client", token="s.token")
    yield "vault-url", "hvac", partial(vault, f"https://ops:{MARKER}@vault.example:8200"), "no credentials"


MISCONFIGURED = list(_misconfigurations())


@pytest.mark.parametrize(("extra", "build", "match"), [m[1:] for m in MISCONFIGURED], ids=[m[0] for m in MISCONFIGURED])
def test_misconfiguration_is_refused_at_construction_echoing_no_value(
    extra: str | None, build: Callable[[], object], match: str
) -> None:
    if extra is not None:
        pytest.importorskip(extra)
    with pytest.raises(ConfigurationError, match=match) as info:
        build()
    assert MARKER not in str(info.value)
    assert WRAPPER.unwraps == 0
