"""statecodec codecs as the MCP SDK's request-state codec, with a real MCPServer and Client."""

from __future__ import annotations

import builtins
import pickle
from typing import Any

import pytest
from mcp.server.mcpserver import RequestStateSecurity
from mcp.server.request_state import InvalidRequestState, authenticated_principal

from statecodec import AESGCMCodec, ConfigurationError, InvalidToken, XAESGCMCodec, format_keys, generate_key
from statecodec._encoding import b64u_decode, b64u_encode
from statecodec.mcp import security_from_env
from tests.mcp_flows import (
    accept_token,
    assert_mcp_rejects,
    mint_token,
    run_mcp_flows,
    submit_token,
)

KEY = generate_key()
OTHER_KEY = generate_key()


def _flip_last_byte(token: str) -> str:
    raw = bytearray(b64u_decode(token))
    raw[-1] ^= 0x01
    return b64u_encode(bytes(raw))


def _flip_body_byte(token: str) -> str:
    raw = bytearray(b64u_decode(token))
    raw[len(raw) // 2] ^= 0x80
    return b64u_encode(bytes(raw))


@pytest.mark.parametrize("codec_cls", [AESGCMCodec, XAESGCMCodec])
def test_flows_complete_through_the_codec(codec_cls: type[AESGCMCodec | XAESGCMCodec]) -> None:
    report = run_mcp_flows(codec_cls([KEY]))
    assert len(report.questions) == 6
    for token in report.sealed:
        assert b64u_decode(token)[0] == codec_cls.VERSION


@pytest.mark.parametrize("token", ["", "v1.AAAA", "A" * 300_000])
def test_a_refusal_is_also_the_sdks_own_error_once_the_sdk_is_loaded(token: str) -> None:
    with pytest.raises(InvalidRequestState) as refused:
        AESGCMCodec([KEY]).unseal(token)
    assert isinstance(refused.value, InvalidToken)
    assert str(refused.value) == refused.value.reason.value
    assert refused.value.__cause__ is None
    assert pickle.loads(pickle.dumps(refused.value)).reason is refused.value.reason  # noqa: S301 - our own bytes


@pytest.mark.parametrize("codec_cls", [AESGCMCodec, XAESGCMCodec])
def test_the_plain_sdk_line_logs_the_reason_without_a_traceback(codec_cls: type[AESGCMCodec]) -> None:
    # RequestStateSecurity(codec=...) with the codec as it is, on a real MCPServer (assert_mcp_rejects checks the log).
    policy = RequestStateSecurity(codec=codec_cls([KEY]))
    assert assert_mcp_rejects(policy, _flip_last_byte, reason="seal") == "seal"


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (_flip_last_byte, "seal"),
        (_flip_body_byte, "seal"),
        (lambda t: t[:10], "malformed"),
        (lambda t: t[:-1], ("malformed", "seal")),  # one char short may still be canonical
        (lambda t: t + "=", "malformed"),
        (lambda t: t[:5] + "+" + t[6:], "malformed"),
        (lambda t: t + "A" * 200_000, "oversized"),
        (lambda t: b64u_encode(bytes([0x7F]) + b64u_decode(t)[1:]), "format"),
    ],
    ids=["tag", "body", "truncated", "one-char-short", "padded", "std-alphabet", "oversized", "version"],
)
def test_tampered_tokens_get_the_frozen_error_and_our_reason(tamper: Any, reason: str | tuple[str]) -> None:
    codec = AESGCMCodec([KEY])
    assert assert_mcp_rejects(codec, tamper, reason=reason) in reason


def test_foreign_key_token_is_unknown_key() -> None:
    assert_mcp_rejects(AESGCMCodec([KEY]), lambda t: t, minted_by=AESGCMCodec([OTHER_KEY]), reason="unknown_key")


def test_other_server_same_key_is_refused_by_audience() -> None:
    codec = AESGCMCodec([KEY])
    assert_mcp_rejects(codec, lambda t: t, minted_on="another-service", reason="audience")
    shared = RequestStateSecurity(codec=codec, audience="shared-audience")
    assert_mcp_rejects(codec, lambda t: t, minted_by=shared, minted_on="another-service", reason="audience")


def test_token_replayed_against_other_arguments_is_refused() -> None:
    codec = AESGCMCodec([KEY])
    rejection = submit_token(codec, mint_token(codec), arguments={"name": "payments"})
    assert rejection.reason == "request binding"


@pytest.mark.parametrize("junk", ["", "x", "not a token", "v1.AAAA", "\u00e9" * 40, "A" * 64])
def test_junk_tokens_are_refused_with_our_reason(junk: str) -> None:
    reason = assert_mcp_rejects(AESGCMCodec([KEY]), junk)
    assert reason in {"malformed", "format", "unknown_key"}


def test_rejection_is_logged_through_caplog(caplog: pytest.LogCaptureFixture) -> None:
    codec = AESGCMCodec([KEY])
    token = _flip_last_byte(mint_token(codec))
    caplog.set_level("WARNING", logger="mcp.server.request_state")
    submit_token(codec, token)
    messages = [r.getMessage() for r in caplog.records if r.name == "mcp.server.request_state"]
    assert messages == ["requestState rejected on tools/call: seal"]
    assert all(r.exc_info is None for r in caplog.records)


def _env(**extra: str) -> dict[str, str]:
    return {"STATECODEC_KEYS": format_keys([KEY, OTHER_KEY]), **extra}


def test_security_from_env_is_the_sdks_policy_around_the_configured_codec_as_it_is() -> None:
    policy = security_from_env(environ=_env(STATECODEC_CODEC="xaesgcm", STATECODEC_TTL="5"), audience="billing")
    assert isinstance(policy.codec, XAESGCMCodec)
    assert policy.codec.key_ids == XAESGCMCodec([KEY, OTHER_KEY]).key_ids
    assert (policy.ttl, policy.audience, policy.bind_principal) == (5, "billing", authenticated_principal)
    assert security_from_env(environ=_env(), bind_principal=None, ttl=30).bind_principal is None
    with pytest.raises(ConfigurationError, match="no codec configured"):
        security_from_env(environ={})


def test_without_the_sdk_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_mcp(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "mcp" or name.startswith("mcp."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mcp)
    with pytest.raises(ImportError, match=r"pip install 'statecodec\[mcp\]'"):
        security_from_env(environ=_env())


def test_principal_binding_through_the_security_helper() -> None:
    codec = AESGCMCodec([KEY])
    token = mint_token(RequestStateSecurity(codec=codec, bind_principal=lambda ctx: "alice"))
    accept_token(RequestStateSecurity(codec=codec, bind_principal=lambda ctx: "alice"), token)
    assert_mcp_rejects(RequestStateSecurity(codec=codec, bind_principal=lambda ctx: "bob"), token, reason="principal")
    assert_mcp_rejects(RequestStateSecurity(codec=codec, bind_principal=None), token, reason="principal drift")


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


def test_expiry_is_enforced_by_the_sdk_around_our_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock(1_000_000.0)
    monkeypatch.setattr("mcp.server.request_state.time", clock)
    codec = AESGCMCodec([KEY])
    policy = RequestStateSecurity(codec=codec, ttl=60.0)
    token = mint_token(policy)
    clock.now += 59.0
    accept_token(policy, token)
    clock.now += 1.0
    assert_mcp_rejects(policy, token, reason="expired")
