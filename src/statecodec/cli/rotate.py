"""`statecodec rotate plan` and `statecodec rotate check`: rotate keys without dropping a round.

`plan` prints the three configurations to roll out, in order, with the
earliest safe start of each. `check` reads the key ids every instance reports
(``codec.key_ids``, primary first; never keys) and exits 0 only when no
instance can mint a token another instance would refuse.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from statecodec.errors import ConfigurationError
from statecodec.keys import DEFAULT_KEYS_ENV, KeyRing, generate_key
from statecodec.rotation import RotationPlan, check_fleet, parse_fleet

_PLAN_EPILOG = """\
The old key comes from --old-file, --old-key or --old-env (default: the
STATECODEC_KEYS variable, which must hold exactly one key). The new key comes
from --new-file, --new-key, --new-env, or --generate-new. For keys a KMS
holds, give --old-id and --new-id (codec.key_ids) instead. The printed
STATECODEC_KEYS values contain secrets: print them only where secrets may go,
or use --ids-only to print key ids alone.

Roll out each phase to every instance before starting the next; run
`statecodec rotate check` on the instances' reported key ids in between.
"""

_CHECK_EPILOG = """\
FILE is JSON (or - for stdin):
  {"instances": {"web-1": ["a1b2c3d4", "e5f6a7b8"], "web-2": ["a1b2c3d4"]},
   "in_flight": ["a1b2c3d4"]}
