"""The figures' geometry, measured from matplotlib itself (report/figure_checks.py): each rule of the project's
plotting style (report/style.py) fails on a figure drawn the old way, and every figure `analyze`, `report` and
the cliff lab draw passes all of them: on a hand-built sweep, on hand-built metrics of an Isolated run, on real
tiny runs trained here, and on the cliff lab's committed raw results."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from report_fixtures import adhoc_runs, build_sweep
from script_module import load_script

from rolecast.diagnostics.curves import CurvePoint
from rolecast.report import style
from rolecast.report.figure_checks import figure_problems
from rolecast.report.html import cell_figure, collect_map, design_of, row_labels, sweep_figures
from rolecast.report.plots import AccuracyPanel, LinePanel, draw_run, gradient_panels, role_labels

pytest.importorskip("matplotlib", reason="the figures need the `plots` extra (make setup installs it)")

ROOT = Path(__file__).resolve().parents[1]
LAB_RAW = ROOT / "docs" / "experiments" / "cliff_lab" / "raw"


def _old_figure(rows: int = 1, height: float = 3.0, width: float = 8.0):
    """A figure as plots.py drew them before issue 34: 8 inches at 100 dpi, matplotlib's default sizes."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height * rows), layout="constrained", dpi=100)
    return fig, fig.subplots(rows, 1, squeeze=False)[:, 0]


def _kinds(problems: list[str]) -> str:
    return "\n".join(problems)


# ---------------------------------------------------------------------------------------------------------
# Each check fails on what the old figures did


def test_labels_cut_overlapping_rotated_and_small_are_found():
    """The old gradients.png: a y-label taller than its panel (cut at the figure's edge, and over its
    neighbour's), the cell figure's vertical alert names at 6 pt."""
    fig, axes = _old_figure(3)
    for ax in axes:
        ax.plot([1, 2, 3], [0.2, 0.5, 0.4], label="aggregator/aggregator")
    axes[1].set_ylabel("share s_r = g_r.g/|g|^2")
    axes[2].set_ylabel("instance alignment |sum g_i|^2 / sum |g_i|^2 (1 orthogonal, N identical) " * 2)
    axes[0].annotate("empty_claim [worker]", (2, 0.3), rotation=90, fontsize=6)
    text = _kinds(figure_problems(fig))
    assert "is cut at the figure's edge" in text
    assert "overlap" in text
    assert "text 'empty_claim [worker]' is rotated 90 degrees" in text
    assert "text 'empty_claim [worker]' is 8.3 px high" in text


def test_an_interval_beyond_the_valid_range_is_found():
    """The old overlay: a 95% band reaching 1.4 on a pass@1 axis; the old accuracy plot: error bars past 1."""
    fig, (ax,) = _old_figure()
    ax.plot([0, 5, 10], [0.8, 0.9, 0.85])
    ax.fill_between([0, 5, 10], [0.6, 0.7, 0.3], [1.0, 1.1, 1.4], alpha=0.2)
    ax.set_ylabel("held-out pass@1")
    text = _kinds(figure_problems(fig))
    assert "reaches 0.3..1.4, outside (0.0, 1.0)" in text
    assert "its y range" in text and "reaches beyond (0.0, 1.0)" in text
    fig, (ax,) = _old_figure()
    ax.errorbar([0, 4], [0.81, 0.83], yerr=[0.18, 0.18])
    ax.set_ylabel("accuracy")
    assert "outside (0.0, 1.0)" in _kinds(figure_problems(fig))


def test_a_legend_over_the_data_and_lines_that_coincide_unsaid_are_found():
    """The old LR panel: two policies on one schedule, one line visible and two legend entries, the legend
    inside the axes."""
    fig, (ax,) = _old_figure()
    ax.plot([1, 2, 3], [1e-4, 2e-4, 1e-4], label="aggregator")
    ax.plot([1, 2, 3], [1e-4, 2e-4, 1e-4], label="generator")
    ax.legend(loc="best")
    text = _kinds(figure_problems(fig))
    assert "lies over a panel's data" in text
    assert "lines 'aggregator' and 'generator' coincide" in text


def test_the_cliff_labs_old_faults_are_found():
    """The old cliff-lab panels: a y-label taller than its panel ("mean ± sd over seeds"), and a single seed's
    band of sd 0: no interval drawn on a zoomed axis, one evaluation's noise read as signal."""
    fig, (ax,) = _old_figure(height=2.2, width=4.2)
    ax.plot([0, 5, 10], [0.72, 0.77, 0.70])
    ax.fill_between([0, 5, 10], [0.72, 0.77, 0.70], [0.72, 0.77, 0.70], alpha=0.15)
    ax.set_ylabel("held-out pass@1 (mean ± sd over seeds)")
    text = _kinds(figure_problems(fig))
    assert "axis label 'held-out pass@1 (mean ± sd over seeds)' reaches outside its axes" in text
    assert "a band of no width (its interval not drawn)" in text


