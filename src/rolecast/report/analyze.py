"""`rolecast analyze RUN_DIR`: the accuracy curve (base / peak / final / gain / cliff with intervals), the failure
signatures and early warnings that fired (replayed over metrics.jsonl and the logged episodes with the same
`EarlyWarning` the loop can run), and PNG plots, written to RUN_DIR/analysis/ with a machine-readable
summary.json. Reads only the run directory's files; works on a run that is still going or was killed."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rolecast.core.metric_keys import (
    GRAD,
    key_family,
    parse_named_key,
    parse_policy_key,
    parse_policy_role_key,
    rollback_key,
)
from rolecast.core.rundir import ANALYSIS, EVAL, METRICS, SUMMARY, write_atomic
from rolecast.core.text import last_boxed
from rolecast.diagnostics.curves import Z_95, CurvePoint, CurveSummary, eval_points, summarize_curve, training_points
from rolecast.diagnostics.signatures import AnswerExtractor
from rolecast.diagnostics.warnings import Alert, EarlyWarning, WarningConfig
from rolecast.plan.registration import read_registration
from rolecast.report import style
from rolecast.report.plots import (
    AccuracyPanel,
    Drawn,
    Panel,
    draw_run,
    gradient_panels,
    lr_panel,
    step_range,
    update_panels,
)
from rolecast.report.runfiles import RunFiles, read_run, sweep_base_rows
from rolecast.tasks import make_task

SUMMARY_VERSION = 1
MAX_STEPS_LISTED = 40


def answer_extractor(run: RunFiles) -> tuple[AnswerExtractor, str]:
    """The run's task's own answer extractor when the task can be built offline, else \\boxed{}."""
    task = (run.config or {}).get("task") or {}
    name = task.get("name")
    if not name:
        return last_boxed, "\\boxed{} (task unknown)"
    try:
        t = make_task(name, **(task.get("options") or {}))
        return t.extract_answer, f"task {name!r}"
    except Exception as e:  # a task whose data is absent here: fall back, and say so
        run.notes.append(
            f"task {name!r} could not be built here ({e.__class__.__name__}: {e}); answers are read as \\boxed{{}}"
        )
        return last_boxed, "\\boxed{} (fallback)"


def _ranges(steps: list[int]) -> str:
    """[1, 2, 3, 7, 9, 10] -> '1-3, 7, 9-10'."""
    out: list[str] = []
    for s in steps:
        if out and int(out[-1].split("-")[-1]) == s - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ", ".join(out)


def group_alerts(alerts: list[Alert], examples: int = 3) -> list[dict[str, Any]]:
    """One entry per (signal, subject): the steps it fired at, its first value and the example turns from the
    first steps that had some."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for a in alerts:
        g = groups.get((a.name, a.subject))
        if g is None:
            g = groups[(a.name, a.subject)] = {
                "name": a.name,
                "kind": a.kind,
                "subject": a.subject,
                "first_step": a.step,
                "steps": [],
                "first_value": a.value,
                "max_value": a.value,
                "threshold": a.threshold,
                "message": a.message,
                "examples": [],
            }
        g["steps"].append(a.step)
        g["max_value"] = max(g["max_value"], a.value)
        if len(g["examples"]) < examples:
            g["examples"] += [dataclasses.asdict(e) for e in a.examples[: examples - len(g["examples"])]]
    out = sorted(groups.values(), key=lambda g: (g["first_step"], g["name"], g["subject"]))
    for g in out:
        g["last_step"] = g["steps"][-1]
        g["n_steps"] = len(g["steps"])
    return out


def replay_warnings(
    run: RunFiles, cfg: WarningConfig | None = None, extract: AnswerExtractor = last_boxed
) -> list[Alert]:
    """Every step's metrics (and its logged episodes, where written) through one EarlyWarning, in step order."""
    warn = EarlyWarning(cfg, extract=extract)
    episode_steps = set(run.episode_steps)
    alerts: list[Alert] = []
    for row in run.metrics:
        step = row["step"]
        alerts += warn.check(step, row, run.episodes(step) if step in episode_steps else ())
    return alerts


