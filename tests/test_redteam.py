"""Hostile input against every unseal path: only InvalidToken escapes, nothing leaks, formats never cross.

One secret serves every ring codec here on purpose: key reuse across formats is
the hardest case for format separation. Sections follow the codecs; each
defect this file was written against has a test that names the guarantee.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hmac
import json
import logging
import os
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statecodec import AESGCMCodec, ConfigurationError, InvalidToken, JWECodec, JWSCodec, Reason, XAESGCMCodec
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec._types import Codec
from statecodec.binding import BoundCodec
from statecodec.envelope import EnvelopeCodec, new_wrapped_key
from statecodec.inspect import describe_token
from statecodec.testing import check_codec
from tests.envelope_wrappers import LocalWrapper

SECRET = bytes(range(7, 39))
BINDING_KEY = bytes(range(101, 133))
MARKER = "redteam-marker-do-not-log-4b1d"
PAYLOAD = b'{"state":"redteam"}'
CAP = 4096

FUZZ = settings(
    max_examples=60,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _build() -> dict[str, Codec]:
    wrapper = LocalWrapper(bytes(range(50, 82)))
    aes = AESGCMCodec([SECRET], max_token_length=CAP)
    hs256 = JWSCodec([SECRET], max_token_length=CAP)
    return {
        "aesgcm": aes,
        "xaesgcm": XAESGCMCodec([SECRET], max_token_length=CAP),
        "envelope": EnvelopeCodec(wrapper, [new_wrapped_key(wrapper)], max_token_length=CAP),
        "bound-aesgcm": BoundCodec(aes, audience="svc", binding_key=BINDING_KEY),
        "bound-jws": BoundCodec(hs256, audience="svc", binding_key=BINDING_KEY),
        "jwe-dir": JWECodec([SECRET], max_token_length=CAP),
        "jwe-a256kw": JWECodec([SECRET], alg="A256KW", max_token_length=CAP),
        "jwe-ecdh-p256": JWECodec.ecdh([ec.generate_private_key(ec.SECP256R1())], max_token_length=CAP),
        "jwe-ecdh-x25519": JWECodec.ecdh([x25519.X25519PrivateKey.generate()], max_token_length=CAP),
        "jws-hs256": hs256,
        "jws-eddsa": JWSCodec.eddsa([ed25519.Ed25519PrivateKey.generate()], max_token_length=CAP),
        "jws-ed25519": JWSCodec.eddsa([ed25519.Ed25519PrivateKey.generate()], alg="Ed25519", max_token_length=CAP),
    }


CODECS = _build()
TOKENS = {name: codec.seal(PAYLOAD) for name, codec in CODECS.items()}
JOSE = [name for name in CODECS if name.startswith(("jwe", "jws", "bound-jws"))]
BINARY = [name for name in CODECS if name not in JOSE]
# Layering, not confusion: a BoundCodec's token is its inner codec's token.
LAYERED = {("bound-aesgcm", "aesgcm"), ("bound-jws", "jws-hs256")}


def refusal(codec: Codec | Callable[[Any], object], token: object) -> InvalidToken:
    """The InvalidToken `token` raises; any other outcome fails the test."""
    unseal: Callable[[Any], object] = codec.unseal if isinstance(codec, Codec) else codec
    try:
        unseal(token)
    except InvalidToken as exc:
        return exc
    except BaseException as exc:  # pragma: no cover - the failure these tests exist for
        pytest.fail(f"{type(exc).__name__} escaped unseal")
    pytest.fail("a hostile token was accepted")


def chain_texts(exc: BaseException) -> Iterator[str]:
    """Every text an exception chain can show: message, repr, args, and parsers' kept input."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield str(cur)
        yield repr(cur)
        yield from (repr(a) for a in cur.args)
        yield from (repr(getattr(cur, name)) for name in ("doc", "object") if hasattr(cur, name))
        yield from (repr(cur.__cause__), repr(cur.__context__))
        cur = cur.__cause__ or cur.__context__


def assert_no_marker(exc: BaseException, *needles: str) -> None:
    for text in chain_texts(exc):
        for needle in (MARKER, *needles):
            assert needle not in text, f"{type(exc).__name__} chain holds token text"


def hostile_headers() -> list[str]:
    """First segments whose parse errors would carry the marker: bad UTF-8, broken JSON."""
    m = MARKER.encode()
    return [
        b64u_encode(b'{"alg":"' + m + b'\xff"}'),
        b64u_encode(b'{"alg":"' + m),
        b64u_encode(b'{"alg":"' + m + b'",}'),
        b64u_encode(b'[' * 600 + m),
    ]


