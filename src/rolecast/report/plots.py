"""The figures of a run and of a sweep, drawn in the project's one style (style.py) and returned as matplotlib
Figures (`draw_*`), so that tests and scripts can check them (figure_checks.py) before `style.save` writes a PNG:

- `draw_run`: stacked panels on one step axis: the accuracy curve (evaluations with their 95% intervals, the
  peak, the cliff, the first alerts, training accuracy behind) and line panels (each policy's lr, per-role
  gradient statistics, update size and drift);
- `gradient_panels`, `update_panels`, `lr_panel`: the line panels worth drawing from a run's metrics, with a
  note for each one left out;
- `draw_overlay`: one workflow's sharing modes, mean over seeds with a 95% band, each policy's lr under it;
- `draw_gain_grid`: the gains (final - base) of every (workflow, column) with their intervals.

matplotlib is the optional extra `plots`; it is imported when a figure is drawn, with a clear message when it
is missing."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rolecast.diagnostics.curves import Cliff, CurvePoint
from rolecast.report import style
from rolecast.report.style import Series

MAX_ALERTS_LISTED = 8


@dataclass
class AccuracyPanel:
    """The accuracy curve: evaluations with z-SE intervals (clipped to [0, 1]), the peak (star), the cliff start
    (dashed line), training accuracy (grey) and `events` (step, name): where signatures / warnings first fired,
    numbered triangles along the bottom, named in the legend."""

    points: Sequence[CurvePoint]
    train: Sequence[CurvePoint] = ()
    peak: CurvePoint | None = None
    cliff: Cliff | None = None
    z: float = 1.96
    events: Sequence[tuple[int, str]] = ()
    height: float = 1.6


@dataclass
class LinePanel:
    """One line per series; series that coincide are drawn once and their legend entry says so (`same`, e.g.
    "same lr"). `references`: (y, label) horizontal lines; `name`: what a note calls the panel when it is left
    out for being one constant."""

    ylabel: str
    series: Series
    name: str = ""
    same: str = "same values"
    references: Sequence[tuple[float, str]] = ()
    sci: bool = False
    height: float = 1.0
    fmt: str = "{:.3g}"


Panel = AccuracyPanel | LinePanel


@dataclass
class Drawn:
    """A drawn figure (None when every panel was left out) and the notes on what was left out."""

    figure: Any
    notes: list[str] = field(default_factory=list)


def _steps_of(panels: Sequence[Panel]) -> list[int]:
    out: list[int] = []
    for p in panels:
        if isinstance(p, AccuracyPanel):
            out += [q.step for q in (*p.points, *p.train)] + [s for s, _ in p.events]
        else:
            out += [x for xs, _ in p.series.values() for x in xs]
    return out


def step_range(*groups: Sequence[Panel]) -> tuple[int, int]:
    """The steps all these panels show (so that every figure of a run has the same step axis)."""
    steps = [s for g in groups for s in _steps_of(g)]
    return (min(steps), max(steps)) if steps else (0, 1)


def draw_run(panels: Sequence[Panel], *, title: str, steps: tuple[int, int] | None = None, note: str = "") -> Drawn:
    """Stacked panels on one step axis (`steps`, else the panels' own range). A line panel whose every series is
    one constant is left out and named in the title's note instead."""
    notes = [note] if note else []
    kept: list[Panel] = []
    for p in panels:
        const = style.constant_note(p.name or p.ylabel, p.series, p.fmt) if isinstance(p, LinePanel) else None
        if const:
            notes.append(const)
        elif not isinstance(p, LinePanel) or p.series:
            kept.append(p)
    if not kept:
        return Drawn(None, notes)
    first, last = steps or step_range(kept)
    with style.fonts():
        fig, axes = style.figure([p.height for p in kept])
        for ax, p in zip(axes, kept, strict=True):
            if isinstance(p, AccuracyPanel):
                _accuracy(ax, p)
            else:
                _lines(ax, p)
        style.step_axis(axes, first, last)
        style.title(fig, title, "; ".join(notes))
        style.align(fig)
    return Drawn(fig, notes)


def _accuracy(ax: Any, p: AccuracyPanel) -> None:
    if p.train:
        ax.plot(
            [q.step for q in p.train],
            [q.value for q in p.train],
            color="0.6",
            lw=1.2,
            marker=".",
            label="train accuracy (5-step means)",
        )
    if p.points:
        style.errorbars(
            ax,
            [q.step for q in p.points],
            [q.value for q in p.points],
            [p.z * q.se for q in p.points],
            marker="o",
            ms=4,
            capsize=3,
            label=f"eval pass@1 ± {p.z:.2f} SE",
        )
    if p.peak is not None:
        ax.plot(
            [p.peak.step],
            [p.peak.value],
            marker="*",
            ms=15,
            color="tab:green",
            ls="none",
            label=f"peak {p.peak.value:.3f} @ {p.peak.step}",
        )
    if p.cliff is not None:
        ax.axvline(p.cliff.step, color="tab:red", ls="--", label=f"cliff from step {p.cliff.step}")
    style.ylabel(ax, style.PASS_AT_1 if p.points else "train accuracy")
    style.bound(ax)
    _alerts(ax, p.events)
    style.legend_outside(ax)


def _alerts(ax: Any, events: Sequence[tuple[int, str]]) -> None:
    """First alerts: a numbered triangle per step along the bottom (numbers upright), named in the legend."""
    if not events:
        return
    from matplotlib.transforms import blended_transform_factory

    at = blended_transform_factory(ax.transData, ax.transAxes)
    by_step: dict[int, list[str]] = {}
    for step, name in sorted(events):
        by_step.setdefault(step, []).append(name)
    k = 0
    for j, (step, names) in enumerate(sorted(by_step.items())):
        ids = list(range(k + 1, k + len(names) + 1))
        k += len(names)
        ax.plot([step], [0.03], marker="^", ms=9, color=style.ALERT_COLOR, transform=at, clip_on=False)
        ax.annotate(
            ",".join(map(str, ids)),
            (step, 0.03),
            xycoords=at,
            xytext=(0, 8 + 13 * (j % 2)),  # neighbours alternate in height, so their numbers stay apart
            textcoords="offset points",
            ha="center",
            fontsize=style.SMALL,
            color=style.ALERT_COLOR,
        )
        for i, name in zip(ids, names, strict=True):
            if i <= MAX_ALERTS_LISTED:
                ax.plot([], [], marker="^", ls="none", color=style.ALERT_COLOR, label=f"{i}: step {step}, {name}")
    if k > MAX_ALERTS_LISTED:
        ax.plot([], [], ls="none", label=f"... {k - MAX_ALERTS_LISTED} more first alerts (listed under the figure)")


def _lines(ax: Any, p: LinePanel) -> None:
    style.draw_series(ax, p.series, what=p.same)
    for y, label in p.references:  # named in the legend, so no text sits on the data
        ax.axhline(y, color="0.35", ls=":", lw=1.2, label=label)
    style.ylabel(ax, p.ylabel)
    if p.sci:
        style.sci_axis(ax)
    style.legend_outside(ax)


# ---------------------------------------------------------------------------------------------------------
# The panels of a run's metrics


def role_labels(series: Series) -> Series:
    """ "pid/role" labels as a reader wants them: the role alone when its policy is named after it (Isolated)
    or when one policy serves every role (Shared), else "role (policy pid)"."""
    pids = {label.split("/", 1)[0] for label in series}

    def name(label: str) -> str:
        pid, _, role = label.partition("/")
        if not role or role == pid or len(pids) == 1:
            return role or pid
        return f"{role} (policy {pid})"

    return {name(k): v for k, v in series.items()}


def gradient_panels(grads: Mapping[str, Series]) -> tuple[list[LinePanel], list[str]]:
    """The per-role gradient panels worth drawing (keys of `grads`: norm, share, alignment, instances; each
    label -> (steps, values), labels "pid/role"), and a note for each left out: the projection share is drawn
    for the policies that serve several roles (a policy serving one role has share 1 at every step)."""
    panels: list[LinePanel] = []
    notes: list[str] = []
    if grads.get("norm"):
        panels.append(LinePanel("gradient norm |g_r|", role_labels(grads["norm"]), name="role gradient norm"))
    shares = grads.get("share", {})
    roles_of: dict[str, list[str]] = {}
    for label in shares:
        roles_of.setdefault(label.split("/", 1)[0], []).append(label)
    shared = {k: v for k, v in shares.items() if len(roles_of[k.split("/", 1)[0]]) >= 2}
    if shared:
        panels.append(LinePanel("gradient share s_r", role_labels(shared), name="gradient share"))
    if shares and len(shared) < len(shares):
        alone = sorted(pid for pid, labels in roles_of.items() if len(labels) == 1)
        notes.append(
            f"gradient share not drawn for {', '.join(alone)}: a policy serving one role has share 1 at every step"
        )
    if grads.get("alignment"):
        n = max((max(ys) for _, ys in grads.get("instances", {}).values() if ys), default=0)
        refs = [(1.0, "1 = orthogonal instances")] + ([(float(n), f"{n:g} = identical instances")] if n >= 2 else [])
        panels.append(LinePanel("instance alignment", role_labels(grads["alignment"]), references=refs))
    return panels, notes


def lr_panel(lrs: Series | None) -> list[LinePanel]:
    """Each policy's learning rate per step (policies with the same schedule coincide, and say so)."""
    return [LinePanel("lr", dict(lrs), name="lr", same="same lr", sci=True, height=0.8, fmt="{:.2g}")] if lrs else []


def update_panels(updates: Mapping[str, Series]) -> list[LinePanel]:
    out = []
    for stat, label in (("size", "update size |dθ|"), ("drift", "drift |θ_t - θ_0|")):
        if updates.get(stat):
            out.append(LinePanel(label, dict(updates[stat]), name=f"update {stat}"))
    return out


# ---------------------------------------------------------------------------------------------------------
# Sweep figures


# A curve over seeds: step -> (mean, low, high) of the mean's 95% interval
Band = dict[int, tuple[float, float, float]]


# One line of an lr panel over arms: (the labels of the lines it draws, steps, lrs, the arm, the policy's index in it)
LrLine = tuple[list[str], list[int], list[float], str, int]
LR_DASHES = ("-", "--", ":", "-.")  # an arm's policies, by their index in it


def lr_lines(lrs: Mapping[str, Series]) -> list[LrLine]:
    """Each arm's policies' lr per step (`lrs`: arm -> policy id -> (steps, lrs)), a line named by the arm alone
    when the arm has one policy, else "arm: pid"; lines that coincide merged into one (style.merge_identical)."""
    series: Series = {}
    where: dict[str, tuple[str, int]] = {}  # line -> (its arm, its policy's index in the arm)
    for arm, by_pid in sorted(lrs.items()):
        for k, (pid, v) in enumerate(sorted(by_pid.items())):
            name = arm if len(by_pid) == 1 else f"{arm}: {pid}"
            series[name] = v
            where[name] = (arm, k)
    return [(labels, xs, ys, *where[labels[0]]) for labels, xs, ys in style.merge_identical(series)]


def draw_lr_lines(ax: Any, lines: Sequence[LrLine], colors: Mapping[str, Any]) -> None:
    """The lr lines in their arm's colour, each policy of an arm its own dash, coinciding lines said."""
    for labels, xs, ys, arm, k in lines:
        ax.plot(
            xs,
            ys,
            color=colors.get(arm),
            ls=LR_DASHES[k % len(LR_DASHES)],
            lw=1.4,
            label=style.coincide_label(labels, "same lr"),
        )


def _band_label(mode: str, n: int | None) -> str:
    if not n:
        return mode
    if n == 1:
        return f"{mode} (1 seed; its evaluation's 95% interval)"
    return f"{mode} (mean of {n} seeds, 95% interval)"


def draw_overlay(
    bands: Mapping[str, Band],
    lrs: Mapping[str, Series] | None = None,
    *,
    title: str = "",
    seeds: Mapping[str, int] | None = None,
) -> Any:
    """One workflow's accuracy curves, one per sharing mode, each the mean over seeds with its 95% interval as a
    band (clipped to [0, 1]); under it, each mode's policies' lr per step (from one seed: every seed trains on
    the same schedule), lines that coincide drawn once."""
    lines = lr_lines(lrs or {})
    constant = style.constant_note("lr", {ln[0][0]: (ln[1], ln[2]) for ln in lines}, "{:.2g}")
    with style.fonts():
        fig, axes = style.figure([1.7, 1.0] if lines and not constant else [1.7])
        ax = axes[0]
        colors: dict[str, Any] = {}
        means: Series = {mode: (sorted(b), [b[s][0] for s in sorted(b)]) for mode, b in bands.items()}
        for modes, steps, ys in style.merge_identical(means):  # arms with the same curve: one line, said
            labels = [_band_label(m, (seeds or {}).get(m)) for m in modes]
            (line,) = ax.plot(steps, ys, marker="o", ms=4, label=style.coincide_label(labels, "same pass@1"))
            colors |= dict.fromkeys(modes, line.get_color())
            band = bands[modes[0]]
            style.band(ax, steps, [band[s][1] for s in steps], [band[s][2] for s in steps], line.get_color())
        style.ylabel(ax, style.PASS_AT_1)
        style.bound(ax)
        style.legend_outside(ax)
        if len(axes) > 1:
            lax = axes[1]
            draw_lr_lines(lax, lines, colors)
            style.ylabel(lax, "lr")
            style.sci_axis(lax)
            style.legend_outside(lax)
        all_steps = [s for b in bands.values() for s in b] + [x for ln in lines for x in ln[1]]
        style.step_axis(axes, min(all_steps, default=0), max(all_steps, default=1))
        style.title(fig, title, constant or "")
        style.align(fig)
    return fig


def _wrap_label(label: str, width: int = 18) -> str:
    return "\n".join(textwrap.wrap(label, width)) or label


def draw_gain_grid(
    rows: Sequence[str], cols: Sequence[str], gains: Mapping[tuple[str, str], tuple[float, float, float]]
) -> Any:
    """A grid of gains (final - base): rows (workflows) x columns (sharing mode, and model or task where they
    vary); green where significantly above 0, red where significantly below, grey within noise, each cell
    the gain and its 95% interval on one line. Drawn with the longer list down the page, so 20 columns become
    20 readable rows."""
    from matplotlib.patches import Rectangle

    down, across = (cols, rows) if len(cols) > len(rows) else (rows, cols)

    def gain(d: str, a: str) -> tuple[float, float, float] | None:
        return gains.get((a, d)) if down is cols else gains.get((d, a))

    with style.fonts():
        fig, (ax,) = style.figure([max(1.0, 0.22 * len(down) + 0.2)], sharex=False)
        ax.grid(False)
        for i, d in enumerate(down):
            y = len(down) - 1 - i
            for j, a in enumerate(across):
                g = gain(d, a)
                if g is None:
                    color, text = "white", "-"
                else:
                    v, lo, hi = g
                    color = "#8fd18f" if lo > 0 else "#f08c8c" if hi < 0 else "#e4e4e4"
                    text = f"{v:+.3f} [{lo:+.3f}, {hi:+.3f}]"
                ax.add_patch(Rectangle((j, y), 1, 1, facecolor=color, edgecolor="white", lw=2))
                ax.text(j + 0.5, y + 0.5, text, ha="center", va="center", fontsize=style.SMALL)
        ax.set_xlim(0, len(across))
        ax.set_ylim(0, len(down))
        ax.set_xticks([j + 0.5 for j in range(len(across))], [_wrap_label(a) for a in across])
        ax.set_yticks([len(down) - 0.5 - i for i in range(len(down))], list(down))
        ax.tick_params(length=0, labelsize=style.SMALL, labeltop=True, labelbottom=False)
        for side in ("top", "right", "bottom", "left"):
            ax.spines[side].set_visible(False)
        style.title(
            fig,
            "gain = final - base with its 95% interval (mean over seeds); "
            "green: above 0, red: below 0, grey: within noise",
        )
    return fig
