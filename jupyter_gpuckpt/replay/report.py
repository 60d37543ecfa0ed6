"""The replay's output: the table, the ``--json`` rows, and the trade-off plot."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

COLUMNS = (
    ("policy", "POLICY", "{}"),
    ("gpu_hours_reserved", "RESERVED", "{:.0f}"),
    ("gpu_hours_busy", "BUSY", "{:.0f}"),
    ("gpu_hours_idle", "IDLE", "{:.0f}"),
    ("gpu_hours_idle_returned", "RETURNED", "{:.0f}"),
    ("idle_returned_share", "OF IDLE", "{:.1%}"),
    ("gpu_hours_lent", "LENT", "{:.0f}"),
    ("cells_waited_share", "CELLS WAITED", "{:.1%}"),
    ("resume_wait_median_s", "WAIT MED", "{:.1f}"),
    ("resume_wait_median_small_s", "MED <=2GB", "{:.1f}"),
    ("resume_wait_p95_s", "WAIT P95", "{:.1f}"),
    ("gpu_waits", "GPU WAITS", "{}"),
    ("gpu_wait_max_s", "GPU WAIT MAX", "{:.0f}"),
    ("suspends_without_demand", "UNASKED", "{}"),
    ("suspend_max_s", "SUSPEND MAX", "{:.0f}"),
    ("sessions_lost", "LOST", "{}"),
    ("rerun_gpu_hours", "RE-RUN", "{:.0f}"),
)
LEGEND = ("GPU-hours: RESERVED held by kernels, BUSY running cells, IDLE the users' pauses, RETURNED of that "
          "with the GPUs back in the pool,\nLENT held by waiting work only because others were reclaimed, RE-RUN "
          "re-running cells after a cull. Waits in seconds: a cell's wait for\nits kernel (restore, or new kernel "
          "and re-run), its median over sessions of at most 2 GB, and requests that waited for a free GPU.\n"
          "UNASKED: suspends while nobody waited. LOST: sessions whose state was lost. * a reference, not a policy.\n"
          "< the policy the given server config runs (--config, --GPUCheckpointApp.name=value).")


def table(rows: Sequence[dict[str, Any]]) -> str:
    """One line per setting, the columns of :data:`COLUMNS` (a row may lack some: ``-``)."""
    lines = [[title for _, title, _ in COLUMNS]]
    for row in rows:
        line = [fmt.format(row[key]) if row.get(key) is not None else "-" for key, _, fmt in COLUMNS]
        if row.get("reference"):
            line[0] += " *"
        if row.get("configured"):
            line[0] += " <"
        lines.append(line)
    return _aligned(lines)


def _aligned(lines: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell: the first left-aligned, numbers right-aligned."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    padded = (("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True))))
              for line in lines)
    return "\n".join(padded)


def comparison(rows: Sequence[dict[str, Any]]) -> str:
    """A live replay's rows (``measured``, ``simulated``, ``difference``, ``tolerance``,
    ``within``) side by side, one line per figure."""
    by_source = {row["source"]: row for row in rows}
    sources = [name for name in ("measured", "simulated", "difference", "tolerance", "within") if name in by_source]
    figures = [key for key, held in by_source["within"].items() if isinstance(held, bool)]
    lines = [["FIGURE", *(name.upper() for name in sources)]]
    for key in figures:
        cells = [by_source[name].get(key) for name in sources]
        lines.append([key, *("yes" if c is True else "NO" if c is False else "-" if c is None
                             else f"{c:.3f}" if isinstance(c, float) else str(c) for c in cells)])
    return _aligned(lines)


def write_json(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    Path(path).write_text(json.dumps(list(rows), indent=1) + "\n")


def plot(rows: Sequence[dict[str, Any]], path: str | Path, title: str = "") -> None:
    """Idle GPU-hours returned against the median resume wait, one point per setting."""
    import matplotlib  # only for --plot: the replay itself needs nothing beyond the project

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for row in rows:
        x, y = row["resume_wait_median_s"], row["gpu_hours_idle_returned"]
        marker = "*" if row.get("reference") else "D" if row.get("configured") else \
            "s" if row["policy"].startswith("cull") else "o"
        label = (f"{row['policy']}: {row['idle_returned_share']:.0%} of idle, "
                 f"{row['cells_waited_share']:.0%} cells waited")
        if row.get("configured"):  # the admin's own: large, outlined, named on the plot too
            ax.scatter([x], [y], marker=marker, s=160, label=label, facecolors="none", edgecolors="crimson",
                       linewidths=2)
            ax.annotate(row["policy"], (x, y), textcoords="offset points", xytext=(8, 8), color="crimson")
            continue
        ax.scatter([x], [y], marker=marker, s=70, label=label, alpha=0.8)  # close points: the legend names them
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlabel("median resume wait of the cells that waited (s)")
    ax.set_ylabel("idle GPU-hours returned to the pool")
    ax.set_title(title or "What each setting returns, and what it costs the user")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
