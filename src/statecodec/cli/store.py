"""`statecodec revoke` and `statecodec store check`: the single-use store, as an operator drives it (docs/cli.md).

Both read the store and its key as every server does and check the store's fingerprint first: under another store
key or namespace, or on a store no server has used, nothing is revoked; nor, unless --force, for a selector of a form
no instance recorded minting, nor with no namespace chosen on a store that holds another. Neither prints a secret.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from statecodec._settings import NAMESPACE_VAR, store_url
from statecodec.cli._output import show, store_time
from statecodec.errors import ConfigurationError

__all__ = ["on_store", "register"]

T = TypeVar("T")

# The SDK binds a principal under its access token's issuer: without --issuer, those tokens are not covered.
_NO_ISSUER = " with no issuer (tokens minted under an issuer need --issuer)"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    revoke = sub.add_parser("revoke", func=_revoke,
                            help="refuse, on every instance, the tokens minted until now for a principal")
    which = revoke.add_mutually_exclusive_group(required=True)
    which.add_argument("--principal", metavar="SUBJECT", help="the authenticated subject (with --issuer if any)")
    which.add_argument("--client", metavar="ID", help="an OAuth client id (with --issuer if any)")
    which.add_argument("--scope", metavar="NAME=VALUE", help="an operator scope the server stamps, e.g. tenant=acme")
    which.add_argument("--all", action="store_true", help="every token minted until now")
    revoke.add_argument("--issuer", metavar="ISS", help="the issuer of --principal or --client (the token's iss)")
    revoke.add_argument("--lift", action="store_true", help="undo the revocation of the same selector")
    revoke.add_argument("--force", action="store_true",
                        help="revoke even a selector no instance recorded minting under (tokens of older versions)")
    revoke.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    store = sub.add_parser("store", help="the single-use store")
    actions = store.add_subparsers(dest="store_command", metavar="SUBCOMMAND", required=True)
    check = actions.add_parser("check", func=_check,
                               help="check the configured store: owner, memory policy, revocations")
    check.add_argument("--json", action="store_true", help="print the report as JSON on stdout")


def on_store(work: Callable[[Any], Awaitable[T]], *, guard: bool = True) -> T:
    """`work` on the single-use guard (or, not `guard`, the bare store) of the store the servers use, then closed:
    the one way an operator command reaches a store. A store inside one process is refused: it would see only its own;
    unless set, the store may take 5 s to answer, longer than a request would wait."""
    import asyncio

    from statecodec.mcp import guard_from_env, store_from_env

    settings = {"STATECODEC_STORE_TIMEOUT": "5", **os.environ}
    url, _ = store_url(settings)  # not shown: it may hold a password
    if url is None or url == "memory":
        what = "=memory is a store inside one process: this command would only see its own" if url else " is not set"
        raise ConfigurationError(f"STATECODEC_STORE_URL{what}; set it to the redis:// URL the servers use")
    target: Any = guard_from_env(settings) if guard else store_from_env(settings)
    store = target.store if guard else target

    async def run() -> T:
        try:
            return await work(target)
        finally:
            await store.aclose()

    return asyncio.run(run())


async def _fleet(guard: Any) -> tuple[dict[str, Any], str | None]:
    """The store's health, and why its namespace may be another's: none chosen, the store holds another (a SCAN)."""
    health = await guard.health()
    if os.environ.get(NAMESPACE_VAR) or (names := await guard.store.namespaces()) in ([], [guard.store.namespace]):
        return health, None
    return health, (f"{NAMESPACE_VAR} is not set and the store at {guard.where} holds namespaces {', '.join(names)}: "
                    "set it to the one your servers use")


def _revoke(args: argparse.Namespace) -> int:
    from statecodec.single_use import checked

    selector: dict[str, Any] = {"everything": args.all, "issuer": args.issuer}
    kind, what, form = "all", "every token", args.issuer  # form: what the stamps record beside the kind
    if args.scope is not None:
        name, sep, value = args.scope.partition("=")
        if not sep:
            raise ConfigurationError("--scope takes NAME=VALUE, e.g. --scope tenant=acme")
        selector["scope"] = (checked("--scope NAME", name), checked("--scope VALUE", value))
        kind, what, form = "scope", f"the tokens of scope {name}={value}", name
    for option in ("principal", "client"):
        if getattr(args, option) is not None:
            selector[option] = checked(f"--{option}", getattr(args, option))
            kind, what = option, f"the tokens of {option} {selector[option]}"
            what += f" at issuer {args.issuer}" if args.issuer else _NO_ISSUER
    doc: dict[str, object] = {"revoked": kind, "value": selector.get(kind, selector.get("scope"))}

    async def work(guard: Any) -> tuple[object, str | None]:
        health, refused = await _fleet(guard)
        unjudged = args.lift or args.force or kind == "all" or health["owner"] != "ok"
        if refused or unjudged or guard.form(kind, form) in (forms := health["forms"]):
            return (None if refused else await (guard.lift if args.lift else guard.revoke)(**selector)), refused
        seen = []  # no instance recorded minting a token of this selector's form: refused, saying what they record
        for name in ("principal", "client"):
            count, bare = sum(entry.startswith(f"{name}:") for entry in forms), guard.form(name, None) in forms
            seen += [f"{name}s with no issuer"] * bare + [f"{name}s at {count - bare} issuer(s)"] * (count > bare)
        seen += [f"{count} scope name(s)" for count in [sum(entry.startswith("scope:") for entry in forms)] if count]
        since = f" since {store_time(min(forms.values()))}" if forms else ""
        return None, (f"no instance recorded minting {what}; the fleet's tokens record "
                      f"{', '.join(seen) or 'no principal, client or scope'}{since}; a token minted by statecodec "
                      "0.1.0 or earlier records none: --force revokes anyway")

    done, refused = on_store(work)
    if refused:
        message = f"nothing {'lifted' if args.lift else 'revoked'}: {refused}"
        return show(args, {"refused": kind, "value": doc["value"], "message": message}, message, 1)
    if args.lift:
        doc = {"lifted": done}
        message = f"lifted the revocation of {what}" if doc["lifted"] else f"nothing to lift: {what} were not revoked"
    else:
        doc["revoked_until"] = store_time(round(cast(float, done) * 1000))
        message = f"revoked {what} minted until {doc['revoked_until']} (store clock)"
    return show(args, {**doc, "message": message}, message, 0 if doc.get("lifted", True) else 1)


def _check(args: argparse.Namespace) -> int:
    health, ambiguous = on_store(_fleet)
    if health["owner"] == "foreign":
        from statecodec.store import check_owner

        check_owner("foreign", str(health["server"]))
    malformed = ", ".join(health["malformed"])
    problems = [f"malformed revocation entries, skipped by every claim: {malformed}"] if malformed else []
    if health["owner"] == "unused":  # the wrong namespace looks like this too: never "ready"
        problems.append("no server has used this store under this store key and namespace (STATECODEC_STORE_NAMESPACE)")
    problems += [ambiguous] if ambiguous else []
    if health["maxmemory_policy"] != "noeviction":
        problems.append(f"maxmemory-policy is {health['maxmemory_policy']}: set noeviction (servers refuse to start)")
    report = {
        "status": "not ready" if problems else "ready",
        "server": health["server"],
        "namespace": health["namespace"],
        "owner": "this store key and namespace" if health["owner"] == "ok" else "no server has used it yet",
        "memory_policy": health["maxmemory_policy"],
        "revocations": health["revocations"],
        "malformed": health["malformed"],
        "longest_lifetime": f"{health['longest_lifetime_ms'] / 1000:g} s",
        "clock_skew": f"{health['clock_skew_ms'] / 1000:g} s",
        "store_time": store_time(health["store_time_ms"]),
        "problems": problems,
    }
    lines = [f"{name.replace('_', ' '):18}{', '.join(value) or 'none' if isinstance(value, list) else value}"
             for name, value in report.items()]
    return show(args, {"ready": not problems, **report}, "\n".join(lines), 1 if problems else 0)
