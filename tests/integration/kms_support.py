"""What the AWS KMS and Cloud KMS integration tests share: a recording sleep, the retry policy, the CLI runner."""

from __future__ import annotations

import contextlib
import io

from statecodec.cli.main import main as cli_main
from statecodec.providers._retry import RetryPolicy

ATTEMPTS = 3
"""Attempts of the retry policy the `policy` fixture builds."""


class Sleeps:
    """Records the backoff delays instead of sleeping (bounded, and the suite stays fast)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def retry_policy(sleeps: Sleeps) -> RetryPolicy:
    """Short, bounded backoff whose delays land in `sleeps`."""
    return RetryPolicy(attempts=ATTEMPTS, base_delay=0.05, max_delay=0.2, sleep=sleeps)


def run_cli(*argv: str) -> tuple[int, str, str]:
    """`statecodec ARGV...` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(argv))
    return code, out.getvalue(), err.getvalue()
