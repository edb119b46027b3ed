"""What a reader would find wrong with a drawn figure, measured from matplotlib itself (the rules of style.py):
text cut at the figure's edge or lying on another panel, an axis label longer than its axes, texts on top of
each other, text rotated beyond 45 degrees (a y-axis label excepted), text under MIN_TEXT_PX, an interval or
axis range outside the valid range of a pass@1 / accuracy axis, an interval band of no width (uncertainty
left out), a legend over a panel's data, step axes with different ranges or ticks, non-integer step ticks,
lines that coincide without a word, and a panel of one constant.

`figure_problems(figs)` returns one line per problem (empty: nothing found). It takes the figures that are read
together (a run's accuracy, gradient and update PNGs): their step axes must agree. Used by the tests and by
scripts/make_images.py on every figure it writes."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from rolecast.report.style import BOUNDS_ATTR, MIN_TEXT_PX, STEP_LABEL, UNIT

TOL_PX = 1.0  # bounding boxes may touch
MAX_ROTATION = 45.0
BOUNDED_WORDS = ("pass@1", "accuracy")  # an axis labelled with one of these holds values in [0, 1]


def _renderer(fig: Any) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _tick_labels(ax: Any) -> list[tuple[Any, Any]]:
    """(label Text, its axis) of every major tick drawn: inside the view interval, visible, with text."""
    out = []
    for axis in (ax.xaxis, ax.yaxis):
        lo, hi = sorted(axis.get_view_interval())
        eps = 1e-9 * max(1.0, abs(hi - lo))
        for tick, loc in zip(axis.get_major_ticks(), axis.get_majorticklocs(), strict=False):
            if not lo - eps <= loc <= hi + eps:
                continue
            for label in (tick.label1, tick.label2):
                if label.get_visible() and label.get_text().strip():
                    out.append((label, axis))
    return out


def _texts(fig: Any) -> list[tuple[str, Any, Any]]:
    """(a name for messages, Text, its axes or None) of every text a reader sees."""
    from matplotlib.text import Text

    ticks: list[tuple[Any, Any]] = []
    all_tick_labels: set[int] = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                all_tick_labels.update((id(tick.label1), id(tick.label2)))
        ticks += [(t, ax) for t, _ in _tick_labels(ax)]
    out = [(f"tick label {t.get_text()!r}", t, ax) for t, ax in ticks]
    for t in fig.findobj(Text):
        if id(t) in all_tick_labels or not t.get_visible() or not t.get_text().strip():
            continue
        out.append((f"text {t.get_text()[:40]!r}", t, _owner(t, fig)))
    return out


def _owner(t: Any, fig: Any) -> Any:
    """The axes a text belongs to (its label, title, annotation), None for the figure's own."""
    for ax in fig.axes:
        if t in (ax.xaxis.label, ax.yaxis.label, ax.title, ax._left_title, ax._right_title):
            return ax
        if t in ax.texts or t in (ax.xaxis.get_offset_text(), ax.yaxis.get_offset_text()):
            return ax
        legend = ax.get_legend()
        if legend is not None and (t in legend.get_texts() or t is legend.get_title()):
            return ax
    return None


def _overlap(a: Any, b: Any) -> bool:
    return (
        min(a.x1, b.x1) - max(a.x0, b.x0) > TOL_PX
        and min(a.y1, b.y1) - max(a.y0, b.y0) > TOL_PX
        and a.width > 0
        and b.width > 0
    )


def _inside(inner: Any, outer: Any) -> bool:
    return (
        inner.x0 >= outer.x0 - TOL_PX
        and inner.y0 >= outer.y0 - TOL_PX
        and inner.x1 <= outer.x1 + TOL_PX
        and inner.y1 <= outer.y1 + TOL_PX
    )


def _rotation(t: Any) -> float:
    r = t.get_rotation() % 180.0
    return min(r, 180.0 - r)


