"""`rolecast report RUNS_DIR`: the empirical map of a sweep as one self-contained HTML file, and as one screen of
text. One row per cell (base, peak, final, gain with its interval, cliff, dominant failure signature, the
evaluation protocol), accuracy curves with peak and cliff markers, per-role gradient share and amplification
where runs measured them, and which sharing mode won per (workflow, task, model), with its uncertainty.

Reads only files: `sweep.json` (cells, axes, status, errors) when the directory is a sweep's, else every
subdirectory that looks like a run; each run through the tolerant readers of `runfiles.py`. A cell that failed,
is still running, or was killed half-way appears as incomplete with what it has, never as an exception. The
HTML has no scripts, no external CSS and no links to fetch: images are PNGs embedded as base64 data URIs.
"""

from __future__ import annotations

import base64
import json
import math
import tempfile
import textwrap
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from rolecast.core.errors import ReportError
from rolecast.core.rundir import (
    CONFIG,
    DONE,
    ERROR,
    EVAL,
    METRICS,
    REPORT,
    STOPPED,
    SWEEP_STATUS,
    RunPaths,
    read_jsonl,
    stopped_reason,
    write_atomic,
)
from rolecast.diagnostics.curves import (
    CLIFF_TYPES,
    Z_95,
    CurvePoint,
    CurveSummary,
    PairedDifference,
    eval_points,
    mean_over_seeds,
    paired_difference,
    summarize_curve,
)
from rolecast.diagnostics.warnings import SIGNATURE_MEANINGS
from rolecast.plan.registration import RegistrationLog, read_registration
from rolecast.report import style
from rolecast.report.analyze import (
    answer_extractor,
    collect_series,
    grad_role_series,
    gradients_every,
    gradients_not_measured,
    group_alerts,
    lr_series,
    replay_warnings,
)
from rolecast.report.design import (
    AXES,
    GROUP_AXES,
    STEPS,
    Design,
    arm,
    condition,
    config_fields,
    describe,
    design,
    differences,
    fmt,
    label,
)
from rolecast.report.plan_view import (
    CLIFF_TYPE_HTML_LEGEND,
    CLIFF_TYPE_LEGEND,
    CLIFF_TYPE_NAMES,
    cliff_label,
    cliff_type_rows,
    posthoc_note,
    registration_lines,
)
from rolecast.report.plots import (
    AccuracyPanel,
    Drawn,
    Panel,
    draw_gain_grid,
    draw_overlay,
    draw_run,
    gradient_panels,
    lr_panel,
)
from rolecast.report.runfiles import read_run

REPORT_FILE = REPORT


