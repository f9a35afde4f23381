"""The progress plot: one panel per tier, every experiment in the order it finished.

Grey dots are idea runs, dark diamonds the champion's baseline runs, the step line the champion's
level (the mean of its runs at that tier, per champion version, the runs it carried over from the
idea stacked into it included: a version may have no baseline run of its own), red the runs of ideas
that were later stacked into the champion, orange ticks along the bottom the failed runs and
grey ticks the skipped ones (the champion moved on before they ran).
"""

from __future__ import annotations

import io
import statistics
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from swarm.report_data import ReportData, RunPoint

IDEA_COLOR = "#9e9e9e"
CHAMPION_COLOR = "#1f3b73"
STACKED_COLOR = "#d62728"
FAILED_COLOR = "#e08000"
SKIPPED_COLOR = "#b0b0b0"
PANEL_HEIGHT = 3.2  # inches per tier
DPI = 100


def plot_progress(data: ReportData, path: Path) -> None:
    """Write the PNG to `path`; a ledger without runs gets a PNG that says so."""
    path.write_bytes(render_progress(data, "png"))


def render_progress(data: ReportData, fmt: str) -> bytes:
    """The plot as `fmt` (png, svg) bytes: the report's file, the web view's chart."""
    out = io.BytesIO()
    tiers = sorted({run.tier for run in data.runs})
    if not tiers:
        fig, ax = plt.subplots(figsize=(6, 2))
        try:
            ax.axis("off")
            ax.text(0.5, 0.5, "no runs yet", ha="center", va="center", fontsize=16)
            fig.savefig(out, dpi=DPI, format=fmt)
        finally:
            plt.close(fig)
        return out.getvalue()
    stacked = {c.idea_id: c.version for c in data.champions if c.idea_id}
    fig, axes = plt.subplots(
        len(tiers), 1, figsize=(10, PANEL_HEIGHT * len(tiers)), squeeze=False, layout="constrained"
    )
    try:
        for ax, tier in zip(axes[:, 0], tiers, strict=True):
            runs = [run for run in data.runs if run.tier == tier]
            levels = {v: level for (t, v), level in data.levels.items() if t == tier}
            _panel(ax, tier, runs, stacked, levels, data.metric_name, data.lower_is_better)
        fig.savefig(out, dpi=DPI, format=fmt)
    finally:
        plt.close(fig)
    return out.getvalue()


def _ticks(ax: Axes, xs: list[int], color: str, label: str) -> None:
    """Runs without a metric, as ticks along the bottom of the panel."""
    if xs:
        ax.plot(
            xs,
            [0.02] * len(xs),
            linestyle="none",
            marker="|",
            markersize=8,
            color=color,
            transform=ax.get_xaxis_transform(),
            label=label,
        )


