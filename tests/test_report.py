"""`rolecast report`: the map of a hand-built sweep (finished, failed, half-written, running and pending cells)
against hand-computed numbers, in HTML (self-contained, PNGs embedded) and as text."""

from __future__ import annotations

import base64
import json
import re
import struct
from html.parser import HTMLParser

import pytest
from report_fixtures import build_sweep

from rolecast.cli import main
from rolecast.core.errors import ReportError
from rolecast.report.html import (
    collect_map,
    compare_sharing,
    short_summary_lines,
    summary_lines,
    text_map,
    write_report,
)

pytest.importorskip("matplotlib", reason="the report's plots need the `plots` extra (make setup installs it)")


class _Page(HTMLParser):
    """The map table's header and rows (data-cell and cell texts), every <img> src and every external
    reference."""

    def __init__(self) -> None:
        super().__init__()
        self.head: list[str] = []
        self.rows: dict[str, list[str]] = {}
        self.row_class: dict[str, str] = {}
        self.imgs: list[str] = []
        self.refs: list[str] = []
        self.scripts = 0
        self._in_map = False
        self._row: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href"):
            if key in a:
                self.refs.append(a[key])
        if tag == "script":
            self.scripts += 1
        if tag == "img":
            self.imgs.append(a["src"])
        if tag == "table":
            self._in_map = a.get("id") == "map"
        if self._in_map and tag == "tr" and "data-cell" in a:
            self._row = a["data-cell"]
            self.rows[self._row] = []
            self.row_class[self._row] = a.get("class", "")
        if self._row and tag == "td" or self._in_map and tag == "th":
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "th" and self._in_map and self._cell is not None:
            self.head.append("".join(self._cell).strip())
            self._cell = None
        if tag == "td" and self._row and self._cell is not None:
            self.rows[self._row].append("".join(self._cell).strip())
            self._cell = None
        if tag == "tr":
            self._row = None
        if tag == "table":
            self._in_map = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parse(path):
    page = _Page()
    page.feed(path.read_text())
    return page, {name: dict(zip(page.head, cells, strict=True)) for name, cells in page.rows.items()}


def test_map_numbers_by_hand(tmp_path):
    smap = collect_map(build_sweep(tmp_path / "sweep"))
    cells = {c.name: c for c in smap.train_cells}
    assert len(cells) == 6 and len(smap.cells) == 9

    c = cells["testbed-single-testbed-shared-s0"]
    assert c.state == "done" and c.curve.base.value == 0.5  # from the base cell's eval.jsonl
    # gain 0.7 - 0.5 with SE sqrt(2) * 0.03 = 0.042426 -> 95% half-width 0.083153
    assert c.curve.gain.value == pytest.approx(0.2)
    assert c.curve.gain.low == pytest.approx(0.2 - 1.959964 * 0.042426, abs=1e-5)
    assert c.gain_class() == "pos" and c.curve.cliff is None and c.curve.peak.step == 20

    c = cells["testbed-voting-testbed-shared-s0"]
    # 5 points: cliff z 2.576; 0.4 and 0.3 are 0.4 and 0.5 below the peak 0.8 (at 5, the earliest of two), SE 0.0424
    assert c.curve.peak.step == 5 and c.curve.cliff.step == 15 and c.curve.cliff.points_below == 2
    assert c.gain_class() == "neg"
    sig = c.dominant_signature
    assert (sig["name"], sig["subject"], sig["n_steps"], sig["first_step"]) == ("length_collapse", "generator", 9, 12)
    assert set(c.grads) >= {"share", "alignment"}
    assert c.grads["share"]["pol/generator"] == (list(range(1, 21)), [0.8] * 20)

    assert cells["testbed-voting-testbed-isolated-s0"].gain_class() == "zero"  # 0.5 - 0.5
    failed = cells["testbed-single-testbed-isolated-s0"]
    assert failed.state == "failed" and failed.error == "RuntimeError: boom"
    running = cells["testbed-eval_opt-testbed-shared-s0"]
    assert running.state == "running" and (running.steps_logged, running.steps_planned) == (3, 20)
    assert [p.step for p in running.curve.points] == [0, 5]
    assert any("not valid JSON" in n for n in running.notes)  # the torn lines are skipped, and said
    assert cells["testbed-eval_opt-testbed-isolated-s0"].state == "pending"
    assert {c.protocol for c in smap.cells if c.curve} == {"study T=0.7 x4"}