# A series selector: a metric name -> (stat, label) when the name belongs to the plotted series, else None
Selector = Callable[[str], tuple[str, str] | None]


def grad_role_series(key: str) -> tuple[str, str] | None:
    """grad/<pid>/<role>/<stat> of the plotted stats (norm, share, alignment, instances) -> (stat, "pid/role")."""
    k = parse_policy_role_key(key)
    if k is None or k.family != "grad" or k.stat not in ("norm", "share", "alignment", "instances"):
        return None
    return k.stat, k.subject


def update_series(key: str) -> tuple[str, str] | None:
    """update/<pid>/size and update/<pid>/drift -> (stat, pid)."""
    k = parse_policy_key(key)
    return (k.stat, k.pid) if k is not None and k.family == "update" and k.stat in ("size", "drift") else None


def lr_series(key: str) -> tuple[str, str] | None:
    """policy/<pid>/lr -> ("lr", pid)."""
    k = parse_policy_key(key)
    return (k.stat, k.pid) if k is not None and k.family == "policy" and k.stat == "lr" else None


def collect_series(
    metrics: list[dict[str, Any]], select: Selector
) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """stat -> label -> (steps, values) for every numeric metric `select` names a (stat, label) for."""
    out: dict[str, dict[str, tuple[list[int], list[float]]]] = {}
    for row in metrics:
        for k, v in row.items():
            sel = select(k)
            if sel is None or not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                continue
            stat, label = sel
            xs, ys = out.setdefault(stat, {}).setdefault(label, ([], []))
            xs.append(row["step"])
            ys.append(float(v))
    return out


def _clean(x: Any) -> Any:
    """JSON has no NaN or infinity: write null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def rollbacks(metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rollbacks on early warning and the lr cuts the trainer logged (`rollback/*` keys of metrics.jsonl: an lr
    cut has no `to_step` and `action: lr_cut`), in step order."""
    return [
        {"step": r["step"], **{name: v for k, v in r.items() if (name := parse_named_key(k, "rollback")) is not None}}
        for r in metrics
        if rollback_key("count") in r
    ]


