"""PNG plots of a run (matplotlib, Agg, no display): accuracy with peak and cliff markers, per-role gradient
statistics, and per-policy update size and drift. matplotlib is the optional extra `plots`; it is imported only
here, when a plot is drawn, with a clear message when it is missing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..diagnostics.curves import Cliff, CurvePoint

Series = dict[str, tuple[list[int], list[float]]]  # label -> (steps, values)


def _figure(rows: int, height: float = 3.0) -> Any:
    try:
        from matplotlib.figure import Figure  # a bare Figure renders with Agg; pyplot's global state is untouched
    except ImportError as e:
        raise ImportError("plots need matplotlib: pip install 'rolecast[plots]'") from e
    return Figure(figsize=(8, height * rows), layout="constrained")


def _integer_steps(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.png")  # written whole, then renamed: a reader never sees half a PNG
    fig.savefig(tmp, format="png", dpi=100)
    tmp.replace(path)
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
