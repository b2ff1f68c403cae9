"""Measure what a codec costs a server: latency per operation, token size, remote calls, scale.

`run()` measures every declared case (statecodec's codecs, the floor, the
MCP SDK's built-in protection and peer libraries) side by side in one run
and returns a JSON document; `format_table`, `plot` and `compare` render and
compare such documents. The command line is ``statecodec bench``.

Cases are declared once per codec (`Case`) in the modules of
`statecodec.bench.cases.BUILTIN_MODULES`, in modules named by
``STATECODEC_BENCH_MODULES``, or by installed packages through the
``statecodec.bench`` entry-point group; a case whose package is missing is
reported as skipped with its install hint.
"""

from statecodec.bench.cases import Built, Case, Skip, discover, select
from statecodec.bench.compare import Change, compare, format_compare
from statecodec.bench.measure import FULL, QUICK, Settings, check_round_trip, measure
from statecodec.bench.payloads import PAYLOADS, Payload
from statecodec.bench.plot import plot
from statecodec.bench.report import SCHEMA, format_table, ratio_to_floor, validate
from statecodec.bench.runner import FULL_PLAN, QUICK_PLAN, Plan, run

__all__ = [
    "FULL",
    "FULL_PLAN",
    "PAYLOADS",
    "QUICK",
    "QUICK_PLAN",
    "SCHEMA",
    "Built",
    "Case",
    "Change",
    "Payload",
    "Plan",
    "Settings",
    "Skip",
    "check_round_trip",
    "compare",
    "discover",
    "format_compare",
    "format_table",
    "measure",
    "plot",
    "ratio_to_floor",
    "run",
    "select",
    "validate",
]
