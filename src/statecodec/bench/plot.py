"""Charts of a run: µs per operation (log scale, grouped by payload) and token overhead.

Needs matplotlib (``pip install 'statecodec[bench]'``); it is imported only
here, with the non-interactive Agg backend, so a run without ``--plot``
never loads it.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statecodec.bench.measure import OPS

__all__ = ["plot"]

_COLOURS = {"floor": "#7f7f7f", "statecodec": "#1f77b4", "sdk": "#ff7f0e", "peer": "#2ca02c", "remote": "#d62728"}


def plot(doc: Mapping[str, Any], path: str | Path) -> Path:
    """Write the charts of `doc` to `path` (PNG) and return the path."""
    try:
        import matplotlib
    except ImportError as exc:
        raise RuntimeError("--plot needs matplotlib: pip install 'statecodec[bench]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [c for c in doc.get("cases", []) if c.get("status") == "ok"]
    payloads = list(doc.get("payloads", {}))
    fig, axes = plt.subplots(3, 1, figsize=(10, 10.5), gridspec_kw={"height_ratios": [3, 3, 2]})
    width = 0.8 / max(1, len(cases))
    for ax, op in zip(axes[:2], OPS, strict=True):
        for i, c in enumerate(cases):
            xs, ys = [], []
            for j, p in enumerate(payloads):
                cell = c["results"].get(p)
                if isinstance(cell, Mapping) and cell.get("status") == "ok":
                    xs.append(j - 0.4 + (i + 0.5) * width)
                    ys.append(cell[op]["median_s"] * 1e6)
            ax.bar(xs, ys, width * 0.92, color=_COLOURS.get(c["group"], "#9467bd"), edgecolor="white", linewidth=0.3)
            for x, y in zip(xs, ys, strict=True):
                ax.text(x, y * 1.08, c["name"], rotation=90, ha="center", va="bottom", fontsize=5.5)
        ax.set_yscale("log")
        ax.set_xticks(range(len(payloads)))
        ax.set_xticklabels([f"{p} ({doc['payloads'][p]['bytes']:,} B)" for p in payloads])
        ax.set_ylabel(f"{op}: µs per operation (median, log)")
        top = ax.get_ylim()[1]
        ax.set_ylim(top=top * 8)
        ax.grid(axis="y", which="major", linewidth=0.3)
    ax = axes[2]
    first = payloads[0] if payloads else ""
    sizes = []
    for c in cases:
        cell = c["results"].get(first)
        if isinstance(cell, Mapping) and cell.get("status") == "ok":
            sizes.append((c["name"], cell["overhead_chars"], c["group"]))
    ax.barh(
        [s[0] for s in sizes],
        [s[1] for s in sizes],
        color=[_COLOURS.get(s[2], "#9467bd") for s in sizes],
    )
    for k, (_, v, _) in enumerate(sizes):
        ax.text(v, k, f" {v}", va="center", fontsize=7)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel(f"token overhead in characters over base64url(payload), payload {first}")
    env = doc.get("environment", {})
    fig.suptitle(
        f"statecodec bench — {env.get('cpu', '?')}, Python {env.get('python', '?')}, {env.get('openssl', '?')}",
        fontsize=9,
    )
    fig.tight_layout()
    out = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72)
    plt.close(fig)
    # A few flat colours and text: a 64-colour palette keeps the file small without visible loss.
    from PIL import Image

    with Image.open(buf) as img:
        img.convert("RGB").quantize(colors=64).save(out, format="PNG", optimize=True)
    return out