def _panel(
    ax: Axes,
    tier: int,
    runs: list[RunPoint],
    stacked: dict[str, int],
    levels: dict[int, float],
    metric_name: str,
    lower_is_better: bool,
) -> None:
    ideas: list[tuple[int, float]] = []
    baselines: list[tuple[int, float]] = []
    winners: dict[str, list[tuple[int, float]]] = defaultdict(list)
    failed: list[int] = []
    skipped: list[int] = []  # never trained: the champion moved on before they ran
    for x, run in enumerate(runs, start=1):
        if run.status == "SKIPPED":
            skipped.append(x)
        elif not run.ok or run.metric is None:
            failed.append(x)
        elif not run.idea_id:
            baselines.append((x, run.metric))
        elif run.idea_id in stacked:
            winners[run.idea_id].append((x, run.metric))
        else:
            ideas.append((x, run.metric))

    if ideas:
        xs, ys = zip(*ideas, strict=True)
        ax.scatter(xs, ys, s=9, color=IDEA_COLOR, alpha=0.7, linewidths=0, label="idea run")
    if baselines:
        xs, ys = zip(*baselines, strict=True)
        ax.scatter(xs, ys, s=26, marker="D", color=CHAMPION_COLOR, label="champion baseline run")
    _champion_steps(ax, runs, levels)
    for n, (idea_id, points) in enumerate(winners.items()):
        xs, ys = zip(*points, strict=True)
        label = "idea later stacked into champion" if n == 0 else None
        ax.scatter(xs, ys, s=34, color=STACKED_COLOR, edgecolors="black", lw=0.5, label=label)
        best = min(points, key=lambda p: p[1] if lower_is_better else -p[1])
        text = f"v{stacked[idea_id]}: {idea_id[:24]}"
        ax.annotate(
            text,
            best,
            xytext=(5, 5),
            textcoords="offset points",
            fontsize=7,
            color=STACKED_COLOR,
            fontweight="bold",
        )
    shown = [y for _, y in baselines] + [y for points in winners.values() for _, y in points]
    _clip_outliers(ax, [y for _, y in ideas] + shown, shown)
    _ticks(ax, failed, FAILED_COLOR, "failed run")
    _ticks(ax, skipped, SKIPPED_COLOR, "skipped run (champion moved)")
    if not (ideas or baselines or winners):
        ax.text(0.5, 0.5, "no successful runs", ha="center", va="center", transform=ax.transAxes)

    ok = len(runs) - len(failed) - len(skipped)
    n_ideas = len({run.idea_id for run in runs if run.idea_id})
    skips = f", {len(skipped)} skipped" if skipped else ""
    ax.set_title(
        f"tier {tier}: {len(runs)} runs ({ok} ok, {len(failed)} failed{skips}), "
        f"{len(baselines)} baseline, {n_ideas} ideas",
        fontsize=10,
    )
    ax.set_xlabel(f"experiment number at tier {tier}")
    better = "lower" if lower_is_better else "higher"
    ax.set_ylabel(f"{metric_name} ({better} is better)")
    ax.set_xlim(0, len(runs) + 1)
    ax.grid(alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        # Outside the axes, to the right: inside, it hid the points in its corner (a newcomer's
        # only idea run sat under it)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, fontsize=7)


def _clip_outliers(ax: Axes, values: list[float], shown: list[float]) -> None:
    """Limit the y axis to where the runs are, the champion's and the stacked ideas' always
    included: one diverged recipe at 8e150 put every other point of a newcomer's panel flat on
    zero. The runs left beyond the axis are counted on the panel."""
    if len(values) < 4:
        return
    middle = statistics.median(values)
    mad = statistics.median(abs(v - middle) for v in values)  # quartiles: moved by the tail
    spread = 10 * 1.4826 * mad or abs(middle) * 0.01 or 1.0  # ten σ of the bulk, about
    lo, hi = min([middle - spread, *shown]), max([middle + spread, *shown])
    beyond = sum(not lo <= v <= hi for v in values)
    if not beyond:
        return
    pad = 0.05 * (hi - lo or 1.0)
    ax.set_ylim(lo - pad, hi + pad)
    note = f"{beyond} run{'s' if beyond > 1 else ''} beyond the axis"
    ax.text(0.99, 0.02, note, ha="right", va="bottom", fontsize=7, transform=ax.transAxes)


def _champion_steps(ax: Axes, runs: list[RunPoint], levels: dict[int, float]) -> None:
    """The champion's level (`levels`: by version, at this tier, carried runs included): from
    the first run of each newer version at this tier on, whoever's run it is."""
    xs: list[int] = []
    ys: list[float] = []
    current: int | None = None
    for x, run in enumerate(runs, start=1):
        version = run.champion_version
        if version not in levels or (current is not None and version <= current):
            continue
        current = version
        xs.append(x)
        ys.append(levels[version])
        ax.annotate(
            f"v{version}",
            (x, ys[-1]),
            xytext=(5, -11),
            textcoords="offset points",
            fontsize=7,
            color=CHAMPION_COLOR,
        )
    if xs:
        xs.append(len(runs))
        ys.append(ys[-1])
        ax.plot(
            xs,
            ys,
            drawstyle="steps-post",
            color=CHAMPION_COLOR,
            lw=1.5,
            label="champion level (mean of its runs here)",
        )
