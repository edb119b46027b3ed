"""The powered testbed map (issue 36): its stages' run directories turned into raw results, tables and a figure.

    python scripts/map_power.py collect runs/map-power/s1 --out docs/experiments/map_power/raw/s1
    python scripts/map_power.py tables docs/experiments/map_power/raw --out docs/experiments/map_power
        [--plan src/rolecast/configs/experiments/map_power_plan.yaml]
    python scripts/map_power.py next docs/experiments/map_power/raw --stage 2 > configs/experiments/map_power_s2.yaml

`collect` copies one stage's small raw results (report/labs.py `collect_sweep`: no checkpoints, no episodes).
`tables` reads every stage under RAW (each a collected sweep: s1, s2, ...), only finished cells, and applies the
plan's rules (its `notes`; map_power_plan.yaml):
- each run against its own seed's base evaluation; its curve summarized under the plan's `cliff` rule;
- per workflow and arm, the gain (final - base) per seed, and its mean over seeds with a 95% interval;
- per workflow, Isolated - Shared final (and peak, secondary) paired by seed, mean with a 95% interval, its p
  value (paired t, two-sided) and the detectable difference ((t_0.975 + t_0.80) x SE);
- the sequential rule: a workflow stops when its Isolated - Shared final half-width is <= 0.04 (the single
  agent: its gain's half-width), else it runs in the next stage, up to the cap (stage 4, 20 seeds).
Two intervals for every mean over seeds: the plan's 95% t interval over seeds (SE sd / sqrt(k), k - 1 df), which
the rule reads; and the report's `mean_over_seeds` ("floored": the SE never below the evaluations' own binomial
noise taken as independent between seeds), beside it. The evaluation set is the same 200 held-out problems for
every seed and arm, so the t interval is conditional on those problems; eval.jsonl keeps no per-problem results, so
no interval over problems can be computed from the raw results. The script's first version read the floored
interval in the rule (it wrote stage 2's matrix); the tables show the rule after each stage under both.
Writes DIR/map_power.md (the tables), DIR/map_power.json and DIR/map_power.png (gains and differences). `next`
prints the next stage's matrix by the rule, with the settings of the family's stage 1 (`--first`; default
map_power_s1.yaml, `make run`'s; the LoRA map: `--plan .../map_power_lora_plan.yaml --first .../map_power_lora_s1.yaml`).

    python scripts/map_power.py summary docs/experiments --out docs/experiments/map_power_summary

`confirm` reads a registered confirmatory follow-up (map_power_large_evalopt_plan.yaml, the default `--plan`, or
map_power_code_large_orch_plan.yaml): one workflow's Isolated - Shared on new paired seeds, tested one-sided in the
original map's direction, the pooled estimate beside it.

    python scripts/map_power.py confirm docs/experiments/map_power_large_evalopt/raw \
        --original docs/experiments/map_power_large/raw --out docs/experiments/map_power_large_evalopt
    python scripts/map_power.py confirm docs/experiments/map_power_code_large_orch/raw \
        --original docs/experiments/map_power_code_large/raw --out docs/experiments/map_power_code_large_orch \
        --plan src/rolecast/configs/experiments/map_power_code_large_orch_plan.yaml --workflow orch_workers

`summary` reads the five maps' map_power.json under EXPERIMENTS (`MAPS`: math and code x small and large, and the
small math map's LoRA companion) and writes one table of them all, per workflow x task x size: the issue's "powered
map". Beside it, two **post hoc** tables that no plan registered: the same workflow's gain between the two sizes
(large - small) and between the two tasks (code - math), each a difference of two independent means over seeds
(different builds, different runs) with Welch's interval, its degrees of freedom floored to a whole number.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rolecast.core.rundir import read_jsonl
from rolecast.diagnostics.curves import CurvePoint, PairedDifference, mean_over_seeds, summarize_curve, t_quantile
from rolecast.plan.schema import Plan, load_plan
from rolecast.report.html import collect_map
from rolecast.report.labs import collect_sweep, paired_t_test, t_sf

PLAN = Path(__file__).resolve().parent.parent / "src/rolecast/configs/experiments/map_power_plan.yaml"
TARGET_HALF_WIDTH = 0.04  # the plan's stopping precision
CAP_SEEDS = 20  # the plan's cap: stage 4
STAGE_SEEDS = 5
WORKFLOWS = ("single", "voting", "eval_opt", "orch_workers")
UNFINISHED = ("pending", "running", "incomplete")  # collect_map's states of a cell that has yet to end
ARMS = ("shared", "isolated")


@dataclass(frozen=True)
class Run:
    """One finished training run: where it is, its cell's axes, and its base / peak / final points."""

    name: str
    stage: str
    workflow: str
    arm: str
    seed: int
    base: CurvePoint | None
    peak: CurvePoint
    final: CurvePoint
    cliff_type: str | None
    task: str = ""  # the cell's axes, for the tables' header
    model: str = ""


