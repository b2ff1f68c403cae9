"""`statecodec rotate`: rotate keys without dropping a round (docs/rotation.md).

`begin`, `advance` and `pull` write the whole key file or nothing, so a re-run after a crash is safe; `advance` only
when the fleet registry shows it safe by the store's clock. `plan` prints secret keys unless given ids or --ids-only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from statecodec import _settings as cfg
from statecodec import rotation
from statecodec._settings import named_errors, setting
from statecodec.cli import check as instance_check
from statecodec.cli._output import emit, replace, show, store_time
from statecodec.cli.main import settings_from_flags
from statecodec.cli.store import on_store
from statecodec.config import KINDS
from statecodec.envelope import parse_wrapped_keys, wrapped_key_id
from statecodec.errors import ConfigurationError
from statecodec.keys import KeyRing, format_keys, generate_key, read_key_file

__all__ = ["register"]

_CHECK_EPILOG = """\
FILE: the reports of `statecodec check --json --instance NAME`, one per instance (several files, or all of them
concatenated on stdin: for h in web-1 web-2; do ssh $h statecodec check --json --instance $h; done | ... check -),
or a fleet file: {"instances": {"web-1": ["a1b2c3d4", "e5f6a7b8"], "web-2": ["a1b2c3d4"]}, "in_flight": []}
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("rotate", help="plan a key rotation and check a fleet's key ids",
                       description="Rotate keys without dropping in-flight rounds: [old,new] -> [new,old] -> [new].")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    plan = actions.add_parser("plan", func=_plan, help="print each phase's keys (secret) and earliest safe start")
    for side, default in (("old", " (default STATECODEC_KEYS or STATECODEC_KEYS_FILE)"), ("new", "")):
        group = plan.add_mutually_exclusive_group(required=side == "new")
        group.add_argument(f"--{side}-env", metavar="VAR", help=f"read the {side} key from VAR{default}")
        group.add_argument(f"--{side}-file", metavar="PATH", help=f"read the {side} key from a key file")
        group.add_argument(f"--{side}-key", metavar="KEY", help=f"the {side} key itself (lands in shell history)")
        group.add_argument(f"--{side}-id", metavar="KEY_ID", help=f"the {side} key's id, for keys a KMS holds")
    group.add_argument("--generate-new", action="store_true", help="generate a fresh new key")
    plan.add_argument("--ttl", type=float, help=f"token lifetime in seconds (default STATECODEC_TTL, else "
                      f"{cfg.DEFAULT_TTL})")
    plan.add_argument("--future-skew", type=float, default=float(cfg.DEFAULT_FUTURE_SKEW),
                      help=f"allowance for clocks ahead (default {cfg.DEFAULT_FUTURE_SKEW} s)")
    plan.add_argument("--ids-only", action="store_true", help="print key ids only, no secrets")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON on stdout")
    plan.add_argument("-o", "--output", metavar="FILE", help="write the plan to a new file, mode 0600 (not stdout)")
    check = actions.add_parser("check", func=_check, help="exit 0 if no instance mints a token others refuse",
                               epilog=_CHECK_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("files", nargs="+", metavar="FILE", help="check reports or a fleet file (JSON), or - for stdin")
    check.add_argument("--in-flight", action="append", default=[], metavar="KEY_ID", help="an in-flight key id")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    live: dict[str, argparse.ArgumentParser] = {}
    for name, run, what in (("status", _status, "show the fleet registry, the phase and the next safe moment"),
                            ("begin", _begin, "write phase 1 (old primary, new accepted) into the key file"),
                            ("advance", _advance, "write the next phase, only once the fleet registry shows it safe"),
                            ("pull", _pull, "drop a leaked key from the key file now: every instance, next poll")):
        live[name] = command = actions.add_parser(name, func=run, help=what)
        command.add_argument("--keys-file", metavar="PATH", help="the key file the servers read (default "
                             "STATECODEC_KEYS_FILE); the fleet registry is in STATECODEC_STORE_URL")
        command.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    live["begin"].add_argument("--new-file", metavar="PATH", help="a key file holding the new key (default: generate)")
    live["advance"].add_argument("--to", type=int, choices=(2, 3), help="do nothing if the key file is at this phase")
    live["pull"].add_argument("key_id", metavar="KEY_ID", help="the leaked key's id (statecodec check, the logs)")


def _key(args: argparse.Namespace, side: str) -> bytes:
    """The one key of `side` from its variable, file or flag (old: the server's key settings by default), for `plan`
    and `begin` (whose one source is --new-file)."""
    file, key, var = (getattr(args, f"{side}_{source}", None) for source in ("file", "key", "env"))
    settings = settings_from_flags({"STATECODEC_KEYS_FILE": file, "STATECODEC_KEYS": key})  # none given with var
    with named_errors(f"the {side} key"):
        ring = KeyRing.from_env(var or "STATECODEC_KEYS", settings)
    if len(ring) != 1:
        raise ConfigurationError(f"the {side} key ring holds {len(ring)} keys; a rotation starts from one key "
                                 f"(finish any earlier rotation with its phase 3 first, or pass the key with "
                                 f"--{side}-file or --{side}-key)")
    return ring[0]


def _plan(args: argparse.Namespace) -> int:
    if args.generate_new and args.ids_only:
        raise ConfigurationError("--generate-new with --ids-only would print a plan whose new key nobody can read; "
                                 "generate it first with `statecodec keygen > new.key` and pass --new-file new.key")
    if (args.old_id is None) != (args.new_id is None):
        raise ConfigurationError("--old-id and --new-id go together: a plan is over two keys or two key ids")
    ttl = cfg.ttl(os.environ) if args.ttl is None else args.ttl  # the servers' token lifetime
    if args.old_id is not None:
        plan = rotation.RotationPlan.from_key_ids(args.old_id, args.new_id, ttl, future_skew=args.future_skew)
    else:
        new = generate_key() if args.generate_new else _key(args, "new")
        plan = rotation.RotationPlan(_key(args, "old"), new, ttl, future_skew=args.future_skew)
    secrets = not args.ids_only and args.old_id is None
    if secrets and args.output is None:
        print("statecodec rotate: SECRET KEYS below; store them like a key file, or use --ids-only", file=sys.stderr)
    p1, p2, p3 = plan.phases
    starts = (
        "any time",
        f"once every instance reports key ids [{', '.join(p1.key_ids)}] (statecodec rotate check)",
        f"no sooner than {p3.wait_after_previous:g} s (ttl + future skew) after the last instance "
        f"reports [{', '.join(p2.key_ids)}]; re-seal stored state before then",
    )
    phases: list[dict[str, Any]] = [
        {"phase": p.number, "key_ids": list(p.key_ids), "wait_after_previous_seconds": p.wait_after_previous,
         "start": start, "summary": p.summary, **({"STATECODEC_KEYS": p.env_value()} if secrets else {})}
        for p, start in zip(plan.phases, starts, strict=True)
    ]  # fmt: skip
    old_id, new_id = p1.key_ids
    lines = [f"Rotation from key {old_id} to key {new_id} (ttl {plan.ttl:g} s, future skew {plan.future_skew:g} s)"]
    for entry in phases:
        keys = f"\n  STATECODEC_KEYS={entry['STATECODEC_KEYS']}" if secrets else ""
        lines.append(f"\nPhase {entry['phase']}: {entry['summary']}\n  start:   {entry['start']}")
        lines.append(f"  key ids: {', '.join(entry['key_ids'])}{keys}")
    doc = {"ttl": plan.ttl, "future_skew": plan.future_skew, "phases": phases}
    emit(json.dumps(doc, indent=2) if args.json else "\n".join(lines), args.output, "statecodec rotate: wrote the plan")
    return 0


def _documents(source: str) -> Iterator[object]:
    """Every JSON value in `source` (a file, or - for stdin): one document, or several one after another."""
    where = "stdin" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise ConfigurationError(f"cannot read {where}: {getattr(exc, 'strerror', None) or 'not UTF-8'}") from None
    decoder, at = json.JSONDecoder(), 0
    while text[at:].strip():
        try:  # the message names a line and column, never the text
            value, at = decoder.raw_decode(text, len(text) - len(text[at:].lstrip()))
        except ValueError as exc:
            raise ConfigurationError(f"cannot read {where} as JSON: {exc}") from None
        yield value
    if at == 0:
        raise ConfigurationError(f"{where} holds no JSON document")


def _instance(where: str, report: object) -> tuple[str, list[str]]:
    """(instance name, key ids) of one `statecodec check --json` report; a not-ready instance cannot be judged."""
    if not (isinstance(report, dict) and report.get("schema") == instance_check.SCHEMA):
        raise ConfigurationError(f"{where}: expected a report of `statecodec check --json` or a fleet file (--help)")
    name = report.get("instance")
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"{where}: a report without an instance name; run statecodec check --instance NAME")
    if report.get("ready") is not True:
        raise ConfigurationError(f"{where}: instance {name!r} is {report.get('status', 'not ready')} "
                                 f"({report.get('error')}); fix it and collect its report again: a rotation "
                                 "is judged on every instance's keys")
    return name, report.get("key_ids", [])


