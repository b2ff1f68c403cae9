"""`statecodec revoke` and `statecodec store check`: the single-use store, as an operator drives it.

Both read the store from ``STATECODEC_STORE_URL`` and its key from ``STATECODEC_STORE_KEY`` (or their ``_FILE``
forms), as every instance does; neither prints the URL's credentials or the key. A revocation is written to the
store and reaches every instance through its revocation view (docs/single-use.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from statecodec.config import check_names
from statecodec.errors import ConfigurationError, StoreError
from statecodec.single_use import MemoryStore, SingleUse, store_from_settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    revoke = sub.add_parser("revoke", help="refuse, on every instance, the tokens issued until now for a scope")
    which = revoke.add_mutually_exclusive_group(required=True)
    which.add_argument("--principal", metavar="P", help="a principal (the authenticated subject, for MCP)")
    which.add_argument("--scope", metavar="NAME=VALUE", help="an operator-chosen scope, e.g. tenant=acme")
    which.add_argument("--all", action="store_true", help="every token issued until now, whatever its scope")
    revoke.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    revoke.set_defaults(func=_revoke)
    store = sub.add_parser("store", help="the single-use store")
    actions = store.add_subparsers(dest="store_command", metavar="SUBCOMMAND", required=True)
    check = actions.add_parser("check", help="connect to the configured store and print its health")
    check.add_argument("--json", action="store_true", help="print the health as JSON on stdout")
    check.set_defaults(func=_check)


def _guard() -> SingleUse:
    check_names(os.environ)  # a misspelt name is named before any store is built
    # One call and done: no revocation view to keep current, so no listener thread.
    return SingleUse.from_env(store=store_from_settings(os.environ, listen=False))


def _revoke(args: argparse.Namespace) -> int:
    scope: tuple[str, str] | tuple[None, None] = (None, None)
    if args.principal is not None:
        scope = ("principal", args.principal)
    elif args.scope is not None:
        name, sep, value = args.scope.partition("=")
        if not (sep and name and value):
            raise ConfigurationError("--scope takes NAME=VALUE, e.g. --scope tenant=acme")
        scope = (name, value)
    guard = _guard()
    if isinstance(guard.store, MemoryStore):
        raise ConfigurationError(
            "STATECODEC_STORE_URL=memory is a store inside one process; revoke writes to the fleet's shared store: "
            "set STATECODEC_STORE_URL to the redis:// or rediss:// URL the servers use"
        )
    try:
        at = guard.revoke(*scope)
    finally:
        guard.store.close()
    what = "every token" if scope[0] is None else f"the tokens of {scope[0]} {scope[1]!r}"
    if args.json:
        print(json.dumps({"revoked": scope[0] or "all", "value": scope[1], "issued_until": at}))
    else:
        print(f"revoked {what} issued until {at:.3f} (epoch seconds)", file=sys.stderr)
    return 0


def _check(args: argparse.Namespace) -> int:
    guard = _guard()
    try:
        health = guard.store.health()
    except StoreError as exc:  # unreachable is an answer here: this instance is not ready
        health = {"reachable": False, "error": str(exc)}
    finally:
        guard.store.close()
    ready = health.get("reachable", True) is True
    if args.json:
        print(json.dumps({"ready": ready, **health}, default=str))
    else:
        for name, value in health.items():
            print(f"{name}: {value}")
    return 0 if ready else 1
