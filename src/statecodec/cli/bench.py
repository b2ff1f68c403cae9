"""`statecodec bench`: what each codec costs, as ratios to the floor and to its peers, from one interleaved run.

The floor is what every AES-GCM token codec must do (a random 96-bit nonce, cryptography's AESGCM, base64url)
and nothing more. Each round times one batch of every operation in a fresh random order (`timeit`, the collector
off); a ratio is the median over rounds of this round's case over this round's floor, so a slow round slows both
sides and cancels. Peers, the SDK, the plot and the progress bar need ``pip install 'statecodec[bench]'`` (a
missing peer is skipped; a missing plotter stops the run before anything is measured).

Output: the table on stdout, or with ``--json`` the run as JSON on stdout; ``--output FILE`` also writes that JSON
to FILE; progress and status go to stderr, so stdout can be piped.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import gc
import hashlib
import importlib.metadata
import json
import os
import platform
import random
import statistics
import sys
import timeit
from collections.abc import Callable, Coroutine, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from statecodec import AESGCMCodec, BoundCodec, Codec, JWECodec, JWSCodec, XAESGCMCodec
from statecodec._encoding import b64u_decode, b64u_encode, b64u_len
from statecodec.binding import mcp_request_context
from statecodec.errors import ConfigurationError

_INSTALL = "pip install 'statecodec[bench]'"
MCP_ROUND = "MCP round"
_BATCH_S = 0.0005
_PACKAGES = ("statecodec", "cryptography", "mcp", "itsdangerous", "joserfc", "tink")
_ROW = "  {case:30} {seal_vs_floor:10.2f} {unseal_vs_floor:12.2f} {token_overhead:+7d}"
_HEAD = f"  {'case':30} {'seal/floor':>10} {'unseal/floor':>12} {'+chars':>7}"
Pair = tuple[Callable[[bytes], str], Callable[[str], bytes]]
Op = Callable[[], object]


def _payload(size: int) -> bytes:
    # ASCII JSON, as a server's requestState is text; seeded, so every run seals the same bytes.
    head = '{"flow":"provision","step":2,"cursor":"'
    return (head + b64u_encode(random.Random(size).randbytes(size))[: size - len(head) - 2] + '"}').encode()


PAYLOADS = {"state": _payload(300), "4k": _payload(4096), "64k": _payload(65536)}


def _floor() -> Pair:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    aead = AESGCM(os.urandom(32))

    def seal(payload: bytes) -> str:
        nonce = os.urandom(12)
        return base64.urlsafe_b64encode(nonce + aead.encrypt(nonce, payload, None)).rstrip(b"=").decode()

    def unseal(token: str) -> bytes:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        return aead.decrypt(raw[:12], raw[12:], None)

    return seal, unseal


def _ours(codec_class: Callable[[list[bytes]], Codec]) -> Callable[[], Pair]:
    def build() -> Pair:
        codec = codec_class([os.urandom(32)])
        return codec.seal, codec.unseal

    return build


def _sdk() -> Pair:
    from mcp.server.request_state import AESGCMRequestStateCodec

    return _ours(AESGCMRequestStateCodec)()


def _fernet() -> Pair:
    from cryptography.fernet import Fernet

    fernet = Fernet(Fernet.generate_key())
    return (lambda p: fernet.encrypt(p).decode()), fernet.decrypt


def _itsdangerous() -> Pair:  # signs only: the payload stays readable
    from itsdangerous import Signer

    signer = Signer(os.urandom(32), salt="statecodec-bench", digest_method=hashlib.sha256)
    return (lambda p: signer.sign(b64u_encode(p)).decode()), (lambda t: b64u_decode(signer.unsign(t).decode()))


def _joserfc() -> Pair:
    from joserfc import jwe
    from joserfc.jwk import OctKey

    key, header = OctKey.import_key(os.urandom(32)), {"alg": "dir", "enc": "A256GCM"}
    registry = jwe.JWERegistry(algorithms=["dir", "A256GCM"])
    registry.max_ciphertext_length = 128 * 1024  # its default 64 KiB cap would refuse the 64k payload
    return (lambda p: jwe.encrypt_compact(header, p, key, registry=registry)), (
        lambda t: cast(bytes, jwe.decrypt_compact(t, key, registry=registry).plaintext)
    )


def _tink() -> Pair:
    import tink
    from tink import aead

    aead.register()
    primitive = tink.new_keyset_handle(aead.aead_key_templates.AES256_GCM).primitive(aead.Aead)
    return (lambda p: b64u_encode(primitive.encrypt(p, b""))), (lambda t: primitive.decrypt(b64u_decode(t), b""))


# Each case: the most direct use of its library to seal bytes into a URL-safe token under a fresh key. The peers
# are the model codebases: cryptography's Fernet, itsdangerous (signs only), joserfc (JWE) and tink.
CASES: dict[str, Callable[[], Pair]] = {
    "floor": _floor,
    "AESGCMCodec": _ours(AESGCMCodec),
    "XAESGCMCodec": _ours(XAESGCMCodec),
    "JWECodec(dir)": _ours(JWECodec),
    "JWSCodec(HS256)": _ours(JWSCodec),
    "AESGCMRequestStateCodec (SDK)": _sdk,
    "Fernet": _fernet,
    "itsdangerous": _itsdangerous,
    "joserfc": _joserfc,
    "tink": _tink,
}


def _finish(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """The result of a coroutine that never suspends, without an event loop's cost in the figure."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("the boundary suspended; it cannot be timed without an event loop")