def _fleet(sources: list[str]) -> tuple[dict[str, Any], list[str]]:
    """(instances, in-flight key ids) from fleet files and `statecodec check` reports; an instance once only."""
    instances: dict[str, Any] = {}
    in_flight: list[str] = []
    for source in sources:
        for i, document in enumerate(_documents(source)):
            where = f"{'stdin' if source == '-' else source} (document {i + 1})"
            if isinstance(document, dict) and "schema" not in document:
                found, flying = rotation.parse_fleet(document)
                pairs, in_flight = list(found.items()), in_flight + flying
            else:
                pairs = [_instance(where, r) for r in (document if isinstance(document, list) else [document])]
            for name, ids in pairs:
                if name in instances:
                    raise ConfigurationError(f"{where}: instance {name!r} is reported twice")
                instances[name] = ids
    return instances, in_flight


def _check(args: argparse.Namespace) -> int:
    reports, in_flight = _fleet(args.files)
    report = rotation.check_fleet(reports, in_flight=[*in_flight, *args.in_flight])
    doc = {"safe": report.safe, "instances": report.instances, "unsafe_instances": report.unsafe_instances,
           "findings": [dataclasses.asdict(finding) for finding in report.findings]}
    return show(args, doc, str(report), 0 if report.safe else 1, indent=2)


