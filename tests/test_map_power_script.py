"""scripts/map_power.py: the powered map's paired differences and its sequential rule, on hand-built runs."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from script_module import ROOT, load_script

from rolecast.diagnostics.curves import CurvePoint

mp = load_script("scripts/map_power.py")


def run(workflow: str, arm: str, seed: int, final: float, base: float = 0.5, se: float = 0.01) -> object:
    pt = CurvePoint(30, final, se, 200)
    return mp.Run(f"{workflow}-{arm}-s{seed}", "s1", workflow, arm, seed, CurvePoint(0, base, se, 200), pt, pt, None)


def test_isolated_minus_shared_is_paired_by_seed_with_a_t_interval():
    runs = [run("voting", "shared", s, f) for s, f in enumerate([0.70, 0.72, 0.74])]
    runs += [run("voting", "isolated", s, f) for s, f in enumerate([0.73, 0.73, 0.79])]
    runs.append(run("voting", "isolated", 7, 0.99))  # no Shared run of seed 7: not a pair
    d, p = mp.paired(runs, "voting", "final")
    assert d.seeds == 3
    assert d.mean == pytest.approx(0.03)  # differences 0.03, 0.01, 0.05
    assert d.se == pytest.approx(0.02 / math.sqrt(3))  # their sd 0.02 over sqrt 3, above the evaluations' 0.0082
    assert mp.half_width(d) == pytest.approx(4.303 * 0.02 / math.sqrt(3), rel=1e-3)
    t = 0.03 / (0.02 / math.sqrt(3))
    assert p == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-6)  # Student's t with 2 df, two-sided


def test_the_rule_stops_a_workflow_on_precision_and_the_rest_at_the_cap():
    runs = []
    for s, diff in enumerate([0.01, -0.01, 0.0, 0.02, -0.02]):  # sd 0.0158: half-width 2.776 x 0.0071 = 0.020
        runs += [run("eval_opt", "shared", s, 0.8, se=0.005), run("eval_opt", "isolated", s, 0.8 + diff, se=0.005)]
    for s in range(3):  # half-width ~0.05 over 3 seeds: another stage
        runs += [run("voting", "shared", s, 0.7), run("voting", "isolated", s, 0.7 + [0.03, 0.01, 0.05][s])]
    for s in range(20):  # differences of +-0.2: far from 0.04 after 20 seeds
        runs += [run("orch_workers", "shared", s, 0.5), run("orch_workers", "isolated", s, 0.5 + 0.2 * (-1) ** s)]
    runs += [run("single", "shared", s, 0.5 + g, base=0.5) for s, g in enumerate([0.05, 0.07, 0.06, 0.08, 0.04])]
    r = mp.rule(runs)
    assert r["eval_opt"]["state"] == "stopped: precision reached"
    assert r["eval_opt"]["half_width"] == pytest.approx(2.776 * math.sqrt(2.5e-4 / 5), rel=1e-3)
    assert r["voting"]["state"] == "continue" and r["voting"]["seeds"] == 3
    assert r["orch_workers"]["state"] == "stopped: cap" and r["orch_workers"]["seeds"] == 20
    assert r["orch_workers"]["detectable"] > 0.08
    # the single agent is read on its gain: 0.06 with sd 0.0158 over 5 seeds, half-width 0.020
    assert r["single"]["state"] == "stopped: precision reached"
    assert mp.gain([x for x in runs if x.workflow == "single"]).mean == pytest.approx(0.06)


def test_the_next_stage_runs_the_workflows_the_rule_has_not_stopped_with_stage_1s_settings():
    stage1 = yaml.safe_load((ROOT / "src/rolecast/configs/experiments/map_power_s1.yaml").read_text())
    going, done = {"state": "continue"}, {"state": "stopped: precision reached"}
    text = mp.stage_matrix({"single": done, "voting": going, "eval_opt": done, "orch_workers": going}, 3, "raw")
    stage3 = yaml.safe_load(text)
    assert stage3["set"] == stage1["set"] and stage3["base"] == stage1["base"] and stage3["plan"] == stage1["plan"]
    assert stage3["out"] == "runs/map-power/s3"
    cells = {(c["workflow"], c["sharing"], c["seed"]) for c in stage3["cells"]}
    expected = {(w, a, s) for w in ("voting", "orch_workers") for a in ("shared", "isolated") for s in range(10, 15)}
    assert cells == expected and len(stage3["cells"]) == 20
    # stage 1 itself: every workflow, the single agent in Shared only (35 cells); past the cap or all stopped: none
    first = yaml.safe_load(mp.stage_matrix(dict.fromkeys(mp.WORKFLOWS, going), 1, "raw"))
    assert first["cells"] == stage1["cells"]
    # the LoRA family: its own stage 1's settings, plan and directory
    lora_s1 = ROOT / "src/rolecast/configs/experiments/map_power_lora_s1.yaml"
    lora = yaml.safe_load(mp.stage_matrix(dict.fromkeys(mp.WORKFLOWS, going), 2, "raw", lora_s1))
    first_lora = yaml.safe_load(lora_s1.read_text())
    assert lora["set"] == first_lora["set"] and lora["set"]["model.trainable"] == "lora"
    assert (lora["plan"], lora["out"]) == ("map_power_lora_plan.yaml", "runs/map-power-lora/s2")
    assert len(lora["cells"]) == 35 and {c["seed"] for c in lora["cells"]} == set(range(5, 10))
    assert mp.stage_matrix(dict.fromkeys(mp.WORKFLOWS, going), 5, "raw") is None
    assert mp.stage_matrix(dict.fromkeys(mp.WORKFLOWS, done), 2, "raw") is None


def test_the_plans_t_interval_ignores_the_evaluations_noise_and_the_reports_floors_at_it():
    """Seeds that agree closely (differences 0.01, 0, 0.01, 0) with noisy evaluations (SE 0.03 each): the plan's t
    interval over seeds is tight and stops the rule; the report's floored one (the evaluations' noise taken as
    independent between seeds) is wide and does not."""
    runs = []
    for s, diff in enumerate([0.01, 0.0, 0.01, 0.0]):
        runs += [run("voting", "shared", s, 0.7, se=0.03), run("voting", "isolated", s, 0.7 + diff, se=0.03)]
    t, _ = mp.paired(runs, "voting", "final")
    floored, _ = mp.paired(runs, "voting", "final", floored=True)
    assert t.mean == floored.mean == pytest.approx(0.005)
    assert mp.half_width(t) == pytest.approx(3.182 * math.sqrt(1 / 3 * 1e-4) / 2, rel=1e-3)  # sd 0.00577 / sqrt 4
    assert mp.half_width(floored) == pytest.approx(3.182 * math.sqrt(4 * 2 * 0.03**2) / 4, rel=1e-3)
    assert mp.rule(runs)["voting"]["state"] == "stopped: precision reached"
    assert mp.rule(runs, floored=True)["voting"]["state"] == "continue"
    [(stage, workflow, plan_reading, floored_reading)] = mp.rule_by_stage(runs)
    assert (stage, workflow) == (1, "voting") and plan_reading["state"] != floored_reading["state"]


def test_the_code_maps_seed_0_is_make_runs_code_half_untraded():
    """map_power_code_s1.yaml's seed-0 cells train as `make run`'s code cells (configs/testbed_matrix.yaml) but for
    what `make run` trades for time (problems a step, how often it evaluates and checkpoints) and where they write."""
    from rolecast.config import CONFIG_DIR
    from rolecast.sweep.matrix import load_matrix

    runs = {c.name: c for c in load_matrix(CONFIG_DIR / "testbed_matrix.yaml").cells}
    stage1 = load_matrix(CONFIG_DIR / "experiments" / "map_power_code_s1.yaml")
    seed0 = [c for c in stage1.train_cells if c.config.seed == 0]
    assert len(seed0) == 7 and len(stage1.train_cells) == 35
    traded = {"run_dir": True, "train": {"problems_per_step"}, "eval": {"every", "n_samples"}, "checkpoint": {"every"}}
    for c in seed0:
        twin = runs[c.name]
        assert twin.config.model_dump(exclude=traded) == c.config.model_dump(exclude=traded), c.name
        assert (c.config.train.problems_per_step, twin.config.train.problems_per_step) == (8, 4)
    assert seed0[0].config.eval.every == 10 and seed0[0].config.rollout.max_new_tokens == 128


@pytest.mark.parametrize(
    ("small_file", "large_file", "small_model", "large_model"),
    [
        ("map_power_code_s1.yaml", "map_power_code_large_s1.yaml", "testbed-code", "testbed-code-large"),
        ("map_power_s1.yaml", "map_power_large_s1.yaml", "testbed", "testbed-large"),
    ],
)
def test_a_large_maps_stage_1_is_the_small_ones_but_for_the_model(small_file, large_file, small_model, large_model):
    """map_power_code_large_s1.yaml and map_power_large_s1.yaml: their small map's stage 1, cell for cell and
    setting for setting, with the large build in place of the small one (their plans: size is the only difference)."""
    from rolecast.config import CONFIG_DIR
    from rolecast.sweep.matrix import load_matrix

    small = load_matrix(CONFIG_DIR / "experiments" / small_file)
    large = load_matrix(CONFIG_DIR / "experiments" / large_file)
    assert len(large.cells) == len(small.cells) and len(large.train_cells) == 35
    assert {c.config.model.path for c in small.cells} == {small_model}
    assert {c.config.model.path for c in large.cells} == {large_model}
    for s, g in zip(small.cells, large.cells, strict=True):
        head, _, tail = s.name.rpartition(f"-{small_model}-")  # the model: the name's last "-<model>-" part
        assert (s.kind, s.config.seed, f"{head}-{large_model}-{tail}") == (g.kind, g.config.seed, g.name)
        same = {"run_dir": True, "model": {"path"}}
        assert s.config.model_dump(exclude=same) == g.config.model_dump(exclude=same), g.name


def test_an_unfinished_stage_is_listed_not_read():
    """The plan reads its rule after a stage's last cell: while stage 1 has runs to go, its rows say so and no
    workflow is stopped, even one whose finished seeds would already meet the precision."""
    runs = []
    for s, diff in enumerate([0.01, -0.01, 0.0, 0.02, -0.02]):  # half-width 0.020: stopped, once stage 1 is over
        runs += [run("eval_opt", "shared", s, 0.8, se=0.005), run("eval_opt", "isolated", s, 0.8 + diff, se=0.005)]
    [(k, w, finished, _)] = mp.rule_by_stage(runs)
    assert (k, w, finished["state"]) == (1, "eval_opt", "stopped: precision reached")
    [(_, _, interim, floored)] = mp.rule_by_stage(runs, {1: (3, 13)})
    assert interim["state"] == floored["state"] == "not read: stage unfinished (3 of 13 runs to run)"
    assert interim["half_width"] == finished["half_width"]  # the numbers are shown, the state is not read
    assert mp.rule_by_stage(runs, {2: (5, 5)})[0][2]["state"] == "stopped: precision reached"  # another stage's


def test_the_tables_header_names_the_maps_task_and_build_from_its_runs():
    from rolecast.plan.schema import load_plan

    plan = load_plan(ROOT / "src/rolecast/configs/experiments/map_power_code_large_plan.yaml").plan
    pt = CurvePoint(30, 0.6, 0.05, 80)
    large = mp.Run("r", "s1", "voting", "shared", 0, pt, pt, pt, None, "testbed_code", "testbed-code-large")
    small = mp.Run("r", "s1", "voting", "shared", 0, pt, pt, pt, None, "testbed_code", "testbed-code")
    math_run = mp.Run("r", "s1", "voting", "shared", 0, pt, pt, pt, None, "testbed", "testbed")
    assert mp.family([large], plan) == ("code", "large", 80)
    assert mp.family([small], plan) == ("code", "small", 80)
    assert mp.family([math_run], plan) == ("math", "small", 200)
    assert mp.family([], plan) == ("code", "large", 80)  # no run finished yet: the plan's title says


def test_welchs_contrast_of_two_maps_gains_hand_computed():
    """b - a of independent means over seeds: SE sqrt(0.01^2 + 0.02^2), Welch df 6.08 floored to 6 (t 2.447)."""
    c = mp.welch({"mean": 0.04, "se": 0.01}, 10, {"mean": 0.07, "se": 0.02}, 5)
    se = math.sqrt(0.0005)
    assert (c.mean, c.se, c.df) == (pytest.approx(0.03), pytest.approx(se), 6)  # 2.5e-7 / (1e-8 / 9 + 1.6e-7 / 4)
    assert (c.low, c.high) == (pytest.approx(0.03 - 2.447 * se, abs=1e-6), pytest.approx(0.03 + 2.447 * se, abs=1e-6))
    theta = math.atan(0.03 / se / math.sqrt(6))  # Student's t, 6 df: P(|T| < t) = sin(theta)(1 + c^2/2 + 3c^4/8)
    c2 = math.cos(theta) ** 2
    assert c.p == pytest.approx(1 - math.sin(theta) * (1 + c2 / 2 + 3 * c2 * c2 / 8), rel=1e-9)
    assert mp.welch({"mean": 0.1, "se": 0.0}, 5, {"mean": 0.2, "se": 0.0}, 5) is None  # no spread: no interval
    assert mp.welch({}, 5, {"mean": 0.2, "se": 0.01}, 5) is None


def test_holm_steps_down_until_the_first_p_above_its_threshold():
    assert mp.holm([0.01, 0.04, 0.03, 0.2]) == [True, False, False, False]  # 0.03 > 0.05 / 3 stops the rest
    assert mp.holm([0.001, 0.02, 0.01]) == [True, True, True]  # 0.001 <= 0.05/3, 0.01 <= 0.05/2, 0.02 <= 0.05
    assert mp.holm([]) == []


def test_the_summary_puts_every_map_in_one_table_and_contrasts_the_sizes(tmp_path):
    def gain(w, arm, mean, se, n, cliffs=0):
        t = {"mean": mean, "low": mean - 2 * se, "high": mean + 2 * se, "se": se, "detectable": 3 * se}
        return {"workflow": w, "arm": arm, "seeds": list(range(n)), "base": 0.5, "final": 0.5 + mean, "t": t} | {
            "cliffs": cliffs
        }

    for folder, *_ in mp.MAPS:
        small = folder in ("map_power", "map_power_code", "map_power_lora")
        doc = {
            "gains": [gain("voting", "shared", 0.04 if small else 0.07, 0.01 if small else 0.02, 10 if small else 5)]
            + [gain("voting", "isolated", 0.05, 0.01, 10 if small else 5, cliffs=1)],
            "differences": [
                {"workflow": "voting", "seeds": 5, "p": 0.001 if folder == "map_power_code_large" else 0.5}
                | {"t": gain("voting", "-", 0.01, 0.01, 5)["t"]}
            ],
            "rule": [{"stage": 1, "workflow": "voting", "t": {"state": "continue"}}]
            + [{"stage": 2, "workflow": "voting", "t": {"state": "stopped: precision reached"}}],
            "unfinished_stages": {},
        }
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "map_power.json").write_text(json.dumps(doc))
    result = mp.summary(tmp_path, tmp_path / "out")
    text = (tmp_path / "out" / "summary.md").read_text()
    assert len(result["rows"]) == 5 and {r["policies"] for r in result["rows"]} == {"full", "LoRA"}
    assert "| code | large | full | voting | 5 / 5 | 0.500 | + +0.070 [+0.030, +0.110] |" in text
    assert "| 0 of 5 / 1 of 5 | stage 2: stopped |" in text  # the rule's last stage read, falls per arm
    # Holm over the map's 5 differences: 0.001 <= 0.05 / 5 is rejected, then 0.5 > 0.05 / 4 stops the step-down
    assert [r["holm"] for r in result["rows"]] == [False, False, False, False, True]
    assert "| 0.001 | yes | 0.030 |" in text and "| 0.500 | no | 0.030 |" in text
    assert "5 Isolated - Shared rows, Holm's step-down at family-wise 5% rejects 1; the smallest p is 0.001" in text
    shared_math = next(r for r in result["scale"] if (r["between"], r["arm"]) == ("math", "shared"))
    assert shared_math["mean"] == pytest.approx(0.03) and shared_math["df"] == 6  # as the hand-computed test above
    isolated = next(r for r in result["scale"] if (r["between"], r["arm"]) == ("math", "isolated"))
    assert isolated["mean"] == pytest.approx(0.0) and not isolated["holm"]
    assert len(result["task"]) == 4  # code - math at both sizes, both arms (LoRA is in no contrast)
    assert (tmp_path / "out" / "summary.png").stat().st_size > 0
    (tmp_path / "map_power_code_large" / "map_power.json").unlink()
    with pytest.raises(SystemExit, match="map_power_code_large/map_power.json is missing"):
        mp.summary(tmp_path, tmp_path / "out")


def _t3_sf(t: float) -> float:
    """Student's t upper tail with 3 df, closed form: 1/2 - (1/pi) (t / (sqrt 3 (1 + t^2/3)) + atan(t / sqrt 3))."""
    return 0.5 - (t / (math.sqrt(3) * (1 + t * t / 3)) + math.atan(t / math.sqrt(3))) / math.pi


