"""Service fixtures for the test suite, one module per service; `stop_process` is the one way they end a server."""

from __future__ import annotations

import signal
import subprocess


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """End `process` (SIGTERM, then SIGKILL after 10 s); idempotent, and it ends a paused (SIGSTOPped) one too."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGCONT)  # a stopped process would not act on SIGTERM
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