def test_sharing_comparison_by_hand(tmp_path):
    smap = collect_map(build_sweep(tmp_path / "sweep"))
    comps = {c.workflow: c for c in compare_sharing(smap.train_cells)}
    # only finished cells count: single's isolated cell failed, eval_opt has none finished
    assert set(comps) == {"single", "voting"}
    assert comps["single"].final_diff is None
    v = comps["voting"]
    assert (v.a, v.b) == ("shared", "isolated")
    # final: isolated 0.5 - shared 0.3 = +0.2; peak: 0.6 - 0.8 = -0.2; SE sqrt(2) * 0.03 either way
    assert v.final_diff == pytest.approx((0.2, 0.042426), abs=1e-6)
    assert v.peak_diff == pytest.approx((-0.2, 0.042426), abs=1e-6)
    lines = summary_lines(list(comps.values()))
    assert "voting / testbed / testbed: final isolated wins by +0.200 [+0.117, +0.283]; " in lines[1]
    assert "peak shared wins by +0.200 [+0.117, +0.283]" in lines[1]
    assert lines[0] == "single / testbed / testbed: only shared finished"
    short = short_summary_lines(list(comps.values()))
    assert short == [
        "single: only shared finished",
        "voting: isolated - shared: final +0.200 [+0.12,+0.28] isolated wins; peak -0.200 [-0.28,-0.12] shared wins; "
        "1 paired seed, detectable 0.119",  # (1.960 + 0.842) x 0.042426
    ]
    assert v.paired_final is not None and v.paired_final.seeds == 1


def test_seeds_pool_with_the_larger_of_evaluation_and_seed_spread(tmp_path):
    from rolecast.diagnostics.curves import CurvePoint
    from rolecast.report.html import _pool

    class C:
        def __init__(self, v):
            p = CurvePoint(20, v, 0.01, 400)
            self.curve = type("Curve", (), {"peak": p, "final": p})()

    mean, se = _pool([C(0.4), C(0.6)], "final")
    # eval SE sqrt(2) * 0.01 / 2 = 0.00707; seed spread sd 0.141421 / sqrt(2) = 0.1 -> 0.1
    assert mean == pytest.approx(0.5) and se == pytest.approx(0.1)