def _pairs(diffs: dict[int, float], shared: float = 0.80) -> list[object]:
    out = []
    for s, d in diffs.items():
        out += [run("eval_opt", "shared", s, shared, base=0.7), run("eval_opt", "isolated", s, shared + d, base=0.7)]
    return out


def test_the_confirmatory_test_is_one_sided_on_the_new_seeds_in_the_original_direction():
    """Original seeds 0-2 have Shared above (mean -0.02), so the new seeds are tested for Isolated - Shared < 0:
    differences -0.02, -0.03, -0.01, -0.04, mean -0.025, sd 0.0129, t -3.873 with 3 df."""
    original = _pairs({0: -0.01, 1: -0.03, 2: -0.02})
    new = _pairs({10: -0.02, 11: -0.03, 12: -0.01, 13: -0.04})
    c = mp.confirmation(new, original, "eval_opt")
    sd = math.sqrt((0.005**2 * 2 + 0.015**2 * 2) / 3)
    t = -0.025 / (sd / 2)
    assert c["alternative"] == "less"
    assert c["t"] == pytest.approx(t) and c["df"] == 3
    assert c["p_one_sided"] == pytest.approx(_t3_sf(-t), rel=1e-6)  # 0.0152
    assert c["p_two_sided"] == pytest.approx(2 * _t3_sf(-t), rel=1e-6)
    assert c["verdict"] == "confirmed"
    assert c["seeds"] == [10, 11, 12, 13] and c["original"]["seeds"] == 3
    assert c["pooled"]["seeds"] == 7 and c["pooled"]["mean"] == pytest.approx((-0.06 - 0.10) / 7)
    assert c["gains"]["shared"]["mean"] == pytest.approx(0.10)
    assert c["gains"]["isolated"]["mean"] == pytest.approx(0.075)


