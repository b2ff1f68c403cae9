"""What `statecodec.otel.instrument` costs per token (not a test).

Measures, in one run and in alternation, on a ~300-byte payload under `AESGCMCodec`:

1. the codec unwrapped;
2. the codec wrapped, with no OpenTelemetry SDK configured (the API's no-op instruments);
3. the codec wrapped, recording into an SDK `MeterProvider` with an in-memory reader.

For each: seal plus unseal of a genuine token, and unseal of a refused (tampered) token, which also counts
and logs the refusal (the log record is built, then dropped by a disabled logger, as on a server whose log
level is above it). Best of several repeats, in microseconds, and the ratio to the unwrapped codec.

Run: ``python benchmarks/otel_overhead.py [--number N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import timeit
from collections.abc import Callable

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from statecodec import AESGCMCodec, Codec, InvalidToken
from statecodec.otel import instrument

PAYLOAD = b'{"state":"' + b"x" * 280 + b'","step":3}'


def _round_trip(codec: Codec) -> Callable[[], object]:
    return lambda: codec.unseal(codec.seal(PAYLOAD))


def _refusal(codec: Codec) -> Callable[[], object]:
    token = codec.seal(PAYLOAD)
    tampered = token[:20] + ("A" if token[20] != "A" else "B") + token[21:]

    def run() -> None:
        with contextlib.suppress(InvalidToken):
            codec.unseal(tampered)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--number", type=int, default=5000, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=7, help="timings per case (best kept)")
    args = parser.parse_args()
    logging.getLogger("statecodec.refusals").setLevel(logging.ERROR)  # records are dropped, as on a quiet server
    plain = AESGCMCodec.ephemeral()
    reader = InMemoryMetricReader()
    codecs: dict[str, Codec] = {
        "unwrapped": plain,
        "wrapped, no SDK": instrument(plain),
        "wrapped, SDK": instrument(plain, MeterProvider(metric_readers=[reader]).get_meter("bench")),
    }
    for label, make in (("seal+unseal", _round_trip), ("refused unseal", _refusal)):
        runs = {name: make(codec) for name, codec in codecs.items()}
        best = dict.fromkeys(runs, float("inf"))
        for _ in range(args.repeat):  # alternate, so drift in machine load hits every case alike
            for name, run in runs.items():
                best[name] = min(best[name], timeit.timeit(run, number=args.number) / args.number * 1e6)
        base = best["unwrapped"]
        print(f"{label}:")
        for name, micros in best.items():
            print(f"  {name:<16} {micros:8.2f} us  x{micros / base:.2f}")


if __name__ == "__main__":
    main()
