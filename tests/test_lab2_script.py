"""scripts/lab2.py (Lab II's tables) and report/labs.py on hand-built sweeps: tiny eval.jsonl / metrics.jsonl
files written here, no training. The pilot's regime rule, cliff counts and their exact intervals against closed
forms, the plan's decisions (McNemar on a hand-built 2x2, Fisher, the paired t), the precursors' fit / held-out
split (a case where fitting on the held-out seeds would change the answer), the remedy table, post hoc marks
from the registration, collect, and the figures' checks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from script_module import load_script

from rolecast.diagnostics.intervals import proportion
from rolecast.diagnostics.precursors import fit_threshold, resolve_precursor, run_series
from rolecast.plan.registration import Design, GitState, record_first_cell, register_start
from rolecast.report.labs import collect_sweep, paired_t_test, t_sf

WF, TASK = "orch_workers", "testbed"
STEPS = 20
# held-out pass@1 at steps 5..20 (the base, 0.5, is every seed's base cell's)
CLIFF = {5: 0.8, 10: 0.85, 15: 0.3, 20: 0.25}  # a significant rise, then the terminal fall from step 15
CALM = {5: 0.7, 10: 0.72, 15: 0.73, 20: 0.74}  # a gain, no fall
DECLINE = {5: 0.45, 10: 0.3, 15: 0.2, 20: 0.2}  # no gain, the end below the base
KEPT = {5: 0.8, 10: 0.82, 15: 0.84, 20: 0.83}  # a rise that holds (a remedied cliff), to a lower peak
BASE = 0.5
CLIFF_STEP = 15


lab2 = load_script("scripts/lab2.py")


def _eval_row(step: int, value: float, tag: str) -> dict:
    return {"step": step, "tag": tag, "workflow": WF, "task": TASK, "split": "test", "pass@1": value,
            "stderr": 0.02, "n_problems": 200, "n_samples": 4}  # fmt: skip


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _cell_dir(root: Path, name: str, seed: int, trainable: str, lr: float, steps: int) -> Path:
    d = root / name
    d.mkdir(parents=True)
    cfg = {"seed": seed, "model": {"path": "testbed", "trainable": trainable}, "train": {"steps": steps, "lr": lr}}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    return d


def write_sweep(root: Path, runs: list[dict], settings: dict[str, tuple[str, float]], pending=()) -> Path:
    """A sweep directory as `rolecast sweep` leaves it: sweep.json, one base cell per (setting, seed), and per
    run (setting, arm, seed, curve, metrics rows) a finished training cell. `pending`: (setting, arm, seed) of
    cells the matrix holds that have not run (no directory)."""
    cells = []
    bases = sorted({(r["setting"], r["seed"]) for r in runs} | {(s, seed) for s, _, seed in pending})
    for setting, seed in bases:
        name = f"base-{TASK}-{WF}-{setting}-s{seed}"
        d = _cell_dir(root, name, seed, *settings[setting], 0)
        _jsonl(d / "eval.jsonl", [_eval_row(0, BASE, "base")])
        (d / "DONE.json").write_text("{}")
        axes = {"workflow": WF, "task": TASK, "model": setting, "seed": seed}
        cells.append({"name": name, "kind": "base_eval", "axes": axes, "base_cell": None, "status": "done"})
    for r in runs:
        name = f"{TASK}-{WF}-{r['setting']}-{r['arm']}-s{r['seed']}"
        d = _cell_dir(root, name, r["seed"], *settings[r["setting"]], STEPS)
        _jsonl(
            d / "eval.jsonl", [_eval_row(s, v, "final" if s == STEPS else "periodic") for s, v in r["curve"].items()]
        )
        _jsonl(d / "metrics.jsonl", r.get("metrics") or [{"step": s, "reward": 0.5} for s in range(1, STEPS + 1)])
        (d / "DONE.json").write_text("{}")
        (d / "checkpoints").mkdir()
        (d / "checkpoints" / "big.bin").write_bytes(b"\0" * 64)
        (d / "episodes").mkdir()
        (d / "episodes" / "step_5.jsonl").write_text("{}\n")
    for r in [*runs, *({"setting": s, "arm": a, "seed": seed, "pending": True} for s, a, seed in pending)]:
        name = f"{TASK}-{WF}-{r['setting']}-{r['arm']}-s{r['seed']}"
        axes = {"workflow": WF, "task": TASK, "model": r["setting"], "sharing": r["arm"], "seed": r["seed"]}
        base = f"base-{TASK}-{WF}-{r['setting']}-s{r['seed']}"
        status = "pending" if r.get("pending") else "done"
        cells.append({"name": name, "kind": "train", "axes": axes, "base_cell": base, "status": status})
    (root / "sweep.json").write_text(json.dumps({"matrix": "m.yaml", "out": str(root), "cells": cells}))
    return root


# ---------------------------------------------------------------------------------------------------------
# The pilot


PILOT_PLAN = """\
title: pilot
arms: [shared, isolated]
reference_arm: shared
cliff: {counts_as_cliff: [fall_after_gain]}
notes: the regime rule
"""
PILOT_SETTINGS = {"full-lr1e-3": ("full", 1e-3), "lora-lr1e-3": ("lora", 1e-3), "lora-lr3e-3": ("lora", 3e-3)}


def _pilot_runs(cliffs: dict[tuple[str, str], set[int]]) -> list[dict]:
    return [
        {"setting": s, "arm": a, "seed": seed, "curve": CLIFF if seed in cliffs.get((s, a), set()) else CALM}
        for s in PILOT_SETTINGS
        for a in ("shared", "isolated")
        for seed in (100, 101, 102)
    ]


def test_the_pilot_chooses_the_setting_whose_best_arm_falls_most_and_counts_with_exact_intervals(tmp_path, capsys):
    # full fine-tune: isolated falls in 2 of 3; LoRA 3e-3: isolated 1 of 3; LoRA 1e-3: never. The count wins over
    # the LoRA preference (which only breaks ties).
    cliffs = {("full-lr1e-3", "isolated"): {100, 102}, ("lora-lr3e-3", "isolated"): {101}}
    raw = write_sweep(tmp_path / "raw", _pilot_runs(cliffs), PILOT_SETTINGS)
    plan = tmp_path / "plan.yaml"
    plan.write_text(PILOT_PLAN)
    result = lab2.pilot(raw, plan, tmp_path / "out")
    assert result["choice"]["setting"] == "full-lr1e-3"
    assert result["choice"]["found"] and not result["choice"]["provisional"]
    counts = {(c["setting"], c["arm"]): c for c in result["counts"]}
    two = counts[("full-lr1e-3", "isolated")]["cliffs"]
    assert (two["k"], two["n"]) == (2, 3)
    # Clopper-Pearson 2 of 3: the upper end solves P(X <= 2) = 1 - p^3 = 0.025; the lower P(X >= 2) =
    # 3p^2 - 2p^3 = 0.025
    assert two["high"] == pytest.approx(0.975 ** (1 / 3), abs=1e-9)
    assert 3 * two["low"] ** 2 - 2 * two["low"] ** 3 == pytest.approx(0.025, abs=1e-9)
    none = counts[("lora-lr1e-3", "shared")]["types"]["none"]
    assert (none["k"], none["n"]) == (3, 3) and none["low"] == pytest.approx(0.025 ** (1 / 3), abs=1e-9)
    zero = counts[("lora-lr1e-3", "shared")]["cliffs"]
    assert (zero["k"], zero["high"]) == (0, pytest.approx(1 - 0.025 ** (1 / 3), abs=1e-9))
    types = {(r["setting"], r["arm"], r["seed"]): r["type"] for r in result["runs"]}
    assert types[("full-lr1e-3", "isolated", 100)] == "fall_after_gain"
    assert types[("full-lr1e-3", "isolated", 101)] == "none"
    md = (tmp_path / "out" / "pilot_tables.md").read_text()
    assert "| full-lr1e-3 | isolated | 3/3 |" in md and "2/3 [0.09, 0.99]" in md
    assert "**Main lab setting: full-lr1e-3** (regime found; final)" in md
    assert "Main lab setting: full-lr1e-3" in capsys.readouterr().out
    assert json.loads((tmp_path / "out" / "pilot.json").read_text())["choice"]["setting"] == "full-lr1e-3"


def test_the_pilot_breaks_ties_to_lora_then_the_lower_lr_and_says_when_it_is_partial(tmp_path):
    cliffs = {(s, "isolated"): {101} for s in PILOT_SETTINGS}  # every setting's best arm: 1 of 3
    runs = [r for r in _pilot_runs(cliffs) if not (r["setting"] == "lora-lr3e-3" and r["seed"] == 102)]
    pending = [("lora-lr3e-3", a, 102) for a in ("shared", "isolated")]
    raw = write_sweep(tmp_path / "raw", runs, PILOT_SETTINGS, pending)
    plan = tmp_path / "plan.yaml"
    plan.write_text(PILOT_PLAN)
    result = lab2.pilot(raw, plan, tmp_path / "out")
    assert result["choice"]["setting"] == "lora-lr1e-3"  # full loses the tie to LoRA, lr 3e-3 to the lower lr
    assert result["choice"]["provisional"] and result["unfinished"] == 2
    counts = {(c["setting"], c["arm"]): c for c in result["counts"]}
    assert (counts[("lora-lr3e-3", "shared")]["planned"], counts[("lora-lr3e-3", "shared")]["finished"]) == (3, 2)
    md = (tmp_path / "out" / "pilot_tables.md").read_text()
    assert "**Partial: 16 of 18 training cells finished.**" in md and "PROVISIONAL" in md
    assert "No registration.jsonl" in md and "*post hoc: no registration" in md


def _counts(setting: str, arm: str, k: int, planned: int) -> object:
    p = proportion(k, planned)
    return lab2.ArmCounts(setting, arm, planned, [object()] * planned, {}, p)


def test_when_no_setting_reaches_a_third_the_most_falls_over_all_arms_win_and_the_regime_is_not_found():
    info = {"a": ("full", 1e-3), "b": ("lora", 3e-3), "c": ("lora", 1e-3)}
    # six planned seeds: a third is 2; no best arm reaches it. a: 1 + 1 over its arms, b: 1, c: 0
    counts = [
        _counts("a", "shared", 1, 6),
        _counts("a", "isolated", 1, 6),
        _counts("b", "isolated", 1, 6),
        _counts("c", "isolated", 0, 6),
    ]
    choice = lab2.choose_regime(counts, info)
    assert (choice.setting, choice.found) == ("a", False)
    # one more fall in b's other arm ties it with a over all arms: LoRA breaks the tie
    choice = lab2.choose_regime([*counts, _counts("b", "shared", 1, 6)], info)
    assert (choice.setting, choice.found) == ("b", False)
    # and a best arm at 2 of 6 reaches a third: it wins over a larger total elsewhere
    choice = lab2.choose_regime([*counts, _counts("c", "shared", 2, 6)], info)
    assert (choice.setting, choice.found) == ("c", True)


# ---------------------------------------------------------------------------------------------------------
# The main lab

PLAN = """\
title: main lab
arms: [shared, isolated, isolated-roleclock]
reference_arm: shared
cliff: {counts_as_cliff: [fall_after_gain]}
seeds: {fit: [0, 1, 2, 3, 4], held_out: [5, 6, 7, 8, 9]}
predictors:
  use: [{name: head_update_ratio}, {name: kl_to_base}]
  thresholds: {max_false_alarms_per_calm_run: 0.1}
