"""`statecodec demo`: a real MCP server and client in one process, with sealed requestState.

Needs the MCP SDK (``pip install 'statecodec[mcp]'``); the SDK is imported
only when the command runs, so the rest of the command line works without it.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

from statecodec.mcp import MCP_EXTRA_HINT


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="run an MCP server and client in memory through a two-round flow, then a tampered token",
        description="Run a real MCPServer and Client in one process: a tool asks a question, the "
        "client answers and echoes the sealed requestState, the tool completes; then a tampered "
        "token is sent and refused. Uses a fresh in-memory key unless --from-env is given.",
    )
    p.add_argument(
        "--from-env",
        action="store_true",
        help="use the codec the STATECODEC_* environment describes instead of a fresh key",
    )
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("mcp") is None:
        print(f"statecodec demo: needs the MCP SDK; {MCP_EXTRA_HINT}", file=sys.stderr)
        return 2
    from statecodec.cli._demo_flow import run_demo

    return run_demo(from_env=bool(args.from_env))