def _write(path: Path, phase: int, old: bytes, new: bytes) -> KeyRing:
    """Write `phase` of the rotation from `old` to `new` into `path`, whole or not at all."""
    ring = KeyRing(rotation.phase_ring(phase, old, new))
    replace(path, f"{rotation.marked(phase, *KeyRing([old, new]).key_ids)}\n{format_keys(ring).replace(',', chr(10))}"
                  "\n")
    return ring


def _begin(args: argparse.Namespace) -> int:
    path, ring, phase, blockers, _, doc = _fleet_status(args)
    rotation = doc["rotation"] or {}  # key ids "old" and "new" in phases 1 and 2
    new = _key(args, "new") if args.new_file else None
    if phase == 1 and (new is None or KeyRing([new]).key_ids[0] == rotation["new"]):
        message = f"phase 1 already: {rotation['old']} seals, {rotation['new']} verifies (nothing written)"
        return show(args, {"phase": 1, "key_ids": list(ring.key_ids), "written": False}, message, indent=2)
    if phase in (1, 2):
        raise ConfigurationError(f"a rotation from {rotation['old']} to {rotation['new']} is at phase {phase}: finish "
                                 "it with `statecodec rotate advance` first")
    if blockers:  # a file the servers do not run: writing it would start nothing
        text = f"refused: the servers do not run this key file's keys; is it the file they read?\n{_text(doc, 0)}"
        return show(args, {**doc, "written": False}, text, 1, indent=2)
    with named_errors("the new key"):
        written = _write(path, 1, ring[0], generate_key() if new is None else new)
    message = f"phase 1 written to {path}: {written.key_ids[0]} seals, {written.key_ids[1]} verifies"
    return show(args, {"phase": 1, "key_ids": list(written.key_ids), "written": True}, message, indent=2)


