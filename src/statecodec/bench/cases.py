"""Benchmark cases: one declaration per codec, discovered without code changes elsewhere.

A `Case` names a codec, the group it belongs to, the packages it needs and
the command that installs them, and a factory that builds it. Nothing is
imported until the factory runs, so a missing package or a statecodec module
that this version does not ship shows up as *skipped* with its install hint,
never as an error. A factory returns any object with ``seal(bytes) -> str``
and ``unseal(str) -> bytes``, or a `Built` when it needs to say more (what is
measured, how to close it).

Cases come from the modules in `BUILTIN_MODULES`, from the modules listed in
the ``STATECODEC_BENCH_MODULES`` environment variable (comma-separated), and
from installed distributions that declare an entry point in the
``statecodec.bench`` group. Each such module exposes ``CASES``, an iterable
of `Case` (an entry point may also name a callable returning one).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from statecodec._types import Codec

__all__ = [
    "BENCH_INSTALL_HINT",
    "BUILTIN_MODULES",
    "ENTRY_POINT_GROUP",
    "MODULES_ENV",
    "Built",
    "Case",
    "Codec",
    "Skip",
    "discover",
    "select",
]

BUILTIN_MODULES: tuple[str, ...] = (
    "statecodec.bench.cases_statecodec",
    "statecodec.bench.cases_baselines",
)
ENTRY_POINT_GROUP = "statecodec.bench"
MODULES_ENV = "STATECODEC_BENCH_MODULES"
BENCH_INSTALL_HINT = "pip install 'statecodec[bench]'"

GROUPS: tuple[str, ...] = ("floor", "statecodec", "sdk", "peer", "remote")
"""Display order of case groups: the floor first, remote providers last."""


class Skip(Exception):
    """Raised by a factory whose case cannot run here (not configured, missing service)."""


@dataclass
class Built:
    """A ready case: the two operations, what they measure, and how to release them.

    `kind` is ``"codec"`` for a plain bytes codec (it can also sit inside an
    `MCPServer` for the event-loop section) or ``"boundary"`` for a case that
    seals claims around a codec itself (the SDK's boundary, `BoundCodec`).
    """

    seal: Callable[[bytes], str]
    unseal: Callable[[str], bytes]
    kind: str = "codec"
    note: str = ""
    close: Callable[[], None] | None = None
    codec: Codec | None = None


@dataclass(frozen=True)
class Case:
    """One benchmark subject, declared once.

    `requires` lists importable module names checked before the factory runs;
    `install_hint` is shown when one is missing. `env` lists environment
    variables that must be set (a remote service to measure against). `quick`
    cases run under ``--quick``. `loop` marks a case worth running in the
    event-loop section.
    """

    name: str
    group: str
    factory: Callable[[], Codec | Built]
    description: str = ""
    requires: tuple[str, ...] = ()
    install_hint: str = BENCH_INSTALL_HINT
    quick: bool = True
    loop: bool = False
    tags: tuple[str, ...] = field(default=())
    env: tuple[str, ...] = field(default=())

    def missing(self) -> str | None:
        """The skip reason if a required module or setting is absent, else None."""
        for mod in self.requires:
            if not _importable(mod):
                return f"needs {mod} ({self.install_hint})"
        for var in self.env:
            if not os.environ.get(var):
                return f"set {var} to measure this case"
        return None

    def build(self) -> Built:
        """Run the factory; `ImportError` and `Skip` propagate for the caller to classify."""
        made = self.factory()
        if isinstance(made, Built):
            return made
        if not isinstance(made, Codec):
            raise TypeError(f"factory of {self.name} returned {type(made).__name__}, not a codec")
        return Built(seal=made.seal, unseal=made.unseal, codec=made)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _module_cases(module_name: str) -> list[Case]:
    module = importlib.import_module(module_name)
    found = getattr(module, "CASES", None)
    if found is None:
        raise LookupError(f"benchmark module {module_name} has no CASES")
    return _as_cases(found() if callable(found) else found, module_name)


def _as_cases(found: object, origin: str) -> list[Case]:
    if not isinstance(found, Iterable):
        raise TypeError(f"benchmark cases from {origin} are not iterable")
    cases = list(found)
    for c in cases:
        if not isinstance(c, Case):
            raise TypeError(f"{origin} declares {type(c).__name__}, not a Case")
    return cases


def discover(extra_modules: Sequence[str] = ()) -> tuple[list[Case], list[str]]:
    """Every declared case, in declaration order, and the problems met while loading.

    A module or entry point that fails to load is reported, not raised, so
    one broken plug-in cannot stop a run. The first declaration of a name wins.
    """
    problems: list[str] = []
    modules = list(BUILTIN_MODULES) + list(extra_modules)
    modules += [m.strip() for m in os.environ.get(MODULES_ENV, "").split(",") if m.strip()]
    cases: list[Case] = []
    for name in modules:
        try:
            cases += _module_cases(name)
        except Exception as exc:
            problems.append(f"cannot load benchmark cases from {name}: {type(exc).__name__}: {exc}")
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = ep.load()
            if isinstance(loaded, type(importlib)):
                cases += _module_cases(ep.value)
            else:
                cases += _as_cases(loaded() if callable(loaded) else loaded, ep.name)
        except Exception as exc:
            problems.append(f"cannot load benchmark entry point {ep.name}: {type(exc).__name__}: {exc}")
    seen: set[str] = set()
    unique: list[Case] = []
    for c in cases:
        if c.name in seen:
            problems.append(f"benchmark case {c.name} is declared twice; the first declaration is used")
            continue
        seen.add(c.name)
        unique.append(c)
    return unique, problems


def select(cases: Iterable[Case], only: Sequence[str] = (), *, quick: bool = False) -> list[Case]:
    """Cases whose name or group contains any `only` pattern (case-insensitive).

    The floor is always kept: every ratio in the report is taken against it.
    """
    pats = [p.lower() for p in only if p]
    out: list[Case] = []
    for c in cases:
        if quick and not c.quick and not pats:
            continue
        hay = f"{c.name} {c.group} {' '.join(c.tags)}".lower()
        if c.group == "floor" or not pats or any(p in hay for p in pats):
            out.append(c)
    return out
