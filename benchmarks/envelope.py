"""EnvelopeCodec against AESGCMCodec, per token, side by side in one run (not a test).

An envelope codec unwraps its data keys once at start-up and then seals
exactly like `AESGCMCodec` (same layout, version byte 0x03). This script
measures seal and unseal of a ~300-byte payload for both, interleaving the
two in every round so machine noise hits both alike, and reports medians and
ratios. It also counts provider calls: at start-up (one unwrap per data key)
and during the timed loop (which must be zero).

With ``--aws`` the envelope codec is built over AWS KMS on a local
``moto_server`` (started and stopped here), and the KMS calls are counted
with botocore's event hooks; otherwise an in-process wrapper stands in, which
does not change the per-token path.

Run: ``python benchmarks/envelope.py [--rounds 41] [--number 5000] [--keys 2] [--aws]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import timeit
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from statecodec import AESGCMCodec, EnvelopeCodec
from statecodec.envelope import canonical_context, default_context

PAYLOAD = b"step-2:" + b"x" * 293


class CountingWrapper:
    """In-process AES-GCM key wrapper that counts calls (stands in for a KMS)."""

    name = "local"

    def __init__(self) -> None:
        self._aead = AESGCM(os.urandom(32))
        self.calls = 0

    def describe(self) -> str:
        return "in-process wrapper"

    def wrap(self, data_key: bytes, context: Mapping[str, str]) -> bytes:
        self.calls += 1
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, data_key, canonical_context(context))

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes:
        self.calls += 1
        return self._aead.decrypt(blob[:12], blob[12:], canonical_context(context))

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes:
        return self.wrap(os.urandom(32), context)


def per_op_us(fn: Callable[[], object], number: int) -> float:
    return timeit.timeit(fn, number=number) / number * 1e6


@contextlib.contextmanager
def moto() -> Iterator[str]:
    exe = Path(sys.executable).with_name("moto_server")
    if not exe.exists() and shutil.which("moto_server") is None:
        raise SystemExit("--aws needs moto_server (pip install 'moto[server]')")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [str(exe if exe.exists() else "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if time.monotonic() > deadline:
                raise SystemExit("moto_server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def build_aws(endpoint: str, keys: int) -> tuple[EnvelopeCodec, Callable[[], int], Any]:
    import boto3

    from statecodec.envelope import new_wrapped_key
    from statecodec.providers.aws_kms import AwsKmsWrapper

    client = boto3.session.Session(
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",  # noqa: S106 - moto
    ).client("kms", endpoint_url=endpoint)
    arn = client.create_key()["KeyMetadata"]["Arn"]
    wrapper = AwsKmsWrapper(arn, client=client)
    ring = [new_wrapped_key(wrapper) for _ in range(keys)]
    calls: list[str] = []
    client.meta.events.register("before-call.kms", lambda model, **_: calls.append(model.name))
    codec = EnvelopeCodec(wrapper, ring)
    return codec, lambda: len(calls), client


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--number", type=int, default=5000, help="operations per timed batch")
    parser.add_argument("--keys", type=int, default=2, help="data keys in the envelope ring")
    parser.add_argument("--aws", action="store_true", help="unwrap through AWS KMS on a local moto_server")
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        if args.aws:
            endpoint = stack.enter_context(moto())
            envelope, provider_calls, client = build_aws(endpoint, args.keys)
            stack.callback(client.close)
            provider = "AWS KMS (moto_server)"
        else:
            wrapper = CountingWrapper()
            context = default_context()
            ring = [wrapper.new_wrapped_key(context) for _ in range(args.keys)]
            before = wrapper.calls
            envelope = EnvelopeCodec(wrapper, ring, context=context)
            provider_calls = lambda: wrapper.calls - before  # noqa: E731
            provider = "in-process wrapper"
        startup_calls = provider_calls()
        local = AESGCMCodec([os.urandom(32)])
        # A second, identical AESGCMCodec: its ratio to the first is the noise of this run.
        control = AESGCMCodec([os.urandom(32)])
        env_token, aes_token, ctl_token = envelope.seal(PAYLOAD), local.seal(PAYLOAD), control.seal(PAYLOAD)
        samples: dict[str, list[float]] = {f"{c}_{op}": [] for c in ("env", "aes", "ctl") for op in ("seal", "unseal")}
        n = args.number
        for r in range(args.rounds):
            pairs = [
                ("env_seal", lambda: envelope.seal(PAYLOAD)),
                ("aes_seal", lambda: local.seal(PAYLOAD)),
                ("ctl_seal", lambda: control.seal(PAYLOAD)),
                ("env_unseal", lambda: envelope.unseal(env_token)),
                ("aes_unseal", lambda: local.unseal(aes_token)),
                ("ctl_unseal", lambda: control.unseal(ctl_token)),
            ]
            if r % 2:  # alternate the order so neither side always runs first
                pairs.reverse()
            for name, fn in pairs:
                samples[name].append(per_op_us(fn, n))
        per_token_calls = provider_calls() - startup_calls
        med = {k: statistics.median(v) for k, v in samples.items()}

    print(f"payload {len(PAYLOAD)} bytes; {args.rounds} rounds x {n} ops; provider: {provider}")
    print(f"start-up provider calls: {startup_calls} for {args.keys} data keys")
    print(f"provider calls during {2 * args.rounds * n} seals and unseals: {per_token_calls}")
    print("microseconds per operation (median over rounds); ratios are medians of the per-round")
    print("ratios to AESGCMCodec, each round timing all three back to back (the control is a second")
    print("AESGCMCodec: its ratio shows this run's noise)")
    print(f"{'':8} {'Envelope us':>12} {'AESGCM us':>10} {'ratio':>7} {'control ratio':>14}")
    for op in ("seal", "unseal"):
        env_us, aes_us = med[f"env_{op}"], med[f"aes_{op}"]
        paired = statistics.median(x / y for x, y in zip(samples[f"env_{op}"], samples[f"aes_{op}"], strict=True))
        control_ratio = statistics.median(
            x / y for x, y in zip(samples[f"ctl_{op}"], samples[f"aes_{op}"], strict=True)
        )
        print(f"{op:8} {env_us:12.3f} {aes_us:10.3f} {paired:7.3f} {control_ratio:14.3f}")
    print(f"token length: {len(env_token)} vs {len(aes_token)} characters")
    same = envelope.seal.__func__ is AESGCMCodec.seal and envelope.unseal.__func__ is AESGCMCodec.unseal  # type: ignore[attr-defined]
    print(f"per-token code is AESGCMCodec.seal / AESGCMCodec.unseal itself: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