def read_runs(raw: Path, plan: Plan) -> tuple[list[Run], list[str], dict[int, tuple[int, int]]]:
    """Every finished training cell of every stage under `raw`; notes for unfinished cells and missing bases; and
    the stages that have not ended: stage number (its seeds', seed // 5 + 1) -> (training runs still to run,
    training runs). The plan reads its rule after a stage's last cell, so nothing is read from those."""
    if not raw.is_dir():
        raise SystemExit(f"map_power: {raw}: not a directory (collected stages: scripts/map_power.py collect)")
    runs, notes = [], []
    left, total = Counter[int](), Counter[int]()
    for stage in sorted(p for p in raw.iterdir() if p.is_dir()):
        smap = collect_map(stage)
        notes += [f"{stage.name}: {n}" for n in smap.notes]
        for c in smap.train_cells:
            k = int(c.axes.get("seed") or 0) // STAGE_SEEDS + 1
            total[k] += 1
            left[k] += c.state in UNFINISHED
            if not c.complete or c.curve is None:
                why = f"{c.state}: {c.error}" if c.error else c.state
                notes.append(f"{stage.name}/{c.name}: {why} (left out of every table)")
                continue
            curve = summarize_curve(c.curve.points, notes=list(c.curve.notes), **plan.cliff.curve_kwargs())
            if curve.base is None:
                notes.append(f"{stage.name}/{c.name}: no base evaluation (left out of the gains)")
            runs.append(
                Run(
                    c.name,
                    stage.name,
                    str(c.axes.get("workflow")),
                    str(c.axes.get("sharing")),
                    int(c.axes.get("seed") or 0),
                    curve.base,
                    curve.peak,
                    curve.final,
                    curve.cliff_type,
                    str(c.axes.get("task") or ""),
                    str(c.axes.get("model") or ""),
                )
            )
    unfinished = {k: (left[k], total[k]) for k in sorted(total) if left[k]}
    return sorted(runs, key=lambda r: (WORKFLOWS.index(r.workflow), ARMS.index(r.arm), r.seed)), notes, unfinished


def family(runs: Sequence[Run], plan: Plan) -> tuple[str, str, int]:
    """(task, build size, evaluation problems) of a map, from its runs' cells (the plan's title when none has
    finished): the testbed's code task has 80 held-out problems, its math task 200."""
    code = any(r.task == "testbed_code" for r in runs) if runs else "(code" in (plan.title or "")
    large = any(r.model.endswith("large") for r in runs) if runs else "large build" in (plan.title or "")
    return ("code" if code else "math"), ("large" if large else "small"), (80 if code else 200)


def over_seeds(values: Sequence[float], ses: Sequence[float], floored: bool) -> PairedDifference:
    """The mean of one value per seed with its 95% interval. floored=False: the plan's t interval over seeds (SE
    sd / sqrt(k), k - 1 df): conditional on the evaluation set, which is the same 200 problems for every seed.
    floored=True: the report's `mean_over_seeds`, whose SE is never below the evaluations' own binomial noise
    taken as independent between seeds (a heuristic: it widens the interval toward the problems' sampling)."""
    if floored or len(values) < 2:
        return mean_over_seeds(values, ses)
    k, m = len(values), sum(values) / len(values)
    se = math.sqrt(sum((v - m) ** 2 for v in values) / (k - 1)) / math.sqrt(k)
    q, power = t_quantile(0.975, k - 1), t_quantile(0.80, k - 1)
    return PairedDifference(m, se, k, q, (q + power) * se)


def gain(runs: Sequence[Run], floored: bool = False) -> PairedDifference | None:
    """Final - base over the runs' seeds (each run against its own seed's base)."""
    with_base = [(r.base, r.final) for r in runs if r.base is not None]
    if not with_base:
        return None
    return over_seeds(
        [f.value - b.value for b, f in with_base], [math.hypot(f.se, b.se) for b, f in with_base], floored
    )


def paired(
    runs: Sequence[Run], workflow: str, which: str, floored: bool = False
) -> tuple[PairedDifference, float] | None:
    """Isolated - Shared of `which` (final / peak) over the seeds both arms finished, and its two-sided p."""
    by = {a: {r.seed: r for r in runs if r.workflow == workflow and r.arm == a} for a in ARMS}
    seeds = sorted(set(by["shared"]) & set(by["isolated"]))
    if not seeds:
        return None
    pts = [(getattr(by["shared"][s], which), getattr(by["isolated"][s], which)) for s in seeds]
    diff = over_seeds([b.value - a.value for a, b in pts], [math.hypot(a.se, b.se) for a, b in pts], floored)
    return diff, paired_t_test([b.value - a.value for a, b in pts], "two-sided").p


def half_width(d: PairedDifference) -> float:
    return d.multiplier * d.se


def interval(d: PairedDifference | None) -> str:
    if d is None:
        return "-"
    verdict = "+" if d.low > 0 else "-" if d.high < 0 else "="
    return f"{verdict} {d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"


def rule(runs: Sequence[Run], floored: bool = False) -> dict[str, dict[str, Any]]:
    """The plan's sequential rule per workflow (its t interval; floored=True: read on the report's interval
    instead): the half-width it is read on, seeds so far, stop or continue."""
    out = {}
    for w in WORKFLOWS:
        if w == "single":
            d = gain([r for r in runs if r.workflow == w and r.arm == "shared"], floored)
        else:
            p = paired(runs, w, "final", floored)
            d = p[0] if p else None
        seeds = d.seeds if d else 0
        hw = half_width(d) if d else math.inf
        state = "stopped: precision reached" if hw <= TARGET_HALF_WIDTH else "continue"
        if state == "continue" and seeds >= CAP_SEEDS:
            state = "stopped: cap"
        out[w] = {"seeds": seeds, "half_width": hw, "state": state, "detectable": d.detectable if d else None}
    return out


def rule_by_stage(
    runs: Sequence[Run], unfinished: dict[int, tuple[int, int]] | None = None
) -> list[tuple[int, str, dict[str, Any], dict[str, Any]]]:
    """The rule after each stage (its seeds so far), both readings: (stage, workflow, plan's t, floored). A stage
    in `unfinished` (`read_runs`' third value) is not read: its rows' state says how many of its runs are left."""
    stages = max((r.seed for r in runs), default=-1) // STAGE_SEEDS + 1
    out = []
    for k in range(1, stages + 1):
        so_far = [r for r in runs if r.seed < STAGE_SEEDS * k]
        t, floored = rule(so_far), rule(so_far, floored=True)
        if unfinished and k in unfinished:
            left, total = unfinished[k]
            state = f"not read: stage unfinished ({left} of {total} runs to run)"
            t = {w: t[w] | {"state": state} for w in t}
            floored = {w: floored[w] | {"state": state} for w in floored}
        out += [(k, w, t[w], floored[w]) for w in WORKFLOWS if any(r.workflow == w for r in so_far)]
    return out


