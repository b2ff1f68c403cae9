"""What the provider integration tests share: the CLI runner, a capture of every log record, a secret search."""

from __future__ import annotations

import base64
import contextlib
import io
import logging
from collections.abc import Iterable, Iterator

from statecodec.cli.main import main as cli_main

ATTEMPTS = 3
"""Attempts of the retry policy the `policy` fixture builds."""


def run_cli(*argv: str) -> tuple[int, str, str]:
    """`statecodec ARGV...` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(argv))
    return code, out.getvalue(), err.getvalue()


class Capture(logging.Handler):
    """Every record it is handed, as text: the formatted line with its args, then every attribute (`extra` too)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s args=%(args)r"))
        self.lines: list[str] = []
        self.names: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.names.append(record.name)
        self.lines.append(f"{self.format(record)} {vars(record)!r}")


@contextlib.contextmanager
def capture_every_record(loggers: Iterable[str]) -> Iterator[Capture]:
    """The root logger at DEBUG with a capturing handler, and the same handler on each of `loggers`."""
    capture, root = Capture(), logging.getLogger()
    level = root.level
    root.setLevel(logging.DEBUG)
    targets = [root, *(logging.getLogger(name) for name in loggers)]
    for logger in targets:
        logger.addHandler(capture)
    try:
        yield capture
    finally:
        for logger in targets:
            logger.removeHandler(capture)
        root.setLevel(level)


def assert_no_secret_in(texts: Iterable[str], secrets: Iterable[bytes | str]) -> None:
    """No secret in any text: raw, escaped, hex (either case), base64 or base64url."""
    texts = list(texts)
    for n, secret in enumerate(secrets):
        raw = secret.encode() if isinstance(secret, str) else secret
        forms = {
            raw.decode("latin-1"),
            repr(raw)[2:-1],
            raw.hex(),
            raw.hex().upper(),
            base64.b64encode(raw).decode().rstrip("="),
            base64.urlsafe_b64encode(raw).decode().rstrip("="),
        }
        leaks = [text[:80] for text in texts for form in forms if form in text]
        assert not leaks, f"secret {n} found in {leaks}"
