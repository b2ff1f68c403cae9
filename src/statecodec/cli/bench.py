"""`statecodec bench`: each codec's seal and unseal cost as a ratio to the floor, beside its peer libraries.

Every operation is timed in each round in a fresh order, so a busy moment slows every case alike; a ratio is the
median over rounds of case / floor in one round. pyperf writes the run; its own runner, one benchmark after
another, moved ratios by more than their gaps on a shared machine (docs/performance.md).
"""

from __future__ import annotations

import argparse
import base64
import functools
import importlib
import math
import os
import random
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statecodec import AESGCMCodec, BoundCodec, XAESGCMCodec
from statecodec.binding import mcp_request_context
from statecodec.errors import ConfigurationError, needs_extra

__all__ = ["CASES", "PAYLOADS", "interleave", "measure", "register"]

Pair = tuple[Callable[[bytes], Any], Callable[[Any], bytes]]
_INSTALL = "pip install 'statecodec[bench]'"
_HEAD = f"  {'codec':30} {'seal/floor':>10} {'unseal/floor':>12} {'+chars':>7}"
_ROW = "  {:30} {:10.2f} {:12.2f} {:+7d}"
PAYLOADS = {"300 B": b'{"step":2,"cursor":"' + b"c" * 278 + b'"}', "4 KiB": b"[" + b"7," * 2047 + b"7]"}


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


def _ours(cls: Any) -> Callable[[], Pair]:
    return lambda: (lambda codec: (codec.seal, codec.unseal))(cls([os.urandom(32)]))


def _pyjwt() -> Pair:  # JWS HS256, as JWSCodec
    from jwt.api_jws import PyJWS

    jws, key = PyJWS(), os.urandom(32)
    return (lambda p: jws.encode(p, key, algorithm="HS256")), (lambda t: jws.decode(t, key, algorithms=["HS256"]))


def _jwcrypto() -> Pair:  # JWE dir A256GCM, as JWECodec
    from jwcrypto import jwe, jwk

    key, header = jwk.JWK.generate(kty="oct", size=256), {"alg": "dir", "enc": "A256GCM"}

    def unseal(text: str) -> bytes:
        (token := jwe.JWE()).deserialize(text, key=key)
        return bytes(token.payload)

    return (lambda p: jwe.JWE(p, protected=header, recipient=key).serialize(compact=True)), unseal


def _joserfc() -> Pair:  # JWE dir A256GCM, as JWECodec
    from joserfc import jwe
    from joserfc.jwk import OctKey

    key, header = OctKey.import_key(os.urandom(32)), {"alg": "dir", "enc": "A256GCM"}
    return (lambda p: jwe.encrypt_compact(header, p, key)), (lambda t: jwe.decrypt_compact(t, key).plaintext or b"")


def _fernet() -> Pair:  # AES-128-CBC and HMAC-SHA256, from cryptography itself
    from cryptography.fernet import Fernet

    return (lambda f: (f.encrypt, f.decrypt))(Fernet(Fernet.generate_key()))


# Ours, then the peers: the SDK's own codec, and the most direct use of each library for the same job.
CASES: dict[str, Callable[[], Pair]] = {
    "floor": _floor, "AESGCMCodec": _ours(AESGCMCodec), "XAESGCMCodec": _ours(XAESGCMCodec),
    # JOSE on first use: every command's start-up imports this module.
    "JWECodec(dir)": lambda: _ours(importlib.import_module("statecodec.jose").JWECodec)(),
    "JWSCodec(HS256)": lambda: _ours(importlib.import_module("statecodec.jose").JWSCodec)(),
    "SDK AESGCMRequestStateCodec": lambda: _ours(
        importlib.import_module("mcp.server.request_state").AESGCMRequestStateCodec)(),
    "PyJWT (JWS HS256)": _pyjwt, "jwcrypto (JWE dir)": _jwcrypto, "joserfc (JWE dir)": _joserfc, "Fernet": _fernet,
}


def _calls(op: timeit.Timer, batch_s: float) -> int:
    """The calls of a batch of `batch_s`, from the best of three warm batches of at least half that (the first calls
    are slower): a batch timed in a busy moment would make every later batch shorter than `batch_s`."""
    calls = 1
    while op.timeit(calls) < batch_s / 2:
        calls *= 2
    return math.ceil(calls * batch_s / min(op.repeat(3, calls)))


def interleave(
    ops: dict[str, Callable[[], object]], rounds: int, batch_s: float = 0.001,
    timer: Callable[[], float] = time.perf_counter, loops: dict[str, int] | None = None,
) -> dict[str, list[float]]:
    """Seconds per call of each operation by `timer`, one value a round (the best of three batches of at least
    about `batch_s`), every operation timed in each round in a fresh order; `loops` receives the calls a batch."""
    loops = {} if loops is None else loops
    for _ in range(2):  # two passes, at two moments: a busy one lengthens every batch timed in it
        for key, op in ops.items():
            loops[key] = max(loops.get(key, 1), _calls(timeit.Timer(op, timer=timer), batch_s))
    values: dict[str, list[float]] = {key: [] for key in ops}
    order = list(ops)
    for _ in range(rounds):
        random.shuffle(order)
        for key in order:
            values[key].append(min(timeit.Timer(ops[key], timer=timer).repeat(3, loops[key])) / loops[key])
    return values