Each instance lists its codec.key_ids, primary first. "in_flight" (optional)
lists key ids that minted tokens still within their TTL. Exit status: 0 safe,
1 unsafe (every instance that could mint a token another cannot verify is
named), 2 unreadable input.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "rotate",
        help="plan a key rotation and check a fleet's key ids",
        description="Rotate keys without dropping in-flight rounds: [old,new] -> [new,old] -> [new].",
    )
    rsub = p.add_subparsers(dest="rotate_command", metavar="ACTION")
    p.set_defaults(func=lambda _args: _usage(p))

    plan = rsub.add_parser(
        "plan",
        help="print the STATECODEC_KEYS value and earliest safe start of each phase",
        epilog=_PLAN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    old = plan.add_mutually_exclusive_group()
    old.add_argument("--old-env", metavar="VAR", help=f"read the old key from VAR (default {DEFAULT_KEYS_ENV})")
    old.add_argument("--old-file", metavar="PATH", help="read the old key from a key file")
    old.add_argument("--old-key", metavar="KEY", help="the old key itself (lands in shell history)")
    old.add_argument("--old-id", metavar="KEY_ID", help="the old key's id, for keys held by a KMS (no secrets)")
    new = plan.add_mutually_exclusive_group(required=True)
    new.add_argument("--new-env", metavar="VAR", help="read the new key from VAR")
    new.add_argument("--new-file", metavar="PATH", help="read the new key from a key file")
    new.add_argument("--new-key", metavar="KEY", help="the new key itself (lands in shell history)")
    new.add_argument("--generate-new", action="store_true", help="generate a fresh new key")
    new.add_argument("--new-id", metavar="KEY_ID", help="the new key's id, for keys held by a KMS (no secrets)")
    plan.add_argument("--ttl", type=float, default=600.0, help="token lifetime in seconds (default 600)")
    plan.add_argument(
        "--future-skew", type=float, default=60.0, help="allowance for clocks ahead, seconds (default 60)"
    )
    plan.add_argument("--ids-only", action="store_true", help="print key ids only, no secrets")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(func=_plan)

    check = rsub.add_parser(
        "check",
        help="check instances' reported key ids: exit 0 if no round can be dropped",
        epilog=_CHECK_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("file", metavar="FILE.json", help="the fleet's key ids as JSON, or - for stdin")
    check.add_argument(
        "--in-flight", action="append", default=[], metavar="KEY_ID",
        help="a key id that minted tokens still within their TTL (repeatable)",
    )
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(func=_check)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _single(ring: KeyRing, where: str) -> bytes:
    if len(ring) != 1:
        raise ConfigurationError(
            f"{where} holds {len(ring)} keys; a rotation starts from one key (finish any earlier "
            "rotation with its phase 3 first, or pass the key with --old-file/--old-key)"
        )
    return ring[0]


def _load(env: str | None, file: str | None, key: str | None, name: str) -> bytes:
    if file is not None:
        return _single(KeyRing.from_file(file), file)
    if key is not None:
        try:
            return _single(KeyRing.parse(key), f"--{name}-key")
        except ConfigurationError as exc:
            raise ConfigurationError(f"--{name}-key: {exc}") from None
    var = env or DEFAULT_KEYS_ENV
    return _single(KeyRing.from_env(var), var)


def _plan(args: argparse.Namespace) -> int:
    if args.generate_new and args.ids_only:
        raise ConfigurationError(
            "--generate-new with --ids-only would print a plan whose new key nobody can read; "
            "generate it first with `statecodec keygen > new.key` and pass --new-file new.key"
        )
    if (args.old_id is None) != (args.new_id is None):
        raise ConfigurationError("--old-id and --new-id go together: a plan is over two keys or two key ids")
    if args.old_id is not None:
        plan = RotationPlan.from_key_ids(args.old_id, args.new_id, args.ttl, future_skew=args.future_skew)
    else:
        old = _load(args.old_env, args.old_file, args.old_key, "old")
        new = generate_key() if args.generate_new else _load(args.new_env, args.new_file, args.new_key, "new")
        plan = RotationPlan(old, new, args.ttl, future_skew=args.future_skew)
    secrets = not args.ids_only and args.old_id is None
    if secrets:
        print(
            "statecodec: the plan below contains SECRET KEYS (the STATECODEC_KEYS values); "
            "store it like a key file, or rerun with --ids-only.",
            file=sys.stderr,
        )
    starts = _starts(plan)
    if args.json:
        phases: list[dict[str, Any]] = []
        for phase, start in zip(plan.phases, starts, strict=True):
            entry: dict[str, Any] = {
                "phase": phase.number,
                "key_ids": list(phase.key_ids),
                "wait_after_previous_seconds": phase.wait_after_previous,
                "start": start,
                "summary": phase.summary,
            }
            if secrets:
                entry[DEFAULT_KEYS_ENV] = phase.env_value()
            phases.append(entry)
        print(json.dumps({"ttl": plan.ttl, "future_skew": plan.future_skew, "phases": phases}, indent=2))
        return 0
    old_id, new_id = plan.phases[0].key_ids
    print(f"Rotation from key {old_id} to key {new_id} (ttl {plan.ttl:g} s, future skew {plan.future_skew:g} s)")
    for phase, start in zip(plan.phases, starts, strict=True):
        print()
        print(f"Phase {phase.number}: {phase.summary}")
        print(f"  start:   {start}")
        print(f"  key ids: {', '.join(phase.key_ids)}")
        if secrets:
            print(f"  {DEFAULT_KEYS_ENV}={phase.env_value()}")
    return 0


def _starts(plan: RotationPlan) -> list[str]:
    p1, p2, p3 = plan.phases
    return [
        "any time",
        f"once every instance reports key ids [{', '.join(p1.key_ids)}] (statecodec rotate check)",
        f"no sooner than {p3.wait_after_previous:g} s (ttl + future skew) after the last instance "
        f"reports [{', '.join(p2.key_ids)}]; re-seal stored state before then",
    ]


def _check(args: argparse.Namespace) -> int:
    source = "stdin" if args.file == "-" else args.file
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read {source}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"{source} is not JSON: {exc}") from None
    reports, in_flight = parse_fleet(document)
    report = check_fleet(reports, in_flight=[*in_flight, *args.in_flight])
    if args.json:
        out = {
            "safe": report.safe,
            "instances": list(report.instances),
            "unsafe_instances": list(report.unsafe_instances),
            "findings": [
                {"instance": f.instance or None, "key_id": f.key_id, "refused_by": list(f.refused_by),
                 "in_flight": f.in_flight}
                for f in report.findings
            ],
        }
        print(json.dumps(out, indent=2))
    else:
        print(report)
    return 0 if report.safe else 1
