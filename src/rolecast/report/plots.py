"""PNG plots of a run (matplotlib, Agg, no display): accuracy with peak and cliff markers, per-role gradient
statistics, and per-policy update size and drift. matplotlib is the optional extra `plots`; it is imported only
here, when a plot is drawn, with a clear message when it is missing."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rolecast.core.rundir import write_atomic
from rolecast.diagnostics.curves import Cliff, CurvePoint

Series = dict[str, tuple[list[int], list[float]]]  # label -> (steps, values)


def _figure(rows: int, height: float = 3.0, width: float = 8.0) -> Any:
    try:
        from matplotlib.figure import Figure  # a bare Figure renders with Agg; pyplot's global state is untouched
    except ImportError as e:
        raise ImportError("plots need matplotlib: pip install 'rolecast[plots]'") from e
    return Figure(figsize=(width, height * rows), layout="constrained")


def _integer_steps(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    write_atomic(path, buf.getvalue())  # a reader never sees half a PNG
    return path


def plot_accuracy(
    path: Path,
    points: Sequence[CurvePoint],
    train: Sequence[CurvePoint],
    *,
    peak: CurvePoint | None,
    cliff: Cliff | None,
    z: float,
    title: str = "",
    events: Sequence[tuple[int, str]] = (),
    lrs: Series | None = None,
) -> Path:
    """Evaluation accuracy with z-SE error bars, the peak (star) and the cliff start (dashed line); training
    accuracy (window means) in grey behind it; `events` (step, name): where signatures / warnings first fired,
    as orange ticks along the bottom with their names. `lrs` (policy -> (steps, lr)): each policy's learning
    rate per step, in a short panel under the curve on the same step axis."""
    if lrs:
        fig = _figure(1, 5.2)
        ax, lax = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
        for label, (xs, ys) in sorted(lrs.items()):
            lax.plot(xs, ys, lw=1.2, label=label)
        lax.set_ylabel("lr")
        lax.grid(alpha=0.3)
        lax.legend(loc="best", fontsize=7)
        lax.set_xlabel("step")
    else:
        fig = _figure(1, 4.0)
        ax = fig.add_subplot()
        ax.set_xlabel("step")
    if train:
        ax.plot([p.step for p in train], [p.value for p in train], color="0.6", lw=1, label="train accuracy")
    if points:
        ax.errorbar(
            [p.step for p in points],
            [p.value for p in points],
            yerr=[z * p.se for p in points],
            marker="o",
            ms=4,
            capsize=3,
            label="eval pass@1",
        )
    if peak is not None:
        ax.plot(
            [peak.step],
            [peak.value],
            marker="*",
            ms=14,
            color="tab:green",
            ls="none",
            label=f"peak {peak.value:.3f} @ {peak.step}",
        )
    if cliff is not None:
        ax.axvline(cliff.step, color="tab:red", ls="--", label=f"cliff from step {cliff.step}")
    if events:
        bottom = ax.get_ylim()[0]
        ax.plot(
            [e[0] for e in events],
            [bottom] * len(events),
            marker="^",
            ms=8,
            ls="none",
            color="tab:orange",
            label=f"first alert ({len(events)})",
            clip_on=False,
        )
        for step, name in events:
            ax.annotate(
                name,
                (step, bottom),
                xytext=(2, 6),
                textcoords="offset points",
                rotation=90,
                fontsize=6,
                color="tab:orange",
                va="bottom",
            )
    ax.set_ylabel("accuracy")
    ax.set_title(title or "accuracy")
    _integer_steps(ax)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _save(fig, path)


def plot_panels(
    path: Path,
    panels: Sequence[tuple[str, Series]],
    title: str = "",
    references: Mapping[int, Sequence[tuple[float, str]]] | None = None,
) -> Path:
    """One panel per (y label, series); each series is a line with its label. `references`: panel index ->
    (y, label) horizontal reference lines (e.g. alignment 1 for orthogonal instances, N for identical ones)."""
    fig = _figure(len(panels))
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for i, (ax, (ylabel, series)) in enumerate(zip(axes, panels, strict=True)):
        for label, (xs, ys) in sorted(series.items()):
            ax.plot(xs, ys, marker="." if len(xs) < 30 else None, label=label)
        for y, label in (references or {}).get(i, ()):
            ax.axhline(y, color="0.4", ls=":", lw=1)
            ax.annotate(
                label,
                (1, y),
                xycoords=("axes fraction", "data"),
                xytext=(-4, 2),
                textcoords="offset points",
                ha="right",
                fontsize=7,
                color="0.3",
            )
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        _integer_steps(ax)
        if series:
            ax.legend(loc="best", fontsize=7)
    axes[-1].set_xlabel("step")
    if title:
        fig.suptitle(title)
    return _save(fig, path)


# A curve over seeds: step -> (mean, low, high) of the mean's 95% interval
Band = dict[int, tuple[float, float, float]]


def plot_overlay(
    path: Path,
    bands: Mapping[str, Band],
    lrs: Mapping[str, Series] | None = None,
    *,
    title: str = "",
    seeds: Mapping[str, int] | None = None,
) -> Path:
    """One workflow's accuracy curves, one per sharing mode, each the mean over seeds with its 95% interval as a
    band; under it, each mode's policies' lr per step (from one seed: every seed trains on the same schedule)."""
    fig = _figure(1, 5.2 if lrs else 4.0)
    if lrs:
        ax, lax = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    else:
        ax, lax = fig.add_subplot(), None
    colors: dict[str, Any] = {}
    for mode, band in sorted(bands.items()):
        steps = sorted(band)
        n = (seeds or {}).get(mode)
        (line,) = ax.plot(
            steps, [band[s][0] for s in steps], marker="o", ms=3, label=f"{mode}" + (f" ({n} seeds)" if n else "")
        )
        colors[mode] = line.get_color()
        ax.fill_between(
            steps, [band[s][1] for s in steps], [band[s][2] for s in steps], color=line.get_color(), alpha=0.15
        )
    ax.set_ylabel("held-out pass@1")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    _integer_steps(ax)
    if lax is not None and lrs:
        styles = ("-", "--", ":", "-.")
        for mode, series in sorted(lrs.items()):
            for k, (pid, (xs, ys)) in enumerate(sorted(series.items())):
                lax.plot(xs, ys, color=colors.get(mode), ls=styles[k % len(styles)], lw=1.2, label=f"{mode}: {pid}")
        lax.set_ylabel("lr")
        lax.set_xlabel("step")
        lax.grid(alpha=0.3)
        lax.legend(loc="best", fontsize=6, ncol=2)
    else:
        ax.set_xlabel("step")
    return _save(fig, path)


def plot_gain_grid(
    path: Path, rows: Sequence[str], cols: Sequence[str], gains: Mapping[tuple[str, str], tuple[float, float, float]]
) -> Path:
    """A grid of gains (final - base): rows (workflows) x columns (sharing mode, and model or task where they
    vary); green where significantly above 0, red where significantly below, grey within noise, each cell
    annotated with the gain and its 95% interval."""
    fig = _figure(1, max(3.0, 0.7 * len(rows) + 1.6), width=max(8.0, 1.25 * len(cols) + 1.5))
    ax = fig.add_subplot()
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            g = gains.get((r, c))
            if g is None:
                color, text = "white", "-"
            else:
                v, lo, hi = g
                color = "#8fd18f" if lo > 0 else "#f08c8c" if hi < 0 else "#dddddd"
                text = f"{v:+.3f}\n[{lo:+.2f},\n{hi:+.2f}]"
            ax.add_patch(_rect(j, len(rows) - 1 - i, color))
            ax.text(j + 0.5, len(rows) - 0.5 - i, text, ha="center", va="center", fontsize=8)
    ax.set_xlim(0, len(cols))
    ax.set_ylim(0, len(rows))
    ax.set_xticks([j + 0.5 for j in range(len(cols))], list(cols), fontsize=8, rotation=30, ha="right")
    ax.set_yticks([len(rows) - 0.5 - i for i in range(len(rows))], list(rows), fontsize=8)
    ax.tick_params(length=0)
    ax.set_title("gain = final - base, 95% interval (green: above 0, red: below, grey: within noise)", fontsize=9)
    return _save(fig, path)


def _rect(x: float, y: float, color: str) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), 1, 1, facecolor=color, edgecolor="white", lw=2)