def _record(d: PairedDifference | None) -> dict[str, Any]:
    return {"mean": d.mean, "low": d.low, "high": d.high, "se": d.se, "detectable": d.detectable} if d else {}


def tables(raw: Path, plan_path: Path, out: Path) -> dict[str, Any]:
    plan = load_plan(plan_path).plan
    runs, notes, unfinished = read_runs(raw, plan)
    task, size, problems = family(runs, plan)
    md = [f"# The powered testbed map ({task}, {size} build): tables", ""]
    with_plan = "" if plan_path == PLAN else f" --plan {plan_path}"
    md += [f"Generated by `python scripts/map_power.py tables {raw} --out {out}{with_plan}` from the collected stages."]
    md += [""]
    for k, (left, total) in sorted(unfinished.items()):
        md += [
            f"**Interim: stage {k} has not finished ({left} of its {total} training runs still to run).** The plan",
            "reads nothing from an unfinished stage: its rows below are the runs finished so far, not verdicts.",
            "",
        ]
    md += [
        "Intervals: **t** is the plan's (95% t over seeds, k - 1 df; conditional on the evaluation set, the same",
        f"{problems} problems for every seed); **floored** is the report's (`mean_over_seeds`: the SE never below the",
        "evaluations' own binomial noise taken as independent between seeds). +: above 0, -: below, =: neither.",
        "",
        "## Gain (final - base) per workflow and sharing mode",
        "",
        "| workflow | arm | seeds | base (mean) | final (mean) | gain [95% t] | [95% floored] | fall after gain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    result: dict[str, Any] = {"gains": [], "differences": [], "rule": [], "notes": notes}
    result["unfinished_stages"] = {str(k): {"left": v[0], "runs": v[1]} for k, v in unfinished.items()}
    for w in WORKFLOWS:
        for a in ARMS:
            rs = [r for r in runs if r.workflow == w and r.arm == a]
            if not rs:
                continue
            g, gf = gain(rs), gain(rs, floored=True)
            bases = [r.base.value for r in rs if r.base]
            base_mean = sum(bases) / len(bases) if bases else math.nan
            final_mean = sum(r.final.value for r in rs) / len(rs)
            cliffs = sum(r.cliff_type == "fall_after_gain" for r in rs)
            md.append(
                f"| {w} | {a} | {len(rs)} | {base_mean:.3f} | {final_mean:.3f} | {interval(g)} | {interval(gf)} "
                f"| {cliffs} of {len(rs)} |"
            )
            result["gains"].append(
                {"workflow": w, "arm": a, "seeds": [r.seed for r in rs], "base": base_mean, "final": final_mean}
                | {"t": _record(g), "floored": _record(gf), "cliffs": cliffs}
            )
    md += ["", "## Isolated - Shared, paired by seed", ""]
    md += [
        "| workflow | seeds | final [95% t] | [95% floored] | p (paired t, two-sided) | detectable (t) "
        "| peak [95% t] (secondary) |",
        "|---|---|---|---|---|---|---|",
    ]
    for w in WORKFLOWS[1:]:
        fin, fin_f, peak = paired(runs, w, "final"), paired(runs, w, "final", floored=True), paired(runs, w, "peak")
        if fin is None or fin_f is None:
            continue
        (d, p), df = fin, fin_f[0]
        pk = interval(peak[0]) if peak else "-"
        md.append(f"| {w} | {d.seeds} | {interval(d)} | {interval(df)} | {p:.3f} | {d.detectable:.3f} | {pk} |")
        result["differences"].append(
            {"workflow": w, "seeds": d.seeds, "p": p, "t": _record(d), "floored": _record(df)}
            | {"peak_t": _record(peak[0]) if peak else {}}
        )
    md += ["", f"With three comparisons, a Bonferroni reading needs p <= {0.05 / 3:.4f}.", ""]
    md += [
        "## The sequential rule after each stage",
        "",
        "The plan's rule reads the t half-width (the single agent: its gain's; the others: Isolated - Shared",
        "final); the floored reading is shown beside"
        + (" (the script's first version read it when it wrote map_power_s2.yaml)." if plan_path == PLAN else "."),
        "",
        "| after stage | workflow | seeds | half-width t | state (plan's) | half-width floored | state (floored) |",
        "|---|---|---|---|---|---|---|",
    ]
    for k, w, t, f in rule_by_stage(runs, unfinished):
        md.append(
            f"| {k} | {w} | {t['seeds']} | {t['half_width']:.3f} | {t['state']} | {f['half_width']:.3f} | {f['state']} |"
        )
        result["rule"].append({"stage": k, "workflow": w, "t": t, "floored": f})
    if notes:
        md += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return _write(out, "map_power", md, result, figure)


def _write(out: Path, stem: str, md: list[str], result: dict[str, Any], draw: Any) -> dict[str, Any]:
    """OUT/STEM.md (the tables, also printed), OUT/STEM.json and OUT/STEM.png (`draw(result, path)`)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text("\n".join(md) + "\n")
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1, default=_json) + "\n")
    draw(result, out / f"{stem}.png")
    print("\n".join(md))
    return result


def _json(x: Any) -> Any:
    return None if isinstance(x, float) and not math.isfinite(x) else str(x)


def figure(result: dict[str, Any], path: Path) -> None:
    """Left: each arm's gain with its interval; right: Isolated - Shared final with its interval."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6), width_ratios=[3, 2])
    gains = [g for g in result["gains"] if g["t"]]
    for i, g in enumerate(gains):
        color = "#1f77b4" if g["arm"] == "shared" else "#d62728"
        m, lo, hi = g["t"]["mean"], g["t"]["low"], g["t"]["high"]
        left.errorbar(m, i, xerr=[[m - lo], [hi - m]], fmt="o", color=color)
    left.set_yticks(range(len(gains)), [f"{g['workflow']} {g['arm']} ({len(g['seeds'])})" for g in gains])
    left.axvline(0, color="grey", lw=0.8)
    left.set_xlabel("gain: final - base (95% t interval over seeds)")
    left.invert_yaxis()
    diffs = result["differences"]
    for i, d in enumerate(diffs):
        m, lo, hi = d["t"]["mean"], d["t"]["low"], d["t"]["high"]
        right.errorbar(m, i, xerr=[[m - lo], [hi - m]], fmt="o", color="k")
    right.set_yticks(range(len(diffs)), [f"{d['workflow']} ({d['seeds']})" for d in diffs])
    for x in (-TARGET_HALF_WIDTH, TARGET_HALF_WIDTH):
        right.axvline(x, color="grey", lw=0.6, ls=":")
    right.axvline(0, color="grey", lw=0.8)
    right.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=4))
    right.set_xlabel("Isolated - Shared, final (paired by seed)")
    right.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