def analyze(run_dir: str | Path, *, plots: bool = True, cfg: WarningConfig | None = None) -> dict[str, Any]:
    """Analyse a run directory; write analysis/summary.json (and the PNGs unless plots=False); return the summary."""
    run = read_run(run_dir)
    out_dir = run.run_dir / ANALYSIS
    notes = run.notes
    config = run.config or {}
    planned = (config.get("train") or {}).get("steps")
    last = run.metrics[-1]["step"] if run.metrics else 0
    status = {
        "steps_logged": len(run.metrics),
        "last_step": last,
        "steps_planned": planned,
        "complete": bool(planned is not None and last >= planned),
    }

    curve_notes: list[str] = []
    if not any(r.get("tag") == "base" for r in run.evals):
        base_rows, base_cell = sweep_base_rows(run.run_dir)
        if base_cell is not None:
            run.evals = [*base_rows, *run.evals]
            curve_notes.append(f"base evaluation read from the sweep's base cell {base_cell}")
    points = eval_points(run.evals, curve_notes)
    if run.evals and all(not isinstance(r.get("per_problem"), list) for r in run.evals):
        curve_notes.append(
            "eval rows hold no per-problem results: differences use unpaired intervals "
            "(conservative for evaluations on the same problems)"
        )
    train_pts = training_points(run.metrics)
    # a cell of a sweep with a registered plan is read with the plan's cliff rule, as the report reads it
    registration = read_registration(run.run_dir.parent)
    plan = registration.plan() if registration else None
    rule = plan.cliff.curve_kwargs() if plan else {}
    if plan:
        curve_notes.append(f"cliff rule from the sweep's registered plan ({plan.title}): {rule}")
    curve: CurveSummary | None = summarize_curve(points, source=EVAL, notes=curve_notes, **rule)
    train_curve = summarize_curve(train_pts, source=f"{METRICS}:accuracy (5-step means)")
    if curve is None and run.evals:
        notes.append(f"{EVAL} has no usable rows")

    extract, extractor_name = answer_extractor(run)
    wcfg = cfg or WarningConfig()
    alerts = replay_warnings(run, wcfg, extract)
    groups = group_alerts(alerts, wcfg.signatures.examples)

    plot_files: list[str] = []
    if plots and (points or train_pts or run.metrics):
        try:
            events = [(g["first_step"], f"{g['name']} [{g['subject']}]") for g in groups]
            figures = run_figures(run, curve or train_curve, points, train_pts, events)
            plot_files = _draw(run, out_dir, figures, notes)
        except ImportError as e:
            notes.append(f"plots skipped: {e}")

    summary = {
        "version": SUMMARY_VERSION,
        "run_dir": str(run.run_dir),
        "run": {
            k: (config.get(s) or {}).get(f)
            for k, s, f in (
                ("task", "task", "name"),
                ("workflow", "workflow", "name"),
                ("sharing", "routing", "sharing"),
                ("model", "model", "path"),
            )
        },
        "status": status,
        "curve": curve.to_dict() if curve else None,
        "train_curve": train_curve.to_dict() if train_curve else None,
        "signatures": [g for g in groups if g["kind"] == "signature"],
        "warnings": [g for g in groups if g["kind"] == "gradient"],
        "rollbacks": rollbacks(run.metrics),
        "gradients_measured": any(key_family(k) == GRAD for r in run.metrics for k in r),
        "gradients_every": gradients_every(config),
        "episode_steps": run.episode_steps,
        "answer_extractor": extractor_name,
        "plots": plot_files,
        "missing": run.missing,
        "notes": notes,
        "thresholds": dataclasses.asdict(wcfg),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / SUMMARY, json.dumps(_clean(summary), indent=1))
    return summary


def gradients_every(config: dict[str, Any]) -> int | None:
    """diagnostics.gradients.every of the run's config (None when the config does not say)."""
    diag = config.get("diagnostics")
    grads = diag.get("gradients") if isinstance(diag, dict) else None
    every = grads.get("every") if isinstance(grads, dict) else None
    return every if isinstance(every, int) and not isinstance(every, bool) else None


def run_title(config: dict[str, Any]) -> str:
    return " / ".join(
        str(x)
        for x in (
            (config.get("task") or {}).get("name"),
            (config.get("workflow") or {}).get("name"),
            (config.get("routing") or {}).get("sharing"),
        )
        if x
    )


def run_figures(
    run: RunFiles,
    curve: CurveSummary | None,
    points: list[CurvePoint],
    train_pts: list[CurvePoint],
    events: list[tuple[int, str]],
) -> list[tuple[str, Drawn]]:
    """(file name, drawn figure) of the run's figures: accuracy (with each policy's lr under it), per-role
    gradients, updates; all on one step axis, so their ticks line up when read together."""
    title = run_title(run.config or {})
    accuracy: list[Panel] = []
    if points or train_pts:
        accuracy = [
            AccuracyPanel(
                points,
                train_pts,
                peak=curve.peak if curve else None,
                cliff=curve.cliff if curve and points else None,
                z=curve.rule.get("interval_z", Z_95) if curve else Z_95,
                events=events,
            ),
            *lr_panel(collect_series(run.metrics, lr_series).get("lr")),
        ]
    grads, grad_notes = gradient_panels(collect_series(run.metrics, grad_role_series))
    updates = update_panels(collect_series(run.metrics, update_series))
    steps = step_range(accuracy, grads, updates)
    out = []
    if accuracy:
        out.append(("accuracy.png", draw_run(accuracy, title=title, steps=steps)))
    if grads or grad_notes:
        drawn = draw_run(grads, title=f"per-role gradients: {title}", steps=steps, note="; ".join(grad_notes))
        out.append(("gradients.png", drawn))
    if updates:
        out.append(("updates.png", draw_run(updates, title=f"updates per policy: {title}", steps=steps)))
    return out