def test_new_seeds_against_the_original_direction_do_not_confirm_it():
    """The same new differences, but the original map had Isolated above: the test looks for > 0 and fails."""
    original = _pairs({0: 0.01, 1: 0.03, 2: 0.02})
    new = _pairs({10: -0.02, 11: -0.03, 12: -0.01, 13: -0.04})
    c = mp.confirmation(new, original, "eval_opt")
    assert c["alternative"] == "greater"
    assert c["p_one_sided"] == pytest.approx(1 - _t3_sf(3.8729833), rel=1e-5)
    assert c["verdict"] == "not established"


def test_a_confirmation_reads_no_verdict_before_its_runs_finish_and_refuses_reused_seeds():
    original = _pairs({0: -0.01, 1: -0.03, 2: -0.02})
    new = _pairs({10: -0.02, 11: -0.03, 12: -0.01, 13: -0.04})
    assert mp.confirmation(new, original, "eval_opt", unfinished=True)["verdict"] == "not read: runs still to go"
    assert mp.confirmation(new[:2], original, "eval_opt")["verdict"] == "not read: fewer than 2 pairs"
    with pytest.raises(ValueError, match=r"seeds \[2\]"):
        mp.confirmation(_pairs({2: -0.01, 10: 0.0}), original, "eval_opt")