@dataclass
class CellView:
    """One cell of the map, as far as its files tell."""

    name: str
    kind: str  # "train" | "base_eval"
    axes: dict[str, Any]
    run_dir: Path
    state: str  # done | stopped | failed | running | incomplete | pending
    error: str | None = None
    base_cell: str | None = None
    steps_logged: int = 0
    steps_planned: int | None = None
    curve: CurveSummary | None = None
    protocol: str = "-"
    signatures: list[dict[str, Any]] = field(default_factory=list)
    grads: dict[str, dict[str, tuple[list[int], list[float]]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # what tells this cell apart (design.py): its axes, and for a run outside a sweep its config's fields
    fields: dict[str, Any] = field(default_factory=dict)
    grad_every: int | None = None  # diagnostics.gradients.every of its config
    last_step: int = 0  # the last step metrics.jsonl holds

    def __post_init__(self) -> None:
        if not self.fields:
            self.fields = dict(self.axes)

    @property
    def complete(self) -> bool:
        return self.state == "done"

    @property
    def trained_points(self) -> list[CurvePoint]:
        return [p for p in self.curve.points if p.step > 0] if self.curve else []

    @property
    def dominant_signature(self) -> dict[str, Any] | None:
        """The failure signature that fired at the most steps (the earliest on ties)."""
        return min(self.signatures, key=lambda g: (-g["n_steps"], g["first_step"]), default=None)

    def gain_class(self) -> str:
        """pos / zero / neg: final - base significantly above 0, within its interval of 0, below; none without."""
        g = self.curve.gain if self.curve and self.trained_points and self.complete else None
        if g is None:
            return "none"
        return "pos" if g.low > 0 else "neg" if g.high < 0 else "zero"


@dataclass
class SharingComparison:
    """Isolated vs Shared (or any two sharing modes) for one condition: a (workflow, task, model) and the
    config fields that differ between runs (`setting`, e.g. "steps=12"; empty in a sweep), the same in both
    modes."""

    workflow: Any
    task: Any
    model: Any
    modes: dict[str, dict[str, float]]  # mode -> peak, peak_se, final, final_se, cells
    a: str  # the reference mode
    b: str
    peak_diff: tuple[float, float] | None  # (b - a, its SE)
    final_diff: tuple[float, float] | None
    # over the seeds both modes finished (paired: same seed, same problems and evaluation problems); None when
    # they share no seed, and the diffs above are then the unpaired pooled ones
    paired_final: PairedDifference | None = None
    paired_peak: PairedDifference | None = None
    setting: str = ""
    # instead of a verdict: why these modes are not compared (their runs differ in more than sharing)
    not_compared: str | None = None
    repeats: list[str] = field(default_factory=list)  # runs left out of the pairing: the same setting and seed
    alone: bool = False  # a == b: no run of another sharing mode exists (finished or not)

    @property
    def multiplier(self) -> float:
        """What turns the SE into a 95% half-width: t over paired seeds, else normal."""
        return self.paired_final.multiplier if self.paired_final else Z_95


@dataclass
class SweepMap:
    runs_dir: Path
    cells: list[CellView]
    matrix: str | None = None
    notes: list[str] = field(default_factory=list)
    adhoc: bool = False  # a directory of runs, not a sweep: runs are told apart by their configs
    registration: RegistrationLog | None = None  # the sweep's registered design (plan/registration.py)

    @property
    def train_cells(self) -> list[CellView]:
        return [c for c in self.cells if c.kind == "train"]

    @property
    def design(self) -> Design:
        return design_of(self.train_cells)


def design_of(cells: list[CellView]) -> Design:
    return design([c.fields for c in cells if c.kind == "train"])


# ---------------------------------------------------------------------------------------------------------
# Reading


def _short(model: Any) -> Any:
    return str(model).rstrip("/").split("/")[-1] if isinstance(model, str) else model


def _axes_from_config(config: dict[str, Any]) -> dict[str, Any]:
    def get(section: str, key: str) -> Any:
        s = config.get(section)
        return s.get(key) if isinstance(s, dict) else None

    return {
        "workflow": get("workflow", "name"),
        "task": get("task", "name"),
        "model": _short(get("model", "path")),
        "sharing": get("routing", "sharing"),
        "seed": config.get("seed"),
    }


def _looks_like_run(d: Path) -> bool:
    return any((d / f).exists() for f in (CONFIG, METRICS, EVAL, DONE, ERROR, STOPPED))


def _last_line(path: Path) -> str | None:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    return lines[-1][:500] if lines else None


def _sweep_rows(runs_dir: Path, notes: list[str]) -> tuple[list[dict[str, Any]], str | None]:
    path = runs_dir / SWEEP_STATUS
    if not path.is_file():
        return [], None
    try:
        data = json.loads(path.read_text())
        cells = [c for c in data["cells"] if isinstance(c, dict) and isinstance(c.get("name"), str)]
        return cells, data.get("matrix")
    except (json.JSONDecodeError, KeyError, TypeError, OSError) as e:
        notes.append(f"{SWEEP_STATUS} unreadable ({e.__class__.__name__}); cells found from the directories instead")
        return [], None


def _state(d: Path, recorded: dict[str, Any]) -> tuple[str, str | None]:
    """The cell's state from its files first (they are written last), then from sweep.json."""
    if (d / DONE).is_file():
        return "done", None
    if (d / STOPPED).is_file():  # the run stopped itself (diverged): final, no final evaluation claimed
        return "stopped", stopped_reason(d)
    if (d / ERROR).is_file():
        return "failed", recorded.get("error") or _last_line(d / ERROR)
    status = recorded.get("status")
    if status == "failed":
        return "failed", recorded.get("error") or "failed (no error recorded)"
    if status == "running":
        return "running", None  # or killed while running: sweep.json cannot tell
    if d.is_dir() and _looks_like_run(d):
        return ("done", None) if _finished_train_run(d) else ("incomplete", None)
    return "pending", None


def _finished_train_run(d: Path) -> bool:
    """A `rolecast train` run (no sweep writes DONE.json for it) finished when its final evaluation is at its
    last planned step (a run with no final evaluation: when it logged every planned step)."""
    run = read_run(d)
    train = (run.config or {}).get("train")
    steps = train.get("steps") if isinstance(train, dict) else None
    if not isinstance(steps, int):
        return False
    if any(r.get("tag") == "final" and r.get("step") == steps for r in run.evals):
        return True
    ev = (run.config or {}).get("eval")
    at_end = ev.get("at_end", True) if isinstance(ev, dict) else True
    return not at_end and len(run.metrics) >= steps and run.metrics[-1].get("step") == steps


def _protocol(rows: list[dict[str, Any]], config: dict[str, Any]) -> str:
    ev = config.get("eval") if isinstance(config.get("eval"), dict) else {}
    temp = ev.get("temperature") if isinstance(ev, dict) else None
    seen: list[str] = []
    for r in rows:
        n = r.get("n_samples", 1)
        t = r.get("temperature", temp)  # rows written before they carried it: the run's setting
        desc = f"{r.get('protocol', 'custom')} T={t if t is not None else '?'} x{n}"
        if desc not in seen:
            seen.append(desc)
    return " / ".join(seen) if seen else "-"


def _cell_view(
    name: str,
    kind: str,
    axes: dict[str, Any],
    d: Path,
    recorded: dict[str, Any],
    base_rows: list[dict[str, Any]],
    *,
    adhoc: bool,
    rule: dict[str, Any] | None = None,
) -> CellView:
    state, error = _state(d, recorded)
    cell = CellView(name, kind, axes, d, state, error, recorded.get("base_cell"))
    if not d.is_dir():
        return cell
    run = read_run(d)
    config = run.config or {}
    cell.axes = {k: (v if v is not None else _axes_from_config(config).get(k)) for k, v in axes.items()}
    cell.steps_logged = len(run.metrics)
    cell.last_step = run.metrics[-1]["step"] if run.metrics else 0
    planned = (config.get("train") or {}).get("steps") if isinstance(config.get("train"), dict) else None
    cell.steps_planned = planned if isinstance(planned, int) else None
    # a sweep's cells differ by its axes (and steps, should they differ); ad-hoc runs by their configs
    cell.fields = {**cell.axes, **(config_fields(config) if adhoc else {STEPS: cell.steps_planned})}
    cell.grad_every = gradients_every(config)
    rows = [*base_rows, *run.evals]
    # the registered plan's cliff rule (`rule`), else the documented defaults
    cell.curve = summarize_curve(eval_points(rows, cell.notes), source=EVAL, notes=cell.notes, **(rule or {}))
    cell.protocol = _protocol(rows, config)
    try:
        extract, _ = answer_extractor(run)
        cell.signatures = [g for g in group_alerts(replay_warnings(run, extract=extract)) if g["kind"] == "signature"]
    except Exception as e:  # a report must not die on one cell's odd episodes
        cell.notes.append(f"failure signatures not checked ({e.__class__.__name__}: {e})")
    cell.grads = collect_series(run.metrics, grad_role_series)
    cell.grads.update(collect_series(run.metrics, lr_series))
    cell.notes += run.notes
    return cell


def collect_map(runs_dir: str | Path) -> SweepMap:
    """Every cell under a sweep's directory (or a directory of runs, or one run directory) with its numbers."""
    runs_dir = Path(runs_dir)
    notes: list[str] = []
    recorded, matrix = _sweep_rows(runs_dir, notes)
    registration = read_registration(runs_dir)
    plan = registration.plan() if registration else None
    rule = plan.cliff.curve_kwargs() if plan else None
    entries: list[tuple[str, str, dict[str, Any], Path, dict[str, Any]]] = []
    if recorded:
        for r in recorded:
            raw = r.get("axes")
            raw = raw if isinstance(raw, dict) else {}
            axes = {k: raw.get(k) for k in AXES}
            axes["model"] = _short(axes["model"])
            entries.append((r["name"], str(r.get("kind", "train")), axes, runs_dir / r["name"], r))
    elif _looks_like_run(runs_dir) and not any(_looks_like_run(d) for d in runs_dir.iterdir() if d.is_dir()):
        entries.append((runs_dir.name, "train", dict.fromkeys(AXES), runs_dir, {}))
    else:
        for d in sorted(p for p in runs_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if not _looks_like_run(d):
                continue
            cfg = read_run(d).config or {}
            steps = (cfg.get("train") or {}).get("steps") if isinstance(cfg.get("train"), dict) else None
            kind = "base_eval" if d.name.startswith("base-") or steps == 0 else "train"
            entries.append((d.name, kind, _axes_from_config(cfg), d, {}))

    # base rows: from the base cell sweep.json names, else from a base cell that matches (workflow, task, model,
    # seed) (one base evaluation per seed), else (workflow, task, model) (sweeps before 2026-12: one for all seeds)
    base_dirs = {name: d for name, kind, _, d, _ in entries if kind == "base_eval"}
    base_by_key: dict[tuple[Any, ...], Path] = {}
    for _, kind, axes, d, _ in entries:
        if kind == "base_eval":
            base_by_key.setdefault(tuple(axes.get(k) for k in ("workflow", "task", "model", "seed")), d)
            base_by_key.setdefault(tuple(axes.get(k) for k in ("workflow", "task", "model")), d)
    cells = []
    for name, kind, axes, d, rec in entries:
        base_rows: list[dict[str, Any]] = []
        if kind == "train":
            bd = (
                base_dirs.get(rec.get("base_cell") or "")
                or base_by_key.get(tuple(axes.get(k) for k in ("workflow", "task", "model", "seed")))
                or base_by_key.get(tuple(axes.get(k) for k in ("workflow", "task", "model")))
            )
            if bd is not None:
                base_rows = [r for r in read_jsonl(RunPaths(bd).eval(), skipped=[]) if r.get("tag") == "base"]
        cells.append(_cell_view(name, kind, axes, d, rec, base_rows, adhoc=not recorded, rule=rule))
    if not cells:
        notes.append(f"no cells found in {runs_dir} (no sweep.json, and no subdirectory holding a run)")
    return SweepMap(runs_dir, cells, matrix, notes, adhoc=not recorded, registration=registration)


# ---------------------------------------------------------------------------------------------------------
# Which sharing mode won


def _pool(cells: list[CellView], which: str) -> tuple[float, float]:
    """Mean of the cells' peaks (or finals) over seeds, with an SE: the evaluations' own SEs combined, or the
    spread across seeds when that is larger."""
    pts = [getattr(c.curve, which) for c in cells if c.curve]
    k = len(pts)
    mean = sum(p.value for p in pts) / k
    se = math.sqrt(sum(p.se**2 for p in pts)) / k
    if k >= 2:
        sd = math.sqrt(sum((p.value - mean) ** 2 for p in pts) / (k - 1))
        se = max(se, sd / math.sqrt(k))
    return mean, se


def _curves_by_seed(cells: list[CellView]) -> list[tuple[Any, CurveSummary]]:
    """(seed, curve) of each cell that has a curve."""
    return [(c.axes.get("seed"), c.curve) for c in cells if c.curve is not None]


def _mode_order(mode: str) -> tuple[bool, bool, str]:
    return (mode != "shared", mode != "isolated", mode)


def compare_sharing(cells: list[CellView], d: Design | None = None) -> list[SharingComparison]:
    """Per condition (a (workflow, task, model) and every config field that differs between runs, held fixed:
    design.py), over finished cells: b - a in peak and final pass@1 for every mode b other than the reference a
    (shared when present, else the first mode; isolated is compared first). Over the seeds both modes finished
    the difference is paired (`paired_difference`: the same seed draws the same problems and evaluates on the
    same problems in every arm); with no common seed, the pooled means are compared, said unpaired. Modes whose
    runs differ in more than sharing (other steps, another lr) are not compared, and the result says why."""
    d = d or design_of(cells)
    conds: dict[tuple[str, ...], dict[str, list[CellView]]] = defaultdict(lambda: defaultdict(list))
    for c in cells:
        if c.kind == "train" and c.complete and c.trained_points:  # a failed or running cell has no final yet
            conds[condition(c.fields, d)][str(c.fields.get("sharing"))].append(c)
    out = []
    groups: dict[tuple[str, ...], list[dict[str, list[CellView]]]] = defaultdict(list)
    for cond, by_mode in conds.items():
        groups[cond[: len(GROUP_AXES)]].append(by_mode)
    for members in groups.values():
        if len({m for by_mode in members for m in by_mode}) == 1:  # one mode in the whole group
            by_mode = members[0]
            mode = next(iter(by_mode))
            wf, task, model = _group_key(by_mode[mode][0])
            # pooled over seeds of one setting; runs of different settings are not pooled into one number
            pooled = _modes(by_mode) if len(members) == 1 else {}
            ran = {
                str(c.fields.get("sharing")) for c in cells if c.kind == "train" and _group_key(c) == (wf, task, model)
            }
            out.append(SharingComparison(wf, task, model, pooled, mode, mode, None, None, alone=ran == {mode}))
            continue
        for by_mode in members:
            if len(by_mode) > 1:
                out += _compare_condition(by_mode, d)
        lonely = _not_compared(members, d)
        if lonely:
            wf, task, model = _group_key(next(iter(members[0].values()))[0])
            out.append(SharingComparison(wf, task, model, {}, "", "", None, None, not_compared="; ".join(lonely)))
    return out


def _modes(by_mode: dict[str, list[CellView]]) -> dict[str, dict[str, float]]:
    """Per mode: peak and final pooled over its seeds (one run per seed: a repeat is not a seed)."""
    modes = {}
    for mode, all_cells in sorted(by_mode.items(), key=lambda kv: _mode_order(kv[0])):
        cs = list({c.fields.get("seed"): c for c in reversed(all_cells)}.values())  # the first run of each seed
        peak, peak_se = _pool(cs, "peak")
        final, final_se = _pool(cs, "final")
        modes[mode] = {"peak": peak, "peak_se": peak_se, "final": final, "final_se": final_se, "cells": len(cs)}
    return modes


def _by_seed(cells: list[CellView], repeats: list[str]) -> dict[Any, CurveSummary]:
    """seed -> curve, one run per seed (a second run with the same settings and seed is a repeat, not a seed)."""
    out: dict[Any, CurveSummary] = {}
    for c in cells:
        if c.curve is None:
            continue
        if c.fields.get("seed") in out:
            repeats.append(c.name)
        else:
            out[c.fields.get("seed")] = c.curve
    return out


def _compare_condition(by_mode: dict[str, list[CellView]], d: Design) -> list[SharingComparison]:
    modes = _modes(by_mode)
    names = list(modes)
    a = names[0]
    first = by_mode[a][0].fields
    setting = describe(first, d.group_fields(first), d)
    out = []
    for b in names[1:]:
        repeats: list[str] = []
        seeds_a, seeds_b = _by_seed(by_mode[a], repeats), _by_seed(by_mode[b], repeats)
        pairs = [(seeds_a[seed], cur) for seed, cur in seeds_b.items() if seed in seeds_a]
        pf = pp = None
        if pairs:
            pf = paired_difference([(x.final, y.final) for x, y in pairs])
            pp = paired_difference([(x.peak, y.peak) for x, y in pairs])
            fd, pd = (pf.mean, pf.se), (pp.mean, pp.se)
        else:
            pd = (modes[b]["peak"] - modes[a]["peak"], math.hypot(modes[a]["peak_se"], modes[b]["peak_se"]))
            fd = (modes[b]["final"] - modes[a]["final"], math.hypot(modes[a]["final_se"], modes[b]["final_se"]))
        wf, task, model = _group_key(by_mode[a][0])
        out.append(SharingComparison(wf, task, model, modes, a, b, pd, fd, pf, pp, setting, repeats=repeats))
    return out


def _not_compared(members: list[dict[str, list[CellView]]], d: Design) -> list[str]:
    """For each setting that finished only one mode while another setting of the group finished another: which,
    and how the nearest run of another mode differs from it (more than sharing, so no verdict)."""
    out = []
    for by_mode in members:
        if len(by_mode) != 1:
            continue
        mode, c = next(iter(by_mode)), next(iter(by_mode.values()))[0]
        others = [o for bm in members for m, os in bm.items() if m != mode for o in os]
        nearest = min(others, key=lambda o: len(differences(c.fields, o.fields, d)))
        diff = ", ".join(differences(nearest.fields, c.fields, d))
        other = str(nearest.fields.get("sharing"))
        where = describe(c.fields, d.group_fields(c.fields), d)
        out.append(f"{mode}{' ' + where if where else ''} has no {other} run alike (nearest {other}: {diff})")
    return out


def _verdict(a: str, b: str, diff: tuple[float, float], z: float = Z_95) -> str:
    d, se = diff
    lo, hi = d - z * se, d + z * se
    if lo > 0:
        return f"{b} wins by {d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
    if hi < 0:
        return f"{a} wins by {-d:+.3f} [{-hi:+.3f}, {-lo:+.3f}]"
    return f"no clear winner: {b} - {a} = {d:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def _design(c: SharingComparison) -> str:
    """How many seeds the difference is paired over, and the smallest difference the design detects."""
    repeats = f"; not paired again: {', '.join(c.repeats)} (same settings and seed)" if c.repeats else ""
    if c.paired_final is None:
        return "unpaired (no common seed)" + repeats
    k = c.paired_final.seeds
    return f"{k} paired seed{'s' if k != 1 else ''}, detectable {c.paired_final.detectable:.3f}" + repeats


NOT_COMPARED = "no paired verdict: the runs differ in more than sharing"


def _only(c: SharingComparison) -> str:
    return f"only {c.a} runs, no other sharing mode" if c.alone else f"only {c.a} finished"


def summary_lines(comparisons: list[SharingComparison]) -> list[str]:
    lines = []
    for c in comparisons:
        key = f"{c.workflow} / {c.task} / {c.model}" + (f" ({c.setting})" if c.setting else "")
        if c.not_compared:
            lines.append(f"{key}: {NOT_COMPARED}: {c.not_compared}")
            continue
        if c.final_diff is None or c.peak_diff is None:
            lines.append(f"{key}: {_only(c)}")
            continue
        z = c.multiplier
        lines.append(
            f"{key}: final {_verdict(c.a, c.b, c.final_diff, z)}; peak {_verdict(c.a, c.b, c.peak_diff, z)}"
            f" ({_design(c)})" + ("  (one role: both modes train one policy)" if c.workflow == "single" else "")
        )
    return lines


def short_summary_lines(comparisons: list[SharingComparison]) -> list[str]:
    """The verdicts for the text map: one line per condition and compared mode, b - a for final and peak with a
    95% interval (t over paired seeds), and the smallest difference the design detects; a line saying so where
    the modes' runs differ in more than sharing."""

    def part(what: str, a: str, b: str, diff: tuple[float, float], z: float) -> str:
        d, se = diff
        lo, hi = d - z * se, d + z * se
        who = f"{b} wins" if lo > 0 else f"{a} wins" if hi < 0 else "no clear winner"
        return f"{what} {d:+.3f} [{lo:+.2f},{hi:+.2f}] {who}"

    varying = [k for k in ("task", "model") if len({getattr(c, k) for c in comparisons}) > 1]
    lines = []
    for c in comparisons:
        key = "/".join([str(c.workflow), *(str(getattr(c, k)) for k in varying)])
        key += f" {c.setting}" if c.setting else ""
        if c.not_compared:
            lines.append(f"{key}: {NOT_COMPARED}; {c.not_compared}")
            continue
        if c.final_diff is None or c.peak_diff is None:
            lines.append(f"{key}: {_only(c)}")
            continue
        z = c.multiplier
        lines.append(
            f"{key}: {c.b} - {c.a}: {part('final', c.a, c.b, c.final_diff, z)}; "
            f"{part('peak', c.a, c.b, c.peak_diff, z)}; {_design(c)}"
        )
    return lines


# ---------------------------------------------------------------------------------------------------------
# Text


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _row_numbers(c: CellView) -> dict[str, str]:
    cur = c.curve
    trained = c.trained_points
    base = cur.base if cur else None
    out = {"base": _f(base.value if base else None), "peak": "-", "final": "-", "gain": "-", "cliff": "-"}
    if cur and trained:
        out["peak"] = f"{cur.peak.value:.3f}@{cur.peak.step}"
        if not c.complete:  # the last evaluation so far is no final: no gain or cliff is claimed
            out["final"] = f"({cur.final.value:.3f}@{cur.final.step})"
            return out
        out["final"] = f"{cur.final.value:.3f}"
        if cur.gain:
            out["gain"] = f"{cur.gain.value:+.3f} [{cur.gain.low:+.2f},{cur.gain.high:+.2f}]"
        out["cliff"] = cliff_label(cur.cliff_type, cur.cliff.step if cur.cliff else None)
    return out


def _state_text(c: CellView) -> str:
    if c.state == "done":
        return "done"
    if c.state in ("incomplete", "running", "stopped") and c.steps_planned:
        return f"{c.state} {c.steps_logged}/{c.steps_planned}"
    return c.state


def _wrap(line: str, width: int, indent: str = "    ") -> list[str]:
    """A line longer than the screen continues on indented lines: nothing is cut."""
    if len(line) <= width:
        return [line]
    return textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


def _fold(line: str, width: int) -> list[str]:
    """A verdict continues on an indented line at its "; " (final; peak), so neither half is cut."""
    head, sep, tail = line.partition("; ")
    if not sep:
        return _wrap(line, width)
    return [*_wrap(head + ";", width), *_wrap(f"    {tail}", width, indent="        ")]


def row_labels(cells: list[CellView], d: Design) -> dict[str, str]:
    """cell name -> its row's name: what tells it apart (design.py); a cell whose settings equal another's
    carries its directory's name too."""
    labels = {c.name: label(c.fields, d) or c.name for c in cells}
    counts: dict[str, int] = defaultdict(int)
    for v in labels.values():
        counts[v] += 1
    return {k: v if counts[v] == 1 else f"{v} ({k})" for k, v in labels.items()}


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], width: int) -> list[str]:
    """Aligned columns, the last one ragged; a row that would pass `width` at its name's length has its name on a
    line of its own above its numbers (nothing is cut)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fixed = sum(widths[1:-1]) + 2 * (len(widths) - 1)  # every column but the name and the last, and the gaps
    fitting = [len(r[0]) for r in rows if len(r[0]) + fixed + len(r[-1]) <= width]
    widths[0] = max([len(header[0]), *fitting])
    widths[-1] = len(header[-1])

    def fmt(r: tuple[str, ...]) -> str:
        return "  ".join(v.ljust(w) if i < len(r) - 1 else v for i, (v, w) in enumerate(zip(r, widths, strict=True)))

    out = [fmt(header)]
    for r in rows:
        out += [r[0], fmt(("", *r[1:]))] if len(r[0]) > widths[0] else [fmt(r)]
    return out


def text_map(smap: SweepMap, width: int = 120) -> str:
    """One screen: a line per training cell (base, peak@step, final, gain [95%], cliff, signature, state), named
    by what tells the cells apart, the protocol(s), and which sharing mode won where. Nothing is cut: a line
    wider than `width` continues on the next."""
    cells = smap.train_cells
    d = design_of(cells)
    protocols = sorted({c.protocol for c in smap.cells if c.protocol != "-"})
    lines = _wrap(
        f"map of {smap.runs_dir}: {len(cells)} training cells; evaluation: {'; '.join(protocols) or '-'}", width
    )
    if d.config_varying:
        lines += _wrap(
            "runs told apart by their configs' differing fields: "
            + ", ".join(f"{d.short[f]} ({f})" if d.short[f] != f else f for f in d.config_varying),
            width,
        )
    if smap.registration is not None:  # folded, not cut: paths and reasons are long
        notes = [f"{t}: {note}" for t in ("map", "sharing") if (note := posthoc_note(smap.registration, t))]
        for line in registration_lines(smap.registration) + notes:
            indent = " " * (len(line) - len(line.lstrip()) + 4)
            lines += textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False) or [""]
    header = ("cell", "base", "peak@step", "final", "gain [95%]", "cliff", "signature", "state")
    rows = []
    errors: list[str] = []
    names = row_labels(cells, d)
    for c in cells:
        n = _row_numbers(c)
        sig = c.dominant_signature
        mark = {"pos": "+", "neg": "-", "zero": "="}.get(c.gain_class(), " ")
        rows.append(
            (
                names[c.name],
                n["base"],
                n["peak"],
                n["final"],
                f"{mark} {n['gain']}" if n["gain"] != "-" else "-",
                n["cliff"],
                f"{sig['name']}({sig['n_steps']})" if sig else "-",
                _state_text(c),
            )
        )
        if c.error:
            errors.append(f"{names[c.name]}: {c.error}")
    lines += _table(header, rows, width)
    lines += [x for e in errors for x in _wrap(f"  error {e}", width)]
    lines.append(
        "gain = final - base, 95% interval; + significantly above 0, = within noise, - below; (x@s): last so far"
    )
    if any(c.curve and c.curve.cliff_type for c in cells):
        legend = list(CLIFF_TYPE_LEGEND)
        if any(len(x) > width for x in legend):  # refolded as one paragraph at the screen's width
            legend = _wrap(" ".join(x.strip() for x in legend), width, indent="  ")
        lines += legend
    shown = sorted({c.dominant_signature["name"] for c in cells if c.dominant_signature})
    if shown:
        lines.append("signature: the failure signature seen at the most logged steps (how many); docs/analysis.md")
        lines += [f"  {name}: {SIGNATURE_MEANINGS.get(name, '')}" for name in shown]
    verdicts = short_summary_lines(compare_sharing(cells, d))
    if any(len(v) > width for v in verdicts):  # fold them all, so they stay aligned
        verdicts = [part for v in verdicts for part in _fold(v, width)]
    lines += verdicts
    bad = [c for c in smap.cells if c.kind == "base_eval" and c.state != "done"]
    lines += [f"base evaluation {c.name}: {c.state}" + (f": {c.error}" if c.error else "") for c in bad]
    lines += [x for n in smap.notes for x in _wrap(n, width)]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# HTML


def _img(path: Path, alt: str) -> dict[str, str]:
    """An image embedded as a data URI (the page fetches nothing)."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return {"src": f"data:image/png;base64,{data}", "alt": alt}


def _group_key(c: CellView) -> tuple[Any, Any, Any]:
    return (c.fields.get("workflow"), c.fields.get("task"), c.fields.get("model"))


def _arms(cells: list[CellView], d: Design) -> dict[tuple[Any, Any, Any], dict[str, list[CellView]]]:
    """(workflow, task, model) -> arm (sharing mode and differing settings: design.arm) -> its cells (seeds)
    that have evaluations after training."""
    by: dict[tuple[Any, Any, Any], dict[str, list[CellView]]] = defaultdict(lambda: defaultdict(list))
    for c in cells:
        if c.kind == "train" and c.curve and c.trained_points:
            members = by[_group_key(c)][arm(c.fields, d)]
            if all(o.fields.get("seed") != c.fields.get("seed") for o in members):  # a repeat is not a seed
                members.append(c)
    return by


def overlay_bands(
    cells: list[CellView], d: Design | None = None
) -> dict[tuple[Any, Any, Any], dict[str, dict[int, tuple[float, float, float]]]]:
    """Per (workflow, task, model) and arm: each evaluated step's mean pass@1 over the seeds that evaluated it,
    with a 95% interval (t over seeds, its SE the larger of the seed spread and the evaluations' own noise, as
    `paired_difference`; one seed: the evaluation's own interval). Runs that differ in more than their seed
    are different arms, never averaged."""
    out: dict[tuple[Any, Any, Any], dict[str, dict[int, tuple[float, float, float]]]] = defaultdict(dict)
    for key, arms in _arms(cells, d or design_of(cells)).items():
        for name, cs in arms.items():
            points: dict[int, list[CurvePoint]] = defaultdict(list)
            for _, cur in _curves_by_seed(cs):
                for p in cur.points:
                    points[p.step].append(p)
            band = {}
            for step, ps in sorted(points.items()):
                m = mean_over_seeds([p.value for p in ps], [p.se for p in ps])
                band[step] = (m.mean, m.low, m.high)
            out[key][name] = band
    return out


def gain_grid(
    cells: list[CellView], d: Design | None = None
) -> tuple[list[str], list[str], dict[tuple[str, str], tuple[float, float, float]]]:
    """Rows (workflows) x columns (arm, with model and task where they vary) -> mean gain final - base over
    seeds with its 95% interval (over seeds, or the one run's own)."""
    d = d or design_of(cells)
    varying = [k for k in ("task", "model") if k in d.varying]
    groups: dict[tuple[str, str], list[CellView]] = defaultdict(list)
    for (wf, _, _), arms in _arms(cells, d).items():
        for cs in arms.values():
            for c in cs:
                if c.complete and c.curve and c.curve.base:
                    col = "/".join([*(str(c.fields.get(k)) for k in varying), arm(c.fields, d)])
                    groups[(str(wf), col)].append(c)
    gains = {}
    for key, cs in groups.items():
        diff = paired_difference([(cur.base, cur.final) for _, cur in _curves_by_seed(cs) if cur.base is not None])
        gains[key] = (diff.mean, diff.low, diff.high)
    rows = list(dict.fromkeys(r for r, _ in sorted(gains)))
    cols = list(dict.fromkeys(c for _, c in sorted(gains, key=lambda k: k[1])))
    return rows, cols, gains


def sweep_figures(smap: SweepMap) -> Iterator[tuple[str, Any]]:
    """(alt text, figure) of the figures a paper would show, drawn one at a time: per (workflow, task, model),
    every arm's curve (mean over seeds, 95% band) with each policy's lr under it; the grid of gains."""
    cells = smap.train_cells
    d = design_of(cells)
    arms = _arms(cells, d)
    varying = [k for k in ("task", "model") if k in d.varying]
    for key, modes in sorted(overlay_bands(cells, d).items(), key=lambda kv: tuple(map(str, kv[0]))):
        wf, task, model = key
        lrs = {}
        seeds = {}
        for name, cs in arms[key].items():
            seeds[name] = len(cs)
            first = min(cs, key=lambda c: str(c.fields.get("seed")))  # every seed trains on the same schedule
            if first.grads.get("lr"):
                lrs[name] = first.grads["lr"]
        where = ", ".join(str(x) for x, k in ((task, "task"), (model, "model")) if k in varying)
        title = f"{wf}{' (' + where + ')' if where else ''}: held-out pass@1 per arm, with each policy's lr"
        yield f"overlay {wf} {where}".strip(), draw_overlay(modes, lrs or None, title=title, seeds=seeds)
    rows, cols, gains = gain_grid(cells, d)
    if gains:
        yield "gain grid", draw_gain_grid(rows, cols, gains)


def cell_figure(c: CellView, title: str) -> Drawn | None:
    """One figure per cell, its panels on one step axis: the accuracy curve (95% intervals, peak, cliff, first
    signatures), each policy's lr, the per-role gradient panels worth drawing (plots.gradient_panels)."""
    if c.curve is None and not c.grads:
        return None
    panels: list[Panel] = []
    if c.curve is not None:
        panels.append(
            AccuracyPanel(
                c.curve.points,
                peak=c.curve.peak if c.trained_points else None,
                cliff=c.curve.cliff,
                z=c.curve.rule.get("interval_z", Z_95),
                events=[(g["first_step"], f"{g['name']} [{g['subject']}]") for g in c.signatures],
            )
        )
    panels += lr_panel(c.grads.get("lr"))
    grads, notes = gradient_panels(c.grads)
    return draw_run([*panels, *grads], title=title, note="; ".join(notes))


def _embed(fig: Any, tmp: Path, name: str, alt: str) -> dict[str, str]:
    return _img(style.save(fig, tmp / f"{name}.png"), alt)


def _figures(smap: SweepMap, tmp: Path, notes: list[str]) -> list[dict[str, str]]:
    try:
        return [_embed(fig, tmp, f"figure-{i}", alt) for i, (alt, fig) in enumerate(sweep_figures(smap))]
    except ImportError as e:
        if str(e) not in notes:
            notes.append(str(e))
        return []


def _plots(c: CellView, title: str, tmp: Path, notes: list[str]) -> list[dict[str, str]]:
    """The cell's figure, drawn into a scratch directory and embedded."""
    try:
        drawn = cell_figure(c, title)
    except ImportError as e:
        if str(e) not in notes:
            notes.append(str(e))
        return []
    if drawn is None or drawn.figure is None:
        return []
    return [_embed(drawn.figure, tmp, c.name, f"accuracy and per-role gradients of {c.name}")]


def _map_head(d: Design, protocols: list[str]) -> list[tuple[str, str]]:
    fields = [(d.short[f], "l") for f in d.varying] or [("run", "l")]
    return [
        *fields,
        ("base", ""),
        ("peak (step)", ""),
        ("final", ""),
        ("gain final - base [95%]", ""),
        ("cliff", ""),
        ("cliff type", "l"),  # always shown beside the cliff, as the cliff is: both are the plan's cliff rule
        ("dominant failure signature", "l"),
        *([("eval protocol", "l")] if len(protocols) > 1 else []),
        ("state", "l"),
    ]


def _numbers(c: CellView) -> dict[str, str]:
    cur = c.curve
    out = {"gain": "-", "cliff": "-", "peak": "-", "final": "-", "cliff_class": "", "cliff_type": "-"}
    if cur and c.trained_points and not c.complete:
        out["peak"] = f"{cur.peak.value:.3f} ({cur.peak.step})"
        out["final"] = f"({cur.final.value:.3f} at step {cur.final.step}, so far)"
    elif cur and c.trained_points:
        out["peak"] = f"{cur.peak.value:.3f} ({cur.peak.step})"
        out["final"] = f"{cur.final.value:.3f}"
        if cur.gain:
            out["gain"] = f"{cur.gain.value:+.3f} [{cur.gain.low:+.3f}, {cur.gain.high:+.3f}]"
        out["cliff"] = f"yes, from step {cur.cliff.step}" if cur.cliff else "no"
        out["cliff_class"] = "cliff-yes" if cur.cliff else ""
        out["cliff_type"] = CLIFF_TYPE_NAMES.get(cur.cliff_type or "", "-")
    return out


def _map_rows(cells: list[CellView], d: Design, protocols: list[str]) -> list[dict[str, Any]]:
    """One row of the map table per training cell (the template escapes every value)."""
    rows = []
    labels = row_labels(cells, d)
    for c in cells:
        cur = c.curve
        trained = c.trained_points
        sig = c.dominant_signature
        n = _numbers(c)
        rows.append(
            {
                "name": c.name,
                "label": labels[c.name],
                "classes": " ".join([f"gain-{c.gain_class()}"] + ([] if c.complete else ["incomplete"])),
                "fields": [fmt(c.fields.get(f)) for f in d.varying] or [c.name],
                "base": _f(cur.base.value if cur and cur.base else None),
                "peak": n["peak"],
                "final": n["final"],
                "peak_value": f"{cur.peak.value:.3f}" if cur and trained else "-",
                "final_value": f"{cur.final.value:.3f}" if cur and trained else "-",
                "gain": n["gain"],
                "cliff": n["cliff"],
                "cliff_class": n["cliff_class"],
                "cliff_type": n["cliff_type"],
                "signature": (
                    f"{sig['name']} [{sig['subject']}], {sig['n_steps']} step(s) from {sig['first_step']}"
                    if sig
                    else "-"
                ),
                "protocol": c.protocol if len(protocols) > 1 else None,
                "state": _state_text(c),
                "error": c.error,
            }
        )
    return rows


def _sharing_rows(comparisons: list[SharingComparison]) -> list[dict[str, Any]]:
    rows = []
    for c in comparisons:
        modes = "; ".join(
            f"{m}: peak {v['peak']:.3f} ± {Z_95 * v['peak_se']:.3f}, final {v['final']:.3f} ± "
            f"{Z_95 * v['final_se']:.3f} ({int(v['cells'])} cell(s))"
            for m, v in c.modes.items()
        )
        if c.not_compared:
            verdict = [NOT_COMPARED, c.not_compared]
        elif c.final_diff is None or c.peak_diff is None:
            verdict = [_only(c)]
        else:
            z = c.multiplier
            verdict = [
                f"final: {_verdict(c.a, c.b, c.final_diff, z)}",
                f"peak: {_verdict(c.a, c.b, c.peak_diff, z)}",
                _design(c),
            ]
        where = " / ".join(str(x) for x in (c.workflow, c.task, c.model)) + (f" ({c.setting})" if c.setting else "")
        rows.append({"where": where, "modes": modes or "-", "verdict": verdict})
    return rows


def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("rolecast.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a name the template uses and the code forgot fails loudly
        keep_trailing_newline=True,
    )
    return env.get_template("report.html.j2")


def _no_gradients(c: CellView) -> str | None:
    """Why a cell with a curve shows no per-role gradient panel, or None when it has some."""
    if c.curve is None or any(stat not in ("lr", "instances") for stat in c.grads):
        return None
    return f"no per-role gradient measurements: {gradients_not_measured(c.grad_every, c.last_step)}"


def render_html(smap: SweepMap) -> str:
    """The report page, from templates/report.html.j2."""
    notes = list(smap.notes)
    cells = smap.train_cells
    d = design_of(cells)
    labels = row_labels(cells, d)
    protocols = sorted({c.protocol for c in smap.cells if c.protocol != "-"})
    same = [f"{k} {v}" for k, v in d.same.items()]
    views = []
    with tempfile.TemporaryDirectory(prefix="rolecast-report-") as tmp:
        figures = _figures(smap, Path(tmp), notes)
        for c in cells:
            title = labels[c.name] + (f" ({c.protocol})" if c.protocol != "-" else "")
            views.append(
                {
                    "name": c.name,
                    "label": labels[c.name],
                    "state": _state_text(c),
                    "error": c.error,
                    "images": _plots(c, title, Path(tmp), notes),
                    "no_gradients": _no_gradients(c),
                    "signatures": c.signatures,
                    "notes": c.notes,
                }
            )
    return _template().render(
        title=smap.runs_dir.name,
        runs_dir=str(smap.runs_dir),
        n_train=len(cells),
        n_done=sum(c.complete for c in cells),
        n_base=sum(c.kind == "base_eval" for c in smap.cells),
        matrix=smap.matrix,
        generated=time.strftime("%Y-%m-%d %H:%M:%S"),
        protocols="; ".join(protocols) or "-",
        same=", ".join(same),
        differing=[f"{d.short[f]} ({f})" if d.short[f] != f else f for f in d.config_varying],
        map_head=_map_head(d, protocols),
        map_rows=_map_rows(cells, d, protocols),
        sharing=_sharing_rows(compare_sharing(cells, d)),
        bad_base=[c for c in smap.cells if c.kind == "base_eval" and c.state != "done"],
        figures=figures,
        cells=views,
        notes=notes,
        text_map=text_map(smap),
        **_plan_context(smap, d),
    )


def _plan_context(smap: SweepMap, d: Design) -> dict[str, Any]:
    """The registration, post hoc marks and cliff-type table for the template (report/plan_view.py). The table's
    arms are the figures' and the verdicts' (design.arm: the sharing mode and the settings that differ), one run
    per seed: runs of different settings are not counted together, and a repeat is not another seed."""
    runs: dict[tuple[Any, ...], tuple[dict[str, Any], str | None]] = {}
    for c in smap.train_cells:
        if c.complete and c.curve and c.trained_points:
            a = arm(c.fields, d)
            runs.setdefault(
                (*_group_key(c), a, fmt(c.fields.get("seed"))), ({**c.fields, "sharing": a}, c.curve.cliff_type)
            )
    return {
        "registration": registration_lines(smap.registration) if smap.registration else [],
        "posthoc": {t: posthoc_note(smap.registration, t) for t in ("map", "cliff_types", "sharing", "figures")},
        "cliff_types": cliff_type_rows(list(runs.values())),
        "cliff_type_names": [CLIFF_TYPE_NAMES[t] for t in CLIFF_TYPES],
        "cliff_type_legend": CLIFF_TYPE_HTML_LEGEND,
    }


def write_report(runs_dir: str | Path, out: str | Path | None = None) -> tuple[Path, SweepMap]:
    """Write the HTML report (default RUNS_DIR/report.html, atomically) and return its path and the map."""
    smap = collect_map(runs_dir)
    if not smap.cells:
        raise ReportError(
            f"{runs_dir}: no runs found (no sweep.json, and no subdirectory holding a run); nothing written"
        )
    path = Path(out) if out else smap.runs_dir / REPORT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, render_html(smap))
    return path, smap