def _mcp_round() -> dict[str, Op]:
    """One retried tools/call by an authenticated client, both ways: what ``BoundCodec`` and the SDK's boundary add
    is each round minus ``bare`` (the codec's own unseal and seal), and for the SDK minus its ``handler`` too."""
    from mcp.server.context import ServerRequestContext
    from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity

    method, principal = "tools/call", '{"client_id":"app-1","issuer":"https://id.example.com","subject":"user-42"}'
    params: dict[str, Any] = {"name": "provision", "arguments": {"name": "orders", "tier": "standard", "replicas": 3}}
    state, codec = PAYLOADS["state"], AESGCMCodec([os.urandom(32)])
    answer = {"resultType": "input_required", "requestState": state.decode()}

    async def handler(ctx: object) -> dict[str, str]:
        return answer

    def request(params: dict[str, Any]) -> Any:  # the boundary reads only the method and the params
        return ServerRequestContext(
            session=cast(Any, None), lifespan_context={}, protocol_version="2026-07-28", method=method, params=params
        )

    security = RequestStateSecurity(codec=codec, bind_principal=lambda ctx: principal)
    boundary = RequestStateBoundary(security, default_audience="bench")
    retry = request({**params, "requestState": _finish(boundary(request(params), handler))["requestState"]})
    bound = BoundCodec(codec, audience="bench", binding_key=os.urandom(32))
    bound_token = bound.seal(state, principal=principal, context=mcp_request_context(method, retry.params))
    bare_token = codec.seal(state)

    def bound_round() -> str:
        context = mcp_request_context(method, retry.params)
        bound.unseal(bound_token, principal=principal, context=context)
        return bound.seal(state, principal=principal, context=context)

    ops: dict[str, Op] = {
        "bare": lambda: (codec.unseal(bare_token), codec.seal(state)),
        "BoundCodec": bound_round,
        "handler": lambda: _finish(handler(retry)),
        "boundary": lambda: _finish(boundary(retry, handler)),
    }
    for op in ops.values():
        op()  # a round either side refuses raises here, before anything is timed
    return ops


def _batch(op: Op, n: int) -> float:
    """Seconds per call over `n` calls (`timeit` turns the collector off), after one untimed call to warm it."""
    op()
    return timeit.Timer(op).timeit(n) / n


