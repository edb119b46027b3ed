"""The cliff lab's tables and figures, from its run directories (docs/experiments/cliff_lab.md).

    python scripts/cliff_lab.py collect runs/cliff_lab --out docs/experiments/cliff_lab/raw
    python scripts/cliff_lab.py tables docs/experiments/cliff_lab/raw --out docs/experiments/cliff_lab
    python scripts/cliff_lab.py corrections docs/experiments/cliff_lab/raw    # prints; writes nothing

`collect` copies what the tables need and nothing else (report/labs.py `collect_sweep`: sweep.json and
registration.jsonl; per cell config.yaml, metrics.jsonl, eval.jsonl, DONE.json / ERROR.txt, resumes.jsonl: no
checkpoints, no episodes), so the committed raw results regenerate every table without retraining. `tables` writes tables.md, analysis.json (per run: curve, cliff,
first firing of every warning) and the figures. `corrections` prints what the write-up's 2026-12-02 corrections
(issue 35) rest on, from the same raw results: each cliff's type, the counts by type with exact intervals, the
exact tests of the arms' counts, the calm runs that came near the band, the weights' drift, what set each
Isolated - Shared interval, and the in-loop warning's recall and false alarms with exact intervals.

The analysis rule, described in its first commit as "fixed before the runs were looked at"; it was first
committed after the push's first evaluations existed (docs/experiments/cliff_lab.md, "Corrections"), so
everything here is exploratory:
- a cliff is `rolecast analyze`'s documented rule, unchanged (diagnostics/curves.py `detect_cliff`: from some
  evaluation to the end every point is below the peak by more than z SE, z corrected for the peak being the
  best of n points, at least 2 points and a drop of at least 0.02, no recovery into the band);
- Isolated - Shared (and the other arm differences) are paired by seed: the mean of per-seed differences of
  the final (and peak) pass@1 with a 95% interval, mean ± t(k - 1) x SE, the SE the larger of the seeds'
  spread (sd / sqrt(k)) and the evaluations' own noise (`paired_difference`): a t interval only where the
  spread sets it;
- early warning: a signal "warns" a cliff run when it first fires at a step strictly before the cliff's first
  point (lead time = cliff step - first firing); recall = warned cliff runs / cliff runs; false alarms = runs
  that never cliff in which it fired at all, and its firings per 100 steps in those runs. "any" is the
  combined rule (any signal); "any gradient" and "any signature" the unions of each kind;
- an intervention "removes the cliff" in a seed when that seed's run has no cliff, and "keeps the gain" when
  its final - base is at least 90% of the baseline arm's peak - base in the same seed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rolecast.core.metric_keys import (
    GRAD,
    POLICY,
    UPDATE,
    grad_key,
    grad_role_key,
    parse_named_key,
    parse_policy_key,
    parse_policy_role_key,
)
from rolecast.core.rundir import METRICS, RunPaths, read_jsonl
from rolecast.diagnostics.curves import CLIFF_TYPES, CurveSummary, difference, paired_difference
from rolecast.diagnostics.intervals import fisher_exact, mcnemar_exact, proportion, rate_interval
from rolecast.diagnostics.warnings import GRADIENT_SIGNALS, SIGNATURE_SIGNALS
from rolecast.report.html import CellView, collect_map
from rolecast.report.labs import band as _band
from rolecast.report.labs import collect_sweep, curve_point, mean, point_record, seed_pairs
from rolecast.report.labs import seeds_text as _seeds_text
from rolecast.report.plots import draw_lr_lines, lr_lines

TRAIN_DROP = 0.15


def collect(sweeps: Sequence[Path], out: Path) -> None:
    for sweep in sweeps:
        dest = out / sweep.name
        collect_sweep(sweep, dest)
        print(f"{sweep} -> {dest}")


# ---------------------------------------------------------------------------------------------------------
# One run


def _read_metrics(d: Path) -> list[dict[str, Any]]:
    return read_jsonl(RunPaths(d).metrics)


def run_record(sweep: str, c: CellView) -> dict[str, Any]:
    cur = c.curve
    metrics = _read_metrics(c.run_dir)
    fired: dict[str, list[int]] = defaultdict(list)
    for row in metrics:
        for k, v in row.items():
            if (signal := parse_named_key(k, "warn")) is not None and v:
                fired[signal].append(int(row["step"]))
    # a candidate added after the first cliffs were seen (so: post hoc, analysis only, not an in-loop warning):
    # the training accuracy's 3-step mean falls 0.15 below its mean over steps 1-3
    acc = [float(r["accuracy"]) for r in metrics if isinstance(r.get("accuracy"), (int, float))]
    if len(acc) >= 4:
        base3 = sum(acc[:3]) / 3
        fired["train_drop (post hoc)"] = [
            t + 1 for t in range(3, len(acc)) if sum(acc[t - 2 : t + 1]) / 3 < base3 - TRAIN_DROP
        ]
    grad_capture = [
        (int(r["step"]), r.get(grad_key(pid, "capture_role")), _masses(r, pid))
        for r in metrics
        for pid in _policies(r)
        if r.get(grad_key(pid, "capture_role"))
    ]
    return {
        "sweep": sweep,
        "cell": c.name,
        "workflow": c.axes.get("workflow"),
        "lr": c.axes.get("model"),
        "arm": c.axes.get("sharing"),
        "seed": c.axes.get("seed"),
        "steps": len(metrics),
        "done": c.complete,
        "base": point_record(cur.base) if cur and cur.base else None,
        "peak": point_record(cur.peak) if cur else None,
        "final": point_record(cur.final) if cur else None,
        "points": [point_record(p) for p in cur.points] if cur else [],
        "cliff": cur.cliff.step if cur and cur.cliff else None,
        "fired": dict(fired),
        "capture": grad_capture,
        "lrs": {pid: [r.get(k) for r in metrics] for pid, k in _lr_keys(metrics)},
    }


def _lr_keys(metrics: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(pid, policy/<pid>/lr) for every policy with a logged lr, in key order."""
    found = {
        (pk.pid, k)
        for r in metrics
        for k in r
        if (pk := parse_policy_key(k)) and pk.family == POLICY and pk.stat == "lr"
    }
    return sorted(found, key=lambda pair: pair[1])


