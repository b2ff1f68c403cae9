"""What a benchmark ran on: machine, Python, OpenSSL, and package versions.

Absolute times only mean something next to these; ratios taken in one run
are what carries over between machines.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
import time
from typing import Any

__all__ = ["PACKAGES", "environment", "timer_overhead"]

PACKAGES: tuple[str, ...] = (
    "statecodec",
    "cryptography",
    "mcp",
    "itsdangerous",
    "pyjwt",
    "jwcrypto",
    "joserfc",
    "pyseto",
    "tink",
    "hvac",
    "matplotlib",
)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _openssl() -> str:
    try:
        from cryptography.hazmat.backends.openssl.backend import backend

        return str(backend.openssl_version_text())
    except Exception:  # an exotic cryptography build: say so rather than fail the run
        return "unknown"


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def timer_overhead(samples: int = 2000) -> float:
    """Median seconds between two back-to-back `perf_counter` reads."""
    pc = time.perf_counter
    deltas = []
    for _ in range(samples):
        t0 = pc()
        deltas.append(pc() - t0)
    deltas.sort()
    return deltas[len(deltas) // 2]


def environment() -> dict[str, Any]:
    """A JSON-ready description of this machine and interpreter."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "cpus": affinity,
        "system": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "openssl": _openssl(),
        "packages": _versions(),
        "timer_overhead_ns": round(timer_overhead() * 1e9, 1),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
