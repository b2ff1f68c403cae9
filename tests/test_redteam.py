"""Hostile input against every codec configuration: only InvalidToken escapes, nothing leaks, formats never cross.

The conformance kit runs once per configuration of tests/codecs.py; the tests after it cover what it cannot
know: reason codes, format separation under one secret, the binary and JOSE layouts, construction refusals.
"""

from __future__ import annotations

import contextlib
import datetime
import hmac
import importlib
import json
import os
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statecodec import AESGCMCodec, ConfigurationError, InvalidToken, JWECodec, JWSCodec, Reason
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.binding import BoundCodec
from statecodec.envelope import EnvelopeCodec, new_wrapped_key
from statecodec.testing import assert_conformant
from statecodec.tokeninfo import describe_token
from tests.codecs import BINDING_KEY, CODECS, DETERMINISTIC, FOREIGN, SECRET
from tests.envelope_wrappers import LocalWrapper
from tests.secrecy import chain_texts

MARKER = "redteam-marker-do-not-log-4b1d"
PAYLOAD = b'{"state":"redteam"}'
TOKENS = {name: codec.seal(PAYLOAD) for name, codec in CODECS.items()}
JOSE = [name for name in CODECS if name.startswith(("jwe", "jws", "bound-jws"))]
# Layering, not confusion: a BoundCodec's token is its inner codec's token.
LAYERED = {("bound-aesgcm", "aesgcm"), ("bound-jws", "jws-hs256")}
FUZZ = settings(max_examples=40, derandomize=True, database=None, deadline=None, suppress_health_check=[*HealthCheck])


def refusal(unseal: Callable[[Any], object], token: object) -> InvalidToken:
    """The InvalidToken `unseal(token)` raises; any other outcome fails the test."""
    try:
        unseal(token)
    except InvalidToken as exc:
        return exc
    except BaseException as exc:  # pragma: no cover - the failure these tests exist for
        pytest.fail(f"{type(exc).__name__} escaped unseal")
    pytest.fail("a hostile token was accepted")


class _TokenStr(str):
    """A str subclass that lies about its length: parsing must never trust it."""

    def __len__(self) -> int:
        return 0


# --- every configuration ------------------------------------------------------------------------


@pytest.mark.parametrize("name", CODECS)
def test_conformance(name: str) -> None:
    fast: dict[str, Any] = {"max_examples": 15, "max_mutations": 3000, "oversized_length": 1 << 20}
    assert_conformant(CODECS[name], foreign=FOREIGN[name], deterministic=name in DETERMINISTIC, **fast)


@pytest.mark.parametrize("name", CODECS)
def test_reason_codes_for_a_str_subclass_and_for_one_character_over_the_cap(name: str) -> None:
    codec, token = CODECS[name], TOKENS[name]
    # Tokens from the wire are plain str; a subclass can override len, split and encode.
    assert refusal(codec.unseal, _TokenStr(token)).reason is Reason.MALFORMED
    limit = cast(Any, getattr(codec, "codec", codec)).max_token_length  # a BoundCodec's cap is its inner one's
    assert refusal(codec.unseal, token + "A" * (limit + 1 - len(token))).reason is Reason.OVERSIZED


@pytest.mark.parametrize("target", CODECS)
def test_a_token_of_one_codec_never_opens_in_another(target: str) -> None:
    for source, token in TOKENS.items():
        if source != target and (source, target) not in LAYERED:
            refusal(CODECS[target].unseal, token)


@pytest.mark.parametrize("name", ["aesgcm", "xaesgcm", "envelope"])
def test_binary_layout_rewrites_raise_only_invalid_token(name: str) -> None:
    raw = b64u_decode(TOKENS[name])

    @FUZZ
    @given(st.sampled_from([0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0xFF]), st.binary(max_size=120), st.booleans())
    def prop(version: int, body: bytes, keep_kid: bool) -> None:
        refusal(CODECS[name].unseal, b64u_encode(bytes([version]) + (raw[1:5] if keep_kid else body[:4]) + body))

    prop()


# --- BoundCodec ---------------------------------------------------------------------------------