# --- every codec: arbitrary input ---------------------------------------------------------------

_SURROGATE = st.characters(categories=["Cs"])
_DIGITS = "\u0663\u06f3\u07c3\u0969\u09e9\u0a69\u0be9\u0e53\uff10\uff11\U0001d7d9"
_FULLWIDTH = "".join(chr(c) for c in range(0xFF01, 0xFF5F))
HOSTILE_TEXT = st.one_of(
    st.text(st.one_of(st.characters(), _SURROGATE), max_size=300),
    st.text(st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/\x00"), max_size=600),
    st.text(st.sampled_from(_DIGITS + _FULLWIDTH + "\x00."), max_size=200),
    st.binary(max_size=400).map(lambda b: b.decode("latin-1")),
)
FIXED_JUNK: list[object] = [
    "",
    "\x00",
    "\x00" * 64,
    "\ud800" * 64,
    "." * 4,
    "." * (CAP + 1),
    "A" * (CAP + 1),
    "A" * (CAP * 64),
    _DIGITS * 8,
    _FULLWIDTH,
    b"AQID",
    bytearray(b"AQID"),
    memoryview(b"AQID"),
    None,
    0,
    2**80,
    float("nan"),
    ["a"],
    {"token": "a"},
    object(),
]


class _TokenStr(str):
    """A str subclass that lies about its length: parsing must never trust it."""

    def __len__(self) -> int:
        return 0


@pytest.mark.parametrize("name", CODECS)
def test_arbitrary_text_raises_only_invalid_token(name: str) -> None:
    codec = CODECS[name]

    @FUZZ
    @given(HOSTILE_TEXT)
    def prop(text: str) -> None:
        refusal(codec, text)

    prop()
    for junk in FIXED_JUNK:
        refusal(codec, junk)


@pytest.mark.parametrize("name", CODECS)
def test_str_subclasses_of_a_genuine_token_are_malformed(name: str) -> None:
    # Tokens from the wire are plain str; a subclass can override len, split and encode.
    assert refusal(CODECS[name], _TokenStr(TOKENS[name])).reason is Reason.MALFORMED


@pytest.mark.parametrize("name", CODECS)
def test_oversized_is_refused_before_decoding(name: str) -> None:
    token = TOKENS[name]
    codec = CODECS[name]
    limit = getattr(getattr(codec, "codec", codec), "max_token_length", CAP)
    assert refusal(codec, token + "A" * (limit + 1 - len(token))).reason is Reason.OVERSIZED


@pytest.mark.parametrize(("source", "target"), [(s, t) for s in CODECS for t in CODECS if s != t])
def test_a_token_of_one_codec_never_opens_in_another(source: str, target: str) -> None:
    if (source, target) in LAYERED:
        pytest.skip("layering by design: the inner codec opens its own token")
    refusal(CODECS[target], TOKENS[source])


@pytest.mark.parametrize("name", CODECS)
def test_no_token_or_payload_text_in_chains_reprs_or_logs(name: str, caplog: pytest.LogCaptureFixture) -> None:
    codec = CODECS[name]
    token = codec.seal(MARKER.encode())
    bad = [token[:-1] + ("A" if token[-1] != "A" else "B"), token + "A", token[: len(token) // 2]]
    if "." in token:
        rest = token[token.index(".") :]
        bad += [header + rest for header in hostile_headers()]
    else:
        bad += [MARKER + "\u00e9", b64u_encode(MARKER.encode()) + "\u00e9"]
    caplog.set_level(logging.DEBUG)
    for candidate in bad:
        assert_no_marker(refusal(codec, candidate), token[5:40], candidate[5:40])
    for shown in (caplog.text, repr(codec)):
        assert MARKER not in shown
        assert token[5:40] not in shown


# --- binary formats: AESGCMCodec, XAESGCMCodec, EnvelopeCodec ------------------------------------


@pytest.mark.parametrize("name", ["aesgcm", "xaesgcm", "envelope"])
def test_binary_layout_mutations_raise_only_invalid_token(name: str) -> None:
    codec = CODECS[name]
    raw = b64u_decode(TOKENS[name])

    @FUZZ
    @given(st.sampled_from([0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0xFF]), st.binary(max_size=120), st.booleans())
    def prop(version: int, body: bytes, keep_kid: bool) -> None:
        head = bytes([version]) + (raw[1:5] if keep_kid else body[:4])
        refusal(codec, b64u_encode(head + body))

    prop()
    for n in range(len(raw)):
        refusal(codec, b64u_encode(raw[:n]))
    # Every version byte with the genuine key id and body: the version is under the tag.
    for version in range(256):
        if version != raw[0]:
            refusal(codec, b64u_encode(bytes([version]) + raw[1:]))


# --- BoundCodec ---------------------------------------------------------------------------------


class _TalkativeCodec:
    """A foreign inner codec whose refusal quotes the token, as some libraries' errors do."""

    def seal(self, payload: bytes) -> str:
        return b64u_encode(payload)

    def unseal(self, token: str) -> bytes:
        raise ValueError(f"cannot decode token {token!r}")


def test_bound_foreign_inner_refusal_keeps_no_token_text_in_the_chain() -> None:
    codec = BoundCodec(_TalkativeCodec(), audience="svc", binding_key=BINDING_KEY)
    exc = refusal(codec, MARKER)
    assert exc.reason is Reason.SEAL
    assert exc.__context__ is None
    assert exc.__cause__ is None
    assert_no_marker(exc)


def test_bound_clock_returning_a_datetime_is_refused_at_construction() -> None:
    with pytest.raises(ConfigurationError, match=r"clock must return seconds .*time\.time.*got datetime"):
        BoundCodec(
            AESGCMCodec([SECRET]),
            audience="svc",
            binding_key=BINDING_KEY,
            clock=datetime.datetime.now,  # type: ignore[arg-type]
        )


def test_bound_clock_that_stops_returning_numbers_refuses_tokens_with_invalid_token() -> None:
    broken = False

    def clock() -> float:
        return None if broken else 1_767_225_600.0  # type: ignore[return-value]

    codec = BoundCodec(AESGCMCodec([SECRET]), audience="svc", binding_key=BINDING_KEY, clock=clock)
    token = codec.seal(b"s")
    broken = True
    assert refusal(codec, token).reason is Reason.NOT_YET_VALID


def test_bound_tag_comparisons_are_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = hmac.compare_digest

    def counting(a: Any, b: Any) -> bool:
        calls.append(1)
        return real(a, b)

    import statecodec.binding

    monkeypatch.setattr(statecodec.binding, "compare_digest", counting)
    codec = CODECS["bound-aesgcm"]
    assert isinstance(codec, BoundCodec)
    token = codec.seal(b"s", principal="alice")
    refusal(lambda t: codec.unseal(t, principal="mallory"), token)
    assert len(calls) >= 2  # the binding tag, then the principal tag


# --- JWECodec and JWSCodec: the protected header --------------------------------------------------


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**200), max_value=2**200),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(st.one_of(st.characters(), _SURROGATE), max_size=20),
        st.sampled_from(["dir", "A256KW", "ECDH-ES+A256KW", "A256GCM", "HS256", "EdDSA", "Ed25519", "none"]),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.sampled_from(["alg", "enc", "kid", "epk", "kty", "crv", "x", "y", "zip"]), inner),
        ),
        max_leaves=12,
    )