def test_html_is_self_contained_with_a_row_per_cell(tmp_path):
    root = build_sweep(tmp_path / "sweep")
    path, smap = write_report(root)
    assert path == root / "report.html"
    page, rows = parse(path)
    assert len(rows) == 6 and set(rows) == {c.name for c in smap.train_cells}
    assert page.scripts == 0
    assert all(r.startswith("data:") or r.startswith("#") for r in page.refs), page.refs

    # one column per axis that varies (workflow, sharing); task, model, seed and protocol are said once above
    assert page.head[:2] == ["workflow", "sharing"] and "eval protocol" not in page.head
    html = path.read_text()
    assert "The same in every cell: task testbed, model testbed, seed 0." in html
    assert "Evaluation protocol(s): study T=0.7 x4" in html
    r = rows["testbed-single-testbed-shared-s0"]
    assert (r["workflow"], r["sharing"], r["base"], r["peak (step)"], r["final"], r["cliff"]) == (
        "single",
        "shared",
        "0.500",
        "0.700 (20)",
        "0.700",
        "no",
    )
    assert r["gain final - base [95%]"] == "+0.200 [+0.117, +0.283]" and r["state"] == "done"
    assert "gain-pos" in page.row_class["testbed-single-testbed-shared-s0"]
    # the cliff type stands beside the cliff in every map: a gain without a fall is "none"; voting-shared falls
    # from step 15 after a significant gain (0.8 at step 5 against the base 0.5): the study's cliff
    assert page.head[page.head.index("cliff") + 1] == "cliff type"
    assert rows["testbed-single-testbed-shared-s0"]["cliff type"] == "none"
    r = rows["testbed-voting-testbed-shared-s0"]
    assert r["cliff"] == "yes, from step 15" and r["cliff type"] == "fall after gain"
    assert r["dominant failure signature"].startswith("length_collapse [generator], 9 step(s)")
    assert "gain-neg" in page.row_class["testbed-voting-testbed-shared-s0"]
    assert "gain-zero" in page.row_class["testbed-voting-testbed-isolated-s0"]
    assert rows["testbed-single-testbed-isolated-s0"]["state"] == "failed: RuntimeError: boom"
    assert "incomplete" in page.row_class["testbed-single-testbed-isolated-s0"]
    assert rows["testbed-eval_opt-testbed-shared-s0"]["state"] == "running 3/20"
    assert rows["testbed-eval_opt-testbed-shared-s0"]["peak (step)"] == "0.520 (5)"
    assert rows["testbed-eval_opt-testbed-shared-s0"]["final"] == "(0.520 at step 5, so far)"
    assert rows["testbed-eval_opt-testbed-shared-s0"]["gain final - base [95%]"] == "-"
    assert rows["testbed-eval_opt-testbed-isolated-s0"]["state"] == "pending"

    # a figure for each of the 5 cells with evaluations, an overlay per workflow with evaluations (single,
    # voting, eval_opt) and the gain grid; all real PNGs, drawn at the report's content width
    assert len(page.imgs) == 5 + 3 + 1
    for src in page.imgs:
        head, data = src.split(",", 1)
        assert head == "data:image/png;base64"
        png = base64.b64decode(data)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[-8:-4] == b"IEND"
        w, h = struct.unpack(">II", png[16:24])
        assert w == 1300 and h >= 250
    assert "isolated wins by +0.200" in html and "shared wins by +0.200" in html


def test_text_map_fits_one_screen(tmp_path):
    smap = collect_map(build_sweep(tmp_path / "sweep"))
    text = text_map(smap)
    lines = text.splitlines()
    assert len(lines) <= 24 and max(map(len, lines)) <= 120
    assert "evaluation: study T=0.7 x4" in lines[0]
    row = next(ln for ln in lines if ln.startswith("single-shared "))
    assert re.search(r"0\.500\s+0\.700@20\s+0\.700\s+\+ \+0\.200 \[\+0\.12,\+0\.28\]\s+no", row), row
    row = next(ln for ln in lines if ln.startswith("voting-shared "))
    # a fall from step 15 after a significant gain (0.8 at step 5 against the base 0.5): the study's cliff type
    assert "- -0.200" in row and "cliff@15" in row and "length_collapse(9)" in row
    # the legend says what each signature shown means
    assert "  length_collapse: a role's completions shrink to half their early length" in lines
    row = next(ln for ln in lines if ln.startswith("single-isolated "))
    assert re.search(r"0\.500\s+0\.550@10\s+\(0\.550@10\)\s+-\s+-\s+-\s+failed$", row), row  # no gain claimed
    assert "  error single-isolated: RuntimeError: boom" in lines
    assert "running 3/20" in text and "pending" in text
    # the verdict (longer than the screen with its design note) folds at final; peak
    assert lines[-2].startswith("voting: isolated - shared: final +0.200")
    assert lines[-1] == "    peak -0.200 [-0.28,-0.12] shared wins; 1 paired seed, detectable 0.119"