def _pull(args: argparse.Namespace) -> int:
    """Write the key file without `key_id` and a pull line naming it, the override of the drop rule every reloading
    instance reads; then record the pull in the fleet registry, which fences an instance started from an old copy."""
    from statecodec.registry import Registry, registry_for  # here, as every command's imports: start-up is per command

    kid, kind = args.key_id.lower(), (setting(os.environ, cfg.CODEC_VAR, required=False) or "aesgcm").lower()
    var = next(v for v in ("STATECODEC_WRAPPED_KEYS", "STATECODEC_KEYS") if v in KINDS.get(kind, KINDS["aesgcm"]).reads)
    name = args.keys_file or setting(os.environ, f"{var}_FILE", required=False)
    if name is None:
        raise ConfigurationError(f"{var} gives the ring inline, which no instance reads again: deploy every instance "
                                 f"with {var} without key {kid} (a new key first if it is the only one) and restart "
                                 "them all at once (docs/key-management.md)" if setting(os.environ, var, required=False)
                                 else f"name the key file the servers read: --keys-file PATH or {var}_FILE")
    path = Path(name)
    text = read_key_file(path)
    with named_errors(f"key file {path}"):
        ring = KeyRing.parse(text) if var == "STATECODEC_KEYS" else None
        items = list(ring) if ring is not None else parse_wrapped_keys(text)
    ids = list(ring.key_ids) if ring is not None else [wrapped_key_id(blob).hex() for blob in items]
    if kid not in {*ids, *(pulled := rotation.pulled_ids(text))}:
        raise ConfigurationError(f"key {kid} is not in {path}, which holds key ids {', '.join(ids)}: nothing pulled "
                                 "(`statecodec check` and the servers' logs name key ids)")
    keep = {i: item for item, i in zip(items, ids, strict=True) if i != kid}
    if not keep and ring is None:
        raise ConfigurationError(f"key {kid} is the only key in {path}: put a new wrapped data key (`statecodec kms "
                                 f"new-data-key`) first in the file, wait one poll, then pull {kid}")
    if generated := not keep:  # a local ring's only key: a fresh one takes its place, a usable primary
        keep = {(fresh := KeyRing.generate()).key_ids[0]: fresh[0]}
    if kid in ids:  # else a re-run: the file already leaves it out, and its own lines (a rotation's marker) stand
        lines = [f"# statecodec pulled: {' '.join(sorted({*pulled, kid}))}"]
        lines += [rotation.marked(2, *reversed(keep))] if len(keep) == 2 else []  # [new, old]: phase 2 of a rotation
        replace(path, "\n".join([*lines, *(format_keys([item]) for item in keep.values())]) + "\n")
    recorded = cfg.store_url(os.environ)[0] not in (None, "memory")
    if recorded:  # after the file: an instance told first would fence itself until it reloaded
        on_store(lambda store: cast(Registry, registry_for(store)).pull(kid), guard=False)
    message = (f"key {kid} pulled from {path}: key ids now {', '.join(keep)}{' (new)' if generated else ''}; every "
               "reloading instance drops it at its next poll, logs it (CRITICAL) and refuses its tokens as unknown_key"
               f"{'' if recorded else '; no fleet registry (STATECODEC_STORE_URL): an old copy of the file works'}")
    doc = {"pulled": kid, "key_file": str(path), "key_ids": list(keep), "generated": generated, "recorded": recorded}
    return show(args, doc, message, indent=2)