RAW_HEADERS = [
    "[" * 700 + "]" * 700,
    "{" * 300,
    '{"a":' * 200 + "1" + "}" * 200,
    '{"alg":' + "9" * 700 + "}",
    '{"alg":1e999}',
    '{"alg":NaN}',
    '{"alg":Infinity}',
    '{"alg":-Infinity}',
    '{"alg":"dir","alg":"dir"}',
    '{"alg":"dir","enc":"A256GCM","kid":"x","kid":"x"}',
    '{"epk":{"x":"a","x":"a"}}',
    '{"kid":"\\ud800"}',
    '{"kid":"\\u0000"}',
    "[]",
    '"dir"',
    "null",
    "0",
    "\ufeff{}",
    "{}",
]


def _encode_header(text: str) -> str:
    return b64u_encode(text.encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("name", JOSE)
def test_header_rewrites_raise_only_invalid_token(name: str) -> None:
    codec = CODECS[name]
    parts = TOKENS[name].split(".")
    try:
        genuine: dict[str, Any] = json.loads(b64u_decode(parts[0]))
    except ValueError:  # bound-jws: the header is the inner JWS's, still JSON
        genuine = {}

    def with_header(h64: str) -> str:
        return ".".join([h64, *parts[1:]])

    for text in RAW_HEADERS:
        refusal(codec, with_header(_encode_header(text)))

    @FUZZ
    @given(st.one_of(_json_values(), st.dictionaries(st.sampled_from(sorted(genuine) or ["alg"]), _json_values())))
    def prop(value: Any) -> None:
        header = {**genuine, **value} if isinstance(value, dict) else value
        refusal(codec, with_header(_encode_header(json.dumps(header))))

    prop()


@pytest.mark.parametrize("name", JOSE)
def test_segment_swaps_drops_and_duplicates_raise_only_invalid_token(name: str) -> None:
    codec = CODECS[name]
    parts = TOKENS[name].split(".")
    n = len(parts)
    for i in range(n):
        for j in range(n):
            if parts[i] != parts[j]:
                swapped = list(parts)
                swapped[i], swapped[j] = swapped[j], swapped[i]
                refusal(codec, ".".join(swapped))
        refusal(codec, ".".join(parts[:i] + parts[i + 1 :]))
        refusal(codec, ".".join(parts[: i + 1] + parts[i:]))
        if parts[i]:  # a dir JWE's encrypted key is already empty
            refusal(codec, ".".join([*parts[:i], "", *parts[i + 1 :]]))


@pytest.mark.parametrize("name", [n for n in JOSE if not n.startswith("bound")])
def test_header_parse_errors_keep_no_header_text_in_the_chain(name: str) -> None:
    codec = CODECS[name]
    rest = TOKENS[name][TOKENS[name].index(".") :]
    for header in hostile_headers():
        assert_no_marker(refusal(codec, header + rest))


@pytest.mark.parametrize("name", ["jwe-ecdh-p256", "jwe-ecdh-x25519"])
def test_hostile_epk_values_are_refused_with_invalid_token(name: str) -> None:
    codec = CODECS[name]
    parts = TOKENS[name].split(".")
    genuine = json.loads(b64u_decode(parts[0]))
    x43, ff43 = "A" * 43, "_" * 43
    epks: list[object] = [
        None,
        [],
        "x",
        {},
        {"kty": "EC", "crv": "P-256", "x": x43, "y": x43},
        {"kty": "EC", "crv": "P-256", "x": ff43, "y": ff43},
        {"kty": "EC", "crv": "P-256", "x": x43, "y": x43[:-1]},
        {"kty": "EC", "crv": "P-256", "x": 1, "y": 2},
        {"kty": "OKP", "crv": "X25519", "x": x43},
        {"kty": "OKP", "crv": "X25519", "x": ff43},
        {"kty": "OKP", "crv": "X25519", "x": b64u_encode(b"\x01" + bytes(31))},
        {"kty": "OKP", "crv": "X25519", "x": x43, "d": x43},
        {"kty": "OKP", "crv": "X448", "x": x43},
        {"kty": "oct", "crv": "X25519", "k": x43},
    ]
    for epk in epks:
        h64 = b64u_encode(json.dumps({**genuine, "epk": epk}).encode())
        refusal(codec, ".".join([h64, *parts[1:]]))


def test_jws_hmac_comparison_is_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import statecodec.jose.jws as jws_module

    calls: list[int] = []
    real = hmac.compare_digest

    def counting(a: Any, b: Any) -> bool:
        calls.append(1)
        return real(a, b)

    monkeypatch.setattr(jws_module, "_compare", counting)
    token = TOKENS["jws-hs256"]
    assert refusal(CODECS["jws-hs256"], token[:-2] + ("AA" if token[-2:] != "AA" else "BA")).reason is Reason.SEAL
    assert calls == [1]


# --- inspect.describe_token -----------------------------------------------------------------------


def test_describe_token_raises_only_invalid_token() -> None:
    @FUZZ
    @given(HOSTILE_TEXT)
    def prop(text: str) -> None:
        with contextlib.suppress(InvalidToken):
            describe_token(text)

    prop()
    for junk in [*FIXED_JUNK, _TokenStr(TOKENS["aesgcm"])]:
        refusal(describe_token, junk)
    for text in RAW_HEADERS:
        # A description is not a verdict: it may describe a header a codec would refuse.
        with contextlib.suppress(InvalidToken):
            describe_token(_encode_header(text) + ".." + "A" * 16 + ".AA.AA")


def test_describe_token_keeps_no_header_text_in_the_chain() -> None:
    rest = TOKENS["jwe-dir"][TOKENS["jwe-dir"].index(".") :]
    for header in hostile_headers():
        assert_no_marker(refusal(describe_token, header + rest))


# --- configuration: refused at construction, with how to fix it, echoing no secret ---------------


@pytest.mark.parametrize("wrapped", [None, 5, 1.5])
def test_envelope_wrapped_keys_that_are_not_a_list_are_a_configuration_error(wrapped: object) -> None:
    wrapper = LocalWrapper()
    with pytest.raises(ConfigurationError, match="wrapped_keys must be a list"):
        EnvelopeCodec(wrapper, wrapped)  # type: ignore[arg-type]
    assert wrapper.unwraps == 0


@pytest.mark.parametrize("limit", ["4096", True, 10, 2**31])
def test_envelope_cap_is_checked_before_any_provider_call(limit: object) -> None:
    wrapper = LocalWrapper()
    blob = new_wrapped_key(wrapper)
    with pytest.raises(ConfigurationError, match="max_token_length"):
        EnvelopeCodec(wrapper, [blob], max_token_length=limit)  # type: ignore[arg-type]
    assert wrapper.unwraps == 0


def test_ecdh_and_eddsa_key_lists_that_are_not_lists_are_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="non-empty list"):
        JWECodec.ecdh(5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="non-empty list"):
        JWSCodec.eddsa(5)  # type: ignore[arg-type]


