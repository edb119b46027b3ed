"""One plotting style for every figure rolecast draws: the report's, `analyze`'s and the scripts' (the cliff lab,
scripts/make_images.py). The rules, as code a figure is drawn with (figure_checks.py checks a drawn figure
against them):

- size: every figure is WIDTH inches wide at DPI, FIGURE_PX pixels, the report's content width in a 1400-px
  window, so the page shows it at its own size and its text stays at least MIN_TEXT_PX pixels high;
- fonts: FONT points for titles and axis labels, SMALL for ticks, legends and annotations, both set explicitly
  on every artist (matplotlib's global rcParams are not touched);
- margins: constrained layout, so every label lies inside the figure; short axis labels (what a symbol means
  goes in a reference line's label or the docs, not in a label taller than its panel);
- bounded intervals: a band or error bar on a pass@1 / accuracy axis is clipped to [0, 1] and the axis stays
  within it (`UNIT`);
- legends outside the data, to the right of their panel;
- steps: integer ticks, the same ticks on every panel and every figure of one run (`step_ticks`), stacked
  panels sharing one step axis, their y-labels aligned;
- lines that coincide are drawn once, and their legend entry says they coincide (`draw_series`);
- a panel whose every line is one constant says nothing a number cannot: it becomes a note (`constant_note`).

matplotlib is the optional extra `plots`, imported here when a figure is drawn."""

from __future__ import annotations

import importlib
import io
import math
import textwrap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rolecast.core.rundir import write_atomic

DPI = 100
WIDTH = 13.0  # inches: FIGURE_PX at DPI
FIGURE_PX = int(WIDTH * DPI)
FONT = 12.0  # points: 16.7 px at DPI
SMALL = 10.5  # points: 14.6 px
MIN_TEXT_PX = 12.0  # the smallest text any figure may hold, at its own size
PANEL_HEIGHT = 2.4  # inches per unit of a panel's height ratio
LEGEND_WRAP = 38  # characters per legend line
UNIT = (0.0, 1.0)  # the valid range of pass@1 and accuracy
BOUNDS_ATTR = "rolecast_bounds"  # set on an axes whose values lie in a range (figure_checks reads it)
STEP_LABEL = "step"
ALERT_COLOR = "tab:orange"
PASS_AT_1 = "held-out pass@1"

Series = dict[str, tuple[list[int], list[float]]]  # label -> (steps, values)


def _mpl() -> Any:
    try:  # what drawing needs, so that a missing piece gives one clear message
        for name in ("matplotlib.figure", "matplotlib.backends.backend_agg"):
            importlib.import_module(name)
        import matplotlib
    except ImportError as e:
        raise ImportError("plots need matplotlib: pip install 'rolecast[plots]'") from e
    return matplotlib


@contextmanager
def fonts() -> Iterator[None]:
    """Sizes for what matplotlib creates late (tick labels at draw time, offset texts): within this context."""
    mpl = _mpl()
    rc = {
        "font.size": SMALL,
        "axes.titlesize": FONT,
        "axes.labelsize": FONT,
        "xtick.labelsize": SMALL,
        "ytick.labelsize": SMALL,
        "legend.fontsize": SMALL,
        "figure.titlesize": FONT,
        "axes.grid": True,
        "grid.alpha": 0.3,
    }
    with mpl.rc_context(rc):
        yield


def figure(height_ratios: Sequence[float], *, width: float = WIDTH, sharex: bool = True) -> tuple[Any, list[Any]]:
    """A figure of stacked panels (heights in PANEL_HEIGHT units) sharing one x axis, with the style's sizes."""
    fig, columns = grid(height_ratios, 1, width=width, sharex=sharex)
    return fig, columns[0]


