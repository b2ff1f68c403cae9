"""Retry-safe single use on every server kind: the same retry gets the first answer and the step runs once.

Each test is an attack or a failure (its name says which). Fleet: tests/integration/test_fleet_single_use.py."""

from __future__ import annotations

import hmac
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from examples import lowlevel_server
from mcp import Client, MCPError
from mcp.server.request_state import RequestStateSecurity
from mcp.types import CallToolResult, ElicitResult, ErrorData, InputRequiredResult

from statecodec import AESGCMCodec, Codec, ConfigurationError, InvalidToken, format_keys, generate_key
from statecodec._settings import DEFAULT_STORE_TIMEOUT, MAX_RETRY_INPUT
from statecodec.errors import StoreUnreachable
from statecodec.mcp import SingleUseMiddleware, single_use_from_env
from statecodec.reload import ReloadingCodec
from statecodec.single_use import SingleUse, canonical_json
from statecodec.store import MemoryStore
from tests.integration.fleet_harness import present as http_present
from tests.integration.fleet_harness import round_one as http_round_one
from tests.mcp_flows import (
    HTTP,
    KEY,
    KINDS,
    STORE_KEY,
    TOOL,
    build_server,
    guarded,
    mint,
    present,
    rejections,
    run_mcp_flows,
    serving,
    single_use,
)
from tests.mcp_flows import client as client_of
from tests.test_vectors import hkdf

RUNS: list[str] = []
GATE = anyio.Event()


async def pay(name: str, ctx: Any) -> str | InputRequiredResult:
    """Round one asks for a region; the step counts each run, waits at the gate for ``slow`` (for ever for ``stuck``),
    raises for ``boom``."""
    answer = (ctx.input_responses or {}).get("region")
    if ctx.request_state != "asked" or not isinstance(answer, ElicitResult) or not answer.content:
        return InputRequiredResult(input_requests={"region": lowlevel_server.ASK_REGION}, request_state="asked")
    RUNS.append(region := str(answer.content["region"]))
    if region == "slow":
        await GATE.wait()
    if region == "stuck":
        await anyio.sleep_forever()
    if region == "boom":
        raise MCPError(-32000, "payment declined", {"retry": False})
    return f"paid in {region}, run {len(RUNS)}"


def paying(middleware: SingleUseMiddleware, kind: str, codec: Codec | None = None) -> Any:
    """A server of `kind` whose tool is `pay`, guarded by `middleware`."""
    security = RequestStateSecurity(codec=codec or AESGCMCodec([KEY]))
    return build_server(security, kind=kind, tool=pay, **guarded(middleware, kind))


def retry_safe(store: MemoryStore | None = None, **options: Any) -> SingleUseMiddleware:
    return single_use(store, retry_safe=True, **options)


async def go(client: Client, token: str, region: str = "eu") -> Any:
    """`token` answered with `region`: the tool's text, or the error."""
    result = await present(client, token, region=region)
    return getattr(result.content[0], "text", None) if isinstance(result, CallToolResult) else result


