"""The report of a run: a text table of ratios to the floor, the MCP round figure, and a PNG.

The PNG needs matplotlib (``pip install 'statecodec[bench]'``), imported
only by `plot` with the non-interactive Agg backend; `require_matplotlib`
lets the command refuse ``--plot`` before it measures anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statecodec import ConfigurationError
from statecodec.bench.cases import INSTALL

__all__ = ["binding_line", "format_table", "plot", "require_matplotlib"]


def binding_line(doc: Mapping[str, Any]) -> str | None:
    """The MCP round figure in one sentence, or None when the run did not measure it."""
    b = doc.get("binding")
    if not b:
        return None
    return (
        f"BoundCodec adds {b['bound_vs_sdk_added']:.2f}x of what the SDK's RequestStateBoundary adds per MCP round "
        f"(+{b['bound_added_us']:.1f} against +{b['sdk_added_us']:.1f} us over the bare AESGCMCodec round of "
        f"{b['bare_round_us']:.1f} us: request identity, unseal and seal of a 300-byte state, with a principal)"
    )


def format_table(doc: Mapping[str, Any]) -> str:
    """One block per payload: each case's seal and unseal as ratios to the floor, and its token overhead."""
    lines: list[str] = []
    for payload, size in doc["settings"]["payloads"].items():
        rows = [r for r in doc["results"] if r["payload"] == payload]
        floor = next(r for r in rows if r["case"] == "floor")
        lines += [
            f"{payload} ({size:,} bytes; the floor: {floor['seal_us']:.2f} us to seal, "
            f"{floor['unseal_us']:.2f} us to unseal)",
            f"  {'case':26} {'seal/floor':>10} {'unseal/floor':>12} {'+chars':>7}",
        ]
        lines += [
            f"  {r['case']:26} {r['seal_vs_floor']:10.2f} {r['unseal_vs_floor']:12.2f} {r['token_overhead']:+7d}"
            for r in rows
        ]
        lines.append("")
    line = binding_line(doc)
    if line:
        lines.append(line)
    lines += [f"skipped {s['case']}: {s['reason']}" for s in doc["skipped"]]
    return "\n".join(lines).rstrip()


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigurationError(f"--plot needs matplotlib: {INSTALL}") from None


def plot(doc: Mapping[str, Any], path: str) -> None:
    """Draw each payload's ratios to the floor (log scale, seal and unseal side by side) to a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    payloads = list(doc["settings"]["payloads"])
    fig, axes = plt.subplots(1, len(payloads), figsize=(4.5 * len(payloads), 6), sharey=True, squeeze=False)
    for ax, payload in zip(axes[0], payloads, strict=True):
        rows = [r for r in doc["results"] if r["payload"] == payload][::-1]
        ys = range(len(rows))
        ax.barh([y + 0.2 for y in ys], [r["seal_vs_floor"] for r in rows], height=0.4, label="seal")
        ax.barh([y - 0.2 for y in ys], [r["unseal_vs_floor"] for r in rows], height=0.4, label="unseal")
        ax.set_yticks(list(ys), [r["case"] for r in rows])
        ax.set_xscale("log")
        ax.axvline(1.0, color="grey", linewidth=0.8)
        ax.set_title(f"{payload}: cost / floor")
    axes[0][-1].legend(loc="upper right")
    line = binding_line(doc)
    if line:
        fig.suptitle(line.split(" (")[0], fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