class _TalkativeCodec:
    """A foreign inner codec whose refusal quotes the token, as some libraries' errors do."""

    def seal(self, payload: bytes) -> str:
        return b64u_encode(payload)

    def unseal(self, token: str) -> bytes:
        raise ValueError(f"cannot decode token {token!r}")


def test_bound_foreign_inner_refusal_keeps_no_token_text_in_the_chain() -> None:
    exc = refusal(BoundCodec(_TalkativeCodec(), audience="svc", binding_key=BINDING_KEY).unseal, MARKER)
    assert exc.reason is Reason.SEAL
    assert exc.__context__ is None
    assert exc.__cause__ is None


def test_bound_clock_that_stops_returning_numbers_refuses_tokens_with_invalid_token() -> None:
    broken = False

    def clock() -> float:
        return None if broken else 1_767_225_600.0  # type: ignore[return-value]

    codec = BoundCodec(AESGCMCodec([SECRET]), audience="svc", binding_key=BINDING_KEY, clock=clock)
    token = codec.seal(b"s")
    broken = True
    assert refusal(codec.unseal, token).reason is Reason.NOT_YET_VALID


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
    refusal(lambda t: bound.unseal(t, principal="mallory"), bound.seal(b"s", principal="alice"))
    assert len(calls) >= 2  # the binding tag, then the principal tag
    calls.clear()
    token = TOKENS["jws-hs256"]
    token = token[:-2] + ("AA" if token[-2:] != "AA" else "BA")
    assert refusal(CODECS["jws-hs256"].unseal, token).reason is Reason.SEAL
    assert len(calls) == 1


# --- JWECodec and JWSCodec: the protected header --------------------------------------------------


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**200), max_value=2**200),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=20),
        st.sampled_from(["dir", "A256KW", "ECDH-ES+A256KW", "A256GCM", "HS256", "EdDSA", "Ed25519", "none"]),
    )
    keys = st.sampled_from(["alg", "enc", "kid", "epk", "kty", "crv", "x", "y", "zip"])
    return st.recursive(
        scalars, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner)), max_leaves=12
    )


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
        refusal(CODECS[name].unseal, ".".join([_header(text), *parts[1:]]))

    @FUZZ
    @given(st.one_of(_json_values(), st.dictionaries(st.sampled_from(sorted(genuine)), _json_values())))
    def prop(value: Any) -> None:
        header = {**genuine, **value} if isinstance(value, dict) else value
        refusal(CODECS[name].unseal, ".".join([_header(json.dumps(header)), *parts[1:]]))

    prop()


@pytest.mark.parametrize("name", JOSE)
def test_segment_swaps_drops_and_duplicates_raise_only_invalid_token(name: str) -> None:
    parts = TOKENS[name].split(".")
    for i in range(len(parts)):
        for j in range(len(parts)):
            if parts[i] != parts[j]:
                swapped = list(parts)
                swapped[i], swapped[j] = swapped[j], swapped[i]
                refusal(CODECS[name].unseal, ".".join(swapped))
        refusal(CODECS[name].unseal, ".".join(parts[:i] + parts[i + 1 :]))
        refusal(CODECS[name].unseal, ".".join(parts[: i + 1] + parts[i:]))
        if parts[i]:  # a dir JWE's encrypted key is already empty
            refusal(CODECS[name].unseal, ".".join([*parts[:i], "", *parts[i + 1 :]]))


# --- token descriptions (never a verdict) ---------------------------------------------------------


def test_describe_token_raises_only_invalid_token_and_keeps_no_header_text() -> None:
    # Any text and any non-str: tests/test_inspect.py. Here: the hostile headers the codecs refuse.
    rest = TOKENS["jwe-dir"][TOKENS["jwe-dir"].index(".") :]
    for text in RAW_HEADERS:
        # A description may describe a header a codec would refuse.
        with contextlib.suppress(InvalidToken):
            describe_token(_header(text) + rest)
    for header in (b'{"alg":"' + MARKER.encode() + b'\xff"}', b'{"alg":"' + MARKER.encode()):
        assert not any(MARKER in text for text in chain_texts(refusal(describe_token, b64u_encode(header) + rest)))


# --- misconfiguration: refused at construction, saying how to fix it, echoing no secret ----------