def test_a_roles_accuracy_is_the_mean_of_its_first_and_last_steps_that_logged_it(tmp_path):
    """Seven steps; the worker logs accuracy in every one, the synthesizer from step 3 (steps without the key are
    skipped, not read as 0); a window of 2."""
    rows = [{"step": s, "role/worker/accuracy": 0.1 * s, "role/orchestrator/reward": 1.0} for s in range(1, 8)]
    for r in rows[2:]:
        r["role/synthesizer/accuracy"] = 1.0 - 0.1 * r["step"]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    acc = mp.role_accuracy(path, window=2)
    assert set(acc) == {"worker", "synthesizer"}  # the orchestrator logs no accuracy
    assert acc["worker"] == pytest.approx((0.15, 0.65))  # steps 1-2 and 6-7
    assert acc["synthesizer"] == pytest.approx((0.65, 0.35))  # steps 3-4: 0.7, 0.6; steps 6-7: 0.4, 0.3


def test_the_roles_table_pairs_isolated_with_shared_by_seed():
    """Worker late differences 0.03, 0.01, 0.05 over seeds 0-2 (mean 0.03, sd 0.02; 4.303 x 0.02 / sqrt 3: the
    interval includes 0, so "="); seed 9 has no Shared run and the evaluator no Isolated one: neither is read."""
    shared = {s: {"worker": (0.5, 0.7), "evaluator": (0.6, 0.6)} for s in range(3)}
    isolated = {s: {"worker": (0.5, 0.7 + d)} for s, d in enumerate([0.03, 0.01, 0.05])} | {9: {"worker": (0, 0)}}
    rows = mp.roles_table(shared, isolated)
    assert len(rows) == 4 and all("evaluator" not in r for r in rows)
    hw = 4.303 * 0.02 / math.sqrt(3)
    late = rows[3].split(" | ")
    assert late[:4] == ["| worker", "last 5", "0.700", "0.730"]
    assert late[4] == f"= +0.030 [{0.03 - hw:+.3f}, {0.03 + hw:+.3f}]"
    t = 0.03 / (0.02 / math.sqrt(3))
    assert late[5] == f"{1 - t / math.sqrt(2 + t * t):.3f}" and late[6] == "3 |"


