"""Lab II (issue 35): its run directories turned into raw results, tables and figures.

    python scripts/lab2.py collect runs/lab2_pilot --out docs/experiments/lab2/pilot_raw
    python scripts/lab2.py pilot docs/experiments/lab2/pilot_raw \\
        --plan src/rolecast/configs/experiments/lab2_pilot_plan.yaml --out docs/experiments/lab2/pilot
    python scripts/lab2.py tables RAW --plan PLAN --out DIR        # the main lab (and its remedy arms)
    python scripts/lab2.py figures RAW --out DIR [--plan PLAN]     # default: the plan RAW's registration holds

`collect` copies a sweep's small raw results (report/labs.py `collect_sweep`: sweep.json, registration.jsonl;
per cell config.yaml, metrics.jsonl, eval.jsonl, DONE.json, ERROR.txt, resumes.jsonl; no checkpoints, no
episodes); a second run copies nothing new. Every other command reads only such a copy, and only finished cells
(DONE.json); unfinished ones are counted as missing, never analysed.

The rules (all but the last three are the plan's; each table says which plan fields it rests on and is marked
post hoc where the registration says one of them was amended after the first run, where the plan given is not
the registered one, or where the analysis is not in the plan):
- a run's cliff type is the plan's `cliff` rule (diagnostics/curves.py `summarize_curve` with
  `plan.cliff.curve_kwargs()`), each run against its own seed's base evaluation (the sweep's
  `base-{task}-{workflow}-{model}-s{seed}` cell); a "cliff" in every count, test and precursor label is a run
  whose type is in `cliff.counts_as_cliff`;
- counts: per setting (the matrix's model label) and arm, k of n finished runs of each type with a 95%
  Clopper-Pearson interval;
- decisions (`decisions`): cliff_rate by `mcnemar_exact` over the seeds both arms finished (only discordant
  seeds count) or `fisher_exact` over all finished runs; final / peak / gain (final - base) by a paired t-test
  over the seeds both arms finished (report/labs.py `paired_t_test`); the claim is supported when p <= alpha;
- precursors (`predictors`): each run labelled as diagnostics/precursors.py scores it (a cliff run: its cliff's
  first evaluation step, the deadline by `warn_by`; a calm run by `calm_runs`; other runs left out); the runs of
  the plan's arms only (remedy arms change the dynamics the precursor is meant to read). For each precursor in
  `use` (its registry series reduced over subjects by `run_series`) a threshold is fitted on the `seeds.fit`
  runs alone (`fit_threshold`, the plan's `thresholds`), then recall (Clopper-Pearson), median lead (steps and
  fraction of the run's planned steps), false alarms per calm run (Garwood) are measured on the
  `seeds.held_out` runs alone (`score_precursor`); the combined rule (`combined: any`) with every fitted
  threshold (`score_combined`); each against `targets`. `warn_by: before_last_good_point`: the deadline is the
  step before the last evaluation still in the band (the evaluation just before the cliff's first);
- the best precursor (this script's rule, not the plan's; computed from the fit half alone, so the held-out
  half stays a test of it): the highest fit-half recall, ties to fewer fit-half false alarms per calm run, then
  the longer fit-half median lead fraction, then the plan's order; none when it warns no fit-half cliff;
- remedy arms: every arm with finished runs that is not in the plan's `arms`, each against a baseline arm:
  `--remedy-baseline REMEDY=ARM` (or `--remedy-baseline ARM` for all), else the longest plan arm its name starts
  with (`isolated-rollback` -> `isolated`), seed for seed over the held-out seeds (all common seeds when the plan
  has none): cliffs removed = the baseline's cliff runs whose remedied run is not a cliff; share of the peak
  gain kept = (final - base of the remedied run) / (peak - base of the baseline run), per seed where the
  baseline gained (peak > base), with the mean's 95% t interval over seeds (its SE floored by the evaluations'
  own noise, `mean_over_seeds`) and how many seeds kept at least 90%. Always post hoc: the plan holds no remedy
  rule;
- the pilot's regime rule (the plan's `notes`, applied by `choose_regime`): per setting and arm count the runs
  counted as cliffs; the setting whose best arm has the highest count wins if that count is at least a third
  of the arm's planned seeds (1 of 3); ties go to LoRA, then to the lower lr (from the cells' configs), then
  the label; if no setting reaches it, the setting with the most counted runs over all arms (ties as above),
  and "regime not found".
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rolecast.core.errors import ConfigError
from rolecast.core.rundir import CONFIG, RunPaths, read_jsonl
from rolecast.diagnostics.curves import CLIFF_TYPES, CurvePoint, CurveSummary, mean_over_seeds, summarize_curve
from rolecast.diagnostics.intervals import (
    Proportion,
    Rate,
    fisher_exact,
    mcnemar_exact,
    proportion,
)
from rolecast.diagnostics.precursors import (
    FittedThreshold,
    LabelledRun,
    PrecursorScore,
    RunSeries,
    fit_threshold,
    resolve_precursor,
    run_series,
    score_combined,
    score_precursor,
    split_by_seed,
)
from rolecast.plan.registration import RegistrationLog, covers, read_registration, registered_design
from rolecast.plan.schema import Decision, Plan, PlanFile, PredictorSpec, load_plan, sha256_text
from rolecast.report.html import collect_map
from rolecast.report.labs import collect_sweep, paired_t_test, point_record
from rolecast.report.plan_view import registration_lines

KEEP_SHARE = 0.9  # a remedied seed "keeps the gain" when it keeps at least this share of the baseline's peak gain
UNKNOWN = "unknown"  # a run without a base evaluation or a trained point: no type

# ---------------------------------------------------------------------------------------------------------
# Runs


@dataclass
class LabRun:
    """One finished training cell, its curve under the plan's cliff rule (against its own seed's base)."""

    cell: str
    workflow: str
    task: str
    setting: str  # the matrix's model label
    arm: str  # the matrix's sharing label
    seed: int
    steps: int  # planned training steps (lead as a fraction of the run)
    trainable: str | None
    lr: float | None
    curve: CurveSummary | None
    metrics: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def type(self) -> str:
        return (self.curve.cliff_type if self.curve else None) or UNKNOWN

    @property
    def cliff_step(self) -> int | None:
        return self.curve.cliff.step if self.curve and self.curve.cliff else None

    def point(self, which: str) -> CurvePoint | None:
        return getattr(self.curve, which) if self.curve else None

    def value(self, which: str) -> float:
        """base / peak / final pass@1, or gain (final - base); NaN where the curve lacks it."""
        if which == "gain":
            return self.value("final") - self.value("base")
        p = self.point(which)
        return p.value if p is not None else math.nan

    def to_json(self) -> dict[str, Any]:
        c = self.curve
        return {
            "cell": self.cell,
            "setting": self.setting,
            "arm": self.arm,
            "seed": self.seed,
            "steps": self.steps,
            "trainable": self.trainable,
            "lr": self.lr,
            "type": self.type,
            "cliff_step": self.cliff_step,
            "rise_step": c.cliff_class.rise_step if c and c.cliff_class else None,
            **{k: point_record(p) if (p := self.point(k)) else None for k in ("base", "peak", "final")},
            "points": [point_record(p) for p in c.points] if c else [],
        }


@dataclass
class Lab:
    """A lab's raw results as read: the finished runs, the cells the matrix planned, the registration."""

    raw: Path
    runs: list[LabRun]
    planned: dict[tuple[str, str], list[str]]  # (setting, arm) -> every training cell the sweep holds
    log: RegistrationLog | None
    notes: list[str] = field(default_factory=list)
    configs: dict[str, list[Path]] = field(default_factory=dict)  # setting -> its cells' (base cells too) dirs

    def settings(self) -> list[str]:
        return sorted({s for s, _ in self.planned} | {r.setting for r in self.runs})

    def arms(self, setting: str) -> list[str]:
        return sorted({a for s, a in self.planned if s == setting} | {r.arm for r in self.runs if r.setting == setting})

    def of(self, setting: str, arm: str) -> list[LabRun]:
        return sorted((r for r in self.runs if r.setting == setting and r.arm == arm), key=lambda r: r.seed)

    @property
    def unfinished(self) -> int:
        return sum(len(cells) for cells in self.planned.values()) - len(self.runs)