FIRST_STAGE = PLAN.parent / "map_power_s1.yaml"  # `next` copies a stage's settings from its family's stage 1


def next_stage(raw: Path, plan_path: Path, stage: int, first: Path = FIRST_STAGE) -> str | None:
    """The matrix of stage `stage` by the plan's rule, read on the stages before it under `raw`."""
    runs, _, unfinished = read_runs(raw, load_plan(plan_path).plan)
    early = {k: v for k, v in unfinished.items() if k < stage}
    if early:
        k, (left, total) = min(early.items())
        raise SystemExit(
            f"map_power: stage {k} under {raw} has {left} of {total} runs still to run; the rule is read "
            "after a stage's last cell (collect it again when its sweep has finished)"
        )
    before = [r for r in runs if r.seed < STAGE_SEEDS * (stage - 1)]
    return stage_matrix(rule(before), stage, str(raw), first)


def stage_matrix(state: dict[str, dict[str, Any]], stage: int, raw: str, first: Path = FIRST_STAGE) -> str | None:
    """Stage `stage`'s matrix: seeds 5(stage-1) to 5 stage - 1 of every workflow `state` (the rule's reading)
    has not stopped, with `first`'s settings (its base, plan, `set`, base evaluations and resources; its `out` with
    the stage's number); None when every workflow has stopped or the stage is past the cap."""
    going = [w for w in WORKFLOWS if state[w]["state"] == "continue"]
    if not going or stage > CAP_SEEDS // STAGE_SEEDS:
        return None
    one = yaml.safe_load(first.read_text())
    name = first.name.replace("_s1.yaml", f"_s{stage}.yaml")
    seeds = range(STAGE_SEEDS * (stage - 1), STAGE_SEEDS * stage)
    lines = [
        f"# Stage {stage} of the sequential rule in {one['plan']} (issue 36): seeds {seeds[0]}-{seeds[-1]} of the",
        f"# workflows the rule had not stopped after stage {stage - 1} ({', '.join(going)}), with {first.name}'s",
        f"# settings; written by `python scripts/map_power.py next {raw} --stage {stage} --first {first.name}`",
        "# and registered when its sweep starts, before any of its cells runs.",
        f"#   rolecast sweep configs/experiments/{name} --executor pool",
        f"base: {one['base']}",
        f"out: {one['out'].removesuffix('/s1')}/s{stage}",
        f"plan: {one['plan']}",
        "cells:",
    ]
    # the task and model of the family's cells, where stage 1 names them (the code map's do)
    fixed = "".join(f"{k}: {one['cells'][0][k]}, " for k in ("task", "model") if k in one["cells"][0])
    for seed in seeds:
        for w in going:
            for arm in ("shared",) if w == "single" else ARMS:
                lines.append(f"  - {{workflow: {w}, {fixed}sharing: {arm}, seed: {seed}}}")
    rest = {k: one[k] for k in ("set", "base_eval", "resources") if k in one}
    return "\n".join(lines) + "\n" + yaml.safe_dump(rest, sort_keys=False)


# The powered maps (issue 36), each a folder of docs/experiments written by `tables`: (folder, task, size,
# parameterization). The LoRA map is the small math map's companion; the post hoc contrasts use full fine-tunes only.
MAPS = (
    ("map_power", "math", "small", "full"),
    ("map_power_lora", "math", "small", "LoRA"),
    ("map_power_large", "math", "large", "full"),
    ("map_power_code", "code", "small", "full"),
    ("map_power_code_large", "code", "large", "full"),
)


@dataclass(frozen=True)
class Contrast:
    """b - a of two independent means over seeds: Welch's SE and degrees of freedom (floored to a whole number,
    which widens the interval), the 95% interval and the two-sided p on those df."""

    mean: float
    se: float
    df: int
    low: float
    high: float
    p: float


def welch(a: dict[str, Any], n_a: int, b: dict[str, Any], n_b: int) -> Contrast | None:
    """b - a of two `_record`s (mean and SE over n seeds each, n >= 2); None when either is missing or both SEs
    are 0 (no spread to build an interval on)."""
    if not a or not b or n_a < 2 or n_b < 2:
        return None
    se = math.hypot(a["se"], b["se"])
    if se == 0:
        return None
    df_welch = se**4 / (a["se"] ** 4 / (n_a - 1) + b["se"] ** 4 / (n_b - 1))
    df = max(1, math.floor(df_welch))
    m, q = b["mean"] - a["mean"], t_quantile(0.975, df)
    return Contrast(m, se, df, m - q * se, m + q * se, min(1.0, 2 * t_sf(abs(m / se), df)))