def _policies(row: dict[str, Any]) -> set[str]:
    return {pk.pid for k in row if (pk := parse_policy_key(k)) and pk.family == GRAD and pk.stat == "capture_role"}


def _masses(row: dict[str, Any], pid: str) -> dict[str, dict[str, float]]:
    """Per role: the mass measures logged with the gradient diagnostics, plus |A| per sequence."""
    out: dict[str, dict[str, float]] = {}
    for k, v in row.items():
        rk = parse_policy_role_key(k)
        if rk is not None and rk.family == GRAD and rk.pid == pid and rk.stat in ("tokens", "seqs", "abs_adv"):
            out.setdefault(rk.role, {})[rk.stat] = float(v)
    for m in out.values():
        if m.get("seqs") and "abs_adv" in m and m.get("tokens"):
            # abs_adv is token-weighted (sum over tokens of |A|); per sequence: sum |A| / mean length
            m["abs_adv_seq"] = m["abs_adv"] / (m["tokens"] / m["seqs"])
    return out


def records(raw: Path) -> list[dict[str, Any]]:
    out = []
    for sweep in sorted(p for p in raw.iterdir() if p.is_dir()):
        smap = collect_map(sweep)
        out += [run_record(sweep.name, c) for c in smap.train_cells if c.complete]
    return out


# ---------------------------------------------------------------------------------------------------------
# Tables


def _fmt_diff(pairs: list[tuple[dict[str, Any], dict[str, Any]]], which: str) -> str:
    d = paired_difference([(curve_point(a[which]), curve_point(b[which])) for a, b in pairs])
    return (
        f"{d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}] (n={d.seeds}, ±{d.high - d.mean:.3f}, detect {d.detectable:.3f})"
    )