FROZEN = ErrorData(code=-32602, message="Invalid or expired requestState", data={"reason": "invalid_request_state"})


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_retry_is_answered_once_run_and_every_other_retry_is_refused(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    RUNS.clear()
    store = MemoryStore()
    server, capped, plain = (paying(retry_safe(store), kind), paying(retry_safe(store, max_result=60), kind),
                             paying(single_use(store), kind))

    async def body() -> list[Any]:
        async with client_of(server) as client, client_of(capped) as small, client_of(plain) as off:
            tokens = [await mint(client) for _ in range(4)]
            out = [await go(client, tokens[0]), await go(client, tokens[0]), await go(client, tokens[0], "us")]
            out += [await go(off, tokens[0]), await go(client, tokens[1], "boom"), await go(client, tokens[1], "boom")]
            out += [await go(small, tokens[2]), await go(small, tokens[2]), await go(off, tokens[3])]
            out.append(await go(client, tokens[3]))  # claimed with the mode off: never the same retry
            (paid, kept), (_, declined) = list(store._retries.items())[:2]  # a claim's digest, then its answer:
            store._retries[paid] = kept[:16] + declined[16:]  # the declined answer, moved onto the paid claim
            return [*out, await go(client, tokens[0])]

    paid, declined = "paid in eu, run 1", ErrorData(code=-32000, message="payment declined", data={"retry": False})
    declined_as = f"Error calling tool '{TOOL}': payment declined" if kind == "FastMCP" else declined  # a result there
    assert anyio.run(body) == [paid, paid, FROZEN, FROZEN, declined_as, declined_as, "paid in eu, run 3", FROZEN,
                               "paid in eu, run 4", FROZEN, FROZEN]  # fmt: skip
    assert RUNS == ["eu", "boom", "eu", "eu"]  # each step once; a raised error is kept and answered again
    assert rejections(caplog.records) == ["replayed"] * 4 + ["seal"]  # other input, mode off, over the cap, mixed


@pytest.mark.parametrize("kind", KINDS)
def test_a_kept_answer_is_under_the_store_key_so_a_codec_ring_reloaded_before_the_retry_leaves_it_in_force(
    kind: str,
) -> None:
    RUNS.clear()
    rings = [[KEY]]
    codec = ReloadingCodec(lambda: AESGCMCodec(rings[-1]), ttl=600)
    server = paying(retry_safe(), kind, codec)

    async def body() -> list[Any]:
        async with client_of(server) as client:
            token = await mint(client)
            first = await go(client, token)
            rings.append([generate_key(), KEY])  # phase 2 of a live rotation: a new primary, the old key verifies
            assert codec.reload()
            return [first, await go(client, token)]

    assert anyio.run(body) == ["paid in eu, run 1"] * 2
    assert RUNS == ["eu"]


class Forgetful(MemoryStore):
    async def keep(self, *, key: bytes, retry: bytes, result: bytes, within_ms: int) -> bool:
        raise StoreUnreachable("the store at memory did not answer")


BUSY = ErrorData(code=-32602, message="requestState in progress: retry shortly", data={"reason": "in_progress"})
LOST = ErrorData(code=-32602, message="requestState step lost, no answer was kept: start the flow again",
                 data={"reason": "step_lost"})  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_a_step_whose_client_went_mid_step_ends_and_its_retry_gets_the_answer_and_a_lost_one_is_told_in_bound(
    kind: str, caplog: pytest.LogCaptureFixture,
) -> None:
    RUNS.clear()
    GATE.__init__()  # type: ignore[misc]
    now = [1_800_000_000.0]  # the lossy store's clock and its guard's, moved by hand

    def clock() -> float:
        return now[0]

    lossy_guard = SingleUse(Forgetful(clock=clock), key=STORE_KEY, ttl=600, clock=clock)
    server = paying(retry_safe(), kind)
    forgetful = paying(SingleUseMiddleware(lossy_guard, retry_safe=True, step_timeout=1), kind)
    bounded = paying(retry_safe(step_timeout=1), kind)

    async def body() -> list[Any]:
        async with client_of(server) as client, client_of(forgetful) as lossy, client_of(bounded) as short:
            cancelled, lost, stuck = await mint(client), await mint(lossy), await mint(short)
            cut = [await go(short, stuck, "stuck"), await go(short, stuck, "stuck")]  # cancelled at its bound, kept
            out = []
            first = anyio.CancelScope()

            async def gone() -> None:
                with first:
                    await go(client, cancelled, "slow")

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(gone)
                while RUNS[-1:] != ["slow"]:
                    await anyio.sleep(0.01)
                out.append(await go(client, cancelled, "slow"))  # while the first runs
                first.cancel()  # the client gave up: the SDK cancels the handler mid-step
                await anyio.sleep(0.1)
                GATE.set()  # the step goes on, shielded, and keeps its answer
            while len(out) < 5 and out[-1] == BUSY:
                await anyio.sleep(0.05)
                out.append(await go(client, cancelled, "slow"))
            out += [await go(lossy, lost), await go(lossy, lost)]
            now[0] += 2.001  # its step's bound (and a second) passed, the answer never kept (the store failed)
            return [*cut, *out, await go(lossy, lost), await go(lossy, lost)]

    results = anyio.run(body)
    cut, outcomes = results[:2], results[2:]
    assert cut == [ErrorData(code=-32603, message="Internal server error")] * 2  # the second without running
    assert outcomes[0] == BUSY
    assert outcomes[-5:] == ["paid in slow, run 2", "paid in eu, run 3", BUSY, LOST, LOST]
    assert all(outcome == BUSY for outcome in outcomes[1:-5])  # until the first run kept its answer
    assert RUNS == ["stuck", "slow", "eu"]
    assert "its retry is refused as in progress, then step_lost after 2 s" in caplog.text
    assert "the handler of tools/call raised past STATECODEC_STEP_TIMEOUT (1 s)" in caplog.text


@pytest.mark.parametrize("kind", KINDS)
def test_over_http_another_presenter_is_another_retry_and_reads_nothing(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FLEET_RUNS_FILE", str(runs := tmp_path / "runs"))

    async def body() -> list[Any]:  # bind_principal=None: the SDK lets anyone present a token; the digest does not
        async with serving(retry_safe(), kind, bind_principal=None) as client:
            state = await http_round_one(client, HTTP, subject="alice")
            calls = [("alice", "eu"), ("mallory", "eu"), ("alice", "us"), ("alice", "eu")]
            return [await http_present(client, HTTP, state, subject=who, region=region) for who, region in calls]

    first, stolen, other, again = anyio.run(body)
    assert again == first
    assert first["result"]["structuredContent"]["region"] == "eu"
    assert stolen["error"] == other["error"] == FROZEN.model_dump(exclude_none=True)
    assert runs.read_text() == "orders\n"
    assert rejections(caplog.records) == ["replayed", "replayed"]
    # Every flow of the SDK (a kept input_required answer too) completes, each wire state sealed by the SDK.
    run_mcp_flows(AESGCMCodec([KEY]), kind=kind, **guarded(retry_safe(), kind))


def test_the_retry_digest_is_the_documented_bytes_and_the_settings_fail_at_start_naming_themselves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    guard = SingleUse(MemoryStore(), key=bytes(range(32)), ttl=60)
    params = {"name": "pay", "arguments": {"amount": 10, "to": "é"}, "_meta": {"progressToken": 7}, "inputResponses":
              {"ok": {"action": "accept", "content": {"sure": True}}}}  # fmt: skip
    canonical = ('{"method":"tools/call","params":{"arguments":{"amount":10,"to":"é"},"inputResponses":{"ok":{"action":'
                 '"accept","content":{"sure":true}}},"name":"pay"},"principal":[null,"https://idp","alice"],'
                 '"state":"su2.x"}').encode()  # fmt: skip
    expected = hmac.new(hkdf(bytes(range(32)), b"statecodec/su2/retry"), canonical, "sha256").digest()[:16]
    assert guard.retry_digest("tools/call", params, "su2.x", (None, "https://idp", "alice")) == expected
    assert expected.hex() == "e23d83482ac5531696c5367dc2f65dad"  # docs/formats.md, "The retry digest"
    # "Kept answer", from the doc alone: nonce || AES-256-GCM(Ka, nonce, JSON, "statecodec/su2/result" 0x00 key digest)
    aead, aad = AESGCM(hkdf(bytes(range(32)), b"statecodec/su2/result")), b"statecodec/su2/result\x00" + KEY[:16]
    sealed = guard.seal_answer(KEY[:16], expected, b'{"result":{}}')
    assert aead.decrypt(sealed[:12], sealed[12:], aad + expected) == b'{"result":{}}'
    assert guard.open_answer(KEY[:16], expected, bytes(12) + aead.encrypt(bytes(12), b"{}", aad + expected)) == {}
    digest = guard.retry_digest  # documented: equal numbers are one retry, text is not normalised, no `_meta`
    one = digest("m", {"arguments": {"n": 1}}, "s", None)
    assert one == digest("m", {"arguments": {"n": 1.0}, "_meta": {"progressToken": 8}}, "s", None)
    assert one != digest("m", {"arguments": {"n": 1.5}}, "s", None)
    assert one != digest("m", {"arguments": {"n": 1}, "task": {}}, "s", None)  # any param a handler may read
    assert digest("m", {"name": "\u00e9"}, "s", None) != digest("m", {"name": "e\u0301"}, "s", None)
    # "Numbers are read from the request's JSON text": an integer beyond 2^53 - 1 is refused, others in ECMAScript form
    def of(text: str) -> bytes:
        return digest("m", json.loads(f'{{"n":{text}}}'), "s", None)

    big = b'{"method":"m","params":{"n":1e+21},"principal":[null,null,null],"state":"s"}'
    assert of("1e21") == hmac.new(hkdf(bytes(range(32)), b"statecodec/su2/retry"), big, "sha256").digest()[:16]
    assert of("10.0") == of("1E1") == of("10")
    assert of("-0.0") == of("0") == of("1e-400")
    assert of("9007199254740993.0") == of("9007199254740992.0") == of("9.007199254740992e15")
    assert of("9007199254740991") == of("9007199254740991.0")
    for text in ("9007199254740992", "-9007199254740992", "1e400", '"\\ud800"'):
        with pytest.raises(InvalidToken, match=r"^malformed$"):
            of(text)
    env = {"STATECODEC_STORE_URL": "memory", "STATECODEC_STORE_KEY": format_keys([STORE_KEY])}
    assert single_use_from_env(env).retry_safe is False
    assert single_use_from_env(env | {"STATECODEC_RETRY_SAFE": "on"}).retry_safe is True
    for name, value in [("STATECODEC_RETRY_SAFE", "yes"), ("STATECODEC_RETRY_RESULT_MAX", "0"),
                        ("STATECODEC_RETRY_RESULT_MAX", "1e6")]:  # fmt: skip
        with pytest.raises(ConfigurationError, match=name):
            single_use_from_env(env | {name: value})
    monkeypatch.setitem(sys.modules, "rfc8785", None)  # `mcp` without statecodec[mcp]: refused at start, not per retry
    with pytest.raises(ImportError, match=r"pip install 'statecodec\[mcp\]'"):
        single_use_from_env(env | {"STATECODEC_RETRY_SAFE": "on"})


def test_a_kept_answer_is_compact_ascii_json_and_the_cap_counts_its_bytes() -> None:
    kept: list[bytes] = []

    class Keeping(SingleUse):
        async def keep(self, key: bytes, retry: bytes, data: bytes, within: float) -> bool:
            kept.append(data)
            return True

    answer = {"result": {"z": "\u00e9", "t": "\U0001f600", "a": [1, 2.5, None]}}
    compact = b'{"result":{"z":"\\u00e9","t":"\\ud83d\\ude00","a":[1,2.5,null]}}'  # docs/formats.md, "Kept answer"
    for cap in (len(compact), len(compact) - 1):
        middleware = SingleUseMiddleware(Keeping(MemoryStore(), key=STORE_KEY, ttl=60), retry_safe=True, max_result=cap)
        anyio.run(middleware._keep, KEY[:16], bytes(16), answer)
    assert kept == [compact, b"{}"]


class Gone(MemoryStore):
    async def keep(self, *, key: bytes, retry: bytes, result: bytes, within_ms: int) -> bool:
        return False  # the claim went meanwhile: a flush, a restart, its token's expiry


@pytest.mark.parametrize("kind", KINDS)
def test_an_answer_not_kept_is_logged_and_the_in_process_store_keeps_answers_within_its_byte_budget(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    RUNS.clear()
    budget = MemoryStore(max_kept_bytes=400)  # one answer fits (up to 326 bytes with its claim, by kind), two do not
    small, gone = paying(retry_safe(budget), kind), paying(retry_safe(Gone()), kind)

    async def body() -> list[Any]:
        async with client_of(small) as client, client_of(gone) as lossy:
            first, second, lost = await mint(client), await mint(client), await mint(lossy)
            out = [await go(client, first), await go(client, second), await go(client, first), await go(client, second)]
            return [*out, await go(lossy, lost), await go(lossy, lost)]

    paid = [f"paid in eu, run {run}" for run in (1, 2, 3)]
    assert anyio.run(body) == [paid[0], paid[1], paid[0], BUSY, paid[2], BUSY]  # the second over the budget
    assert "would pass its max_kept_bytes (400)" in caplog.text
    assert "the claim is gone" in caplog.text
    with pytest.raises(ConfigurationError, match="max_kept_bytes"):
        MemoryStore(max_kept_bytes=0)


@dataclass
class Request:
    method: str
    params: dict[str, Any]


def test_a_spent_tokens_retry_with_megabytes_of_input_is_refused_without_stalling_the_loop_and_large_input_runs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    RUNS.clear()
    middleware = retry_safe()
    server, steps = paying(middleware, "Server"), []
    hostile = {f"k{i}": {"action": "accept", "content": {"a": i, "b": "yy"}} for i in range(56_000)}  # 3.3 MB of JSON
    assert len(json.dumps(hostile, separators=(",", ":"))) > 3_300_000
    large = {"big": {"action": "accept", "content": {"text": "x" * (MAX_RETRY_INPUT + 1)}}}  # over the cap, genuine

    async def call_next(ctx: Any) -> dict[str, Any]:
        steps.append(len(ctx.params["inputResponses"]))
        return {"content": []}

    def presented(state: bytes, responses: dict[str, Any]) -> Any:  # a request the SDK's boundary verified
        return Request("tools/call", {"name": "pay", "arguments": {}, "requestState": state.decode(),
                                      "inputResponses": responses})  # fmt: skip

    async def ticker(lags: list[float], stop: anyio.Event) -> None:
        while not stop.is_set():
            start = time.perf_counter()
            await anyio.sleep(0.005)
            lags.append(time.perf_counter() - start - 0.005)

    async def body() -> tuple[list[Any], float]:
        async with middleware.lifespan(server):
            spent, big = middleware.guard.stamp(b"s"), middleware.guard.stamp(b"b")
            out = [await middleware(presented(spent, {"ok": {"action": "accept"}}), call_next)]
            lags, stop = [0.0], anyio.Event()
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(ticker, lags, stop)
                await anyio.sleep(0.02)
                with pytest.raises(MCPError) as refused:
                    await middleware(presented(spent, hostile), call_next)
                stop.set()
            out += [refused.value.error, await middleware(presented(big, large), call_next)]
            with pytest.raises(MCPError) as again:  # claimed without the mode: at most once
                await middleware(presented(big, large), call_next)
            return [*out, again.value.error], max(lags)

    outcomes, lag = anyio.run(body)
    assert outcomes == [{"content": []}, FROZEN, {"content": []}, FROZEN]
    assert steps == [1, 1]
    assert rejections(caplog.records) == ["replayed", "replayed"]
    started = time.perf_counter()
    canonical_json()(hostile)  # what a retry cost before the cap, on this machine now
    reference = time.perf_counter() - started
    # Within the store's deadline, and a small part of what the canonical form alone takes: a ratio a loaded
    # machine keeps (both are CPU time on this process).
    assert lag < 2 * DEFAULT_STORE_TIMEOUT, (lag, reference)
    assert lag < reference / 4, (lag, reference)