def _config(run_dir: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load((run_dir / CONFIG).read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _settings_of(config: Mapping[str, Any]) -> tuple[str | None, float | None, int | None]:
    model, train = config.get("model") or {}, config.get("train") or {}
    lr = train.get("lr")
    steps = train.get("steps")
    return (
        model.get("trainable"),
        float(lr) if isinstance(lr, (int, float)) else None,
        steps if isinstance(steps, int) else None,
    )


def read_lab(raw: Path, plan: Plan) -> Lab:
    """Every training cell under `raw` (a collected sweep), its curve re-summarized under `plan.cliff`."""
    if not raw.is_dir():
        raise SystemExit(f"lab2: {raw}: not a directory (a collected sweep: scripts/lab2.py collect)")
    smap = collect_map(raw)
    planned: dict[tuple[str, str], list[str]] = defaultdict(list)
    runs, notes = [], list(smap.notes)
    configs: dict[str, list[Path]] = defaultdict(list)
    for c in smap.cells:
        if (c.run_dir / CONFIG).is_file():
            configs[str(c.axes.get("model"))].append(c.run_dir)
    for c in smap.train_cells:
        setting, arm = str(c.axes.get("model")), str(c.axes.get("sharing"))
        planned[(setting, arm)].append(c.name)
        if not c.complete:
            continue
        trainable, lr, steps = _settings_of(_config(c.run_dir))
        curve = (
            summarize_curve(c.curve.points, notes=list(c.curve.notes), **plan.cliff.curve_kwargs()) if c.curve else None
        )
        if curve is None or curve.base is None:
            notes.append(f"{c.name}: no base evaluation found (its type is {UNKNOWN})")
        runs.append(
            LabRun(
                c.name,
                str(c.axes.get("workflow")),
                str(c.axes.get("task")),
                setting,
                arm,
                int(c.axes.get("seed") or 0),
                steps or c.steps_planned or c.last_step,
                trainable,
                lr,
                curve,
                read_jsonl(RunPaths(c.run_dir).metrics, skipped=[]),
            )
        )
    return Lab(raw, runs, dict(planned), smap.registration, notes, dict(configs))


def counted(run: LabRun, plan: Plan) -> bool:
    """Whether the run is a cliff as the plan counts it (`cliff.counts_as_cliff`)."""
    return run.type in plan.cliff.counts_as_cliff


# ---------------------------------------------------------------------------------------------------------
# Post hoc marks


@dataclass
class Provenance:
    """What the registration says about the plan the tables are computed with."""

    log: RegistrationLog | None
    plan_sha256: str
    registered_sha256: str | None

    @classmethod
    def of(cls, lab: Lab, plan_file: PlanFile) -> Provenance:
        design = registered_design(lab.log.rows) if lab.log else None
        text = design.plan_text if design else None
        return cls(lab.log, plan_file.sha256, sha256_text(text) if text is not None else None)

    def header(self) -> list[str]:
        if self.log is None:
            return ["No registration.jsonl: nothing shows that the plan preceded the runs (every table is post hoc)."]
        lines = registration_lines(self.log)
        if self.registered_sha256 != self.plan_sha256:
            lines.append(
                f"the plan given (sha256 {self.plan_sha256[:12]}) is not the registered one "
                f"({(self.registered_sha256 or 'none')[:12]}): every table is post hoc"
            )
        return lines

    def _descriptive_amended(self, fields: Sequence[str]) -> list[str]:
        """Times of amendments after the first run that changed one of `fields` (descriptive ones, e.g. the
        `notes` holding the pilot's regime rule, are recorded but never flagged by `posthoc`)."""
        assert self.log is not None
        return [
            str(row.get("time"))
            for row in self.log.amendments
            if self.log.after_first_run(row)
            and any(covers(f, ch) for f in fields for ch in (row.get("plan") or {}).get("fields", []))
        ]

    def mark(
        self,
        rests_on: Sequence[str],
        *,
        cells: Sequence[str] = (),
        descriptive: Sequence[str] = (),
        not_in_plan: str | None = None,
    ) -> str | None:
        """Why a table resting on these plan fields (and holding these cells) is post hoc, or None."""
        reasons = [f"not in the plan: {not_in_plan}"] if not_in_plan else []
        if self.log is None or self.log.registered is None:
            reasons.append("no registration (nothing shows the plan preceded the runs)")
        elif self.log.late:
            reasons.append("the design was registered after cells had run")
        else:
            if self.registered_sha256 != self.plan_sha256:
                reasons.append("the plan given is not the registered one")
            amended = sorted({f for f, _ in self.log.posthoc(rests_on)})
            if amended:
                reasons.append(f"rests on {', '.join(amended)}, amended after the first run")
            times = self._descriptive_amended(descriptive)
            if times:
                reasons.append(f"rests on {', '.join(descriptive)}, changed after the first run ({', '.join(times)})")
            added = sorted(c for c in self.log.posthoc_cells() if c in set(cells))
            if added:
                reasons.append(f"holds cells added after the first run: {', '.join(added)}")
        return "post hoc: " + "; ".join(reasons) if reasons else None


def _marked(title: str, mark: str | None, rests_on: Sequence[str]) -> list[str]:
    fields = f"rests on the plan's {', '.join(rests_on)}" if rests_on else "rests on no plan field"
    return [f"## {title}", "", f"*{mark}*" if mark else f"*registered ({fields})*", ""]


# ---------------------------------------------------------------------------------------------------------
# Formatting


def fmt_prop(p: Proportion) -> str:
    return f"{p.k}/{p.n} [{p.low:.2f}, {p.high:.2f}]" if p.n else "0/0"


def fmt_rate(r: Rate) -> str:
    if not r.exposure:
        return "- (no calm run)"
    return f"{r.count}/{r.exposure} = {r.value:.2f} [{r.low:.2f}, {r.high:.2f}]"


def fmt_p(p: float) -> str:
    return "-" if math.isnan(p) else f"{p:.4g}"


def _v(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f}"


# ---------------------------------------------------------------------------------------------------------
# Cliff counts by type


@dataclass
class ArmCounts:
    setting: str
    arm: str
    planned: int
    runs: list[LabRun]
    types: dict[str, Proportion]  # over runs with a known type, in CLIFF_TYPES order
    cliffs: Proportion  # runs counted as cliffs

    def to_json(self) -> dict[str, Any]:
        return {
            "setting": self.setting,
            "arm": self.arm,
            "planned": self.planned,
            "finished": len(self.runs),
            "types": {t: _prop_json(p) for t, p in self.types.items()},
            "cliffs": _prop_json(self.cliffs),
        }


def _prop_json(p: Proportion) -> dict[str, Any]:
    return {"k": p.k, "n": p.n, "low": p.low, "high": p.high}


def arm_counts(lab: Lab, plan: Plan, setting: str, arm: str) -> ArmCounts:
    runs = lab.of(setting, arm)
    typed = [r for r in runs if r.type != UNKNOWN]
    types = {t: proportion(sum(r.type == t for r in typed), len(typed)) for t in CLIFF_TYPES}
    cliffs = proportion(sum(counted(r, plan) for r in typed), len(typed))
    return ArmCounts(setting, arm, len(lab.planned.get((setting, arm), [])), runs, types, cliffs)


def counts_table(rows: Sequence[ArmCounts], plan: Plan) -> list[str]:
    head = " | ".join(CLIFF_TYPES)
    lines = [
        f"| setting | arm | finished / planned | {head} | counted as cliffs ({', '.join(plan.cliff.counts_as_cliff)}) |",
        "|---|---|---|" + "---|" * len(CLIFF_TYPES) + "---|",
    ]
    for c in rows:
        cells = " | ".join(fmt_prop(c.types[t]) for t in CLIFF_TYPES)
        lines.append(f"| {c.setting} | {c.arm} | {len(c.runs)}/{c.planned} | {cells} | {fmt_prop(c.cliffs)} |")
    return lines


def runs_table(runs: Sequence[LabRun]) -> list[str]:
    lines = [
        "| setting | arm | seed | type | cliff step | rise step | base | peak (step) | final | final - base |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(runs, key=lambda r: (r.setting, r.arm, r.seed)):
        peak = r.point("peak")
        rise = r.curve.cliff_class.rise_step if r.curve and r.curve.cliff_class else None
        lines.append(
            f"| {r.setting} | {r.arm} | {r.seed} | {r.type} | {r.cliff_step or '-'} | {rise or '-'} | "
            f"{_v(r.value('base'))} | {_v(r.value('peak'))} ({peak.step if peak else '-'}) | "
            f"{_v(r.value('final'))} | {r.value('gain'):+.3f} |"
        )
    return lines


# ---------------------------------------------------------------------------------------------------------
# The pilot's regime rule


@dataclass
class RegimeChoice:
    setting: str | None
    found: bool  # some setting's best arm reached a third of its planned runs
    provisional: bool  # cells were unfinished when it was chosen
    reasons: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"setting": self.setting, "found": self.found, "provisional": self.provisional, "reasons": self.reasons}


def _tie_key(setting: str, info: Mapping[str, tuple[str | None, float | None]]) -> tuple[bool, float, str]:
    """Ties go to LoRA (the study's parameterization), then to the lower lr, then to the label."""
    trainable, lr = info.get(setting, (None, None))
    return (trainable != "lora", lr if lr is not None else math.inf, setting)


def choose_regime(
    counts: Sequence[ArmCounts], info: Mapping[str, tuple[str | None, float | None]], *, provisional: bool = False
) -> RegimeChoice:
    """The pilot plan's regime rule (its `notes`), mechanically: per setting, its best arm's count of runs
    counted as cliffs; the settings whose best arm reaches a third of that arm's planned runs compete on that
    count; if none does, every setting competes on its count over all arms. The highest count wins; ties by
    `_tie_key`. `info`: setting -> (trainable, lr) from its cells' configs."""
    by_setting: dict[str, list[ArmCounts]] = defaultdict(list)
    for c in counts:
        by_setting[c.setting].append(c)
    if not by_setting:
        return RegimeChoice(None, False, provisional, ["no finished run"])
    best = {s: max(cs, key=lambda c: (c.cliffs.k, -c.cliffs.n)) for s, cs in by_setting.items()}
    reached = {s: b.cliffs.k >= 1 and 3 * b.cliffs.k >= max(b.planned, len(b.runs)) for s, b in best.items()}
    total = {s: sum(c.cliffs.k for c in cs) for s, cs in by_setting.items()}
    reasons = [
        f"{s} ({info.get(s, (None, None))[0]}, lr {info.get(s, (None, None))[1]}): best arm {b.arm} "
        f"{b.cliffs.k}/{b.planned} planned ({len(b.runs)} finished){' reaches a third' if reached[s] else ''}; "
        f"over all arms {total[s]}"
        for s, b in sorted(best.items())
    ]
    found = any(reached.values())
    pool = [s for s in best if reached[s]] if found else list(best)
    score = {s: best[s].cliffs.k if found else total[s] for s in pool}
    top = max(score.values())
    tied = sorted((s for s in pool if score[s] == top), key=lambda s: _tie_key(s, info))
    chosen = tied[0]
    how = "its best arm's count" if found else "the count over all arms (no setting reached a third)"
    reasons.append(
        f"chosen: {chosen} by {how}, {top}"
        + (f"; tied with {', '.join(tied[1:])}, broken by LoRA first, then the lower lr" if len(tied) > 1 else "")
    )
    return RegimeChoice(chosen, found, provisional, reasons)


def setting_info(lab: Lab) -> dict[str, tuple[str | None, float | None]]:
    """setting -> (trainable, lr), from its finished cells' configs, else from any of its cells' (a base cell
    takes the settings of its first training cell)."""
    info: dict[str, tuple[str | None, float | None]] = {}
    for r in lab.runs:
        info.setdefault(r.setting, (r.trainable, r.lr))
    for setting, dirs in lab.configs.items():
        if setting not in info and dirs:
            trainable, lr, _ = _settings_of(_config(dirs[0]))
            info[setting] = (trainable, lr)
    return info


def pilot(raw: Path, plan_path: Path, out: Path) -> dict[str, Any]:
    plan_file = load_plan(plan_path)
    plan = plan_file.plan
    lab = read_lab(raw, plan)
    prov = Provenance.of(lab, plan_file)
    arms = list(plan.arms) or sorted({a for _, a in lab.planned})
    counts = [arm_counts(lab, plan, s, a) for s in lab.settings() for a in arms if (s, a) in lab.planned]
    choice = choose_regime(counts, setting_info(lab), provisional=lab.unfinished > 0)
    md = [f"# {plan.title}: tables (generated by scripts/lab2.py pilot; do not edit)", ""]
    md += [*prov.header(), ""]
    if lab.unfinished:
        md += [f"**Partial: {len(lab.runs)} of {len(lab.runs) + lab.unfinished} training cells finished.**", ""]
    md += _marked("Every finished run", prov.mark(["cliff"], cells=[r.cell for r in lab.runs]), ["cliff"])
    md += [*runs_table(lab.runs), ""]
    rests = ["cliff", "arms"]
    md += _marked("Cliff types per setting and arm (95% Clopper-Pearson)", prov.mark(rests), rests)
    md += [*counts_table(counts, plan), ""]
    mark = prov.mark(["cliff", "arms"], descriptive=["notes"])
    md += _marked("The regime rule (the plan's notes)", mark, ["cliff", "arms", "notes"])
    md += [f"> {plan.notes.strip()}", ""]
    md += [f"- {line}" for line in choice.reasons]
    verdict = "regime found" if choice.found else "regime NOT found: the write-up must say so"
    status = "PROVISIONAL (unfinished cells)" if choice.provisional else "final"
    md += ["", f"**Main lab setting: {choice.setting}** ({verdict}; {status})", ""]
    md += [f"- {n}" for n in lab.notes]
    result = _result(plan_path, plan_file, lab, counts=[c.to_json() for c in counts], choice=choice.to_json())
    _write(out, "pilot_tables.md", md, "pilot.json", result)
    print("\n".join(md))
    print(f"wrote {out / 'pilot_tables.md'} and {out / 'pilot.json'}")
    return result


# ---------------------------------------------------------------------------------------------------------
# Decisions


@dataclass
class DecisionResult:
    decision: Decision
    setting: str
    p: float
    detail: str
    n: int

    @property
    def supported(self) -> bool:
        return not math.isnan(self.p) and self.p <= self.decision.alpha

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.decision.name,
            "setting": self.setting,
            "claim": self.decision.claim,
            "test": self.decision.test,
            "alternative": self.decision.alternative,
            "alpha": self.decision.alpha,
            "p": None if math.isnan(self.p) else self.p,
            "supported": self.supported,
            "detail": self.detail,
            "n": self.n,
        }


def _by_seed(runs: Sequence[LabRun]) -> dict[int, LabRun]:
    return {r.seed: r for r in runs}


def decide(lab: Lab, plan: Plan, setting: str, d: Decision) -> DecisionResult:
    """One decision of the plan: `compare: [b, a]`, b against a."""
    b_runs = [r for r in lab.of(setting, d.compare[0]) if r.type != UNKNOWN]
    a_runs = [r for r in lab.of(setting, d.compare[1]) if r.type != UNKNOWN]
    b, a = _by_seed(b_runs), _by_seed(a_runs)
    seeds = sorted(set(a) & set(b))
    if d.test == "fisher_exact":
        bk, ak = sum(counted(r, plan) for r in b_runs), sum(counted(r, plan) for r in a_runs)
        if not b_runs or not a_runs:
            return DecisionResult(d, setting, math.nan, "an arm has no finished run", 0)
        p = fisher_exact(bk, len(b_runs), ak, len(a_runs), d.alternative)
        detail = f"{d.compare[0]} {bk}/{len(b_runs)}, {d.compare[1]} {ak}/{len(a_runs)}"
        return DecisionResult(d, setting, p, detail, len(b_runs) + len(a_runs))
    if d.test == "mcnemar_exact":
        cells = [(counted(b[s], plan), counted(a[s], plan)) for s in seeds]
        both, b_only = sum(x and y for x, y in cells), sum(x and not y for x, y in cells)
        a_only, neither = sum(y and not x for x, y in cells), sum(not x and not y for x, y in cells)
        p = mcnemar_exact(b_only, a_only, d.alternative) if seeds else math.nan
        detail = (
            f"{len(seeds)} paired seeds: both {both}, {d.compare[0]} only {b_only}, {d.compare[1]} only {a_only}, "
            f"neither {neither}"
        )
        return DecisionResult(d, setting, p, detail, len(seeds))
    diffs = [b[s].value(d.measure) - a[s].value(d.measure) for s in seeds]
    t = paired_t_test(diffs, d.alternative)
    detail = (
        f"{len(seeds)} paired seeds: mean {d.measure} difference {t.mean:+.4f}, SE {t.se:.4f}, t {t.t:.3f}, df {t.df}"
    )
    return DecisionResult(d, setting, t.p, detail, len(seeds))


def decisions_table(results: Sequence[DecisionResult]) -> list[str]:
    lines = [
        "| setting | decision | claim | test (alternative) | data | p | alpha | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        d = r.decision
        verdict = "supported" if r.supported else "not shown"
        lines.append(
            f"| {r.setting} | {d.name} | {d.claim} | {d.test} ({d.alternative}) | {r.detail} | {fmt_p(r.p)} | "
            f"{d.alpha} | {verdict} |"
        )
    return lines


# ---------------------------------------------------------------------------------------------------------
# Precursors


def _last_good_step(run: LabRun, cliff_step: int) -> int | None:
    before = [p.step for p in (run.curve.points if run.curve else []) if p.step < cliff_step]
    return max(before) if before else None


def label(run: LabRun, plan: Plan) -> LabelledRun | None:
    """The run as the precursor scoring sees it: a cliff run (counted type, with its cliff's first evaluation
    step), a calm run (by `predictors.calm_runs`), or None (neither: left out)."""
    if run.type == UNKNOWN:
        return None
    if counted(run, plan):
        if run.cliff_step is None:
            return None  # a counted type without the terminal-fall rule has no step to warn before
        deadline = None
        if plan.predictors.warn_by == "before_last_good_point":
            good = _last_good_step(run, run.cliff_step)
            deadline = good - 1 if good is not None else None
        return LabelledRun(run.cell, run.seed, run.steps, run.cliff_step, deadline)
    calm = run.type == "none" if plan.predictors.calm_runs == "no_fall" else True
    return LabelledRun(run.cell, run.seed, run.steps) if calm else None


def spec_name(spec: PredictorSpec) -> str:
    return spec.name if spec.subject == "any" else f"{spec.name} ({spec.subject})"


@dataclass
class PrecursorResult:
    spec: PredictorSpec | None  # None: the combined rule
    name: str
    direction: str | None
    fitted: FittedThreshold | None
    fit_score: PrecursorScore | None
    held_out: PrecursorScore | None
    held_series: list[RunSeries] = field(default_factory=list, repr=False)
    note: str = ""

    def meets(self, plan: Plan) -> dict[str, bool | None]:
        """Each target of the plan, on the held-out runs (None: not measurable)."""
        h, t = self.held_out, plan.predictors.targets
        if h is None:
            return {"recall": None, "false_alarms": None, "lead": None}
        lead = h.median_lead_fraction
        return {
            "recall": None if not h.recall.n else h.recall.value >= t.recall,
            "false_alarms": None
            if not h.false_alarms.exposure
            else h.false_alarms.value <= t.max_false_alarms_per_calm_run,
            "lead": None if lead is None else lead >= t.min_lead_fraction,
        }

    def to_json(self, plan: Plan) -> dict[str, Any]:
        return {
            "name": self.name,
            "direction": self.direction,
            "threshold": self.fitted.threshold if self.fitted else None,
            "fit": _score_json(self.fit_score),
            "held_out": _score_json(self.held_out),
            "meets": self.meets(plan),
            "note": self.note,
        }


def _score_json(s: PrecursorScore | None) -> dict[str, Any] | None:
    if s is None:
        return None
    fa = s.false_alarms
    return {
        "recall": _prop_json(s.recall),
        "false_alarms": {"count": fa.count, "calm_runs": fa.exposure, "low": fa.low, "high": fa.high},
        "calm_alarmed": _prop_json(s.calm_alarmed),
        "leads": s.leads,
        "lead_fractions": s.lead_fractions,
        "median_lead": s.median_lead,
        "median_lead_fraction": s.median_lead_fraction,
    }


def _labelled(lab: Lab, plan: Plan, setting: str) -> list[tuple[LabRun, LabelledRun]]:
    arms = plan.arms or lab.arms(setting)
    return [(r, lr) for a in arms for r in lab.of(setting, a) if (lr := label(r, plan)) is not None]


def score_one(labelled: Sequence[tuple[LabRun, LabelledRun]], spec: PredictorSpec, plan: Plan) -> PrecursorResult:
    """Fit the precursor's threshold on the fit seeds' runs, score it on the held-out seeds' runs."""
    pre = resolve_precursor(spec.name, spec.direction)
    direction = spec.direction or pre.direction
    items: list[RunSeries] = [(lr, run_series(pre.series(r.metrics), direction, spec.subject)) for r, lr in labelled]
    name = spec_name(spec)
    if not any(series for _, series in items):
        return PrecursorResult(spec, name, direction, None, None, None, note="logged in no run")
    fit, held = split_by_seed(items, plan.seeds.fit, plan.seeds.held_out)
    try:
        fitted = fit_threshold(fit, direction, plan.predictors.thresholds.max_false_alarms_per_calm_run)
    except ValueError as e:
        return PrecursorResult(spec, name, direction, None, None, None, held, note=f"not fitted: {e}")
    return PrecursorResult(
        spec, name, direction, fitted, fitted.fit, score_precursor(held, fitted.threshold, direction), held
    )


def score_all(lab: Lab, plan: Plan, setting: str) -> list[PrecursorResult]:
    labelled = _labelled(lab, plan, setting)
    results = [score_one(labelled, spec, plan) for spec in plan.predictors.use]
    fitted = [r for r in results if r.fitted is not None and r.spec is not None]
    if plan.predictors.combined == "any" and fitted:
        fit_seeds, held_seeds = set(plan.seeds.fit), set(plan.seeds.held_out)

        def combined(seeds: set[int]) -> PrecursorScore:
            parts = []
            for r, lr in labelled:
                if lr.seed in seeds:
                    parts.append((lr, [_part(r, p) for p in fitted]))
            return score_combined(parts)

        results.append(
            PrecursorResult(
                None, f"combined (any of {len(fitted)})", None, None, combined(fit_seeds), combined(held_seeds)
            )
        )
    return results


def _part(run: LabRun, p: PrecursorResult) -> tuple[list[tuple[int, float]], float, Any]:
    assert p.spec is not None and p.fitted is not None
    pre = resolve_precursor(p.spec.name, p.spec.direction)
    return (
        list(run_series(pre.series(run.metrics), p.fitted.direction, p.spec.subject)),
        p.fitted.threshold,
        p.fitted.direction,
    )


def best_precursor(results: Sequence[PrecursorResult]) -> PrecursorResult | None:
    """The script's rule, from the fit half alone: the highest fit-half recall, then fewer fit-half false alarms
    per calm run, then the longer fit-half median lead fraction, then the plan's order; None when no single
    precursor warns a fit-half cliff."""
    single = [r for r in results if r.spec is not None and r.fitted is not None and r.fit_score is not None]
    if not single:
        return None

    def key(i: int) -> tuple[float, float, float, int]:
        s = single[i].fit_score
        assert s is not None
        lead = s.median_lead_fraction if s.median_lead_fraction is not None else -math.inf
        return (s.recall.value, -s.false_alarms.value, lead, -i)

    best = single[max(range(len(single)), key=key)]
    return best if best.fit_score is not None and best.fit_score.recall.k > 0 else None


def _lead(s: PrecursorScore) -> str:
    if s.median_lead is None:
        return "-"
    frac = s.median_lead_fraction
    return f"{s.median_lead:g} steps ({frac:.0%} of the run)" if frac is not None else f"{s.median_lead:g} steps"


def _met(v: bool | None) -> str:
    return "-" if v is None else "yes" if v else "no"


def precursor_table(setting: str, results: Sequence[PrecursorResult], plan: Plan) -> list[str]:
    t = plan.predictors.targets
    lines = [
        f"| setting | precursor | threshold (fit seeds) | fit: recall, false alarms / calm run | held-out recall "
        f"(>= {t.recall}) | median lead (>= {t.min_lead_fraction:.0%}) | false alarms / calm run "
        f"(<= {t.max_false_alarms_per_calm_run}) | calm runs alarmed | targets met (recall, alarms, lead) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r.held_out is None or r.fit_score is None:
            lines.append(f"| {setting} | {r.name} | - | {r.note} | - | - | - | - | - |")
            continue
        h, f = r.held_out, r.fit_score
        thr = f"{r.direction} {r.fitted.threshold:.4g}" if r.fitted else "each at its own"
        m = r.meets(plan)
        lines.append(
            f"| {setting} | {r.name} | {thr} | {fmt_prop(f.recall)}, {fmt_rate(f.false_alarms)} | "
            f"{fmt_prop(h.recall)} | {_lead(h)} | {fmt_rate(h.false_alarms)} | {fmt_prop(h.calm_alarmed)} | "
            f"{_met(m['recall'])}, {_met(m['false_alarms'])}, {_met(m['lead'])} |"
        )
    return lines


def trigger_lines(best: PrecursorResult | None) -> list[str]:
    """The best precursor and its fitted threshold as the remedy matrix's override (the threshold in full: the
    trigger fires strictly past it, as `score_precursor` judged it)."""
    if best is None or best.spec is None or best.fitted is None:
        return ["No precursor warned a cliff of the fit seeds: no trigger to carry into a remedy arm."]
    spec, thr = best.spec, best.fitted.threshold
    entry = f"{{name: {spec.name}, threshold: {thr!r}, subject: {spec.subject}"
    entry += f", direction: {spec.direction}}}" if spec.direction else "}"
    return [
        f"Best precursor (fit half): **{best.name}**, alarm when {best.fitted.direction} {thr!r}.",
        "",
        "```yaml",
        f"interventions.rollback.precursors: [{entry}]",
        "interventions.rollback.action: rollback   # or lr_cut (with interventions.rollback.lr_factor)",
        "```",
    ]


# ---------------------------------------------------------------------------------------------------------
# Remedies


@dataclass
class RemedySeed:
    seed: int
    baseline: LabRun
    remedy: LabRun
    share: float | None  # (final - base of the remedy) / (peak - base of the baseline); None: no baseline gain
    share_se: float | None


@dataclass
class RemedyResult:
    setting: str
    arm: str
    baseline_arm: str
    seeds: list[RemedySeed]
    baseline_cliffs: Proportion
    remedy_cliffs: Proportion
    removed: Proportion  # of the baseline's cliff seeds, those whose remedied run is no cliff
    kept: Proportion  # seeds with a baseline gain that kept >= KEEP_SHARE of it
    share_mean: float | None
    share_low: float | None
    share_high: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "setting": self.setting,
            "arm": self.arm,
            "baseline": self.baseline_arm,
            "seeds": [
                {"seed": s.seed, "baseline_type": s.baseline.type, "remedy_type": s.remedy.type, "share": s.share}
                for s in self.seeds
            ],
            "baseline_cliffs": _prop_json(self.baseline_cliffs),
            "remedy_cliffs": _prop_json(self.remedy_cliffs),
            "removed": _prop_json(self.removed),
            "kept": _prop_json(self.kept),
            "share_mean": self.share_mean,
            "share_low": self.share_low,
            "share_high": self.share_high,
        }


def remedy_baseline(arm: str, plan: Plan, given: Mapping[str, str]) -> str | None:
    """The baseline of a remedy arm: `--remedy-baseline` (for this arm, else for every arm: key ""), else the
    longest plan arm its name starts with ("isolated-rollback" -> "isolated")."""
    if arm in given or "" in given:
        return given.get(arm, given.get(""))
    prefixes = [a for a in plan.arms if arm.startswith(a + "-")]
    return max(prefixes, key=len) if prefixes else None


def _share(b: LabRun, r: LabRun) -> tuple[float | None, float | None]:
    gain = b.value("peak") - b.value("base")
    final, base = r.point("final"), r.point("base")
    if not gain > 0 or final is None or base is None:
        return None, None
    return (final.value - base.value) / gain, math.hypot(final.se, base.se) / gain


def remedy(lab: Lab, plan: Plan, setting: str, arm: str, baseline_arm: str) -> RemedyResult:
    seeds = set(plan.seeds.held_out) or None
    base_runs, rem_runs = _by_seed(lab.of(setting, baseline_arm)), _by_seed(lab.of(setting, arm))
    common = sorted(s for s in set(base_runs) & set(rem_runs) if seeds is None or s in seeds)
    rows = [RemedySeed(s, base_runs[s], rem_runs[s], *_share(base_runs[s], rem_runs[s])) for s in common]
    cliff_seeds = [x for x in rows if counted(x.baseline, plan)]
    with_gain = [x for x in rows if x.share is not None]
    shares = [x.share for x in with_gain if x.share is not None]
    ses = [x.share_se for x in with_gain if x.share_se is not None]
    m = mean_over_seeds(shares, ses) if shares else None
    return RemedyResult(
        setting,
        arm,
        baseline_arm,
        rows,
        proportion(len(cliff_seeds), len(rows)),
        proportion(sum(counted(x.remedy, plan) for x in rows), len(rows)),
        proportion(sum(not counted(x.remedy, plan) for x in cliff_seeds), len(cliff_seeds)),
        proportion(sum(s >= KEEP_SHARE for s in shares), len(shares)),
        m.mean if m else None,
        m.low if m else None,
        m.high if m else None,
    )


def remedy_tables(results: Sequence[RemedyResult]) -> list[str]:
    lines = [
        "| setting | remedy arm | baseline | seeds | baseline cliffs | remedy cliffs | cliffs removed | share of the "
        f"peak gain kept, mean [95%] | kept >= {KEEP_SHARE:.0%} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        share = "-" if r.share_mean is None else f"{r.share_mean:.2f} [{r.share_low:.2f}, {r.share_high:.2f}]"
        lines.append(
            f"| {r.setting} | {r.arm} | {r.baseline_arm} | {len(r.seeds)} | {fmt_prop(r.baseline_cliffs)} | "
            f"{fmt_prop(r.remedy_cliffs)} | {fmt_prop(r.removed)} | {share} | {fmt_prop(r.kept)} |"
        )
    lines += [
        "",
        "| setting | remedy arm | seed | baseline type | remedy type | share kept |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        for s in r.seeds:
            share = "- (no baseline gain)" if s.share is None else f"{s.share:.2f}"
            lines.append(f"| {r.setting} | {r.arm} | {s.seed} | {s.baseline.type} | {s.remedy.type} | {share} |")
    return lines


# ---------------------------------------------------------------------------------------------------------
# tables


@dataclass
class SettingAnalysis:
    setting: str
    counts: list[ArmCounts]
    decisions: list[DecisionResult]
    precursors: list[PrecursorResult]
    best: PrecursorResult | None
    remedies: list[RemedyResult]
    remedy_notes: list[str]


def analyze_setting(lab: Lab, plan: Plan, setting: str, baselines: Mapping[str, str]) -> SettingAnalysis:
    arms = plan.arms or lab.arms(setting)
    counts = [arm_counts(lab, plan, setting, a) for a in arms]
    decisions = [decide(lab, plan, setting, d) for d in plan.decisions]
    precursors = score_all(lab, plan, setting)
    remedies, notes = [], []
    for arm in lab.arms(setting):
        if arm in arms or not lab.of(setting, arm):
            continue
        base = remedy_baseline(arm, plan, baselines)
        if base is None:
            notes.append(f"remedy arm {arm}: no baseline arm (name one: --remedy-baseline {arm}=ARM)")
        else:
            remedies.append(remedy(lab, plan, setting, arm, base))
    return SettingAnalysis(setting, counts, decisions, precursors, best_precursor(precursors), remedies, notes)


PRECURSOR_RULES = ("cliff", "seeds", "predictors")


def _tables_md(lab: Lab, plan: Plan, prov: Provenance, analyses: Sequence[SettingAnalysis]) -> list[str]:
    plan_runs = [r for r in lab.runs if not plan.arms or r.arm in plan.arms]
    remedy_runs = [r for r in lab.runs if plan.arms and r.arm not in plan.arms]
    md = [f"# {plan.title}: tables (generated by scripts/lab2.py tables; do not edit)", "", *prov.header(), ""]
    if lab.unfinished:
        md += [f"**Partial: {len(lab.runs)} of {len(lab.runs) + lab.unfinished} training cells finished.**", ""]
    md += _marked("Every finished run", prov.mark(["cliff"], cells=[r.cell for r in lab.runs]), ["cliff"])
    md += [*runs_table(lab.runs), ""]
    cells = [r.cell for r in plan_runs]
    title = "Cliff types per arm (95% Clopper-Pearson)"
    md += _marked(title, prov.mark(["cliff", "arms"], cells=cells), ["cliff", "arms"])
    md += [*counts_table([c for a in analyses for c in a.counts], plan), ""]
    md += _marked("Decisions", prov.mark(["cliff", "arms", "decisions"], cells=cells), ["cliff", "arms", "decisions"])
    md += [*decisions_table([d for a in analyses for d in a.decisions]), ""]
    held, fit = plan.seeds.held_out, plan.seeds.fit
    title = f"Precursors: thresholds fitted on seeds {fit}, measured on seeds {held}"
    md += _marked(title, prov.mark(PRECURSOR_RULES, cells=cells), PRECURSOR_RULES)
    for a in analyses:
        md += [*precursor_table(a.setting, a.precursors, plan), ""]
    not_in_plan = "the best-precursor rule is this script's (its docstring), computed from the fit half alone"
    md += _marked("The best precursor", prov.mark(PRECURSOR_RULES, not_in_plan=not_in_plan), PRECURSOR_RULES)
    for a in analyses:
        md += [f"{a.setting}:", "", *trigger_lines(a.best), ""]
    remedies = [r for a in analyses for r in a.remedies]
    if remedies or any(a.remedy_notes for a in analyses):
        mark = prov.mark(["cliff", "seeds"], cells=[r.cell for r in remedy_runs], not_in_plan="remedy arms")
        md += _marked(f"Remedies on the held-out seeds {held}", mark, ["cliff", "seeds"])
        md += [*remedy_tables(remedies), "", *[f"- {n}" for a in analyses for n in a.remedy_notes], ""]
    md += [f"- {n}" for n in lab.notes]
    return md


def _result(plan_path: Path, plan_file: PlanFile, lab: Lab, **fields: Any) -> dict[str, Any]:
    """What every command's JSON holds (the plan and its sha256, the finished runs, the notes), plus `fields`."""
    return {
        "plan": str(plan_path),
        "plan_sha256": plan_file.sha256,
        "finished": len(lab.runs),
        "unfinished": lab.unfinished,
        "runs": [r.to_json() for r in lab.runs],
        "notes": lab.notes,
        **fields,
    }


def _write(out: Path, md_name: str, md: list[str], json_name: str, result: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / md_name).write_text("\n".join(md) + "\n")
    (out / json_name).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


def tables(raw: Path, plan_path: Path, out: Path, baselines: Mapping[str, str]) -> dict[str, Any]:
    plan_file = load_plan(plan_path)
    plan = plan_file.plan
    lab = read_lab(raw, plan)
    prov = Provenance.of(lab, plan_file)
    analyses = [analyze_setting(lab, plan, s, baselines) for s in lab.settings()]
    md = _tables_md(lab, plan, prov, analyses)
    settings = [
        {
            "setting": a.setting,
            "counts": [c.to_json() for c in a.counts],
            "decisions": [d.to_json() for d in a.decisions],
            "precursors": [p.to_json(plan) for p in a.precursors],
            "best_precursor": a.best.to_json(plan) if a.best else None,
            "remedies": [r.to_json() for r in a.remedies],
        }
        for a in analyses
    ]
    result = _result(plan_path, plan_file, lab, settings=settings)
    _write(out, "tables.md", md, "analysis.json", result)
    for a in analyses:
        print(f"{a.setting}:")
        print("\n".join(trigger_lines(a.best)))
    print(f"wrote {out / 'tables.md'} and {out / 'analysis.json'} ({len(lab.runs)} finished runs)")
    return result


# ---------------------------------------------------------------------------------------------------------
# Figures

TYPE_COLORS = {
    "fall_after_gain": "tab:red",
    "decline_from_base": "tab:purple",
    "fall_without_gain": "tab:orange",
    "none": "tab:blue",
    UNKNOWN: "tab:gray",
}


def _arm_panel(ax: Any, runs: Sequence[LabRun], last: int) -> set[str]:
    """One arm's panel: the band of its seeds' bases, every seed's curve in its type's colour. The types seen."""
    from rolecast.report import style

    bases = [p for r in runs if (p := r.point("base")) is not None]
    if bases:
        m = mean_over_seeds([p.value for p in bases], [p.se for p in bases])
        style.band(ax, [0, last], [m.low, m.low], [m.high, m.high], "0.5")
    for r in runs:
        pts = r.curve.points if r.curve else []
        ax.plot([p.step for p in pts], [p.value for p in pts], color=TYPE_COLORS[r.type], lw=1.2, ms=3,
                marker="o", alpha=0.85, label="_" + r.cell)  # fmt: skip
    seeds = f"{len(runs)} seed" + ("s" if len(runs) != 1 else "")
    ax.set_title(f"{runs[0].arm} ({seeds})", fontsize=style.FONT)
    return {r.type for r in runs}


def curves_figure(lab: Lab, setting: str, arms: Sequence[str]) -> Any:
    """One panel per arm (one pass@1 range for all): every seed's held-out pass@1 (its base at step 0)
    coloured by its cliff type, and the band of the seeds' bases (their mean with its 95% interval). None
    without a finished run."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from rolecast.report import style

    arms = [a for a in arms if lab.of(setting, a)]
    if not arms:
        return None
    points = [p for a in arms for r in lab.of(setting, a) if r.curve for p in r.curve.points]
    last = max((p.step for p in points), default=1)
    lo, hi = min(p.value - 2 * p.se for p in points), max(p.value + 2 * p.se for p in points)  # the base band too
    seen: set[str] = set()
    with style.fonts():
        fig, columns = style.grid([1.3], len(arms), extra=1.4)
        for (ax,), arm in zip(columns, arms, strict=True):
            seen |= _arm_panel(ax, lab.of(setting, arm), last)
            ax.set_ylim(lo - 0.02, hi + 0.02)
            style.bound(ax)
            style.step_axis([ax], 0, last)
        style.ylabel(columns[0][0], style.PASS_AT_1)
        types = [t for t in (*CLIFF_TYPES, UNKNOWN) if t in seen]
        handles: list[Any] = [Line2D([], [], color=TYPE_COLORS[t], marker="o", ms=3) for t in types]
        handles.append(Patch(color="0.5", alpha=0.18))
        style.figure_legend(fig, handles, [*types, "base: mean over seeds, 95% interval"])
        style.title(fig, f"Lab II, {setting}: every seed's held-out pass@1 by cliff type")
    return fig


def precursor_figure(setting: str, results: Sequence[PrecursorResult]) -> Any:
    """One row per fitted precursor: its held-out cliff runs' series aligned to the cliff's first evaluation
    (left), its held-out calm runs' series by step (right), the threshold fitted on the fit seeds dashed."""
    from matplotlib.ticker import MaxNLocator

    from rolecast.report import style

    shown = [r for r in results if r.fitted is not None and r.spec is not None and r.held_series]
    if not shown:
        return None
    last = max((s for r in shown for _, series in r.held_series for s, _ in series), default=1)
    with style.fonts():
        fig, (left, right) = style.grid([1.0] * len(shown), 2, extra=0.9)
        for ax_c, ax_k, r in zip(left, right, shown, strict=True):
            assert r.fitted is not None
            for run, series in r.held_series:
                ax = ax_k if run.calm else ax_c
                shift = run.cliff_step or 0
                ax.plot([s - shift for s, _ in series], [v for _, v in series], lw=1.0, alpha=0.8,
                        color="tab:blue" if run.calm else "tab:red", label="_" + run.name)  # fmt: skip
            for ax in (ax_c, ax_k):
                ax.axhline(r.fitted.threshold, color="black", ls="--", lw=1.0, label="_threshold")
            style.ylabel(ax_c, r.name)
        left[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
        left[-1].set_xlabel("steps from the cliff's first evaluation", fontsize=style.FONT)
        left[0].set_title("held-out cliff runs (red)", fontsize=style.FONT)
        right[0].set_title("held-out calm runs (blue)", fontsize=style.FONT)
        style.step_axis(right, 0, last)
        style.title(
            fig, f"Lab II, {setting}: precursors on the held-out seeds; dashed: the threshold fitted on the fit seeds"
        )
        style.align(fig)
    return fig


def figures(raw: Path, out: Path, plan_path: Path | None) -> list[Path]:
    from rolecast.report import style
    from rolecast.report.figure_checks import figure_problems

    plan = _figure_plan(raw, plan_path)
    lab = read_lab(raw, plan)
    written = []
    for setting in lab.settings():
        arms = [*(plan.arms or []), *(a for a in lab.arms(setting) if a not in plan.arms)]
        drawn = [
            (f"lab2_curves_{setting}.png", curves_figure(lab, setting, arms)),
            (f"lab2_precursors_{setting}.png", precursor_figure(setting, score_all(lab, plan, setting))),
        ]
        for name, fig in drawn:
            if fig is None:
                continue
            problems = figure_problems(fig)
            if problems:
                print(f"{name}: figure problems: " + "; ".join(problems), file=sys.stderr)
            written.append(style.save(fig, out / name))
    print(f"wrote {', '.join(str(p) for p in written) or 'no figure'}")
    return written


def _figure_plan(raw: Path, plan_path: Path | None) -> Plan:
    if plan_path is not None:
        return load_plan(plan_path).plan
    log = read_registration(raw)
    plan = log.plan() if log else None
    if plan is None:
        raise SystemExit(f"lab2 figures: {raw} holds no registered plan; give one with --plan")
    return plan


# ---------------------------------------------------------------------------------------------------------


def _baselines(values: Sequence[str]) -> dict[str, str]:
    """--remedy-baseline REMEDY=ARM (or ARM, for every remedy arm: key "")."""
    out = {}
    for v in values:
        arm, sep, base = v.partition("=")
        out[arm if sep else ""] = base if sep else arm
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="copy a sweep's small raw results")
    c.add_argument("run_root", type=Path)
    c.add_argument("--out", type=Path, required=True)
    for name in ("pilot", "tables"):
        p = sub.add_parser(name)
        p.add_argument("raw", type=Path)
        p.add_argument("--plan", type=Path, required=True)
        p.add_argument("--out", type=Path, required=True)
        if name == "tables":
            p.add_argument("--remedy-baseline", action="append", default=[], metavar="[REMEDY=]ARM")
    f = sub.add_parser("figures")
    f.add_argument("raw", type=Path)
    f.add_argument("--out", type=Path, required=True)
    f.add_argument("--plan", type=Path, default=None)
    a = ap.parse_args(argv)
    try:
        return _run(a)
    except ConfigError as e:  # a plan that does not load: one message naming the file and the field
        raise SystemExit(f"lab2 {a.cmd}: {e}") from None


def _run(a: argparse.Namespace) -> int:
    if a.cmd == "collect":
        try:
            cells, copied = collect_sweep(a.run_root, a.out)
        except ValueError as e:
            raise SystemExit(f"lab2 collect: {e}") from None
        print(f"{a.run_root} -> {a.out}: {cells} cells, {copied} files copied")
    elif a.cmd == "pilot":
        pilot(a.raw, a.plan, a.out)
    elif a.cmd == "tables":
        tables(a.raw, a.plan, a.out, _baselines(a.remedy_baseline))
    else:
        figures(a.raw, a.out, a.plan)
    return 0


if __name__ == "__main__":
    sys.exit(main())