def text_problems(fig: Any, renderer: Any) -> list[str]:
    """Cut, overlapping, rotated or too small text."""
    problems = []
    texts = _texts(fig)
    boxes = {id(t): t.get_window_extent(renderer) for _, t, _ in texts}
    for name, t, ax in texts:
        box = boxes[id(t)]
        if not _inside(box, fig.bbox):
            problems.append(f"{name} is cut at the figure's edge ({_fmt(box)} outside {_fmt(fig.bbox)})")
        is_ylabel = ax is not None and t is ax.yaxis.label
        if _rotation(t) > MAX_ROTATION and not is_ylabel:
            problems.append(f"{name} is rotated {t.get_rotation():g} degrees (at most {MAX_ROTATION:g} reads)")
        px = t.get_fontsize() * fig.dpi / 72.0
        if px < MIN_TEXT_PX - 1e-6:
            problems.append(f"{name} is {px:.1f} px high (at least {MIN_TEXT_PX:g})")
        for other in fig.axes:
            if other is not ax and _overlap(box, other.bbox):
                problems.append(f"{name} lies on another panel's data area")
                break
    for ax in fig.axes:  # an axis label spans no more than its own axes (a longer one reads as the neighbour's)
        for label, lo, hi, box in (
            (ax.yaxis.label, ax.bbox.y0, ax.bbox.y1, boxes.get(id(ax.yaxis.label))),
            (ax.xaxis.label, ax.bbox.x0, ax.bbox.x1, boxes.get(id(ax.xaxis.label))),
        ):
            if box is None:
                continue
            start, end = (box.y0, box.y1) if label is ax.yaxis.label else (box.x0, box.x1)
            if start < lo - TOL_PX or end > hi + TOL_PX:
                problems.append(f"axis label {label.get_text()[:40]!r} reaches outside its axes")
    for (na, a, _), (nb, b, _) in itertools.combinations(texts, 2):
        if _overlap(boxes[id(a)], boxes[id(b)]):
            problems.append(f"{na} and {nb} overlap")
    return problems


def bounds_of(ax: Any) -> tuple[float, float] | None:
    """The valid range of the axes' values: set by style.bound, or [0, 1] for a pass@1 / accuracy axis."""
    explicit = getattr(ax, BOUNDS_ATTR, None)
    if explicit is not None:
        lo, hi = explicit
        return float(lo), float(hi)
    label = ax.get_ylabel().lower()
    return UNIT if any(w in label for w in BOUNDED_WORDS) else None


def _data_ys(artist: Any) -> list[float]:
    """The y values (in data units) an artist draws: a line's points, a band's or error bar's vertices."""
    if hasattr(artist, "get_ydata"):  # a line
        ys = np.asarray(artist.get_ydata(orig=False), dtype=float)
    elif hasattr(artist, "get_paths"):  # a band (fill_between) or error bars (a LineCollection)
        paths = artist.get_paths()
        ys = np.concatenate([np.asarray(p.vertices, dtype=float)[:, 1] for p in paths]) if paths else np.zeros(0)
    else:
        return []
    return [float(y) for y in ys[np.isfinite(ys)]]


def _zero_width_band(artist: Any) -> bool:
    """A filled band (fill_between) whose every polygon encloses no area: lower and upper bounds equal."""
    if not hasattr(artist, "get_paths") or type(artist).__name__ not in ("PolyCollection", "FillBetweenPolyCollection"):
        return False
    areas = []
    for path in artist.get_paths():
        v = np.asarray(path.vertices, dtype=float)
        x, y = v[:, 0], v[:, 1]
        areas.append(abs(float(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1)))) / 2)
    return bool(areas) and max(areas) < 1e-12


def interval_problems(fig: Any) -> list[str]:
    """Bands, error bars and lines beyond a bounded axis' valid range, and a y range reaching past it."""
    problems = []
    for i, ax in enumerate(fig.axes):
        bounds = bounds_of(ax)
        if bounds is None:
            continue
        lo, hi = bounds
        name = f"panel {i} ({ax.get_ylabel()!r})"
        for artist in [*ax.lines, *ax.collections]:
            if artist.get_transform() != ax.transData or not artist.get_visible():
                continue  # drawn in axes coordinates (a cliff's vertical line, alert markers)
            ys = _data_ys(artist)
            if _zero_width_band(artist):
                problems.append(f"{name}: a band of no width (its interval not drawn)")
            if ys and (min(ys) < lo - 1e-9 or max(ys) > hi + 1e-9):
                problems.append(
                    f"{name}: {artist.get_label()!r} reaches {min(ys):.3g}..{max(ys):.3g}, outside {bounds}"
                )
        y0, y1 = sorted(ax.get_ylim())
        pad = 0.05 * (hi - lo)
        if y0 < lo - pad or y1 > hi + pad:
            problems.append(f"{name}: its y range {y0:.3g}..{y1:.3g} reaches beyond {bounds}")
    return problems