def test_a_panel_of_one_constant_is_found():
    """The old gradients.png under Isolated routing: every policy serves one role, every share is 1.0."""
    fig, (ax,) = _old_figure()
    ax.plot([1, 2, 3], [1.0, 1.0, 1.0], label="a")
    ax.plot([1, 2, 3, 4], [1.0, 1.0, 1.0, 1.0], label="b")
    assert "every line is the constant 1" in _kinds(figure_problems(fig))


def test_step_axes_that_disagree_are_found():
    """The old cell figure: the accuracy panel's steps 0-30 (ticks 0, 4, 8, ...) over a gradient panel of steps
    2-28 (ticks 3, 6, 9, ...); a step axis with ticks between steps."""
    a, (ax,) = _old_figure()
    ax.plot([0, 30], [0.5, 0.6])
    ax.set_xlabel("step")
    b, (bx,) = _old_figure()
    bx.plot([2, 28], [1.0, 2.0])
    bx.set_xlabel("step")
    text = _kinds(figure_problems([a, b]))
    assert "step ranges differ" in text and "step ticks differ" in text
    c, (cx,) = _old_figure()
    cx.plot([1, 2], [0.0, 1.0])
    cx.set_xlabel("step")
    assert "are not all integers" in _kinds(figure_problems(c))


# ---------------------------------------------------------------------------------------------------------
# Every figure drawn now passes


def isolated_voting_metrics(steps: int = 8) -> list[dict]:
    """An Isolated voting run diagnosed every 2nd step: per-role norms, shares of 1 (one role per policy),
    the generators' instance alignment, and both policies on one lr schedule."""
    rows = []
    for s in range(1, steps + 1):
        row = {
            "step": s,
            "accuracy": 0.5,
            "policy/aggregator/lr": 1e-4 * s / steps,
            "policy/generator/lr": 1e-4 * s / steps,
        }
        if s % 2 == 0:
            row |= {
                "grad/aggregator/aggregator/norm": 0.2 + 0.01 * s,
                "grad/generator/generator/norm": 1.0 - 0.02 * s,
                "grad/aggregator/aggregator/share": 1.0,
                "grad/generator/generator/share": 1.0,
                "grad/generator/generator/alignment": 1.2 + 0.1 * s,
                "grad/generator/generator/instances": 3,
            }
        rows.append(row)
    return rows


def test_isolated_gradients_leave_the_share_out_and_name_roles_once(tmp_path):
    """What the issue found in analysis/gradients.png, fixed: no flat share panel (a note says why), legend
    entries `aggregator` rather than `aggregator/aggregator`, one lr line said to be both policies', and the
    accuracy and gradient figures on one step axis."""
    from rolecast.report.analyze import collect_series, grad_role_series, run_figures
    from rolecast.report.runfiles import RunFiles

    run = RunFiles(tmp_path, config={"workflow": {"name": "voting"}}, metrics=isolated_voting_metrics())
    points = [CurvePoint(0, 0.7, 0.03, 200, "base"), CurvePoint(8, 0.75, 0.03, 200, "final")]
    figs = dict(run_figures(run, None, points, [], [(4, "length_collapse [generator]")]))
    grads = figs["gradients.png"]
    assert [ax.get_ylabel() for ax in grads.figure.axes] == ["gradient norm |g_r|", "instance alignment"]
    assert grads.notes == [
        "gradient share not drawn for aggregator, generator: a policy serving one role has share 1 at every step"
    ]
    labels = [t.get_text() for t in grads.figure.axes[0].get_legend().get_texts()]
    assert labels == ["aggregator", "generator"]
    acc = figs["accuracy.png"].figure
    lr_labels = [t.get_text() for t in acc.axes[1].get_legend().get_texts()]
    assert lr_labels == ["aggregator, generator: same lr (lines\ncoincide)"]
    alert = [t.get_text() for t in acc.axes[0].get_legend().get_texts() if "length_collapse" in t.get_text()]
    assert alert == ["1: step 4, length_collapse [generator]"]
    assert figure_problems([d.figure for d in figs.values()]) == []
    # role names: a shared policy's roles by name, several policies' as "role (policy pid)"
    assert list(role_labels({"shared/generator": ([1], [1.0]), "shared/aggregator": ([1], [1.0])})) == [
        "generator",
        "aggregator",
    ]
    assert list(role_labels({"a/generator": ([1], [1.0]), "b/aggregator": ([1], [1.0])})) == [
        "generator (policy a)",
        "aggregator (policy b)",
    ]
    panels, notes = gradient_panels(collect_series(isolated_voting_metrics(), grad_role_series))
    assert [p.ylabel for p in panels] == ["gradient norm |g_r|", "instance alignment"] and len(notes) == 1