def _provider(module: str, name: str, *args: Any, **kwargs: Any) -> object:
    """`statecodec.providers.<module>.<name>(*args, **kwargs)`, imported only when called (an optional extra)."""
    return getattr(importlib.import_module(f"statecodec.providers.{module}"), name)(*args, **kwargs)


def _with_vault_client(name: str, *args: Any, **kwargs: Any) -> object:
    """`<name>(client, ...)` with a client for an address where nothing listens: a call would fail otherwise."""
    client: Any = _provider("vault", "vault_client", "http://127.0.0.1:1", token="s.token")
    try:
        return _provider("vault", name, client, *args, **kwargs)
    finally:
        client.adapter.close()


WRAPPER = LocalWrapper()  # counts unwraps: a configuration error is found before any provider call


def _misconfigurations() -> Iterator[tuple[str, str | None, Callable[[], object], str]]:
    """(id, the extra it needs, a construction that must fail, what the message must say)."""
    five, clock = cast(Any, 5), cast(Any, datetime.datetime.now)
    for bad in (None, 5, 1.5):
        yield f"envelope-keys-{bad}", None, partial(EnvelopeCodec, WRAPPER, cast(Any, bad)), "wrapped_keys must be"
    for cap in ("4096", True, 10, 2**31):
        capped = partial(EnvelopeCodec, WRAPPER, [new_wrapped_key(WRAPPER)], max_token_length=cast(Any, cap))
        yield f"envelope-cap-{cap!r}", None, capped, "max_token_length"
    yield "ecdh-keys", None, partial(JWECodec.ecdh, five), "non-empty list"
    yield "eddsa-keys", None, partial(JWSCodec.eddsa, five), "non-empty list"
    for alg in (["HS256"], {"k": MARKER}, 7, MARKER * 4):
        jwk = {"kty": "oct", "kid": "a", "k": b64u_encode(os.urandom(32)), "alg": alg}
        yield f"jws-jwk-alg-{type(alg).__name__}", None, partial(JWSCodec.from_jwks, [jwk]), "this codec accepts"
        yield f"jwe-jwk-alg-{type(alg).__name__}", None, partial(JWECodec.from_jwks, [jwk]), "this codec accepts"
    bound = partial(BoundCodec, AESGCMCodec([SECRET]), audience="svc", binding_key=BINDING_KEY, clock=clock)
    yield "bound-clock-datetime", None, bound, r"clock must .*epoch seconds .*got a clock returning datetime"
    aws = partial(_provider, "aws_kms", "AwsKmsWrapper", "1234abcd", region="eu-west-1")
    for kw in ({"endpoint_url": 5}, {"read_timeout": float("nan")}, {"connect_timeout": -1}, {"connect_timeout": "2"}):
        yield f"aws-{kw}", "boto3", partial(aws, **kw), "must be"
    gcp_key = "projects/p/locations/global/keyRings/r/cryptoKeys/k"
    gcp = partial(_provider, "gcp_kms", "GcpKmsWrapper", gcp_key, client=0)
    yield "gcp-retry", "google.cloud.kms", partial(gcp, retry=5), "RetryPolicy"
    yield "gcp-timeout", "google.cloud.kms", partial(gcp, timeout=True), "timeout"
    vault = partial(_provider, "vault", "vault_client", f"https://ops:{MARKER}@vault.example:8200", token="s.token")
    yield "vault-url", "hvac", vault, "no credentials"
    transit = partial(_with_vault_client, "VaultTransitCodec", "k", clock=None)
    yield "vault-transit-clock", "hvac", transit, "clock must be a callable"
    yield "vault-wrapper-retry", "hvac", partial(_with_vault_client, "VaultKeyWrapper", "k", retry=5), "RetryPolicy"


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




def test_vault_secret_files_are_read_with_a_bound(tmp_path: Path) -> None:
    pytest.importorskip("hvac")
    huge = tmp_path / "token"
    huge.write_bytes(b"s." + b"x" * (128 * 1024))
    settings_ = {"STATECODEC_VAULT_ADDR": "http://127.0.0.1:1", "STATECODEC_VAULT_TOKEN_FILE": str(huge)}
    with pytest.raises(ConfigurationError, match="is over") as info:
        _provider("vault", "vault_client_from_settings", settings_)
    assert "xxxx" not in str(info.value)