def holm(ps: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down reading of a family of p values: which are rejected at family-wise `alpha`."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    rejected = [False] * len(ps)
    for rank, i in enumerate(order):
        if ps[i] > alpha / (len(ps) - rank):
            break
        rejected[i] = True
    return rejected


def _span(r: dict[str, Any]) -> str:
    if not r:
        return "-"
    verdict = "+" if r["low"] > 0 else "-" if r["high"] < 0 else "="
    return f"{verdict} {r['mean']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]"


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def summary(experiments: Path, out: Path) -> dict[str, Any]:
    """One table of every map's gains and Isolated - Shared differences, and the post hoc contrasts between maps."""
    maps: dict[tuple[str, str, str], dict[str, Any]] = {}
    for folder, task, size, param in MAPS:
        path = experiments / folder / "map_power.json"
        if not path.is_file():
            raise SystemExit(f"map_power summary: {path} is missing (run `tables` for that map first)")
        maps[(task, size, param)] = json.loads(path.read_text())
    md = [
        "# The powered map: workflow x task x size (issue 36)",
        "",
        f"Generated by `python scripts/map_power.py summary {experiments} --out {out}` from each map's",
        "map_power.json (its own tables: `<map>/map_power.md`). Intervals: the plans' 95% t over seeds, conditional on",
        "each task's evaluation set (200 math, 80 code problems, the same for every seed). +: above 0, -: below, =:",
        "neither. Seeds: the gain's (Shared / Isolated); the difference's are the pairs. Rule: the plan's sequential",
        "rule after the last stage read (stopped: the difference, or the single agent's gain, reached a 95% half-width",
        "of 0.04; continues: not yet, its next stage has not run).",
        "",
        "| task | size | policies | workflow | seeds | base | gain Shared [95% t] | gain Isolated [95% t] "
        "| Isolated - Shared final [95% t] | p | Holm 5%, whole map | detectable | falls after a gain | rule |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    result: dict[str, Any] = {"rows": [], "scale": [], "task": []}
    lines: list[str] = []  # the table's rows, less their whole-map Holm reading (it needs every p first)
    for (task, size, param), m in maps.items():
        gains = {(g["workflow"], g["arm"]): g for g in m["gains"]}
        diffs = {d["workflow"]: d for d in m["differences"]}
        last = {r["workflow"]: r for r in m["rule"]}  # rule rows are in stage order: the last one per workflow
        for w in WORKFLOWS:
            s, i, d = gains.get((w, "shared")), gains.get((w, "isolated")), diffs.get(w)
            if s is None:
                continue
            seeds = f"{len(s['seeds'])}" + (f" / {len(i['seeds'])}" if i else "")
            falls = f"{s['cliffs']} of {len(s['seeds'])}" + (f" / {i['cliffs']} of {len(i['seeds'])}" if i else "")
            rule_state = last[w]["t"]["state"] if w in last else "-"
            stage = last[w]["stage"] if w in last else 0
            rule_text = f"stage {stage}: " + ("stopped" if rule_state.startswith("stopped") else rule_state)
            p = f"{d['p']:.3f}" if d else "-"
            det = f"{d['t']['detectable']:.3f}" if d else "-"
            lines.append(
                f"| {task} | {size} | {param} | {w} | {seeds} | {s['base']:.3f} | {_span(s['t'])} "
                f"| {_span(i['t']) if i else '-'} | {_span(d['t']) if d else '-'} | {p} | {{holm}} | {det} "
                f"| {falls} | {rule_text} |"
            )
            result["rows"].append(
                {"task": task, "size": size, "policies": param, "workflow": w, "base": s["base"], "rule": rule_state}
                | {"gain_shared": s["t"], "gain_isolated": i["t"] if i else {}, "difference": d["t"] if d else {}}
                | {"seeds_shared": len(s["seeds"]), "seeds_isolated": len(i["seeds"]) if i else 0}
                | {"pairs": d["seeds"] if d else 0, "p": d["p"] if d else None}
            )
    # Every map's plan reads its own differences (Bonferroni over its workflows); over the whole map the family
    # is every Isolated - Shared row, read here by Holm's step-down.
    tested = [r for r in result["rows"] if r["p"] is not None]
    held = iter(holm([r["p"] for r in tested]))
    for line, r in zip(lines, result["rows"], strict=True):
        r["holm"] = next(held) if r["p"] is not None else None
        md.append(line.replace("{holm}", "-" if r["holm"] is None else "yes" if r["holm"] else "no"))
    md += [
        "",
        f"Over the whole map's {len(tested)} Isolated - Shared rows, Holm's step-down at family-wise 5% rejects "
        f"{sum(bool(r['holm']) for r in tested)}; the smallest p is {_p(min(r['p'] for r in tested))} "
        f"(Holm's first threshold: {0.05 / len(tested):.4f}).",
    ]
    unfinished = [f"{t} {z} ({p})" for (t, z, p), m in maps.items() if m.get("unfinished_stages")]
    if unfinished:
        md += ["", f"**Unfinished stages** in: {', '.join(unfinished)}: their rows are interim."]

    def contrasts(
        key: str, pairs: list[tuple[str, tuple[str, str], tuple[str, str]]], names: tuple[str, str], head: str
    ) -> None:
        first_column = "size" if key == "task" else "task"
        rows = []
        for label, a_key, b_key in pairs:
            a, b = maps[(*a_key, "full")], maps[(*b_key, "full")]
            ga = {(g["workflow"], g["arm"]): g for g in a["gains"]}
            gb = {(g["workflow"], g["arm"]): g for g in b["gains"]}
            for w in WORKFLOWS:
                for arm in ARMS:
                    x, y = ga.get((w, arm)), gb.get((w, arm))
                    if x is None or y is None:
                        continue
                    c = welch(x["t"], len(x["seeds"]), y["t"], len(y["seeds"]))
                    if c is not None:
                        rows.append((label, w, arm, x, y, c))
        held = holm([c.p for *_, c in rows])
        md.extend(["", head, ""])
        md.append(f"| {first_column} | workflow | arm | gain, {names[0]} [seeds] | gain, {names[1]} [seeds] "
                  f"| {names[1]} - {names[0]} [95% Welch] | df | p | Holm 5% |")  # fmt: skip
        md.append("|---" * 9 + "|")
        for (label, w, arm, x, y, c), h in zip(rows, held, strict=True):
            md.append(
                f"| {label} | {w} | {arm} | {x['t']['mean']:+.3f} [{len(x['seeds'])}] | {y['t']['mean']:+.3f} "
                f"[{len(y['seeds'])}] | {'+' if c.low > 0 else '-' if c.high < 0 else '='} {c.mean:+.3f} "
                f"[{c.low:+.3f}, {c.high:+.3f}] | {c.df} | {_p(c.p)} | {'yes' if h else 'no'} |"
            )
            result[key].append(
                {"between": label, "workflow": w, "arm": arm, "first": x["t"]["mean"], "second": y["t"]["mean"]}
                | {"mean": c.mean, "se": c.se, "df": c.df, "low": c.low, "high": c.high, "p": c.p, "holm": h}
            )

    contrasts(
        "scale",
        [(t, (t, "small"), (t, "large")) for t in ("math", "code")],
        ("small", "large"),
        "## Post hoc: the gain at the large build minus the small build's (full fine-tune; no plan registered this)\n\n"
        "The builds differ in size and were built separately; their seeds are independent runs.",
    )
    contrasts(
        "task",
        [(z, ("math", z), ("code", z)) for z in ("small", "large")],
        ("math", "code"),
        "## Post hoc: the gain on code minus the gain on math (full fine-tune; no plan registered this)\n\n"
        "Different tasks are different builds (the code builds start from the math weights) and different "
        "evaluation sets (80 and 200 problems).",
    )
    md += [
        "",
        "Holm 5%: rejected by Holm's step-down over that table's rows (family-wise 5%). A 95% interval that excludes",
        f"0 without surviving Holm is weaker evidence: over a table of {len(result['scale'])} rows, where nothing "
        f"differs, about {0.05 * len(result['scale']):.1f} intervals exclude 0 by chance.",
    ]
    return _write(out, "summary", md, result, summary_figure)


def summary_figure(result: dict[str, Any], path: Path) -> None:
    """One panel per task x size (full fine-tune): each workflow's gain per arm with its 95% t interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 6), sharex=True)
    for r, task in enumerate(("math", "code")):
        for c, size in enumerate(("small", "large")):
            ax = axes[r][c]
            rows = [x for x in result["rows"] if (x["task"], x["size"], x["policies"]) == (task, size, "full")]
            labels: list[str] = []
            shown: set[str] = set()  # each arm labelled once (the single agent has no Isolated arm)
            for i, x in enumerate(rows):
                for arm, off, color in (("shared", -0.12, "#1f77b4"), ("isolated", 0.12, "#d62728")):
                    g = x[f"gain_{arm}"]
                    if g:
                        ax.errorbar(g["mean"], i + off, xerr=[[g["mean"] - g["low"]], [g["high"] - g["mean"]]],
                                    fmt="o", color=color, label=None if arm in shown else arm)  # fmt: skip
                        shown.add(arm)
                labels.append(x["workflow"])
            ax.set_yticks(range(len(labels)), labels)
            ax.axvline(0, color="grey", lw=0.8)
            ax.invert_yaxis()
            ax.set_title(f"{task}, {size} build", fontsize=10)
            if r == 1:
                ax.set_xlabel("gain: final - base (95% t over seeds)")
    axes[0][0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


CONFIRM_ALPHA = 0.05  # both follow-up plans: one-sided, in the direction the map found
CONFIRM_PLAN = PLAN.parent / "map_power_large_evalopt_plan.yaml"


def confirmation(
    new: Sequence[Run], original: Sequence[Run], workflow: str, unfinished: bool = False
) -> dict[str, Any]:
    """A registered confirmatory test of one workflow's Isolated - Shared final accuracy on new paired seeds
    (map_power_large_evalopt_plan.yaml): the one verdict is the paired t test over the new seeds, one-sided in the
    direction of the original map's mean ("less" when Shared was above), at CONFIRM_ALPHA; beside it, none a
    verdict, the two-sided 95% t interval, the peak difference, each arm's gain, and the pooled estimate over the
    original seeds and the new ones (the original seeds were the reason for the test, so the pool is not a test).
    `unfinished`: runs are still to go, and no verdict is read."""
    mine = [r for r in new if r.workflow == workflow]
    before = [r for r in original if r.workflow == workflow]
    overlap = {r.seed for r in mine} & {r.seed for r in before}
    if overlap:
        raise ValueError(f"confirm: seeds {sorted(overlap)} are in both the original map and the new runs")
    first = paired(before, workflow, "final")
    direction = "less" if first is None or first[0].mean < 0 else "greater"
    per_seed = _per_seed(mine)
    seeds, diffs = list(per_seed), list(per_seed.values())
    test = paired_t_test(diffs, direction)
    fin, peak = paired(mine, workflow, "final"), paired(mine, workflow, "peak")
    if unfinished:
        verdict = "not read: runs still to go"
    elif len(diffs) < 2:
        verdict = "not read: fewer than 2 pairs"
    elif test.p < CONFIRM_ALPHA:
        verdict = "confirmed"
    else:
        verdict = "not established"
    pooled = paired(list(before) + list(mine), workflow, "final")
    gains = {a: gain([r for r in mine if r.arm == a]) for a in ARMS}
    return {
        "workflow": workflow,
        "seeds": seeds,
        "differences": diffs,
        "alternative": direction,
        "alpha": CONFIRM_ALPHA,
        "t": test.t,
        "df": test.df,
        "p_one_sided": test.p,
        "verdict": verdict,
        "final": _record(fin[0]) if fin else {},
        "p_two_sided": fin[1] if fin else math.nan,
        "peak": _record(peak[0]) if peak else {},
        "gains": {a: _record(g) for a, g in gains.items()},
        "falls": {a: sum(r.cliff_type == "fall_after_gain" for r in mine if r.arm == a) for a in ARMS},
        "runs": {a: sum(r.arm == a for r in mine) for a in ARMS},
        "original": {"seeds": first[0].seeds, "p_two_sided": first[1]} | _record(first[0]) if first else {},
        "original_differences": {str(s): d for s, d in _per_seed(before).items()},
        "pooled": {"seeds": pooled[0].seeds, "p_two_sided": pooled[1]} | _record(pooled[0]) if pooled else {},
    }


def _per_seed(runs: Sequence[Run]) -> dict[int, float]:
    """Isolated - Shared final of each seed both arms finished, by seed."""
    by = {a: {r.seed: r.final.value for r in runs if r.arm == a} for a in ARMS}
    return {s: by["isolated"][s] - by["shared"][s] for s in sorted(set(by["shared"]) & set(by["isolated"]))}


def confirm(raw: Path, original_raw: Path, plan_path: Path, out: Path, workflow: str) -> dict[str, Any]:
    plan = load_plan(plan_path).plan
    new, notes, unfinished = read_runs(raw, plan)
    original, _, _ = read_runs(original_raw, plan)  # the same cliff rule: the follow-up copies the map's plan
    c = confirmation(new, original, workflow, unfinished=bool(unfinished))
    c["notes"] = notes
    left = sum(v[0] for v in unfinished.values())
    md = [f"# A confirmatory follow-up: {workflow}, Isolated - Shared on new seeds", ""]
    with_plan = "" if plan_path == CONFIRM_PLAN else f" --plan {plan_path}"
    with_plan += "" if workflow == "eval_opt" else f" --workflow {workflow}"
    md += [f"Generated by `python scripts/map_power.py confirm {raw} --original {original_raw} --out {out}{with_plan}`"]
    md += [f"from the collected runs (the plan, {plan_path.name}, registered the test first).", ""]
    if unfinished:
        md += [f"**Interim: {left} training runs still to run. The plan reads no verdict until all have finished.**"]
        md += [""]
    o = c["original"]
    md += [
        "## The verdict (the plan's one test)",
        "",
        "Intervals: 95% t over seeds; +: above 0, -: below, =: neither.",
        "",
        "| | seeds | Isolated - Shared final [95% t] | t (df) | p, one-sided | verdict |",
        "|---|---|---|---|---|---|",
        f"| original map (the reason for the test) | {o.get('seeds', 0)} | {_span(o)} | | "
        f"{o.get('p_two_sided', math.nan):.3f} two-sided | - |",
        f"| **new seeds** ({', '.join(map(str, c['seeds']))}) | {len(c['seeds'])} | {_span(c['final'])} "
        f"| {c['t']:+.2f} ({c['df']}) | **{c['p_one_sided']:.3f}** ({c['alternative']}: Isolated - Shared "
        f"{'<' if c['alternative'] == 'less' else '>'} 0) | **{c['verdict']}** |",
        "",
        f"The test: paired t over the new seeds, one-sided at {CONFIRM_ALPHA}; its two-sided p is "
        f"{c['p_two_sided']:.3f}.",
        "",
        "## Beside it (no verdicts)",
        "",
        "| measure | value [95% t] |",
        "|---|---|",
        f"| Isolated - Shared, peak (new seeds) | {_span(c['peak'])} |",
    ]
    for a in ARMS:
        md.append(
            f"| gain (final - base), {a} ({c['runs'][a]} runs; falls after a gain: {c['falls'][a]}) "
            f"| {_span(c['gains'][a])} |"
        )
    pl = c["pooled"]
    md.append(
        f"| pooled, original + new ({pl.get('seeds', 0)} seeds; the original seeds selected the test) "
        f"| {_span(pl)}, p {pl.get('p_two_sided', math.nan):.3f} two-sided |"
    )
    md += ["", "## Per seed: Isolated - Shared final", ""]
    md += ["| seed | " + " | ".join(map(str, c["seeds"])) + " |", "|---" * (len(c["seeds"]) + 1) + "|"]
    md += ["| difference | " + " | ".join(f"{d:+.4f}" for d in c["differences"]) + " |"]
    if notes:
        md += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return _write(out, "confirm", md, c, confirm_figure)


ROLE_WINDOW = 5  # `roles`: the first and the last 5 training steps of a run
RoleAccuracy = dict[str, tuple[float, float]]  # role -> (mean of its first ROLE_WINDOW steps, of its last)


def role_accuracy(metrics: Path, window: int = ROLE_WINDOW) -> RoleAccuracy:
    """Per role of one run, the mean of its training rollouts' accuracy (`role/<role>/accuracy`: the turns the
    update trained on) over the first and the last `window` steps that logged it, from its metrics.jsonl."""
    rows = read_jsonl(metrics)
    out = {}
    for role in sorted({k.split("/")[1] for r in rows for k in r if k.startswith("role/") and k.endswith("/accuracy")}):
        values = [float(r[f"role/{role}/accuracy"]) for r in rows if f"role/{role}/accuracy" in r]
        first, last = values[:window], values[-window:]
        out[role] = (sum(first) / len(first), sum(last) / len(last))
    return out


def roles_table(shared: dict[int, RoleAccuracy], isolated: dict[int, RoleAccuracy]) -> list[str]:
    """Each role's accuracy per arm and Isolated - Shared paired by seed (the seeds both arms have it), early and
    late, with the plan's 95% t interval and the two-sided paired t test: Markdown rows."""
    md = [
        "| role | steps | Shared | Isolated | Isolated - Shared [95% t] | p, two-sided | pairs |",
        "|---|---|---:|---:|---|---|---:|",
    ]
    seeds = sorted(set(shared) & set(isolated))
    for role in sorted({role for s in seeds for role in shared[s]} & {role for s in seeds for role in isolated[s]}):
        both = [s for s in seeds if role in shared[s] and role in isolated[s]]
        for i, when in enumerate((f"first {ROLE_WINDOW}", f"last {ROLE_WINDOW}")):
            a, b = [shared[s][role][i] for s in both], [isolated[s][role][i] for s in both]
            diffs = [y - x for x, y in zip(a, b, strict=True)]
            d = over_seeds(diffs, [0.0] * len(diffs), floored=False)
            md.append(
                f"| {role} | {when} | {sum(a) / len(a):.3f} | {sum(b) / len(b):.3f} | {interval(d)} "
                f"| {_p(paired_t_test(diffs, 'two-sided').p)} | {len(both)} |"
            )
    return md


def roles(raws: Sequence[Path], plan_path: Path, workflow: str) -> list[str]:
    """Post hoc (no plan registers it): `roles_table` of one workflow's finished runs over every collected folder
    given (a map's and its follow-up's: a seed may appear in only one)."""
    plan = load_plan(plan_path).plan
    acc: dict[str, dict[int, RoleAccuracy]] = {a: {} for a in ARMS}
    for raw in raws:
        for r in read_runs(raw, plan)[0]:
            if r.workflow != workflow:
                continue
            if r.seed in acc[r.arm]:
                raise SystemExit(f"map_power roles: seed {r.seed} ({r.arm}) is in more than one folder given")
            acc[r.arm][r.seed] = role_accuracy(raw / r.stage / r.name / "metrics.jsonl")
    return roles_table(acc["shared"], acc["isolated"])


def confirm_figure(result: dict[str, Any], path: Path) -> None:
    """Each seed's Isolated - Shared final, the original map's seeds and the new ones, with each set's mean and
    95% t interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    sets = [
        ("original map", list(result["original_differences"].values()), result["original"], "#888888"),
        ("new seeds", result["differences"], result["final"], "k"),
    ]
    for i, (_, values, summary, color) in enumerate(sets):
        ax.scatter(values, [i] * len(values), color=color, alpha=0.5, s=14)
        if summary:
            m, lo, hi = summary["mean"], summary["low"], summary["high"]
            ax.errorbar(m, i + 0.25, xerr=[[m - lo], [hi - m]], fmt="o", color=color)
    ax.set_yticks(range(len(sets)), [f"{name} ({len(values)})" for name, values, _, _ in sets])
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_xlabel(f"{result['workflow']}: Isolated - Shared final (dots: seeds; bar: mean, 95% t)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="copy one stage's small raw results")
    c.add_argument("sweep", type=Path)
    c.add_argument("--out", type=Path, required=True)
    t = sub.add_parser("tables", help="tables, JSON and the figure from the collected stages")
    t.add_argument("raw", type=Path)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--plan", type=Path, default=PLAN)
    n = sub.add_parser("next", help="print the next stage's matrix by the plan's rule (nothing when all stopped)")
    n.add_argument("raw", type=Path)
    n.add_argument("--stage", type=int, required=True)
    n.add_argument("--plan", type=Path, default=PLAN)
    n.add_argument("--first", type=Path, default=FIRST_STAGE, help="the family's stage-1 matrix (its settings)")
    m = sub.add_parser("summary", help="one table of the five maps (workflow x task x size), post hoc contrasts beside")
    m.add_argument("experiments", type=Path, help="the folder that holds each map's folder (docs/experiments)")
    m.add_argument("--out", type=Path, required=True)
    f = sub.add_parser("confirm", help="a registered confirmatory test of one workflow on new paired seeds")
    f.add_argument("raw", type=Path, help="the follow-up's collected runs")
    f.add_argument("--original", type=Path, required=True, help="the original map's collected stages")
    f.add_argument("--out", type=Path, required=True)
    f.add_argument("--plan", type=Path, default=CONFIRM_PLAN)
    f.add_argument("--workflow", default="eval_opt", choices=WORKFLOWS[1:])
    r = sub.add_parser("roles", help="post hoc: each role's training-rollout accuracy, Isolated - Shared by seed")
    r.add_argument("raw", type=Path, nargs="+", help="collected stages (a map's and its follow-up's; seeds distinct)")
    r.add_argument("--workflow", required=True, choices=WORKFLOWS[1:])
    r.add_argument("--plan", type=Path, default=PLAN)
    a = parser.parse_args(argv)
    if a.command == "roles":
        print("\n".join(roles(a.raw, a.plan, a.workflow)))
    elif a.command == "confirm":
        confirm(a.raw, a.original, a.plan, a.out, a.workflow)
    elif a.command == "summary":
        summary(a.experiments, a.out)
    elif a.command == "next":
        text = next_stage(a.raw, a.plan, a.stage, a.first)
        print(text or f"every workflow has stopped (or stage {a.stage} is past the cap): no next stage\n", end="")
    elif a.command == "collect":
        cells, copied = collect_sweep(a.sweep, a.out)
        print(f"{a.sweep}: {cells} cells, {copied} files copied to {a.out}")
    else:
        tables(a.raw, a.plan, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