def test_cli_report_and_bad_dirs(tmp_path, capsys):
    root = build_sweep(tmp_path / "sweep")
    out = tmp_path / "elsewhere" / "map.html"
    assert main(["report", str(root), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"report: {out}" in printed and "voting-shared" in printed
    assert out.is_file() and not (root / "report.html").exists()
    assert main(["report", str(tmp_path / "missing")]) == 2

    # an empty directory is an error, and nothing is written into it; a broken sweep.json is said, not a crash
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ReportError, match="no runs found"):
        write_report(empty)
    assert main(["report", str(empty)]) == 2 and list(empty.iterdir()) == []
    assert "no runs found" in capsys.readouterr().err
    (root / "sweep.json").write_text("{not json")
    smap = collect_map(root)
    assert any("sweep.json unreadable" in n for n in smap.notes)
    assert len(smap.train_cells) == 5  # found from the directories: the pending cell has none
    assert {c.name for c in smap.cells if c.kind == "base_eval"} == {
        f"base-testbed-{w}-testbed" for w in ("single", "voting", "eval_opt")
    }
    by_name = {c.name: c for c in smap.train_cells}
    assert by_name["testbed-single-testbed-isolated-s0"].state == "failed"  # ERROR.txt alone says so
    assert by_name["testbed-eval_opt-testbed-shared-s0"].state == "incomplete"
    assert by_name["testbed-single-testbed-shared-s0"].curve.base.value == 0.5  # base cell matched by axes


def test_one_run_directory(tmp_path):
    root = build_sweep(tmp_path / "sweep")
    smap = collect_map(root / "testbed-voting-testbed-shared-s0")
    assert [c.name for c in smap.cells] == ["testbed-voting-testbed-shared-s0"]
    c = smap.cells[0]
    assert c.axes["workflow"] == "voting" and c.curve.cliff.step == 15 and c.curve.base is None
    json.dumps(text_map(smap))  # renders without a base


def test_text_map_names_rows_by_the_axes_that_vary(tmp_path):
    """A scale matrix (one task, two models): rows are named by the model, not task/model/..., so they keep
    their signature and state columns within the screen's width."""
    root = build_sweep(tmp_path / "sweep")
    sweep = json.loads((root / "sweep.json").read_text())
    for c in sweep["cells"]:
        if c["name"] == "testbed-voting-testbed-isolated-s0":
            c["axes"]["model"] = "testbed-large"
    (root / "sweep.json").write_text(json.dumps(sweep))
    lines = text_map(collect_map(root)).splitlines()
    assert next(ln for ln in lines if ln.startswith("testbed-large/voting-isolated "))
    row = next(ln for ln in lines if ln.startswith("testbed/voting-shared "))
    assert row.endswith("done") and "length_collapse(9)" in row
    assert not any(ln.startswith("testbed/testbed") for ln in lines)


def test_text_map_folds_a_long_sharing_verdict_and_wraps_rows_instead_of_cutting_them(tmp_path):
    smap = collect_map(build_sweep(tmp_path / "sweep"))
    verdict = (
        "voting: isolated - shared: final +0.200 [+0.12,+0.28] isolated wins; peak -0.200 [-0.28,-0.12] shared wins; "
        "1 paired seed, detectable 0.119"
    )
    assert verdict in text_map(smap, width=200).splitlines()  # fits in 200 columns: one line
    lines = text_map(smap, width=80).splitlines()
    i = lines.index("voting: isolated - shared: final +0.200 [+0.12,+0.28] isolated wins;")
    assert lines[i + 1] == "    peak -0.200 [-0.28,-0.12] shared wins; 1 paired seed, detectable 0.119"
    # the numbers alone need 90 columns: no row is cut; each name has a line of its own above its numbers (the
    # cliff column gives the cliff's type: a fall from step 15 after a significant gain, `cliff@15`)
    assert not any("…" in ln for ln in lines)
    i = lines.index("voting-shared")
    assert re.fullmatch(
        r"\s+0\.500\s+0\.800@5\s+0\.300\s+- -0\.200 \[-0\.28,-0\.12\]\s+cliff@15\s+length_collapse\(9\)\s+done",
        lines[i + 1],
    )


def test_paired_difference_over_seeds_by_hand():
    """Three seeds, b - a = +0.10, +0.04, +0.07: mean 0.07, sd 0.03, SE 0.03 / sqrt(3) = 0.017321 (above the
    evaluations' own sqrt(6 x 0.01^2) / 3 = 0.008165); t(0.975, 2) = 4.303, t(0.80, 2) = 1.061."""
    from rolecast.diagnostics.curves import CurvePoint, paired_difference, t_quantile

    a = [CurvePoint(30, v, 0.01, 200) for v in (0.50, 0.60, 0.55)]
    b = [CurvePoint(30, v, 0.01, 200) for v in (0.60, 0.64, 0.62)]
    d = paired_difference(list(zip(a, b, strict=True)))
    assert d.seeds == 3 and d.mean == pytest.approx(0.07)
    assert d.se == pytest.approx(0.03 / 3**0.5)
    assert (d.low, d.high) == pytest.approx((0.07 - 4.303 * 0.017321, 0.07 + 4.303 * 0.017321), abs=1e-5)
    assert d.detectable == pytest.approx((4.303 + 1.061) * 0.017321, abs=1e-5)
    # differences that agree exactly: the evaluations' noise is the floor of the SE
    same = paired_difference([(CurvePoint(30, 0.5, 0.01, 200), CurvePoint(30, 0.6, 0.01, 200))] * 3)
    assert same.se == pytest.approx((6 * 0.01**2) ** 0.5 / 3)
    assert t_quantile(0.975, 40) == 2.042 and t_quantile(0.975, float("inf")) == pytest.approx(1.959964)
    with pytest.raises(ValueError):
        t_quantile(0.9, 3)


def _train_run(d, steps, evals, metrics_steps):
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(
        f"workflow: {{name: voting}}\nrouting: {{sharing: shared}}\ntrain: {{steps: {steps}}}\n"
    )
    (d / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    (d / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward": 0.5}) + "\n" for s in metrics_steps))


def test_plain_train_runs_are_done_when_their_final_evaluation_is_at_the_last_step(tmp_path):
    """`rolecast train` writes no DONE.json: a run whose final evaluation is at train.steps finished; one
    stopped half-way (no final row, fewer steps) is incomplete."""
    ev = {"pass@1": 0.5, "stderr": 0.03, "n_problems": 100, "n_samples": 1}
    _train_run(
        tmp_path / "runs" / "a",
        40,
        [{**ev, "step": 0, "tag": "base"}, {**ev, "step": 40, "tag": "final"}],
        range(1, 41),
    )
    _train_run(
        tmp_path / "runs" / "b",
        40,
        [{**ev, "step": 0, "tag": "base"}, {**ev, "step": 20, "tag": "periodic"}],
        range(1, 21),
    )
    smap = collect_map(tmp_path / "runs")
    assert {c.name: c.state for c in smap.cells} == {"a": "done", "b": "incomplete"}
    assert collect_map(tmp_path / "runs" / "a").cells[0].state == "done"  # one run directory, too
    assert "incomplete 20/40" in text_map(smap) and "incomplete 40/40" not in text_map(smap)


def test_overlay_bands_and_gain_grid_by_hand(tmp_path):
    """Two seeds of shared (final 0.60, 0.70; base 0.50) and one of isolated (final 0.40): the band's mean at
    the last step is 0.65 with a t(1) interval, the gains are +0.15 and -0.10 (its own interval)."""
    from rolecast.diagnostics.curves import CurvePoint, summarize_curve
    from rolecast.report.html import CellView, gain_grid, overlay_bands

    def cell(sharing, seed, final):
        pts = [CurvePoint(0, 0.5, 0.02, 400, "base"), CurvePoint(10, final, 0.02, 400, "final")]
        axes = {"workflow": "voting", "task": "testbed", "model": "testbed", "sharing": sharing, "seed": seed}
        return CellView(f"{sharing}{seed}", "train", axes, tmp_path, "done", curve=summarize_curve(pts))

    cells = [cell("shared", 0, 0.6), cell("shared", 1, 0.7), cell("isolated", 0, 0.4)]
    bands = overlay_bands(cells)[("voting", "testbed", "testbed")]
    mean, lo, hi = bands["shared"][10]
    se = max(0.1 / 2**0.5 / 2**0.5, (2 * 0.02**2) ** 0.5 / 2)  # sd of (0.6, 0.7) / sqrt(2), or the evals' noise
    assert mean == pytest.approx(0.65) and hi - mean == pytest.approx(12.706 * se)
    assert bands["isolated"][10] == pytest.approx((0.4, 0.4 - 1.959964 * 0.02, 0.4 + 1.959964 * 0.02))
    rows, cols, gains = gain_grid(cells)
    assert rows == ["voting"] and cols == ["isolated", "shared"]
    assert gains[("voting", "shared")][0] == pytest.approx(0.15)
    g, lo, hi = gains[("voting", "isolated")]
    assert g == pytest.approx(-0.1) and hi < 0  # significantly below: drawn red


def _adhoc_run(root, name, sharing, seed, steps, final, lr=1e-4):
    """A finished `rolecast train` run (no sweep): base 0.5, final `final`, SE 0.02 on 400 problems."""
    d = root / name
    d.mkdir(parents=True)
    config = {
        "seed": seed,
        "run_dir": str(d),  # bookkeeping: differs in every run and tells none apart
        "workflow": {"name": "voting"},
        "task": {"name": "testbed"},
        "model": {"path": "testbed"},
        "routing": {"sharing": sharing},
        "train": {"steps": steps, "lr": lr},
        "logging": {"progress": False},
    }
    (d / "config.yaml").write_text(json.dumps(config))
    ev = {"stderr": 0.02, "n_problems": 400, "n_samples": 1, "protocol": "study"}
    rows = [{**ev, "step": 0, "tag": "base", "pass@1": 0.5}, {**ev, "step": steps, "tag": "final", "pass@1": final}]
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "reward": 0.5}) + "\n" for s in range(1, steps + 1))
    )


