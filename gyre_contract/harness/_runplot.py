"""Drawing a run log: phase times per run (spread), or a metric per cycle (learning curves).

Why two figures: repeats of one configuration (different seeds) are compared by their spread,
while the cycles of one run are a curve over time; drawing successive cycles or runs as if they
were repeats hides the learning. Needs matplotlib (the `plot` or `demo` extra), imported only
here and only when drawing; the Agg canvas, no display. The PNG replaces its file atomically.
"""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gyre_contract.harness._runlog import RunRecord, config_label
from gyre_contract.io._atomic import atomic_path

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")
"""One colour per configuration (matplotlib's tab10), cycled."""


def curve_names(records: Sequence[RunRecord]) -> list[str]:
    """The metrics that have a per-cycle curve in at least one run, in order of appearance."""
    return list(dict.fromkeys(name for r in records for name in r.curves))


def plot_runs(records: Sequence[RunRecord], path: str | Path, curve: str | None = None,
              *, curve_label: str | None = None) -> Path:
    """Draws the runs of a run log as a PNG at `path` and returns the path.

    Without `curve`: rollout and train seconds of every run, one column per configuration, each
    run a dot and the configuration's median a black line (the spread of repeats). With `curve`
    (a metric the runs recorded per cycle): that metric against the cycle, one thin line per run
    and a bold median per configuration, and beside it the final value of every run per
    configuration (the spread of repeats). `curve_label` names the curve's axis with its unit
    (default: the metric's name). A configuration shown by its hash is spelled out underneath.
    """
    if not records:
        raise ValueError("plot_runs needs at least one run")
    if curve is not None and curve not in curve_names(records):
        known = ", ".join(curve_names(records)) or "none"
        raise ValueError(f"no run has a curve of {curve!r}; curves: {known}")
    from matplotlib.figure import Figure

    keys = list(dict.fromkeys(r.config_key for r in records))
    width = max(6.0, 1.2 * len(keys) + 3) + (0 if curve is None else 4)
    fig = Figure(figsize=(width, 4.5), layout="constrained")
    if curve is None:
        _draw_times(fig, records, keys)
    else:
        _draw_curves(fig, records, keys, curve, curve_label or curve)
    hashed = [f"{config_label(k)} = {_short(k, 400)}" for k in keys if config_label(k) != k]
    if hashed:  # spelled out under the axes, wrapped to the figure's width (~14 chars an inch)
        lines = [part for line in hashed for part in textwrap.wrap(line, int(width * 14))]
        fig.supxlabel("\n".join(lines), fontsize="small", ha="left", x=0.01)
    return _save(fig, Path(path))


def _draw_times(fig: Any, records: Sequence[RunRecord], keys: list[str]) -> None:
    axes = fig.subplots(1, 2, sharey=True)  # one scale: which phase dominates shows
    for ax, name in zip(axes, ("rollout_s", "train_s"), strict=True):
        for x, key in enumerate(keys):
            values = [getattr(r, name) for r in records if r.config_key == key]
            _spread_column(ax, x, values, COLORS[x % len(COLORS)])
        ax.set_title(f"{name.removesuffix('_s')} time per run")
        ax.set_xticks(range(len(keys)), _labels(keys), rotation=20, ha="right")
        ax.set_xlabel("configuration")
        ax.set_xlim(-0.5, len(keys) - 0.5)
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("seconds per run (all cycles)")
    _spread_legend(axes[1])
    fig.suptitle(f"{len(records)} runs: one dot per run, the median as a line")


def _draw_curves(fig: Any, records: Sequence[RunRecord], keys: list[str], curve: str,
                 label: str) -> None:
    from matplotlib.ticker import MaxNLocator

    lines_ax, final_ax = fig.subplots(1, 2, width_ratios=(3, 1))
    labels = _labels(keys)
    for x, key in enumerate(keys):
        color = COLORS[x % len(COLORS)]
        runs = [r for r in records if r.config_key == key and curve in r.curves]
        for r in runs:
            values = [float("nan") if v is None else v for v in r.curves[curve]]
            lines_ax.plot(range(len(values)), values, color=color, alpha=0.35, linewidth=1)
        median = _median_per_cycle([r.curves[curve] for r in runs])
        if runs:
            lines_ax.plot(range(len(median)), median, color=color, linewidth=2.5,
                          label=f"{labels[x]}: median of {len(runs)} "
                          f"run{'s' if len(runs) != 1 else ''}")
        finals = [r.metrics[curve] for r in records if r.config_key == key and curve in r.metrics]
        if finals:
            _spread_column(final_ax, x, finals, color)
    lines_ax.set_title(f"{curve} per cycle: one thin line per run")
    lines_ax.set_xlabel("cycle (one train step each)")
    lines_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    lines_ax.set_ylabel(label)
    lines_ax.grid(alpha=0.3)
    lines_ax.legend(loc="best", fontsize="small", title="configuration")
    final_ax.set_title("at the last cycle, per run")
    final_ax.set_xticks(range(len(keys)), labels, rotation=20, ha="right")
    final_ax.set_xlabel("configuration")
    final_ax.set_ylabel(label)
    final_ax.set_xlim(-0.5, len(keys) - 0.5)
    final_ax.grid(axis="y", alpha=0.3)
    _spread_legend(final_ax)


def _spread_column(ax: Any, x: int, values: Sequence[float], color: str) -> None:
    """One configuration's runs as dots around `x`, its median as a black line."""
    offsets = _spread_offsets(len(values))
    ax.scatter([x + o for o in offsets], values, s=22, alpha=0.85, color=color)
    ax.hlines(statistics.median(values), x - 0.25, x + 0.25, colors="black")


def _spread_legend(ax: Any) -> None:
    from matplotlib.lines import Line2D

    ax.legend(handles=[
        Line2D([], [], marker="o", linestyle="", color="grey", label="one run"),
        Line2D([], [], color="black", label="median"),
    ], loc="best", fontsize="small")


def _median_per_cycle(curves: Sequence[Sequence[float | None]]) -> list[float]:
    """Per cycle, the median over the runs that have a finite value there (NaN where none)."""
    length = max((len(c) for c in curves), default=0)
    medians = []
    for i in range(length):
        values = [v for v in (c[i] for c in curves if i < len(c)) if v is not None]
        medians.append(statistics.median(values) if values else float("nan"))
    return medians


def _save(fig: Any, out: Path) -> Path:
    """Writes the figure atomically (`io._atomic`: through a link, never onto an input)."""
    with atomic_path(out, fsync=False) as tmp, open(tmp, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    return out


def _spread_offsets(n: int) -> list[float]:
    """Evenly spaced x offsets in [-0.15, 0.15] so runs with equal values stay visible."""
    if n == 1:
        return [0.0]
    return [-0.15 + 0.3 * i / (n - 1) for i in range(n)]


def _labels(keys: Sequence[str]) -> list[str]:
    """The configurations as the `runs` table names them: a short key, or `#` and its hash."""
    return [config_label(k) for k in keys]


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