def _fleet_status(args: argparse.Namespace) -> tuple[Path, KeyRing, int, list[str], float, dict[str, Any]]:
    """The key file (ring and marker read from the same bytes), its phase, what blocks the next phase, the wait, and
    the status document."""
    from statecodec.registry import Registry, read_fleet, registry_for

    name = args.keys_file or setting(os.environ, "STATECODEC_KEYS_FILE", required=False)
    if name is None:
        raise ConfigurationError("name the key file the servers read: --keys-file PATH or STATECODEC_KEYS_FILE")
    path = Path(name)
    text = read_key_file(path)
    with named_errors(f"key file {path}"):
        ring = KeyRing.parse(text)
        phase, old_id, new_id = rotation.key_file_phase(text, ring)
    # on_store refuses the in-process store, the one store without a registry (no server reports to this process).
    fleet = on_store(lambda store: read_fleet(cast(Registry, registry_for(store))), guard=False)
    blockers, wait = rotation.next_step(phase, ring.key_ids, fleet)
    doc = {
        "key_file": str(path), "phase": phase, "key_ids": list(ring.key_ids), "store_time": store_time(fleet.now_ms),
        "rotation": {"old": old_id, "new": new_id} if new_id else None, "blockers": blockers,
        "safe": phase in (1, 2) and not blockers and wait == 0, "wait_seconds": wait if math.isfinite(wait) else None,
        "safe_at": store_time(round(fleet.now_ms + wait * 1000)) if math.isfinite(wait) else None,
        "pulled": {kid: store_time(at) for kid, at in fleet.pulled.items()},
        "instances": [{"name": m.name, "primary": (m.accepts or (None,))[0], "key_ids": list(m.accepts),
                       "loaded": store_time(m.loaded_ms), "expires": store_time(m.expires_ms), "error": m.error,
                       "pulled": list(m.pulled)} for m in fleet.members],
    }  # fmt: skip
    return path, ring, phase, blockers, wait, doc


def _text(doc: dict[str, Any], wait: float) -> str:
    step = f"phase {doc['phase'] + 1}: safe now"
    if doc["phase"] in (0, 3):
        step = "none: no rotation under way (`statecodec rotate begin` starts one)"
    elif doc["blockers"]:
        step = f"phase {doc['phase'] + 1}: blocked"
    elif not doc["safe"]:
        step = f"phase {doc['phase'] + 1}: in {wait:.1f} s (at {doc['safe_at']}, store clock)"
    lines = [f"key file    {doc['key_file']}: phase {doc['phase']}, key ids {', '.join(doc['key_ids'])}",
             f"store time  {doc['store_time']}", f"next        {step}"]  # fmt: skip
    lines += [f"waiting for {blocker}" for blocker in doc["blockers"]]
    lines += [f"pulled      key {kid} at {at} (store clock)" for kid, at in doc["pulled"].items()]
    lines.append(f"\n{'instance':<24} {'primary':<9} {'key ids':<27} {'loaded (store clock)':<29} state")
    for m in doc["instances"]:
        lines.append(f"{m['name']:<24} {m['primary'] or '-':<9} {','.join(m['key_ids']) or '-':<27} {m['loaded']:<29} "
                     f"{'ok' if m['error'] is None else 'reload refused: ' + m['error']}"
                     f"{'; pulled ' + ','.join(m['pulled']) if m['pulled'] else ''}")
    return "\n".join(lines)


def _status(args: argparse.Namespace) -> int:
    *_, wait, doc = _fleet_status(args)
    return show(args, doc, _text(doc, wait), indent=2)


def _advance(args: argparse.Namespace) -> int:
    path, ring, phase, _, wait, doc = _fleet_status(args)
    if phase in (0, 3) or (args.to is not None and phase >= args.to):
        message = f"the key file is at phase {phase}: nothing to advance"
        return show(args, {**doc, "written": False}, message, indent=2)
    if not doc["safe"]:
        text = f"refused: phase {phase + 1} is not safe yet\n{_text(doc, wait)}"
        return show(args, {**doc, "written": False}, text, 1, indent=2)
    new, old = (ring[1], ring[0]) if phase == 1 else (ring[0], ring[1])
    written = _write(path, phase + 1, old, new)
    message = f"phase {phase + 1} written to {path}: key ids {', '.join(written.key_ids)}"
    return show(args, {**doc, "phase": phase + 1, "key_ids": list(written.key_ids), "written": True}, message, indent=2)