def interleave(
    ops: Mapping[str, Op], rounds: int, progress: Callable[[int], None] = lambda done: None
) -> dict[str, list[float]]:
    """Seconds per call of every operation, one sample per round, in a fresh order each round; `progress` is told
    each round that is done."""
    counts = {}
    for key, op in ops.items():  # calls per batch: doubled until they fill half a batch, then scaled to one
        n = 1
        while (per_call := _batch(op, n)) * n < _BATCH_S / 2 and n < 1 << 24:
            n *= 2
        counts[key] = max(1, round(_BATCH_S / per_call))
    samples: dict[str, list[float]] = {key: [] for key in ops}
    order = list(ops)
    for done in range(1, rounds + 1):
        random.shuffle(order)
        gc.collect()
        for key in order:
            samples[key].append(_batch(ops[key], counts[key]))
        progress(done)
    return samples


@contextlib.contextmanager
def _progress(rounds: int) -> Iterator[Callable[[int], None]]:
    """A progress bar on a terminal (tqdm, from the bench extra), else a plain line on stderr every fifth of the
    run, so a log or a CI job shows the run is alive without carriage returns."""
    if sys.stderr.isatty():
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            with tqdm(total=rounds, desc="bench", unit="round", file=sys.stderr, leave=False) as bar:
                yield lambda done: bar.update(done - bar.n)
            return
    step = -(-rounds // 5)  # five lines a run, the last one at the end

    def line(done: int) -> None:
        if done % step == 0 or done == rounds:
            print(f"bench: round {done}/{rounds}", file=sys.stderr, flush=True)

    yield line


def paired(a: list[float], b: list[float]) -> float:
    """Median over rounds of a[r] / b[r]."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def _build(name: str, build: Callable[[], Any], skipped: dict[str, str]) -> Any:
    """What `build` returns, or None when a package it needs is missing (and why, in `skipped`)."""
    try:
        return build()
    except ImportError as exc:
        skipped[name] = f"{(exc.name or 'a package').split('.')[0]} is not installed ({_INSTALL})"
        return None


def run(
    cases: Mapping[str, Callable[[], Pair]],
    rounds: int,
    *,
    mcp_round: bool = True,
    progress: Callable[[int], None] = lambda done: None,
) -> dict[str, Any]:
    """Build, check and time every case (the floor first) on every payload, and the MCP round unless told not to."""
    skipped: dict[str, str] = {}
    ops: dict[str, Op] = {}
    overhead: dict[str, int] = {}
    for name, build in cases.items():
        pair: Pair | None = _build(name, build, skipped)
        for payload, data in PAYLOADS.items() if pair else ():
            seal, unseal = cast(Pair, pair)
            token = seal(data)
            if unseal(token) != data:
                raise RuntimeError(f"{name}: unseal(seal(payload)) is not the payload")
            ops[f"{name}/{payload}/seal"] = functools.partial(seal, data)
            ops[f"{name}/{payload}/unseal"] = functools.partial(unseal, token)
            overhead[f"{name}/{payload}"] = len(token) - b64u_len(len(data))  # no case's length varies by nonce
    round_ops = _build(MCP_ROUND, _mcp_round, skipped) if mcp_round else None
    ops.update({f"round/{key}": op for key, op in (round_ops or {}).items()})
    samples = interleave(ops, rounds, progress)
    results = []
    for case in overhead:
        name, payload = case.split("/")
        row: dict[str, Any] = {"case": name, "payload": payload}
        for op in ("seal", "unseal"):
            row[f"{op}_vs_floor"] = paired(samples[f"{case}/{op}"], samples[f"floor/{payload}/{op}"])
        results.append({**row, "token_overhead": overhead[case]})
    figure = None
    if round_ops:
        bare, bound, handler, sdk = (samples[f"round/{k}"] for k in ("bare", "BoundCodec", "handler", "boundary"))
        bound_added = [b - c for b, c in zip(bound, bare, strict=True)]
        figure = paired(bound_added, [s - h - c for s, h, c in zip(sdk, handler, bare, strict=True)])
    found = {d.metadata["Name"].lower(): d.version for d in importlib.metadata.distributions()}
    return {
        "schema": "statecodec-bench/3",
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "packages": {name: found.get(name) for name in sorted(_PACKAGES)},
        },
        "rounds": rounds,
        "payloads": {name: len(data) for name, data in PAYLOADS.items()},
        # Seconds per call of the floor, the one absolute figure: what a ratio of 1 costs on this machine.
        "floor_seconds": {
            payload: {op: statistics.median(samples[f"floor/{payload}/{op}"]) for op in ("seal", "unseal")}
            for payload in PAYLOADS
        },
        "results": results,
        "bound_vs_sdk_added": figure,
        "skipped": skipped,
    }


def _micro(stream: Any) -> str:
    """The microsecond unit this stream can print: "µs", or "us" on a stream whose encoding has no µ (a terminal
    or a pipe under ``PYTHONIOENCODING=ascii``, a Latin-less locale), so the table never fails on a unit."""
    try:
        "µ".encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return "us"
    return "µs"


def _table(doc: Mapping[str, Any], micro: str = "µs") -> str:
    """One block per payload: the floor's own time, each case's seal and unseal as ratios to it, its overhead."""
    lines = []
    for payload, size in doc["payloads"].items():
        floor = doc["floor_seconds"][payload]
        lines += [
            "",
            f"{payload} ({size:,} bytes; floor: seal {floor['seal'] * 1e6:.1f} {micro}, "
            f"unseal {floor['unseal'] * 1e6:.1f} {micro})",
            _HEAD,
        ]
        lines += [_ROW.format(**r) for r in doc["results"] if r["payload"] == payload]
    if doc["bound_vs_sdk_added"] is not None:
        lines.append(
            f"\nMCP round: BoundCodec adds {doc['bound_vs_sdk_added']:.2f}x of what the SDK's RequestStateBoundary "
            "adds (request identity, unseal and seal of a 300-byte state, with a principal)"
        )
    lines += [f"skipped {name}: {reason}" for name, reason in doc["skipped"].items()]
    return "\n".join(lines).strip()


def _plot(doc: Mapping[str, Any], path: str) -> None:
    """Each payload's ratios to the floor as one panel: a bar from the floor (1x) to each ratio, seal and unseal
    side by side and labelled with their value, log scale; a PNG readable at its 150 dpi."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    payloads = list(doc["payloads"])
    cases = list(dict.fromkeys(r["case"] for r in doc["results"] if r["case"] != "floor"))[::-1]
    ratios = [r[f"{op}_vs_floor"] for r in doc["results"] for op in ("seal", "unseal")]
    low, high = min([*ratios, 1.0]) / 1.25, max([*ratios, 1.0]) * 1.6
    fig, axes = plt.subplots(
        1, len(payloads), figsize=(4.2 * len(payloads) + 2.0, 0.6 * len(cases) + 2.0), sharey=True, squeeze=False
    )
    for ax, payload in zip(axes[0], payloads, strict=True):
        rows = {r["case"]: r for r in doc["results"] if r["payload"] == payload}
        for op, shift, color in (("seal", 0.2, "#1f77b4"), ("unseal", -0.2, "#ff7f0e")):
            ys = [y + shift for y, case in enumerate(cases) if case in rows]
            values = [rows[case][f"{op}_vs_floor"] for case in cases if case in rows]
            # From the floor, so a bar's length and side say how much dearer (right) or cheaper (left) it is.
            bars = ax.barh(ys, [v - 1 for v in values], left=1, height=0.38, label=op, color=color)
            ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], padding=2, fontsize=8)
        ax.set_xscale("log")
        ax.set_xlim(low, high)
        ax.xaxis.set_major_locator(FixedLocator([0.5, 1, 2, 5, 10, 20, 50, 100]))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}x"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_title(f"{payload} ({doc['payloads'][payload]:,} bytes)", fontsize=11)
        ax.grid(axis="x", which="major", alpha=0.3)
    axes[0][0].set_yticks(range(len(cases)), cases, fontsize=10)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncols=2, fontsize=9, frameon=False)
    fig.suptitle(f"statecodec bench: seal and unseal cost over the floor's ({doc['rounds']} rounds)", fontsize=12)
    fig.supxlabel("cost / floor, log scale (1x = a bare AES-GCM seal or unseal with base64url)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark the codecs against the floor, the MCP SDK and peer libraries",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="15 rounds instead of 101")
    p.add_argument(
        "--only",
        metavar="NAMES",
        help=f"comma-separated case names, or parts of names, to measure (the floor is always measured; "
        f"'{MCP_ROUND}' selects the round); none matching is an error",
    )
    p.add_argument("--json", action="store_true", help="print the run as JSON on stdout instead of the table")
    p.add_argument("--output", metavar="FILE.json", help="also write the run as JSON to FILE.json")
    p.add_argument("--plot", metavar="PATH.png", help="draw the ratios to PATH.png (needs matplotlib)")
    p.add_argument(
        "--store-url",
        metavar="URL",
        help="also time the single-use Redis store at URL (redis://host:6379/0) against a bare PING to it; its claims "
        "go to the statecodec-bench namespace (needs statecodec[redis])",
    )
    p.set_defaults(func=_bench)