@pytest.mark.parametrize("alg", [["HS256"], {"k": MARKER}, 7, MARKER * 4])
def test_jwk_alg_of_any_type_is_a_configuration_error_that_echoes_no_value(alg: object) -> None:
    jwk = {"kty": "oct", "kid": "a", "k": b64u_encode(os.urandom(32)), "alg": alg}
    for build in (lambda: JWSCodec.from_jwks([jwk]), lambda: JWECodec.from_jwks([jwk])):
        with pytest.raises(ConfigurationError, match="this codec accepts") as info:
            build()
        assert MARKER not in str(info.value)


def test_vault_address_with_credentials_is_refused_without_echoing_them() -> None:
    pytest.importorskip("hvac")
    from statecodec.providers.vault import vault_client

    with pytest.raises(ConfigurationError, match="no credentials") as info:
        vault_client(f"https://ops:{MARKER}@vault.example:8200", token="s.token")
    assert MARKER not in str(info.value)


def test_vault_transit_clock_that_is_not_callable_is_refused_before_any_call() -> None:
    pytest.importorskip("hvac")
    from statecodec.providers.vault import VaultTransitCodec, vault_client

    # Nothing listens on port 1: reaching the network would be a ProviderError, not this.
    client = vault_client("http://127.0.0.1:1", token="s.token")
    try:
        with pytest.raises(ConfigurationError, match="clock must be a callable"):
            VaultTransitCodec(client, "statecodec", clock=None)  # type: ignore[arg-type]
    finally:
        client.adapter.close()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"endpoint_url": 5},
        {"read_timeout": float("nan")},
        {"connect_timeout": -1},
        {"connect_timeout": "2"},
        {"retry": 5},
    ],
)
def test_aws_wrapper_arguments_are_checked_at_construction(kwargs: dict[str, Any]) -> None:
    pytest.importorskip("boto3")
    from statecodec.providers.aws_kms import AwsKmsWrapper

    with pytest.raises(ConfigurationError, match="must be"):
        AwsKmsWrapper("1234abcd-12ab-34cd-56ef-1234567890ab", region="eu-west-1", **kwargs)


