"""Per-token transit when Vault is sealed, stopped, silent or paused: fail closed, fast, and keep no credential."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from tests.plugins.vault import BaoServer, CallLog, Clock, client_for
from tests.secrecy import assert_unreachable

from statecodec import InvalidToken, ProviderError, Reason
from statecodec.providers import RetryPolicy
from statecodec.providers.vault import VaultKeyWrapper, VaultTransitCodec, vault_client

pytestmark = pytest.mark.integration


@pytest.fixture
def live(vault_server_fresh: BaoServer) -> Iterator[tuple[BaoServer, Any, str]]:
    with client_for(vault_server_fresh, timeout=(0.5, 0.5)) as c:
        yield vault_server_fresh, c, vault_server_fresh.new_key()


def _fault(name: str, server: BaoServer, client: Any) -> contextlib.AbstractContextManager[object]:
    """Seal or stop the server; or, `silent`, stop it and take its port with a socket that never answers."""
    if name == "sealed":
        server.seal()
        return contextlib.nullcontext()
    host, port = server.addr.removeprefix("http://").split(":")
    server.stop()
    if name == "stopped":
        return contextlib.nullcontext()
    client.adapter.session.close()  # drop pooled connections to the stopped server
    silent = socket.socket()
    silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    silent.bind((host, int(port)))
    silent.listen(16)  # never accepted: the kernel completes the handshake, nobody answers
    return silent


@pytest.mark.parametrize(
    ("fault", "phrase"),
    [("sealed", "sealed"), ("stopped", "cannot connect"), ("silent", "did not answer within the read timeout")],
)
def test_a_vault_that_cannot_answer_fails_closed(live: tuple[BaoServer, Any, str], fault: str, phrase: str) -> None:
    server, client, key = live
    codec = VaultTransitCodec(client, key, outage_backoff=0)
    plain = VaultTransitCodec(client, server.new_key(derived=False), outage_backoff=0)
    wrapper = VaultKeyWrapper(client, key, retry=RetryPolicy(attempts=1))
    token, plain_token = codec.seal(b"p"), plain.seal(b"p")
    with _fault(fault, server, client):
        with pytest.raises(InvalidToken) as info:
            codec.unseal(token)
        assert info.value.reason is Reason.PROVIDER
        assert info.value.__context__ is None
        with pytest.raises(InvalidToken) as info:
            codec.reseal(token[:20])  # a token that fails the local checks is still refused for what it is
        assert info.value.reason is Reason.MALFORMED
        for call in (
            partial(codec.seal, b"p"),
            partial(codec.reseal, token),
            partial(plain.reseal, plain_token),
            partial(VaultTransitCodec, client, key),
            partial(wrapper.new_wrapped_key, {"purpose": "p"}),
        ):
            with pytest.raises(ProviderError, match=phrase) as err:
                call()
            # The `requests` error keeps the request, X-Vault-Token header and all: nothing may reach it.
            assert err.value.__context__ is None
            assert_unreachable(err.value, server.root_token.encode())
    if fault == "sealed":  # unsealed again, the same codec carries on: nothing to restart
        server.unseal()
        assert codec.unseal(token) == b"p"
        assert codec.unseal(codec.seal(b"q")) == b"q"


def test_the_codec_keeps_to_its_outage_window(live: tuple[BaoServer, Any, str]) -> None:
    server, client, key = live
    clock = Clock()
    codec = VaultTransitCodec(client, key, outage_backoff=1.0, clock=clock)
    token = codec.seal(b"p")
    server.seal()
    calls = CallLog(client)
    tried = []
    for _ in range(8):  # one call per simulated second
        before = calls.count()
        with pytest.raises(InvalidToken):
            codec.unseal(token)
        tried.append(calls.count() > before)
        clock.now += 1.0
    assert tried == [True, True, False, True, False, False, False, True]  # windows of 1, 2 and 4 s
    with pytest.raises(ProviderError, match=r"sealed.*\(backing off\)"):
        codec.seal(b"p")  # inside the 8 s window: refused without a call
    assert calls.count() == 4
    server.unseal()
    clock.now += 8.0
    assert codec.unseal(token) == b"p"
    server.seal()  # the answer reset the window to `outage_backoff`: 1 s, then 2 s
    for _ in range(3):
        with pytest.raises(InvalidToken):
            codec.unseal(token)
        clock.now += 1.0
    assert calls.count() == 7


def test_concurrent_callers_in_a_stall_open_one_window(vault_server_fresh: BaoServer) -> None:
    """Eight calls in flight when OpenBao is paused (SIGSTOP) count as one failure, not eight.

    Counted once per call, the window would double eight times (to the 30 s cap); counted once, the codec serves
    again within one base window of SIGCONT. The deadline allows ten seconds more, still far short of the cap.
    """
    server, base, callers = vault_server_fresh, 1.0, 8
    key = server.new_key()
    with client_for(server, timeout=(0.5, 0.5), pool_size=callers) as client:
        codec = VaultTransitCodec(client, key, outage_backoff=base)
        token = codec.seal(b"p")
        start = threading.Barrier(callers)
        reasons: list[Reason] = []

        def caller() -> None:
            start.wait(timeout=30)
            try:
                codec.unseal(token)
            except InvalidToken as exc:
                reasons.append(exc.reason)

        threads = [threading.Thread(target=caller) for _ in range(callers)]
        with server.paused():
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
        resumed = time.monotonic()
        assert not any(t.is_alive() for t in threads)
        assert reasons == [Reason.PROVIDER] * callers
        served, refusals = False, set()
        while not served and time.monotonic() < resumed + base + 10.0:
            try:
                served = codec.unseal(token) == b"p"
            except InvalidToken as exc:
                refusals.add(exc.reason)
                time.sleep(0.05)
        assert served, "still refusing after one base window (plus ten seconds) of a healthy Vault"
        assert refusals <= {Reason.PROVIDER}


def test_a_failed_approle_login_keeps_no_secret_id() -> None:
    secret_id = "an-approle-secret-id"
    with pytest.raises(ProviderError, match="AppRole login") as info:
        vault_client("http://127.0.0.1:1", role_id="r", secret_id=secret_id, timeout=(0.5, 0.5))
    assert info.value.__context__ is None
    assert_unreachable(info.value, secret_id.encode())