def test_intervals_are_clipped_to_the_unit_range():
    """An evaluation at 0.99 with SE 0.05: its 95% bar is drawn from 0.892 to 1.0, not to 1.088."""
    drawn = draw_run([AccuracyPanel([CurvePoint(0, 0.6, 0.05, 50), CurvePoint(5, 0.99, 0.05, 50)])], title="t")
    ax = drawn.figure.axes[0]
    bars = [c for c in ax.collections if c.get_paths()]
    ys = sorted(float(v[1]) for p in bars[0].get_paths() for v in p.vertices)
    assert ys[-1] == pytest.approx(1.0) and ys[0] == pytest.approx(0.6 - 1.96 * 0.05)
    assert max(ax.get_ylim()) <= 1.02
    assert figure_problems(drawn.figure) == []


def test_a_constant_panel_becomes_a_note():
    drawn = draw_run(
        [
            LinePanel("lr", {"shared": ([1, 2, 3], [1e-4] * 3)}, name="lr", fmt="{:.2g}"),
            LinePanel("x", {"a": ([1, 2], [1.0, 2.0])}),
        ],
        title="run",
    )
    assert drawn.notes == ["lr: 0.0001 at every step"]
    assert [ax.get_ylabel() for ax in drawn.figure.axes] == ["x"]
    assert drawn.figure._suptitle.get_text() == "run\nlr: 0.0001 at every step"


def test_every_figure_of_the_hand_built_sweep(tmp_path):
    smap = collect_map(build_sweep(tmp_path / "sweep"))
    figures = list(sweep_figures(smap))
    assert [alt for alt, _ in figures] == ["overlay eval_opt", "overlay single", "overlay voting", "gain grid"]
    for alt, fig in figures:
        assert figure_problems(fig) == [], alt
        assert fig.get_figwidth() * fig.dpi == style.FIGURE_PX
    labels = row_labels(smap.train_cells, design_of(smap.train_cells))
    drawn = [cell_figure(c, labels[c.name]) for c in smap.train_cells]
    assert sum(d is not None for d in drawn) == 5  # the pending cell has nothing to draw
    for c, d in zip(smap.train_cells, drawn, strict=True):
        if d is not None:
            assert figure_problems(d.figure) == [], c.name


def test_every_figure_of_real_tiny_runs(tmp_path_factory):
    """`analyze` on every run and `report` over the directory, on runs trained here."""
    from rolecast.report.analyze import analyze

    root = adhoc_runs(tmp_path_factory.mktemp("adhoc"))
    smap = collect_map(root)
    for alt, fig in sweep_figures(smap):
        assert figure_problems(fig) == [], alt
    labels = row_labels(smap.train_cells, design_of(smap.train_cells))
    for c in smap.train_cells:
        d = cell_figure(c, labels[c.name])
        assert d is not None and figure_problems(d.figure) == [], c.name
    summary = analyze(root / "voting-i", plots=True)
    assert "analysis/gradients.png" in summary["plots"]


def test_the_cliff_lab_figures_from_its_committed_raw_results():
    """All four lab figures pass; a one-seed arm's band is its evaluation's own 95% interval (the issue: a
    single seed drawn with no interval on a zoomed axis read one evaluation's noise as signal)."""
    lab = load_script("scripts/cliff_lab.py")
    recs = lab.records(LAB_RAW)
    arms = ("shared", "isolated", "isolated-roleclock")
    for lr in ("lr1e-4", "lr3e-4", "lr1e-3"):
        fig = lab.lab_figure(recs, lr, arms)
        assert figure_problems(fig) == [], lr
    interventions = sorted({r["arm"] for r in recs} - set(arms))
    assert figure_problems(lab.lab_figure(recs, "lr3e-4", ("isolated", "isolated-roleclock", *interventions))) == []
    # one seed at lr 1e-4: the band at each step is value ± 1.96 SE of that evaluation, cut at [0, 1]
    (run,) = [r for r in recs if r["lr"] == "lr1e-4" and r["arm"] == "shared" and r["workflow"] == "voting"]
    band = lab._band([run])
    for p in run["points"]:
        mean, low, high = band[p["step"]]
        assert mean == pytest.approx(p["value"])
        assert high - mean == pytest.approx(1.959964 * p["se"], rel=1e-4)
        assert math.isclose(style.clip(high), min(high, 1.0))
    assert lab._seeds_text({1}) == "1 seed: its evaluation's 95% interval"
    assert lab._seeds_text({3}) == "mean of 3 seeds, 95% interval"