def _single_use_ops() -> dict[str, Callable[[], object]]:
    """One `BoundCodec` seal+unseal pair of a 300-byte state with a principal and an MCP request context, and the
    same pair plus what single use adds on the MCP path (a stamp, and a consume over the in-process store)."""
    from statecodec.single_use import SingleUse
    from statecodec.store import MemoryStore
    from statecodec.sync import finish

    bound = BoundCodec(AESGCMCodec([os.urandom(32)]), audience="bench", binding_key=os.urandom(32))
    guard, state = SingleUse(MemoryStore(), key=os.urandom(32), ttl=600), PAYLOADS["300 B"]
    finish(guard.start())
    who, context = "user-42", mcp_request_context("tools/call", {"name": "t", "arguments": {}})

    def pair() -> bytes:
        return bound.unseal(bound.seal(state, principal=who, context=context), principal=who, context=context)

    def single_use() -> bytes:
        stamped = guard.stamp(state, principal=("client", "https://issuer", who))
        token = bound.seal(stamped, principal=who, context=context)
        return bytes(finish(guard.consume(bound.unseal(token, principal=who, context=context))))

    return {"single use: BoundCodec pair": pair, "single use: pair + stamp + consume": single_use}


def measure(rounds: int, loops: dict[str, int]) -> tuple[dict[str, list[float]], dict[str, int], dict[str, str]]:
    """`interleave` over each case's seal and unseal of each payload; each case's token overhead; skipped cases."""
    ops: dict[str, Callable[[], object]] = {}
    overhead, skipped = {}, {}
    for name, build in CASES.items():
        try:
            seal, unseal = build()
        except ImportError as exc:
            skipped[name] = f"{(exc.name or 'a package').split('.')[0]} is not installed ({_INSTALL})"
            continue
        for size, payload in PAYLOADS.items():
            token = seal(payload)
            if unseal(token) != payload:
                raise RuntimeError(f"{name}: unseal(seal(payload)) is not the payload")
            ops[f"{name} seal {size}"] = functools.partial(seal, payload)
            ops[f"{name} unseal {size}"] = functools.partial(unseal, token)
            overhead[f"{name} {size}"] = len(token) + (-4 * len(payload) // 3)  # over the payload in base64
    # pyperf warns of a batch under 1 ms (`pyperf show`); the margin absorbs the calibration's error.
    return interleave({**ops, **_single_use_ops()}, rounds, 0.00125, loops=loops), overhead, skipped


def _bench(args: argparse.Namespace) -> int:
    with needs_extra("pyperf", "bench", "bench"):
        import pyperf
    rounds = args.rounds if args.rounds is not None else 21 if args.quick else 101
    if rounds < 2:
        raise ConfigurationError(f"--rounds {rounds}: give at least 2")
    if args.output and not Path(args.output).parent.is_dir():  # before the run, not after it
        raise ConfigurationError(f"--output {args.output}: its folder does not exist")
    loops: dict[str, int] = {}
    values, overhead, skipped = measure(rounds, loops)
    us = "µs" if (sys.stdout.encoding or "").lower().startswith("utf") else "us"
    suite, lines = [], []
    for size in PAYLOADS:
        floor = {op: values[f"floor {op} {size}"] for op in ("seal", "unseal")}
        seal_us, unseal_us = (statistics.median(floor[op]) * 1e6 for op in ("seal", "unseal"))
        lines += [f"\n{size}: floor seal {seal_us:.1f} {us}, unseal {unseal_us:.1f} {us} ({rounds} rounds)", _HEAD]
        for name in (n for n in CASES if f"{n} {size}" in overhead):
            r = {op: statistics.median(c / f for c, f in zip(values[f"{name} {op} {size}"], floor[op], strict=True))
                 for op in ("seal", "unseal")}  # the median over rounds of case / floor in the same round
            lines += [] if name == "floor" else [_ROW.format(name, r["seal"], r["unseal"], overhead[f"{name} {size}"])]
            suite += [pyperf.Benchmark([pyperf.Run(values[f"{name} {op} {size}"], metadata={
                "name": f"{name} {op} {size}", "unit": "second", "loops": loops[f"{name} {op} {size}"],
                "ratio_to_floor": r[op]})]) for op in r]
    pair, guarded = values["single use: BoundCodec pair"], values["single use: pair + stamp + consume"]
    added = [g - p for g, p in zip(guarded, pair, strict=True)]
    ratio = statistics.median(a / p for a, p in zip(added, pair, strict=True))
    lines.append(f"\nsingle use (in-process store, MCP path) adds {statistics.median(added) * 1e6:.1f} {us} per token, "
                 f"{ratio:.2f}x one BoundCodec seal+unseal pair")
    print("\n".join([*lines, *(f"skipped {name}: {why}" for name, why in skipped.items())]).strip())
    if args.output:
        pyperf.BenchmarkSuite(suite).dump(args.output, replace=True)
        print(f"bench: wrote {args.output} (python -m pyperf compare_to OLD.json {args.output})", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bench", func=_bench, help="time every codec and its peers against the floor (raw AES-GCM)")
    p.description = (
        "Time each codec's seal and unseal of a 300-byte and a 4 KiB payload as ratios to the floor (raw AES-GCM "
        "with base64url), beside the MCP SDK's codec, PyJWT, jwcrypto, joserfc and Fernet, in interleaved rounds. "
        f"Needs {_INSTALL}.")
    p.add_argument("--quick", action="store_true", help="21 rounds instead of 101 (a few seconds)")
    p.add_argument("--rounds", type=int, metavar="N", help="exactly N rounds")
    p.add_argument("--output", metavar="FILE.json", help="write the run as pyperf JSON (for pyperf compare_to)")