decisions:
  - {name: paired, claim: "Isolated falls more", measure: cliff_rate, compare: [isolated, shared],
     test: mcnemar_exact}
  - {name: unpaired, claim: "Isolated falls more", measure: cliff_rate, compare: [isolated, shared],
     test: fisher_exact}
  - {name: final, claim: "Isolated ends elsewhere", measure: final, compare: [isolated, shared], test: paired_t,
     alternative: two-sided}
"""
SETTINGS = {"lora": ("lora", 1e-3)}
ISOLATED_CLIFFS = {0, 1, 2, 5, 6, 7}
SHARED_CLIFFS = {1, 8}  # both fall at seed 1; isolated only at 0, 2, 5, 6, 7; shared only at 8
REMEDIED = {5, 6}  # the remedy arm keeps the rise at these held-out seeds; seed 7 still falls


def _precursor_rows(seed: int, cliff: bool) -> list[dict]:
    """Two policies; at step 10 one of them has a head update ratio of 0.6 (fit-half cliff runs), 0.5
    (fit-half calm), 0.45 (held-out cliffs) or 0.3 (held-out calm), 0.1 otherwise: fitted on the fit seeds the
    threshold is 0.5 and warns no held-out cliff; fitted on the held-out seeds it would be 0.3 and warn every
    one. KL to the base is 0.9 at step 8 in cliff runs, 0.2 in calm ones, 0.05 otherwise."""
    head = {(True, True): 0.6, (True, False): 0.5, (False, True): 0.45, (False, False): 0.3}[(seed < 5, cliff)]
    rows = []
    for s in range(1, STEPS + 1):
        rows.append({
            "step": s,
            "precursor/p0/head_update_ratio": head if s == 10 else 0.1,
            "precursor/p1/head_update_ratio": 0.1,
            "precursor/p0/kl_to_base": (0.9 if cliff else 0.2) if s == 8 else 0.05,
        })  # fmt: skip
    return rows


def _main_runs() -> list[dict]:
    runs = []
    for seed in range(10):
        for arm, cliffs in (("shared", SHARED_CLIFFS), ("isolated", ISOLATED_CLIFFS), ("isolated-roleclock", set())):
            cliff = seed in cliffs
            curve = CLIFF if cliff else DECLINE if (arm, seed) == ("isolated-roleclock", 9) else CALM
            runs.append({"setting": "lora", "arm": arm, "seed": seed, "curve": curve,
                         "metrics": _precursor_rows(seed, cliff)})  # fmt: skip
    for seed in range(5, 10):  # the remedy arm, on the held-out seeds
        curve = KEPT if seed in REMEDIED else CLIFF if seed in ISOLATED_CLIFFS else CALM
        runs.append({"setting": "lora", "arm": "isolated-rollback", "seed": seed, "curve": curve,
                     "metrics": _precursor_rows(seed, seed in ISOLATED_CLIFFS - REMEDIED)})  # fmt: skip
    return runs


@pytest.fixture(scope="module")
def main_lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("main")
    raw = write_sweep(root / "raw", _main_runs(), SETTINGS)
    plan = root / "plan.yaml"
    plan.write_text(PLAN)
    result = lab2.tables(raw, plan, root / "out", {})
    return root, raw, plan, result


def _setting(result: dict) -> dict:
    (s,) = result["settings"]
    return s


def test_cliff_counts_by_type_per_arm_with_exact_intervals(main_lab):
    *_, result = main_lab
    counts = {c["arm"]: c for c in _setting(result)["counts"]}
    assert [c for c in counts] == ["shared", "isolated", "isolated-roleclock"]  # remedy arms are not plan arms
    iso = counts["isolated"]["types"]["fall_after_gain"]
    assert (iso["k"], iso["n"]) == (6, 10)
    # Clopper-Pearson ends solve the binomial tails: P(X >= 6 | low) = 0.025 = P(X <= 6 | high)
    tail = lambda k, p: sum(math.comb(10, i) * p**i * (1 - p) ** (10 - i) for i in range(k + 1))  # noqa: E731
    assert 1 - tail(5, iso["low"]) == pytest.approx(0.025, abs=1e-9)
    assert tail(6, iso["high"]) == pytest.approx(0.025, abs=1e-9)
    assert (iso["low"], iso["high"]) == (pytest.approx(0.26238, abs=1e-5), pytest.approx(0.87845, abs=1e-5))
    rc = counts["isolated-roleclock"]
    assert rc["types"]["none"]["k"] == 9 and rc["types"]["decline_from_base"]["k"] == 1
    assert rc["cliffs"]["k"] == 0 and rc["cliffs"]["high"] == pytest.approx(1 - 0.025**0.1, abs=1e-9)
    assert counts["shared"]["cliffs"]["k"] == 2


def test_the_decisions_mcnemar_on_the_hand_built_2x2_fisher_and_the_paired_t(main_lab):
    *_, result = main_lab
    d = {x["name"]: x for x in _setting(result)["decisions"]}
    # discordant seeds: isolated only 5 (0, 2, 5, 6, 7), shared only 1 (8): P(X >= 5 | 6, 1/2) = 7/64
    assert d["paired"]["detail"].startswith("10 paired seeds: both 1, isolated only 5, shared only 1, neither 3")
    assert d["paired"]["p"] == pytest.approx(7 / 64, abs=1e-12) and not d["paired"]["supported"]
    # Fisher, 6/10 against 2/10: sum over x = 6..8 of C(8,x) C(12,10-x) / C(20,10)
    fisher = sum(math.comb(8, x) * math.comb(12, 10 - x) for x in range(6, 9)) / math.comb(20, 10)
    assert d["unpaired"]["p"] == pytest.approx(fisher, abs=1e-12)
    # final pass@1, isolated - shared, seed by seed
    lo, hi = CLIFF[20], CALM[20]
    diffs = [lo - hi, 0, lo - hi, 0, 0, lo - hi, lo - hi, lo - hi, hi - lo, 0]
    assert d["final"]["p"] == pytest.approx(paired_t_test(diffs, "two-sided").p, abs=1e-12)


def test_thresholds_are_fitted_on_the_fit_seeds_only_and_scored_on_the_held_out_ones(main_lab):
    _, raw, plan, result = main_lab
    pre = {p["name"]: p for p in _setting(result)["precursors"]}
    head = pre["head_update_ratio"]
    # fitted on seeds 0-4: above 0.5 (the calm runs reach 0.5, the cliff runs 0.6); held out, the cliffs
    # reach only 0.45: none warned
    assert head["threshold"] == 0.5
    assert (head["fit"]["recall"]["k"], head["fit"]["recall"]["n"]) == (4, 4)
    assert (head["held_out"]["recall"]["k"], head["held_out"]["recall"]["n"]) == (0, 4)
    assert head["held_out"]["false_alarms"] == {
        "count": 0,
        "calm_runs": 10,
        "low": 0.0,
        "high": pytest.approx(0.36889, abs=1e-5),
    }
    # the precondition that makes this a test: fitted on the held-out runs, the threshold would warn them all
    lab = lab2.read_lab(raw, lab2.load_plan(plan).plan)
    labelled = lab2._labelled(lab, lab2.load_plan(plan).plan, "lora")
    p = resolve_precursor("head_update_ratio")
    held = [(lr, run_series(p.series(r.metrics), "above")) for r, lr in labelled if lr.seed >= 5]
    wrong = fit_threshold(held, "above")
    assert wrong.threshold == 0.3 and wrong.fit.recall.k == 4
    kl = pre["kl_to_base"]
    assert kl["threshold"] == 0.2 and kl["held_out"]["recall"]["k"] == 4
    assert kl["held_out"]["median_lead"] == CLIFF_STEP - 8 and kl["held_out"]["median_lead_fraction"] == 7 / STEPS
    assert kl["meets"] == {"recall": True, "false_alarms": True, "lead": True}
    assert head["meets"] == {"recall": False, "false_alarms": True, "lead": None}
    combined = pre["combined (any of 2)"]
    assert combined["held_out"]["recall"]["k"] == 4 and combined["held_out"]["false_alarms"]["count"] == 0
    # the roleclock decline (seed 9) is neither a cliff nor calm (calm_runs: no_fall); the remedy arm is left out
    assert kl["held_out"]["false_alarms"]["calm_runs"] == 10


def test_runs_are_labelled_by_the_plans_warn_by_and_calm_runs(main_lab):
    _, raw, plan, _ = main_lab
    p = lab2.load_plan(plan).plan
    lab = lab2.read_lab(raw, p)
    runs = {(r.arm, r.seed): r for r in lab.runs}
    cliff, decline, calm = runs[("isolated", 0)], runs[("isolated-roleclock", 9)], runs[("shared", 0)]
    assert (lab2.label(cliff, p).cliff_step, lab2.label(cliff, p).warn_by) == (CLIFF_STEP, CLIFF_STEP - 1)
    assert lab2.label(decline, p) is None and lab2.label(calm, p).calm  # calm_runs: no_fall
    other = p.model_copy(deep=True)
    other.predictors.warn_by, other.predictors.calm_runs = "before_last_good_point", "not_a_counted_cliff"
    assert lab2.label(cliff, other).warn_by == 10 - 1  # the step before the last evaluation in the band (10)
    assert lab2.label(decline, other).calm


def test_a_bad_plan_is_one_message_naming_the_field(main_lab, tmp_path):
    _, raw, _, _ = main_lab
    bad = tmp_path / "plan.yaml"
    bad.write_text(PLAN.replace("counts_as_cliff: [fall_after_gain]", "counts_as_cliff: [none]"))
    with pytest.raises(SystemExit, match=r"plan.yaml: cliff.counts_as_cliff: 'none' is the absence of a fall"):
        lab2.main(["tables", str(raw), "--plan", str(bad), "--out", str(tmp_path / "out")])


def test_the_best_precursor_is_chosen_on_the_fit_half_and_printed_as_a_trigger(main_lab):
    root, *_, result = main_lab
    best = _setting(result)["best_precursor"]
    # both warn 4/4 fit-half cliffs without false alarms; KL warns earlier (lead 7 of 20 against 5 of 20)
    assert best["name"] == "kl_to_base" and best["threshold"] == 0.2
    md = (root / "out" / "tables.md").read_text()
    assert "interventions.rollback.precursors: [{name: kl_to_base, threshold: 0.2, subject: any}]" in md


def test_the_remedy_table_removed_cliffs_and_the_share_of_the_peak_gain_kept(main_lab):
    root, raw, plan, result = main_lab
    (rem,) = _setting(result)["remedies"]
    assert (rem["arm"], rem["baseline"]) == ("isolated-rollback", "isolated")
    assert [s["seed"] for s in rem["seeds"]] == [5, 6, 7, 8, 9]  # the held-out seeds
    assert (rem["baseline_cliffs"]["k"], rem["remedy_cliffs"]["k"]) == (3, 1)
    assert (rem["removed"]["k"], rem["removed"]["n"]) == (2, 3)
    peak_gain = {5: CLIFF[10] - BASE, 6: CLIFF[10] - BASE, 7: CLIFF[10] - BASE, 8: CALM[20] - BASE, 9: CALM[20] - BASE}
    final = {5: KEPT[20], 6: KEPT[20], 7: CLIFF[20], 8: CALM[20], 9: CALM[20]}
    shares = [(final[s] - BASE) / peak_gain[s] for s in range(5, 10)]
    assert [s["share"] for s in rem["seeds"]] == pytest.approx(shares, abs=1e-12)
    assert rem["share_mean"] == pytest.approx(sum(shares) / 5, abs=1e-12)
    assert (rem["kept"]["k"], rem["kept"]["n"]) == (4, 5)  # every seed but 7 keeps >= 90%
    md = (root / "out" / "tables.md").read_text()
    assert "*post hoc: not in the plan: remedy arms" in md
    # against another baseline, named on the command line: shared falls at held-out seed 8 only
    other = lab2.tables(raw, plan, root / "other", {"isolated-rollback": "shared"})
    (rem,) = _setting(other)["remedies"]
    assert rem["baseline"] == "shared" and (rem["removed"]["k"], rem["removed"]["n"]) == (1, 1)


def test_tables_are_marked_post_hoc_where_an_amended_rule_rests(tmp_path):
    raw = write_sweep(tmp_path / "raw", _main_runs(), SETTINGS)
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    git, now = GitState("abc", False, {}), iter(f"2026-12-0{i}T10:00:00+00:00" for i in range(1, 9))
    register_start(raw, Design("m.yaml", "m", "plan.yaml", PLAN), jobs=1, git=git, now=lambda: next(now))
    record_first_cell(raw, "x", now=lambda: next(now))
    amended = PLAN.replace("max_false_alarms_per_calm_run: 0.1}", "max_false_alarms_per_calm_run: 0.2}")
    amended += "amendments: [{date: 2026-12-04, reason: looser, fields: [predictors.thresholds]}]\n"
    register_start(raw, Design("m.yaml", "m", "plan.yaml", amended), jobs=1, git=git, now=lambda: next(now))
    plan.write_text(amended)
    lab2.tables(raw, plan, tmp_path / "out", {})
    md = (tmp_path / "out" / "tables.md").read_text()
    sections = {s.split("\n", 1)[0]: s for s in md.split("## ")[1:]}
    counts = next(v for k, v in sections.items() if k.startswith("Cliff types per arm"))
    precursors = next(v for k, v in sections.items() if k.startswith("Precursors"))
    assert "*registered (rests on the plan's cliff, arms)*" in counts
    assert (
        "*post hoc: rests on predictors.thresholds.max_false_alarms_per_calm_run, amended after the first run*"
        in precursors
    )
    assert "amendment 1 at 2026-12-03T10:00:00+00:00 (commit abc), after the first run started" in md
    # the plan as first registered, given instead of the amended one: every table says so
    plan.write_text(PLAN)
    lab2.tables(raw, plan, tmp_path / "old", {})
    md = (tmp_path / "old" / "tables.md").read_text()
    assert "is not the registered one" in md and "registered (rests" not in md


def test_collect_copies_the_small_raw_results_only_and_twice_copies_nothing(tmp_path):
    root = write_sweep(tmp_path / "sweep", _pilot_runs({}), PILOT_SETTINGS)
    (root / "registration.jsonl").write_text('{"event": "registered"}\n')
    cells, copied = collect_sweep(root, tmp_path / "raw")
    assert cells == 27 and copied == 2 + 9 * 3 + 18 * 4  # sweep files; base: config, eval, DONE; train: + metrics
    assert not list((tmp_path / "raw").rglob("checkpoints")) and not list((tmp_path / "raw").rglob("episodes"))
    assert (tmp_path / "raw" / "registration.jsonl").is_file()
    assert collect_sweep(root, tmp_path / "raw") == (27, 0)
    assert lab2.main(["collect", str(root), "--out", str(tmp_path / "raw")]) == 0
    with pytest.raises(SystemExit, match="not a directory"):
        lab2.main(["collect", str(tmp_path / "nowhere"), "--out", str(tmp_path / "raw")])


def test_the_t_distribution_against_closed_forms():
    assert t_sf(1.0, 1) == pytest.approx(0.25, abs=1e-12)  # Cauchy: 1/2 - atan(t) / pi
    assert t_sf(2.0, 2) == pytest.approx(0.5 - 2 / (2 * math.sqrt(6)), abs=1e-12)  # 1/2 - t / (2 sqrt(t^2 + 2))
    # df = 3: 1/2 - (theta + sin theta cos theta) / pi, theta = atan(t / sqrt 3)
    th = math.atan(1.5 / math.sqrt(3))
    assert t_sf(1.5, 3) == pytest.approx(0.5 - (th + math.sin(th) * math.cos(th)) / math.pi, abs=1e-12)
    assert t_sf(-2.0, 2) == pytest.approx(1 - t_sf(2.0, 2), abs=1e-12)
    assert t_sf(1.959964, 100000) == pytest.approx(0.025, abs=1e-4)  # towards the normal
    t = paired_t_test([1.0, 2.0, 3.0])  # mean 2, sd 1: t = 2 sqrt 3, df 2
    assert (t.t, t.df) == (pytest.approx(2 * math.sqrt(3)), 2)
    assert t.p == pytest.approx(0.5 - t.t / (2 * math.sqrt(t.t**2 + 2)), abs=1e-12)
    assert math.isnan(paired_t_test([1.0]).p) and math.isnan(paired_t_test([1.0, 1.0]).p)


def test_the_figures_pass_the_shared_checks(main_lab, tmp_path):
    from rolecast.report.figure_checks import figure_problems

    _, raw, plan, _ = main_lab
    p = lab2.load_plan(plan).plan
    lab = lab2.read_lab(raw, p)
    curves = lab2.curves_figure(lab, "lora", [*p.arms, "isolated-rollback"])
    assert figure_problems(curves) == []
    precursors = lab2.precursor_figure("lora", lab2.score_all(lab, p, "lora"))
    assert figure_problems(precursors) == []
    # each seed's curve is drawn in its type's colour
    colors = {ln.get_label(): ln.get_color() for ax in curves.axes for ln in ax.lines}
    assert colors[f"_{TASK}-{WF}-lora-isolated-s0"] == lab2.TYPE_COLORS["fall_after_gain"]
    assert colors[f"_{TASK}-{WF}-lora-isolated-roleclock-s9"] == lab2.TYPE_COLORS["decline_from_base"]
    assert lab2.main(["figures", str(raw), "--out", str(tmp_path), "--plan", str(plan)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lab2_curves_lora.png", "lab2_precursors_lora.png"]
    with pytest.raises(SystemExit, match="holds no registered plan; give one with --plan"):
        lab2.main(["figures", str(raw), "--out", str(tmp_path)])