def _selected(only: str | None) -> tuple[dict[str, Callable[[], Pair]], bool]:
    """The cases `--only` names (the floor always), and whether it names the MCP round; every case when unset. A part
    equal to a name (any case) selects that name alone; any other part selects every name that contains it."""
    if only is None:
        return dict(CASES), True
    names = [*CASES, MCP_ROUND]
    chosen: set[str] = set()
    for part in (part.strip().lower() for part in only.split(",") if part.strip()):
        exact = [name for name in names if name.lower() == part]  # "AESGCMCodec" is not also "XAESGCMCodec"
        chosen.update(exact or [name for name in names if part in name.lower()])
    if not chosen:
        raise ConfigurationError(f"--only {only!r} matches no case; the cases are: {', '.join(names)}")
    return {name: CASES[name] for name in CASES if name == "floor" or name in chosen}, MCP_ROUND in chosen


def _writable(flag: str, path: str, suffix: str) -> None:
    """Refuse an output path before the run rather than after it: a missing folder or a wrong suffix."""
    target = Path(path)
    if target.suffix.lower() != suffix:
        raise ConfigurationError(f"{flag} {path!r}: the file name must end in {suffix}")
    if target.is_dir():
        raise ConfigurationError(f"{flag} {path!r} is a directory; give a file name ending in {suffix}")
    folder = target.parent
    if not folder.is_dir():
        raise ConfigurationError(f"{flag} {path!r}: the folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise ConfigurationError(f"{flag} {path!r}: the folder {str(folder)!r} is not writable")


def _bench(args: argparse.Namespace) -> int:
    # Everything that can fail without measuring fails first: a bad --only, path or plotter costs no run.
    cases, mcp_round = _selected(args.only)
    if args.output:
        _writable("--output", args.output, ".json")
    if args.plot:
        _writable("--plot", args.plot, ".png")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ConfigurationError(f"--plot needs matplotlib: {_INSTALL}") from None
    from statecodec.cli import bench_single_use

    rounds = 15 if args.quick else 101
    with bench_single_use.redis_store(args.store_url) as store:  # a bad URL or a missing extra stops here
        with _progress(rounds) as progress:
            doc = run(cases, rounds=rounds, mcp_round=mcp_round, progress=progress)
        if args.only is None or store is not None:  # single use is measured with the whole run or when asked for
            doc["single_use"] = bench_single_use.run(rounds, store, lag_s=0.5 if args.quick else 2.0)
    text = json.dumps(doc, indent=1, ensure_ascii=True) + "\n"
    if args.json:
        sys.stdout.write(text)
    else:
        single_use = bench_single_use.table(doc["single_use"]) if "single_use" in doc else ""
        print(_table(doc, _micro(sys.stdout)) + single_use)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"bench: wrote {args.output}", file=sys.stderr)
    if args.plot:
        _plot(doc, args.plot)
        print(f"bench: wrote {args.plot}", file=sys.stderr)
    return 0