def legend_problems(fig: Any, renderer: Any) -> list[str]:
    problems = []
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
    for lg in legends:
        box = lg.get_window_extent(renderer)
        if not _inside(box, fig.bbox):
            problems.append(f"a legend is cut at the figure's edge ({_fmt(box)})")
        for ax in fig.axes:
            if _overlap(box, ax.bbox):
                problems.append(f"a legend ({lg.get_texts()[0].get_text()[:30]!r}...) lies over a panel's data")
                break
    return problems


def _identical(a: Any, b: Any) -> bool:
    xa, ya = a.get_xdata(orig=False), a.get_ydata(orig=False)
    xb, yb = b.get_xdata(orig=False), b.get_ydata(orig=False)
    return (
        len(xa) > 1
        and len(xa) == len(xb)
        and all(x == y for x, y in zip(xa, xb, strict=True))
        and all(x == y for x, y in zip(ya, yb, strict=True))
    )


def line_problems(fig: Any) -> list[str]:
    """Labelled lines that coincide (one hides the other, and no word says so); panels whose every line is one
    constant."""
    problems = []
    for i, ax in enumerate(fig.axes):
        lines = [ln for ln in ax.lines if ln.get_visible() and not ln.get_label().startswith("_")]
        data = [ln for ln in lines if ln.get_transform() == ax.transData and len(ln.get_xdata()) > 1]
        for a, b in itertools.combinations(data, 2):
            if _identical(a, b):
                problems.append(f"panel {i}: lines {a.get_label()!r} and {b.get_label()!r} coincide")
        values = {float(y) for ln in data for y in ln.get_ydata()}
        if data and len(values) == 1 and not ax.collections:
            problems.append(f"panel {i} ({ax.get_ylabel()!r}): every line is the constant {values.pop():g}")
    return problems


def _step_axes(figs: Sequence[Any]) -> list[Any]:
    """Axes whose x axis counts steps: labelled "step", or sharing x with one that is."""
    out = []
    for fig in figs:
        for ax in fig.axes:
            siblings = ax.get_shared_x_axes().get_siblings(ax)
            if any(s.get_xlabel() == STEP_LABEL for s in siblings):
                out.append(ax)
    return out


def _visible_xticks(ax: Any) -> list[float]:
    lo, hi = sorted(ax.get_xlim())
    return [float(t) for t in ax.get_xticks() if lo - 1e-9 <= t <= hi + 1e-9]


def step_problems(figs: Sequence[Any]) -> list[str]:
    """Step axes of one figure or of figures read together: the same range and ticks, integer ticks, and
    stacked panels of one figure aligned at both edges."""
    problems = []
    axes = _step_axes(figs)
    for ax in axes:
        ticks = _visible_xticks(ax)
        if any(t != int(t) for t in ticks):
            problems.append(f"step ticks {ticks} are not all integers")
    if axes:
        ref = axes[0]
        for ax in axes[1:]:
            if tuple(ax.get_xlim()) != tuple(ref.get_xlim()):
                problems.append(f"step ranges differ: {tuple(ref.get_xlim())} and {tuple(ax.get_xlim())}")
            if _visible_xticks(ax) != _visible_xticks(ref):
                problems.append(f"step ticks differ: {_visible_xticks(ref)} and {_visible_xticks(ax)}")
    for ax in axes:  # the panels of one column (sharing its step axis) start and end at the same x
        column = ax.get_shared_x_axes().get_siblings(ax)
        edges = {(round(a.bbox.x0), round(a.bbox.x1)) for a in column}
        if len(edges) > 1:
            problems.append(f"stacked step panels are not aligned (left, right edges {sorted(edges)})")
            break
    return problems


def figure_problems(figs: Any | Iterable[Any]) -> list[str]:
    """Every problem of a figure, or of figures read together (their step axes must agree)."""
    figs = [figs] if hasattr(figs, "savefig") else list(figs)
    problems = []
    for k, fig in enumerate(figs):
        renderer = _renderer(fig)
        prefix = f"figure {k}: " if len(figs) > 1 else ""
        found = text_problems(fig, renderer) + interval_problems(fig) + legend_problems(fig, renderer)
        found += line_problems(fig)
        problems += [prefix + p for p in found]
    return problems + step_problems(figs)


def _fmt(b: Any) -> str:
    return f"[{b.x0:.0f}, {b.y0:.0f}, {b.x1:.0f}, {b.y1:.0f}]"