def test_the_orch_workers_follow_up_is_the_large_code_maps_stage_1_on_new_seeds():
    """map_power_code_large_orch_s1.yaml: Orch-Workers' cells of the large code map, setting for setting, on seeds
    10-17 (the map's Orch-Workers ran 0-4), both arms of each seed, and its plan names the test."""
    from rolecast.config import CONFIG_DIR
    from rolecast.sweep.matrix import load_matrix

    stage1 = load_matrix(CONFIG_DIR / "experiments" / "map_power_code_large_s1.yaml")
    follow = load_matrix(CONFIG_DIR / "experiments" / "map_power_code_large_orch_s1.yaml")
    assert {(c.config.workflow.name, c.config.seed) for c in follow.train_cells} == {
        ("orch_workers", s) for s in range(10, 18)
    }
    assert len(follow.train_cells) == 16 and {c.kind for c in follow.cells} == {"train", "base_eval"}
    twins = {
        c.config.routing.sharing: c
        for c in stage1.train_cells
        if c.config.workflow.name == "orch_workers" and c.config.seed == 0
    }
    arms = [(c.config.seed, c.config.routing.sharing) for c in follow.train_cells]
    assert sorted(arms) == [(s, a) for s in range(10, 18) for a in ("isolated", "shared")]
    for c in follow.train_cells:
        same = {"run_dir": True, "seed": True}
        assert c.config.model_dump(exclude=same) == twins[c.config.routing.sharing].config.model_dump(exclude=same)
    plan = load_plan_text("map_power_code_large_orch_plan.yaml")
    assert "one-sided" in plan.notes and "10-17" in plan.notes and plan.arms == ["shared", "isolated"]


def load_plan_text(name: str):
    from rolecast.plan.schema import load_plan

    return load_plan(ROOT / "src/rolecast/configs/experiments" / name).plan