def grid(
    height_ratios: Sequence[float], columns: int, *, width: float = WIDTH, sharex: bool = True, extra: float = 0.6
) -> tuple[Any, list[list[Any]]]:
    """A figure of `columns` columns of stacked panels, each column sharing one x axis; returns the figure and
    its axes column by column. `extra`: inches above the panels (title and notes)."""
    _mpl()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # a bare Figure renders with Agg; pyplot's global state is untouched

    fig = Figure(figsize=(width, PANEL_HEIGHT * sum(height_ratios) + extra), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(
        len(height_ratios),
        columns,
        sharex="col" if sharex else False,
        squeeze=False,
        gridspec_kw={"height_ratios": list(height_ratios)},
    )
    for ax in axes.flat:
        ax.tick_params(labelsize=SMALL)
        ax.grid(alpha=0.3)
    return fig, [list(axes[:, j]) for j in range(columns)]


def title(fig: Any, text: str, note: str = "") -> None:
    """The figure's title, and under it a note in smaller type (what was left out, and why)."""
    lines = [text] + [ln for ln in textwrap.wrap(note, 150)]
    fig.suptitle("\n".join(lines), fontsize=FONT)


def ylabel(ax: Any, text: str) -> None:
    ax.set_ylabel(text, fontsize=FONT)


def legend_label(label: str, width: int = LEGEND_WRAP) -> list[str]:
    """A legend entry's lines, as legends here wrap it."""
    return textwrap.wrap(label, width) or [label]


def _wrapped(labels: Sequence[str], width: int = LEGEND_WRAP) -> list[str]:
    return ["\n".join(legend_label(lb, width)) for lb in labels]


def legend_outside(ax: Any, *, title: str | None = None, below: bool = False) -> None:
    """The axes' legend off its data: to its right, or `below` it (under its tick labels); constrained layout
    makes room for it."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    # below: under its tick labels and axis label (3.4 font sizes down from the axes' bottom edge)
    loc, anchor, pad = ("upper center", (0.5, 0.0), 3.4) if below else ("upper left", (1.01, 1.0), 0.0)
    ax.legend(
        handles,
        _wrapped(labels),
        loc=loc,
        bbox_to_anchor=anchor,
        borderaxespad=pad,
        frameon=False,
        fontsize=SMALL,
        title=title,
        title_fontsize=SMALL,
    )


def figure_legend(fig: Any, handles: Sequence[Any], labels: Sequence[str]) -> None:
    """One legend for the whole figure (entries every panel shares), under the panels, in as many columns as
    fit the figure's width."""
    longest = max((len(lb) for lb in labels), default=1)
    columns = max(1, min(len(labels), int(fig.get_figwidth() * DPI / (8.5 * longest + 60))))
    fig.legend(handles, list(labels), loc="outside lower center", ncols=columns, frameon=False, fontsize=SMALL)


def bound(ax: Any, bounds: tuple[float, float] = UNIT) -> None:
    """Mark the axes' values as lying in `bounds` and keep its y range within them (plus a 2% margin)."""
    setattr(ax, BOUNDS_ATTR, bounds)
    lo, hi = bounds
    pad = 0.02 * (hi - lo)
    y0, y1 = ax.get_ylim()
    ax.set_ylim(max(y0, lo - pad), min(y1, hi + pad))


def clip(x: float, bounds: tuple[float, float] = UNIT) -> float:
    return min(max(x, bounds[0]), bounds[1])


def errorbars(ax: Any, xs: Sequence[float], ys: Sequence[float], half: Sequence[float], **kw: Any) -> Any:
    """Error bars of half-widths `half`, cut at the bounds of pass@1: an interval never leaves [0, 1]."""
    low = [y - clip(y - h) for y, h in zip(ys, half, strict=True)]
    high = [clip(y + h) - y for y, h in zip(ys, half, strict=True)]
    return ax.errorbar(xs, ys, yerr=[low, high], **kw)


def band(ax: Any, xs: Sequence[float], lows: Sequence[float], highs: Sequence[float], color: Any) -> Any:
    """An interval band, clipped to [0, 1]."""
    return ax.fill_between(xs, [clip(v) for v in lows], [clip(v) for v in highs], color=color, alpha=0.18, lw=0)


def step_ticks(first: int, last: int) -> list[int]:
    """Integer ticks for steps first..last, the same for every panel and figure that shows these steps."""
    from matplotlib.ticker import MaxNLocator

    if last <= first:
        return [first]
    ticks = MaxNLocator(nbins=10, integer=True, steps=[1, 2, 5, 10]).tick_values(first, last)
    return [int(t) for t in ticks if first <= t <= last]


def step_axis(axes: Sequence[Any], first: int, last: int) -> None:
    """One step axis for stacked panels: the range first..last (with a margin), integer ticks, and the label on
    the bottom panel only."""
    from matplotlib.ticker import FixedLocator

    margin = max(0.5, 0.02 * (last - first))
    for ax in axes:
        ax.set_xlim(first - margin, last + margin)
        ax.xaxis.set_major_locator(FixedLocator(step_ticks(first, last)))
    axes[-1].set_xlabel(STEP_LABEL, fontsize=FONT)


def align(fig: Any) -> None:
    fig.align_ylabels()


def same_values(a: tuple[list[int], list[float]], b: tuple[list[int], list[float]]) -> bool:
    return list(a[0]) == list(b[0]) and all(
        math.isclose(x, y, rel_tol=1e-9, abs_tol=0.0) for x, y in zip(a[1], b[1], strict=True)
    )


def merge_identical(series: Series) -> list[tuple[list[str], list[int], list[float]]]:
    """Series with the same steps and values, merged: (their labels, steps, values), in label order."""
    out: list[tuple[list[str], list[int], list[float]]] = []
    for label, (xs, ys) in sorted(series.items()):
        for labels, mxs, mys in out:
            if len(mxs) == len(xs) and same_values((mxs, mys), (list(xs), list(ys))):
                labels.append(label)
                break
        else:
            out.append(([label], list(xs), list(ys)))
    return out


def coincide_label(labels: Sequence[str], what: str) -> str:
    """The legend entry of lines drawn once because they coincide: it says so."""
    if len(labels) == 1:
        return labels[0]
    return f"{', '.join(labels)}: {what} (lines coincide)"


def draw_series(
    ax: Any, series: Series, *, what: str = "same values", colors: dict[str, Any] | None = None, **kw: Any
) -> None:
    """Each series as a line, those that coincide once with a legend entry that says so."""
    for labels, xs, ys in merge_identical(series):
        color = (colors or {}).get(labels[0])
        marker = "." if len(xs) < 30 else None
        ax.plot(xs, ys, marker=marker, color=color, label=coincide_label(labels, what), **kw)


def constant_note(name: str, series: Series, fmt: str = "{:.3g}") -> str | None:
    """'name: v at every step' when every series is the one constant v (a panel would show a flat line), else
    None."""
    values = {y for _, ys in series.values() for y in ys}
    if len(values) != 1 or not series:
        return None
    return f"{name}: {fmt.format(next(iter(values)))} at every step"


def sci(v: float, _pos: Any = None) -> str:
    """A tick label for learning rates: 0, 1e-4, 2.5e-4."""
    if v == 0:
        return "0"
    mant, exp = f"{v:.1e}".split("e")
    return f"{mant.removesuffix('.0')}e{int(exp)}"


def sci_axis(ax: Any) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ax.yaxis.set_major_formatter(FuncFormatter(sci))
    ax.yaxis.set_major_locator(MaxNLocator(nbins=4))


def save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with fonts():
        fig.savefig(buf, format="png", dpi=DPI)
    write_atomic(path, buf.getvalue())  # a reader never sees half a PNG
    return path