def test_gcp_and_vault_wrappers_refuse_a_retry_that_is_not_a_policy() -> None:
    pytest.importorskip("google.cloud.kms")
    pytest.importorskip("hvac")
    from statecodec.providers.gcp_kms import GcpKmsWrapper
    from statecodec.providers.vault import VaultKeyWrapper, vault_client

    name = "projects/p/locations/global/keyRings/r/cryptoKeys/k"
    with pytest.raises(ConfigurationError, match="RetryPolicy"):
        GcpKmsWrapper(name, client=object(), retry=5)  # type: ignore[arg-type]
    client = vault_client("http://127.0.0.1:1", token="s.token")
    try:
        with pytest.raises(ConfigurationError, match="RetryPolicy"):
            VaultKeyWrapper(client, "statecodec", retry=5)  # type: ignore[arg-type]
    finally:
        client.adapter.close()


def test_gcp_wrapper_refuses_a_boolean_timeout() -> None:
    """True is an int to Python; as a timeout it is a mistake, as the AWS and Vault settings say."""
    pytest.importorskip("google.cloud.kms")
    from statecodec.providers.gcp_kms import GcpKmsWrapper

    name = "projects/p/locations/global/keyRings/r/cryptoKeys/k"
    with pytest.raises(ConfigurationError, match="timeout"):
        GcpKmsWrapper(name, client=object(), timeout=True)


