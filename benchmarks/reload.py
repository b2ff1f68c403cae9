"""What live reloading costs a token: seal+unseal through `codec_from_env` with ``STATECODEC_RELOAD_INTERVAL`` set
(a `ReloadingCodec`, its watcher polling the key file on the loop thread `start` gives it) against the same key file
without it (not a test).

Each round times both sides, a ~300-byte state sealed and unsealed, in a fresh random order, keeping each side's
fastest of three batches (`statecodec bench`'s interleaving), by this process's CPU time, which counts the watcher
thread's polls against the reloading side; the figure is the median over rounds of the per-round ratio.

Run: ``python benchmarks/reload.py [--rounds 61] [--batch-ms 5] [--interval 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from statecodec import format_keys, generate_key
from statecodec.cli.bench import interleave
from statecodec.config import codec_from_env
from statecodec.reload import ReloadingCodec

STATE = b'{"step":2,"asked":"region","draft":"' + b"x" * 260 + b'"}'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=61)
    parser.add_argument("--batch-ms", type=float, default=5.0)
    parser.add_argument("--interval", default="5", help="STATECODEC_RELOAD_INTERVAL of the reloading side")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        ring = Path(directory) / "ring"
        ring.write_text(format_keys([generate_key(), generate_key()]), encoding="utf-8")
        static = codec_from_env({"STATECODEC_KEYS_FILE": str(ring)})
        live = codec_from_env({"STATECODEC_KEYS_FILE": str(ring), "STATECODEC_RELOAD_INTERVAL": args.interval})
        assert isinstance(live, ReloadingCodec)
        live.start()
        ops: dict[str, Callable[[], object]] = {"static": lambda: static.unseal(static.seal(STATE)),
                                                "live": lambda: live.unseal(live.seal(STATE))}
        s = interleave(ops, args.rounds, args.batch_ms / 1000, timer=time.process_time)
        live.close()
    ratio = statistics.median(a / b for a, b in zip(s["live"], s["static"], strict=True))
    print(f"{args.rounds} interleaved rounds, medians: seal+unseal {statistics.median(s['static']) * 1e6:.2f} us "
          f"without reloading, {statistics.median(s['live']) * 1e6:.2f} us with (interval {args.interval} s): "
          f"ratio {ratio:.3f}")


if __name__ == "__main__":
    main()