def test_ad_hoc_runs_are_named_by_their_differing_fields_and_paired_only_when_alike(tmp_path):
    """Runs outside a sweep: shared and isolated at 10 steps, seeds 0 and 1, pair by seed (isolated - shared
    = +0.10 and +0.04: mean 0.07, SE the larger of sd 0.042426 / sqrt(2) = 0.03 and the evaluations' own
    sqrt(2 x 2 x 0.02^2) / 2 = 0.02, t(1) = 12.706);
    an isolated run of 20 steps has no shared run alike and gets no verdict; a repeat of a run (same settings,
    same seed) is not a second seed."""
    root = tmp_path / "runs"
    _adhoc_run(root, "a", "shared", 0, 10, 0.60)
    _adhoc_run(root, "b", "isolated", 0, 10, 0.70)
    _adhoc_run(root, "c", "shared", 1, 10, 0.62)
    _adhoc_run(root, "d", "isolated", 1, 10, 0.66)
    _adhoc_run(root, "e", "isolated", 0, 20, 0.55)
    _adhoc_run(root, "f", "isolated", 0, 10, 0.70)  # b again
    smap = collect_map(root)
    assert smap.adhoc
    comps = compare_sharing(smap.train_cells)
    paired = next(c for c in comps if c.paired_final is not None)
    assert paired.setting == "steps=10" and (paired.a, paired.b) == ("shared", "isolated")
    assert paired.paired_final.seeds == 2 and paired.repeats == ["f"]
    assert paired.modes["isolated"]["cells"] == 2  # b and d; f repeats b
    assert paired.modes["isolated"]["final"] == pytest.approx((0.70 + 0.66) / 2)
    assert paired.final_diff == pytest.approx((0.07, 0.03), abs=1e-9)
    lone = next(c for c in comps if c.not_compared)
    assert lone.not_compared == "isolated steps=20 has no shared run alike (nearest shared: steps 10 vs 20)"
    assert len(comps) == 2
    text = text_map(smap, width=250)
    lines = text.splitlines()
    assert "runs told apart by their configs' differing fields: steps (train.steps)" in lines
    names = [ln.split("  ")[0] for ln in lines if ln.startswith("voting-")]
    assert names == [
        "voting-shared steps=10",
        "voting-isolated steps=10 (b)",
        "voting-shared-s1 steps=10",
        "voting-isolated-s1 steps=10",
        "voting-isolated steps=20",
        "voting-isolated steps=10 (f)",
    ]
    d = 12.706 * 0.03
    assert f"voting steps=10: isolated - shared: final +0.070 [{0.07 - d:+.2f},{0.07 + d:+.2f}] no clear winner" in text
    assert "2 paired seeds, detectable" in text and "not paired again: f (same settings and seed)" in text
    assert (
        "voting: no paired verdict: the runs differ in more than sharing; isolated steps=20 has no shared run alike"
        in text
    )
    # cliff types per arm count the figures' arms (sharing and the differing settings), one run per seed: the
    # 20-step run is an arm of its own, and f (a repeat of b) is not a third isolated run at 10 steps. Every run
    # gains (the 10-step finals are >= 0.60 against the base 0.50, z >= 3.5 with SE 0.028) or stays within noise
    # (e: +0.05, z 1.77), and none falls: each counts as "none" (the last of the four types)
    from rolecast.report.html import _plan_context

    types = {r["arm"]: r for r in _plan_context(smap, smap.design)["cliff_types"]}
    assert {a: r["n"] for a, r in types.items()} == {
        "shared steps=10": 2,
        "isolated steps=10": 2,
        "isolated steps=20": 1,
    }
    assert all(r["counts"][3].startswith(f"{r['n']}/{r['n']} ") for r in types.values())