def test_vault_secret_files_are_read_with_a_bound(tmp_path: Path) -> None:
    pytest.importorskip("hvac")
    from statecodec.providers.vault import vault_client_from_settings

    huge = tmp_path / "token"
    huge.write_bytes(b"s." + b"x" * (128 * 1024))
    with pytest.raises(ConfigurationError, match="is over") as info:
        vault_client_from_settings(
            {"STATECODEC_VAULT_ADDR": "http://127.0.0.1:1", "STATECODEC_VAULT_TOKEN_FILE": str(huge)}
        )
    assert "xxxx" not in str(info.value)


# --- the conformance kit ------------------------------------------------------------------------


class _HeaderEchoCodec:
    """A JWS whose header check keeps the parser's error (and the header text) as __context__."""

    def __init__(self) -> None:
        self._inner = JWSCodec.ephemeral()

    def seal(self, payload: bytes) -> str:
        return self._inner.seal(payload)

    def unseal(self, token: str) -> bytes:
        if type(token) is str and "." in token:
            try:
                json.loads(b64u_decode(token.split(".")[0]).decode("utf-8", "replace"))
            except ValueError:
                raise InvalidToken(Reason.MALFORMED) from None
            except InvalidToken:
                pass
        return self._inner.unseal(token)


def test_the_kit_catches_header_text_kept_in_the_exception_chain() -> None:
    codec = _HeaderEchoCodec()
    report = check_codec(codec, error_type=InvalidToken, max_examples=2, max_mutations=50, deterministic=True)
    assert "no_leak" in report.failed_checks()


# --- VaultTransitCodec: local parsing before any network call ------------------------------------


def _reaches_vault(text: object) -> bool:
    """Whether `text` passes every local check (so a Vault call is the only verdict left)."""
    if type(text) is not str or len(text) > CAP:
        return False
    try:
        raw = b64u_decode(text)
    except InvalidToken:
        return False
    return len(raw) >= 33 and raw[0] == 0x05 and raw[1:5] != bytes(4)


@pytest.mark.integration
def test_vault_transit_refuses_junk_locally_with_zero_calls(
    vault_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from statecodec.providers.vault import VaultTransitCodec
    from tests.plugins.vault import CallLog, client_for

    with client_for(vault_server) as client:
        calls = CallLog(client)  # before the codec, which binds the adapter's post at construction
        codec = VaultTransitCodec(client, vault_server.new_key(derived=True), max_token_length=CAP)
        raw = b64u_decode(codec.seal(PAYLOAD))
        calls.reset()
        caplog.set_level(logging.DEBUG)
        expected = 0

        @FUZZ
        @given(HOSTILE_TEXT)
        def prop(text: str) -> None:
            nonlocal expected
            expected += _reaches_vault(text)
            refusal(codec, text)

        prop()
        local: list[object] = [*FIXED_JUNK, _TokenStr(b64u_encode(raw))]
        local += [b64u_encode(raw[:n]) for n in range(33)]
        local += [b64u_encode(bytes([v]) + raw[1:]) for v in range(256) if v != 0x05]
        local += [b64u_encode(raw[:1] + bytes(4) + raw[5:]), b64u_encode(raw) + "=", " " + b64u_encode(raw)]
        for junk in local:
            assert not _reaches_vault(junk)
            refusal(codec, junk)
        assert calls.count() == expected
        exc = refusal(codec, b64u_encode(raw[:1] + (2**32 - 1).to_bytes(4, "big") + raw[5:]))
        assert exc.reason is Reason.UNKNOWN_KEY  # Vault's "too new": a verdict on the token, not an outage
        tampered = b64u_encode(raw[:-1] + bytes([raw[-1] ^ 1]))
        exc = refusal(codec, tampered)
        assert exc.reason is Reason.SEAL
        for needle in (tampered[5:40], b64u_encode(raw)[5:40], base64.b64encode(raw[5:]).decode()[:32]):
            assert_no_marker(exc, needle)
            assert needle not in caplog.text


def test_the_kit_leaves_memory_tracing_as_it_found_it() -> None:
    tracemalloc.start()
    try:
        check_codec(CODECS["aesgcm"], error_type=InvalidToken, max_examples=1, max_mutations=20)
        assert tracemalloc.is_tracing()
    finally:
        tracemalloc.stop()