def map_table(recs: list[dict[str, Any]]) -> list[str]:
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        cells[(r["workflow"], r["lr"], r["arm"])].append(r)
    lines = [
        "| workflow | lr | arm | seeds | base | peak (mean step) | final | final - base | cliffs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (wf, lr, arm), rs in sorted(cells.items(), key=lambda kv: (kv[0][0], _lr_value(kv[0][1]), kv[0][2])):
        rs = sorted(rs, key=lambda r: r["seed"])
        base = mean(r["base"]["value"] for r in rs if r["base"])
        peak = mean(r["peak"]["value"] for r in rs)
        pstep = mean(r["peak"]["step"] for r in rs)
        final = mean(r["final"]["value"] for r in rs)
        cl = [f"s{r['seed']}@{r['cliff']}" for r in rs if r["cliff"]]
        lines.append(
            f"| {wf} | {lr} | {arm} | {len(rs)} | {base:.3f} | {peak:.3f} ({pstep:.0f}) | {final:.3f} | "
            f"{final - base:+.3f} | {len(cl)}/{len(rs)} {' '.join(cl)} |"
        )
    return lines


Arms = dict[str, dict[int, dict[str, Any]]]  # arm -> seed -> run record


def _by_workflow_lr(recs: list[dict[str, Any]]) -> list[tuple[tuple[Any, Any], Arms]]:
    """The runs as (workflow, lr) -> arm -> seed -> record, in workflow then lr order."""
    by: dict[tuple[Any, Any], Arms] = defaultdict(lambda: defaultdict(dict))
    for r in recs:
        by[(r["workflow"], r["lr"])][r["arm"]][r["seed"]] = r
    return sorted(by.items(), key=lambda kv: (kv[0][0], _lr_value(kv[0][1])))


def diff_table(recs: list[dict[str, Any]], pairs_of: Sequence[tuple[str, str]]) -> list[str]:
    lines = [
        "| workflow | lr | difference | final [95%] | peak [95%] |",
        "|---|---|---|---|---|",
    ]
    for (wf, lr), arms in _by_workflow_lr(recs):
        for a, b in pairs_of:
            pairs = seed_pairs(arms, a, b)
            if not pairs:
                continue
            lines.append(f"| {wf} | {lr} | {b} - {a} | {_fmt_diff(pairs, 'final')} | {_fmt_diff(pairs, 'peak')} |")
    return lines


def rule_counts(
    cliff_runs: list[dict[str, Any]], calm: list[dict[str, Any]], members: set[str]
) -> tuple[list[int], int, int, int]:
    """A warning rule (the signals in `members`) over the runs: the lead of each cliff run it warned (its first
    firing strictly before the cliff's first point), the calm runs in which it fired, the steps on which it
    fired in calm runs, and the calm runs' steps."""
    leads = []
    for r in cliff_runs:
        first = min((s for n in members for s in r["fired"].get(n, [])), default=None)
        if first is not None and first < r["cliff"]:
            leads.append(r["cliff"] - first)
    warned_calm = sum(any(r["fired"].get(n) for n in members) for r in calm)
    firings = sum(len({s for n in members for s in r["fired"].get(n, [])}) for r in calm)
    return leads, warned_calm, firings, sum(r["steps"] for r in calm)


def warning_table(recs: list[dict[str, Any]]) -> list[str]:
    names = sorted({n for r in recs for n, steps in r["fired"].items() if steps})
    rules: dict[str, set[str]] = {n: {n} for n in names}
    rules["any gradient"] = {n for n in names if n in GRADIENT_SIGNALS}
    rules["any signature"] = {n for n in names if n in SIGNATURE_SIGNALS}
    rules["any (the in-loop rule)"] = {n for n in names if n in GRADIENT_SIGNALS or n in SIGNATURE_SIGNALS}
    cliff_runs = [r for r in recs if r["cliff"]]
    calm = [r for r in recs if not r["cliff"]]
    lines = [
        f"{len(recs)} runs, {len(cliff_runs)} with a cliff.",
        "",
        "| rule | recall (warned before the cliff) | lead time, steps (mean, range) | false alarms (calm runs warned) "
        "| firings / 100 steps in calm runs |",
        "|---|---|---|---|---|",
    ]
    for rule, members in rules.items():
        if not members:
            continue
        leads, warned_calm, firings, calm_steps = rule_counts(cliff_runs, calm, members)
        lead = f"{mean(leads):.1f} ({min(leads)}-{max(leads)})" if leads else "-"
        per100 = f"{100 * firings / calm_steps:.1f}" if calm_steps else "-"
        lines.append(f"| {rule} | {len(leads)}/{len(cliff_runs)} | {lead} | {warned_calm}/{len(calm)} | {per100} |")
    return lines


def alignment_table(raw: Path) -> list[str]:
    """The old norm ratio against the new alignment on every diagnosed step of a role with parallel instances:
    how often each crossed its warning threshold (old: sqrt(N) + 0.75 (N - sqrt(N)); new: 1 + 0.75 (N - 1)),
    and on how many steps the old one fired with one instance holding (nearly) all of the gradient."""
    n = old = new = single = 0
    for metrics in raw.glob(f"*/*/{METRICS}"):
        for row in read_jsonl(metrics):
            for k, v in row.items():
                rk = parse_policy_role_key(k)
                if rk is None or rk.family != GRAD or rk.stat != "norm_ratio" or not isinstance(v, (int, float)):
                    continue
                inst = row.get(grad_role_key(rk.pid, rk.role, "instances"))
                align = row.get(grad_role_key(rk.pid, rk.role, "alignment"))
                if not isinstance(inst, (int, float)) or inst < 2 or not isinstance(align, (int, float)):
                    continue
                n += 1
                fired_old = v >= math.sqrt(inst) + 0.75 * (inst - math.sqrt(inst))
                old += fired_old
                new += align >= 1 + 0.75 * (inst - 1)
                single += fired_old and align < 1.5
    return [
        "| diagnosed role-steps with >= 2 instances | old rule (norm ratio) fired | new rule (alignment) fired "
        "| old fired while alignment < 1.5 |",
        "|---|---|---|---|",
        f"| {n} | {old} | {new} | {single} |",
    ]


MASS_MEASURES = ("tokens", "seqs", "abs_adv", "abs_adv_seq")


def capture_table(recs: list[dict[str, Any]]) -> list[str]:
    """Which mass measure's largest role is the capture role (largest projection share), per diagnosed step of
    every policy that several roles share."""
    hits: dict[tuple[str, str], list[int]] = defaultdict(list)
    roles_seen: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in recs:
        for _, role, masses in r["capture"]:
            if len(masses) < 2:
                continue
            roles_seen[r["workflow"]][role] += 1
            for m in MASS_MEASURES:
                vals = {k: v[m] for k, v in masses.items() if m in v}
                if vals:
                    hits[(r["workflow"], m)].append(int(max(vals, key=lambda k: (vals[k], k)) == role))
    lines = [
        "| workflow | steps | capture role (steps) | "
        + " | ".join(f"argmax {m}" for m in MASS_MEASURES)
        + " | always the most frequent capture role |",
        "|---|---|---|" + "---|" * len(MASS_MEASURES) + "---|",
    ]
    for wf in sorted(roles_seen):
        n = sum(roles_seen[wf].values())
        who = ", ".join(f"{k} ({v})" for k, v in sorted(roles_seen[wf].items(), key=lambda kv: -kv[1]))
        cells = [f"{mean(hits[(wf, m)]):.2f}" if hits[(wf, m)] else "-" for m in MASS_MEASURES]
        lines.append(f"| {wf} | {n} | {who} | " + " | ".join(cells) + f" | {max(roles_seen[wf].values()) / n:.2f} |")
    return lines


INTERVENTIONS = ("-rollback", "-kl")


def intervention_table(recs: list[dict[str, Any]], arms: Sequence[str]) -> list[str]:
    """Each intervention arm ("<baseline>-rollback", "<baseline>-kl") against its baseline arm, seed by seed."""
    lines = [
        "| workflow | lr | arm | baseline | cliffs: arm (baseline) | cliff removed and >= 90% of the baseline's "
        "peak gain kept | final - baseline final [95%] | per seed: arm final - base vs baseline peak - base |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (wf, lr), by_arm in _by_workflow_lr(recs):
        for arm in arms:
            baseline = next((arm.removesuffix(x) for x in INTERVENTIONS if arm.endswith(x)), None)
            pairs = seed_pairs(by_arm, baseline, arm)
            if not pairs:
                continue
            n = len(pairs)
            cl_b = sum(bool(b["cliff"]) for b, _ in pairs)
            cl_a = sum(bool(a["cliff"]) for _, a in pairs)
            ok = 0
            gains = []
            for b, a in pairs:
                base = b["base"]["value"]
                peak_gain = b["peak"]["value"] - base
                kept = a["final"]["value"] - base
                gains.append(f"{kept:+.3f} vs {peak_gain:+.3f}")
                ok += int(not a["cliff"] and kept >= 0.9 * peak_gain)
            lines.append(
                f"| {wf} | {lr} | {arm} | {baseline} | {cl_a}/{n} ({cl_b}/{n}) | {ok}/{n} | "
                f"{_fmt_diff(pairs, 'final')} | {'; '.join(gains)} |"
            )
    return lines


# ---------------------------------------------------------------------------------------------------------
# Corrections (issue 35): the committed raw results against the write-up's first claims

CORE_ARMS = ("shared", "isolated", "isolated-roleclock")
ARM_TESTS = (("shared", "isolated"), ("isolated", "isolated-roleclock"))


@dataclass(frozen=True)
class Run:
    """A finished run as the corrections read it: its axes, its curve (with the cliff type against the step-0
    base point) and each policy's drift |theta - theta_0| at the last step that logged it."""

    cell: str
    workflow: str
    lr: str
    arm: str
    seed: int
    curve: CurveSummary
    drift: dict[str, float]

    @property
    def name(self) -> str:
        return f"{self.workflow} {self.lr} {self.arm} s{self.seed}"

    @property
    def cliff_type(self) -> str:
        return self.curve.cliff_type or "unknown (no base)"


def final_drift(metrics: list[dict[str, Any]]) -> dict[str, float]:
    """Per policy, the last logged update/<pid>/drift."""
    out: dict[str, float] = {}
    for row in metrics:
        for k, v in row.items():
            pk = parse_policy_key(k)
            if pk is not None and pk.family == UPDATE and pk.stat == "drift" and isinstance(v, (int, float)):
                out[pk.pid] = float(v)
    return out


def runs(raw: Path) -> list[Run]:
    out = []
    for sweep in sorted(p for p in raw.iterdir() if p.is_dir()):
        for c in collect_map(sweep).train_cells:
            if c.complete and c.curve is not None:
                a = c.axes
                drift = final_drift(_read_metrics(c.run_dir))
                out.append(
                    Run(c.name, str(a["workflow"]), str(a["model"]), str(a["sharing"]), int(a["seed"]), c.curve, drift)
                )
    return sorted(out, key=lambda r: (r.workflow, _lr_value(r.lr), r.arm, r.seed))


def _exact(k: int, n: int) -> str:
    p = proportion(k, n)
    return f"{k}/{n} [{p.low:.2f}, {p.high:.2f}]"


def type_table(rs: list[Run]) -> list[str]:
    """Every run the cliff rule flags, with the two tests against its base that type it (docs/analysis.md)."""
    lines = [
        "| run | cliff at | base | peak (step) | final | largest rise over the base: value at step (z; z needed) "
        "| final - base [95%] | type |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        cur, k = r.curve, r.curve.cliff_class
        if cur.cliff is None or k is None or cur.base is None:
            continue
        z = k.rise.value / k.rise.se if k.rise.se else 0.0
        lines.append(
            f"| {r.name} | {cur.cliff.step} | {cur.base.value:.3f} | {cur.peak.value:.3f} ({cur.peak.step}) | "
            f"{cur.final.value:.3f} | {k.rise.value:+.3f} at {k.rise_point_step} ({z:.2f}; {k.rise_z:.2f}) | "
            f"{k.decline.value:+.3f} [{k.decline.low:+.3f}, {k.decline.high:+.3f}] | {k.type} |"
        )
    return lines


def type_counts(rs: list[Run]) -> list[str]:
    flagged = [r for r in rs if r.curve.cliff is not None]
    lines = ["| type | runs the cliff rule flags [95% exact] | all runs [95% exact] |", "|---|---|---|"]
    for t in CLIFF_TYPES:
        in_flagged = sum(r.cliff_type == t for r in flagged)
        lines.append(
            f"| {t} | {_exact(in_flagged, len(flagged))} | {_exact(sum(r.cliff_type == t for r in rs), len(rs))} |"
        )
    return lines


OUTCOMES: dict[str, Callable[[Run], bool]] = {
    "cliff rule": lambda r: r.curve.cliff is not None,
    "fall_after_gain": lambda r: r.cliff_type == "fall_after_gain",
    "decline_from_base": lambda r: r.cliff_type == "decline_from_base",
}


def arm_tests(rs: list[Run]) -> list[str]:
    """Each outcome's count in two arms with at least 2 seeds each, Fisher's exact test (independent runs) and
    the exact McNemar test (runs paired by seed: only the seeds where one arm hit and the other did not)."""
    by: dict[tuple[str, str, str], dict[int, Run]] = defaultdict(dict)
    for r in rs:
        by[(r.workflow, r.lr, r.arm)][r.seed] = r
    lines = [
        "| workflow | lr | outcome | arm a | arm b | Fisher p two-sided (b > a) | McNemar p two-sided, discordant seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    for wf, lr in sorted({(r.workflow, r.lr) for r in rs}, key=lambda k: (k[0], _lr_value(k[1]))):
        for a, b in ARM_TESTS:
            ra, rb = by.get((wf, lr, a), {}), by.get((wf, lr, b), {})
            if len(ra) < 2 or len(rb) < 2:
                continue
            seeds = sorted(set(ra) & set(rb))
            for outcome, hit in OUTCOMES.items():
                ka, kb = sum(map(hit, ra.values())), sum(map(hit, rb.values()))
                if ka == kb == 0:
                    continue
                b_only = sum(hit(rb[s]) and not hit(ra[s]) for s in seeds)
                a_only = sum(hit(ra[s]) and not hit(rb[s]) for s in seeds)
                lines.append(
                    f"| {wf} | {lr} | {outcome} | {a} {ka}/{len(ra)} | {b} {kb}/{len(rb)} | "
                    f"{fisher_exact(kb, len(rb), ka, len(ra), 'two-sided'):.2f} "
                    f"({fisher_exact(kb, len(rb), ka, len(ra), 'greater'):.2f}) | "
                    f"{mcnemar_exact(b_only, a_only, 'two-sided'):.2f}, {b} only {b_only}, {a} only {a_only} |"
                )
    return lines


def band_margin(cur: CurveSummary) -> tuple[list[int], float]:
    """A curve against the cliff rule's band under its peak (the rule's own z and min_drop): the later points
    below the band, and the final's drop from the peak as a fraction of z SE of that difference (>= 1: below)."""
    z, min_drop = cur.rule["cliff_z"], cur.rule["min_drop"]
    below, ratio = [], 0.0
    for p in cur.points:
        if p.step <= cur.peak.step:
            continue
        d = difference(cur.peak, p, z)
        if d.high < 0 and -d.value >= min_drop:
            below.append(p.step)
        ratio = -d.value / (z * d.se) if d.se else 0.0
    return below, ratio


def near_band(rs: list[Run], at_least: float = 0.8) -> list[str]:
    """The runs the rule does not flag that had points below the band, or ended within `at_least` of it."""
    lines = ["| run (no cliff) | points below the band | final's drop / z SE | type |", "|---|---|---|---|"]
    for r in rs:
        below, ratio = band_margin(r.curve)
        if r.curve.cliff is None and (below or ratio >= at_least):
            lines.append(f"| {r.name} | {', '.join(map(str, below)) or '-'} | {ratio:.2f} | {r.cliff_type} |")
    return lines


def drift_table(rs: list[Run]) -> list[str]:
    """Per (workflow, lr) with a flagged run, each run's drift at the end (its policies' min-max)."""
    groups = sorted({(r.workflow, r.lr) for r in rs if r.curve.cliff}, key=lambda k: (k[0], _lr_value(k[1])))
    lines = ["| workflow | lr | arm | per seed: drift at the end, min-max over policies (cliff: the rule flags it) |"]
    lines.append("|---|---|---|---|")
    for wf, lr in groups:
        for arm in sorted({r.arm for r in rs if (r.workflow, r.lr) == (wf, lr)}):
            cells = [
                f"s{r.seed} {min(r.drift.values()):.3f}-{max(r.drift.values()):.3f}"
                + (f" cliff ({r.cliff_type})" if r.curve.cliff else "")
                for r in rs
                if (r.workflow, r.lr, r.arm) == (wf, lr, arm) and r.drift
            ]
            lines.append(f"| {wf} | {lr} | {arm} | {'; '.join(cells)} |")
    return lines


def interval_sources(recs: list[dict[str, Any]]) -> list[str]:
    """What set each arm difference's interval (`paired_difference`; the core arms' pairs, and each remedy arm
    against its baseline): the seeds' spread sd / sqrt(k), or the floor, the evaluations' own noise
    sqrt(sum se^2) / k. Either is multiplied by t(k - 1)."""
    lines = [
        "| workflow | lr | difference | final [95%] | seeds' spread | evaluations' noise | the SE used |",
        "|---|---|---|---|---|---|---|",
    ]
    for (wf, lr), arms in _by_workflow_lr(recs):
        remedies = [(arm.removesuffix(x), arm) for arm in sorted(arms) for x in INTERVENTIONS if arm.endswith(x)]
        for a, b in [
            ("shared", "isolated"),
            ("shared", "isolated-roleclock"),
            ("isolated", "isolated-roleclock"),
            *remedies,
        ]:
            pairs = [(curve_point(x["final"]), curve_point(y["final"])) for x, y in seed_pairs(arms, a, b)]
            if len(pairs) < 2:
                continue
            d = paired_difference(pairs)
            vals = [y.value - x.value for x, y in pairs]
            k = len(vals)
            spread = math.sqrt(sum((v - d.mean) ** 2 for v in vals) / (k - 1) / k)
            noise = math.sqrt(sum(x.se**2 + y.se**2 for x, y in pairs)) / k
            used = "seeds' spread (a t interval)" if spread >= noise else "evaluations' noise (the floor)"
            lines.append(
                f"| {wf} | {lr} | {b} - {a} | {d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}] | {spread:.4f} | "
                f"{noise:.4f} | {used}, x t = {d.multiplier:.3f} |"
            )
    return lines


def warning_exact(recs: list[dict[str, Any]], rs: list[Run]) -> list[str]:
    """The in-loop rule (any gradient or signature signal) with exact intervals: recall, calm runs warned, and
    the steps it fired on per calm run (Garwood)."""
    members = {n for r in recs for n in r["fired"] if n in GRADIENT_SIGNALS or n in SIGNATURE_SIGNALS}
    cliff_runs, calm = [r for r in recs if r["cliff"]], [r for r in recs if not r["cliff"]]
    leads, warned_calm, firings, calm_steps = rule_counts(cliff_runs, calm, members)
    rate = rate_interval(firings, len(calm))
    types = {r.cell: r.cliff_type for r in rs}
    lines = [
        f"- recall: {_exact(len(leads), len(cliff_runs))}, leads {sorted(leads)} steps",
        f"- calm runs warned: {_exact(warned_calm, len(calm))}",
        f"- steps fired on in calm runs: {firings} of {calm_steps}, {rate.value:.2f} per calm run "
        f"[{rate.low:.2f}, {rate.high:.2f}]",
    ]
    for r in cliff_runs:
        first = sorted((min(s), n) for n, s in r["fired"].items() if n in members and s and min(s) < r["cliff"])
        said = ", ".join(f"{n} at {s}" for s, n in first[:3]) or "nothing before the cliff"
        lines.append(f"- {r['cell']} ({types.get(r['cell'], '?')}), cliff at {r['cliff']}: {said}")
    return lines


def corrections(raw: Path) -> list[str]:
    recs, rs = records(raw), runs(raw)
    return [
        "## Cliff types of the runs the cliff rule flags",
        "",
        *type_table(rs),
        "",
        *type_counts(rs),
        "",
        "## Arms' counts, exact tests",
        "",
        *arm_tests(rs),
        "",
        "## Runs without a cliff near the band",
        "",
        *near_band(rs),
        "",
        "## Drift at the end",
        "",
        *drift_table(rs),
        "",
        "## What set the arm differences' intervals",
        "",
        *interval_sources(recs),
        "",
        "## The in-loop early warning, exact intervals",
        "",
        *warning_exact(recs, rs),
    ]


def _lr_value(label: Any) -> float:
    try:
        return float(str(label).removeprefix("lr"))
    except ValueError:
        return math.inf


# ---------------------------------------------------------------------------------------------------------
# Figures


def _lr_series(run: dict[str, Any]) -> dict[str, tuple[list[int], list[float]]]:
    """A run record's lr per policy and step (steps 1..n)."""
    return {
        pid: (list(range(1, len(lrs) + 1)), [math.nan if v is None else float(v) for v in lrs])
        for pid, lrs in run["lrs"].items()
    }


def _arm_runs(recs: list[dict[str, Any]], wf: str, lr: str, arms: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    found = {a: [r for r in recs if r["workflow"] == wf and r["lr"] == lr and r["arm"] == a] for a in arms}
    return {a: rs for a, rs in found.items() if rs}


def lab_figure(recs: list[dict[str, Any]], lr: str, arms: Sequence[str]) -> Any:
    """One column per workflow: held-out pass@1 per arm over the seeds (report/style.py: bands clipped to
    [0, 1], legends off the data, one step axis per column), each policy's lr under it, lines that coincide
    drawn once and said. None when no run matches."""
    from rolecast.report import style

    workflows = sorted({r["workflow"] for r in recs if r["lr"] == lr and r["arm"] in arms})
    if not workflows:
        return None
    colors = {arm: f"C{i}" for i, arm in enumerate(arms)}
    by_wf = {wf: _arm_runs(recs, wf, lr, arms) for wf in workflows}
    lines = {  # each arm's policies' lr from its first seed (every seed trains on the same schedule)
        wf: lr_lines({a: _lr_series(min(rs, key=lambda r: r["seed"])) for a, rs in by_wf[wf].items()})
        for wf in workflows
    }
    # room under the panels for the tallest lr legend (its wrapped lines) and the arms' legend
    legend_lines = max(
        sum(len(style.legend_label(style.coincide_label(ln[0], "same lr"))) for ln in lines[wf]) for wf in workflows
    )
    handles: dict[str, Any] = {}
    seeds: dict[str, set[int]] = defaultdict(set)
    last = max(p["step"] for r in recs if r["lr"] == lr for p in r["points"])
    with style.fonts():
        fig, columns = style.grid([1.5, 1.0], len(workflows), extra=1.6 + 0.21 * legend_lines)
        for (ax, lax), wf in zip(columns, workflows, strict=True):
            for arm, rs in by_wf[wf].items():
                band = _band(rs)
                steps = sorted(band)
                (handles[arm],) = ax.plot(steps, [band[s][0] for s in steps], marker="o", ms=3.5, color=colors[arm])
                style.band(ax, steps, [band[s][1] for s in steps], [band[s][2] for s in steps], colors[arm])
                seeds[arm].add(len(rs))
            draw_lr_lines(lax, lines[wf], colors)
            ax.set_title(wf, fontsize=style.FONT)
            style.bound(ax)
            style.sci_axis(lax)
            style.legend_outside(lax, below=True)
            style.step_axis([ax, lax], 0, last)
        style.ylabel(columns[0][0], style.PASS_AT_1)
        style.ylabel(columns[0][1], "lr (seed 0)")
        style.figure_legend(fig, list(handles.values()), [f"{a} ({_seeds_text(seeds[a])})" for a in handles])
        style.title(fig, f"cliff lab, {lr}: held-out pass@1 per arm, and each policy's learning rate")
        style.align(fig)
    return fig


def figures(recs: list[dict[str, Any]], out: Path, lr: str, arms: Sequence[str], name: str = "curves") -> list[Path]:
    from rolecast.report import style

    fig = lab_figure(recs, lr, arms)
    if fig is None:
        return []
    return [style.save(fig, out / f"cliff_lab_{name}_{lr}.png")]


def tables(raw: Path, out: Path, main_lr: str) -> None:
    recs = records(raw)
    out.mkdir(parents=True, exist_ok=True)
    (out / "analysis.json").write_text(json.dumps(recs, indent=1, sort_keys=True) + "\n")
    arms = ("shared", "isolated", "isolated-roleclock")
    pairs = (("shared", "isolated"), ("shared", "isolated-roleclock"), ("isolated", "isolated-roleclock"))
    interventions = sorted({r["arm"] for r in recs} - set(arms))
    md = ["# Cliff lab: tables (generated by scripts/cliff_lab.py; do not edit)", ""]
    md += ["## Every cell (means over seeds)", "", *map_table(recs), ""]
    md += ["## Paired differences (by seed)", "", *diff_table(recs, pairs), ""]
    md += ["## Early warning, over every run of the lab", "", *warning_table(recs), ""]
    md += ["## Which mass measure names the capture role (shared policies)", "", *capture_table(recs), ""]
    md += ["## The amplification warning: norm ratio (old) against alignment (new)", "", *alignment_table(raw), ""]
    if interventions:
        md += ["## Rollback and intervention against the cliff", ""]
        md += [*intervention_table(recs, interventions), ""]
    (out / "tables.md").write_text("\n".join(md))
    for lr in sorted({r["lr"] for r in recs}, key=_lr_value):
        figures(recs, out, lr, arms)
        if any(r["lr"] == lr and r["arm"] in interventions for r in recs):
            figures(recs, out, lr, ("isolated", "isolated-roleclock", *interventions), name="interventions")
    print(f"wrote {out / 'tables.md'}, {out / 'analysis.json'} and figures ({len(recs)} runs)")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("sweeps", nargs="+", type=Path)
    c.add_argument("--out", type=Path, required=True)
    t = sub.add_parser("tables")
    t.add_argument("raw", type=Path)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--main-lr", default="lr3e-4")
    k = sub.add_parser("corrections")
    k.add_argument("raw", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "collect":
        collect(a.sweeps, a.out)
    elif a.cmd == "corrections":
        print("\n".join(corrections(a.raw)))
    else:
        tables(a.raw, a.out, a.main_lr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