def _draw(run: RunFiles, out_dir: Path, figures: list[tuple[str, Drawn]], notes: list[str]) -> list[str]:
    files = []
    for name, drawn in figures:
        if drawn.figure is None:
            notes.append(f"{name} not drawn: " + "; ".join(drawn.notes))
            continue
        files.append(style.save(drawn.figure, out_dir / name))
    return [str(f.relative_to(run.run_dir)) for f in files]


# ---------------------------------------------------------------------------------------------------------
# Text


def _pm(x: float, se: float, z: float) -> str:
    return f"{x:.3f} ± {z * se:.3f}"


def _diff(d: dict[str, Any]) -> str:
    return f"{d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]" + (" paired" if d["paired"] else "")


def gradients_not_measured(every: int | None, last_step: int) -> str:
    """Why a run has no per-role gradient measurements: diagnostics off, or on but the run ended before its
    first diagnosed step (steps every, 2 * every, ...)."""
    if every == 0:
        return "gradient diagnostics were off, diagnostics.gradients.every 0"
    if every is not None and last_step < every:
        return (
            f"gradient diagnostics were on, diagnostics.gradients.every {every}, but the run ended at step "
            f"{last_step}, before its first diagnosed step ({every})"
        )
    setting = f"diagnostics.gradients.every {every}" if every is not None else "config.yaml does not say"
    return f"metrics.jsonl holds no per-role gradient keys ({setting})"


def _not_measured(s: dict[str, Any]) -> str:
    why = gradients_not_measured(s.get("gradients_every"), s["status"]["last_step"])
    return f"not measured ({why}; only grad_spike on the policies' gradient norms was checked, and it did not fire)"


def _confidence(z: float) -> str:
    """The two-sided confidence of a z-SE interval, as a reader names it: 1.96 -> '95%'."""
    return f"{100 * math.erf(z / math.sqrt(2)):.0f}%"


CLIFF_TYPE_WORDS = {
    "fall_after_gain": "fall after a gain (the study's cliff)",
    "decline_from_base": "decline from the base (no significant gain)",
    "fall_without_gain": "a terminal fall, but neither a significant gain nor an end below the base",
    "none": "no fall",
}


def cliff_type_line(k: dict[str, Any]) -> str:
    """The cliff type with the two tests against the base that decide it (docs/analysis.md, "Cliff types")."""
    rise = k["rise"]
    gain = (
        f"first significant gain at step {k['rise_step']}"
        if k["rise_step"] is not None
        else f"no significant gain (best: step {k['rise_point_step']} {rise['value']:+.3f}"
        f", z {rise['value'] / rise['se']:.2f} <= {k['rise_z']:.2f})"
    )
    return f"{CLIFF_TYPE_WORDS.get(k['type'], k['type'])}; {gain}; final - base {_diff(k['decline'])}"