def test_the_report_of_real_ad_hoc_runs(tmp_path_factory, tmp_path, capsys, monkeypatch):
    """Five real runs, all seed 0 (report_fixtures.ADHOC_RUNS): rows named by lr, steps and the gradient
    diagnostics' cadence, a verdict for the one pair that differs in sharing alone, "no paired verdict" for the
    3-step run, and nothing cut in a 250-column terminal."""
    from report_fixtures import adhoc_runs

    root = adhoc_runs(tmp_path_factory.mktemp("adhoc"))
    capsys.readouterr()  # what training printed, when this test trained them
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["report", str(root), "--out", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and "..." not in out
    rows = [ln.split("  ")[0] for ln in out.splitlines() if ln.startswith(("single-", "voting-"))]
    assert sorted(rows) == [
        "single-shared lr=0.0001",
        "single-shared lr=0.0003",
        "voting-isolated every=1 steps=2",
        "voting-isolated every=4 steps=3",
        "voting-shared every=1 steps=2",
    ]
    assert "voting every=1 steps=2: isolated - shared: final" in out and "1 paired seed" in out
    assert "voting: no paired verdict: the runs differ in more than sharing;" in out
    assert "single: only shared runs, no other sharing mode" in out
    (single,) = [c for c in compare_sharing(collect_map(root).train_cells) if c.workflow == "single"]
    assert single.alone and single.modes == {}  # two lrs: no number pooled over different settings
    long = [ln for ln in out.splitlines() if len(ln) > 120 and not ln.startswith("report: ")]
    assert long == []