def format_summary(s: dict[str, Any]) -> str:
    lines = [f"run: {s['run_dir']}"]
    r, st = s["run"], s["status"]
    desc = ", ".join(f"{k} {v}" for k, v in r.items() if v)
    planned = st["steps_planned"]
    progress = f"{st['last_step']}/{planned} steps" if planned is not None else f"{st['last_step']} steps"
    state = "complete" if st["complete"] else "incomplete (still running, or stopped)"
    lines.append(f"  {desc}; {progress} logged, {state}")
    c = s["curve"] or s["train_curve"]
    if c is None:
        lines.append("accuracy: no evaluations and no training accuracy yet")
    else:
        z = c["rule"]["interval_z"]
        ci = f"{_confidence(z)} CI"
        lines.append(
            f"accuracy ({c['source']}, {len(c['points'])} points; ± is a {ci}, {z:.2f} SE, and [] a 95% CI; "
            "`rolecast train` prints ± 1 SE):"
        )
        if c["base"]:
            lines.append(
                f"  base   step {c['base']['step']:>6}  {_pm(c['base']['value'], c['base']['se'], z)} ({ci})  "
                f"(n={c['base']['n']})"
            )
        lines.append(f"  peak   step {c['peak']['step']:>6}  {_pm(c['peak']['value'], c['peak']['se'], z)} ({ci})")
        lines.append(f"  final  step {c['final']['step']:>6}  {_pm(c['final']['value'], c['final']['se'], z)} ({ci})")
        if c["gain"]:
            lines.append(f"  gain   final - base  {_diff(c['gain'])}")
        if c["peak_gain"]:
            lines.append(f"         peak - base   {_diff(c['peak_gain'])}")
        if c["final"]["step"] != c["peak"]["step"]:
            lines.append(f"         final - peak  {_diff(c['final_vs_peak'])}")
        rule = c["rule"]
        if c["cliff"]:
            cl = c["cliff"]
            lines.append(
                f"  cliff  YES from step {cl['step']} (peak at {cl['peak_step']}; {cl['points_below']} points "
                f"below the peak by > {cl['z']:.2f} SE); final - peak {_diff(cl['drop'])}"
            )
        else:
            lines.append(
                f"  cliff  none (rule: the last >= {rule['min_points']} points all below the peak by > "
                f"{rule['cliff_z']:.2f} SE and >= {rule['min_drop']}, without recovery)"
            )
        if c.get("cliff_class"):
            lines.append(f"  type   {cliff_type_line(c['cliff_class'])}")
        lines += [f"  note: {n}" for n in c["notes"]]
    for title, key in (("failure signatures", "signatures"), ("early warnings (gradient signals)", "warnings")):
        groups = s[key]
        if not groups and key == "warnings" and not s.get("gradients_measured", True):
            lines.append(f"{title}: {_not_measured(s)}")
            continue
        if not groups:
            lines.append(f"{title}: none fired")
            continue
        lines.append(f"{title}:")
        for g in groups:
            steps = g["steps"]
            listed = _ranges(steps[:MAX_STEPS_LISTED]) + (" ..." if len(steps) > MAX_STEPS_LISTED else "")
            lines.append(
                f"  {g['name']} [{g['subject']}] at {g['n_steps']} step(s): {listed}; first at step "
                f"{g['first_step']}: {g['message']} (value {g['first_value']:.3g}, threshold "
                f"{g['threshold']:.3g})"
            )
            for e in g["examples"]:
                lines.append(
                    f"      e.g. step {e['step']} problem {e['problem_id']} sample {e['sample']} "
                    f'{e["instance"]}: "{e["excerpt"]}"'
                )
    lines += [_rollback_line(rb) for rb in s.get("rollbacks", [])]
    if s["plots"]:
        lines.append("plots: " + ", ".join(s["plots"]))
    lines.append("summary: analysis/summary.json")
    lines += [f"missing: {m}" for m in s["missing"]]
    lines += [f"note: {n}" for n in s["notes"]]
    return "\n".join(lines)


def _rollback_line(rb: dict[str, Any]) -> str:
    """One line of the summary for a rollback (to a checkpoint) or an lr cut (nothing restored)."""
    if rb.get("action") == "lr_cut":
        return f"lr cut {rb.get('count')}: at step {rb['step']} (lr x{rb.get('lr_scale')}) on {rb.get('signals')}"
    basis = f"eval pass@1 {rb['accuracy']:.3f}" if isinstance(rb.get("accuracy"), float) else "latest checkpoint"
    return (
        f"rollback {rb.get('count')}: at step {rb['step']} to checkpoint step_{rb.get('to_step')} ({basis}; lr "
        f"x{rb.get('lr_scale')}) on {rb.get('signals')}"
    )
