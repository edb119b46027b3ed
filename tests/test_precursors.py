"""Precursors (diagnostics/precursors.py): each measurement on a hand-built tensor case, the registry over metric
rows, and the fit-on-some-seeds / score-on-the-others rule on hand-built runs with numbers worked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rolecast.core.episode import Episode, Turn
from rolecast.core.errors import ConfigError
from rolecast.core.metric_keys import PrecursorKey, parse_precursor_key, precursor_key
from rolecast.diagnostics.intervals import clopper_pearson, poisson_interval
from rolecast.diagnostics.precursors import (
    DERIVED_EACH_STEP,
    LOGGED,
    MEASURED_EACH_STEP,
    MEASURED_PERIODICALLY,
    PRECURSORS,
    LabelledRun,
    ProbeSums,
    alarm_onsets,
    canary_accuracy,
    change_from_base,
    fired_at,
    fit_threshold,
    get_precursor,
    kl_estimate,
    kl_exact,
    logged_series,
    mean_token_entropy,
    probe_log_likelihood,
    probe_sums,
    register_precursor,
    resolve_precursor,
    run_series,
    score_combined,
    score_precursor,
    select_probes,
    slope,
    split_by_seed,
    update_ratio,
    update_to_weight_ratio,
    values_at,
)

# --- measurements -----------------------------------------------------------------------------------------


def test_probe_log_likelihood_is_token_weighted_over_the_probe_set_and_its_change_from_base():
    logprobs = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -9.0, -9.0]])  # -9: padding, masked out
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    ll = probe_log_likelihood(logprobs, mask)
    assert ll == pytest.approx(-3.5 / 3)
    assert change_from_base(ll, -1.0) == pytest.approx(-3.5 / 3 + 1.0)
    with pytest.raises(ValueError, match="no token"):
        probe_log_likelihood(logprobs, torch.zeros_like(mask))


def test_update_ratio_of_one_tensor_and_of_a_whole_policy():
    before = torch.tensor([[3.0, 4.0]])  # |W| = 5
    assert update_ratio(before, torch.tensor([[3.0, 4.5]])) == pytest.approx(0.1)  # |dW| = 0.5
    assert update_ratio(torch.zeros(2), torch.ones(2)) == math.inf and update_ratio(torch.zeros(2), torch.zeros(2)) == 0
    # two tensors: |W|^2 = 9 + 16, |dW|^2 = 1 -> 1 / 5
    b = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([0.0, 4.0])}
    a = {"a": torch.tensor([3.0, 1.0]), "b": torch.tensor([0.0, 4.0])}
    assert update_to_weight_ratio(b, a) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="differ"):
        update_to_weight_ratio(b, {"a": a["a"]})


def test_mean_token_entropy_of_a_uniform_and_a_certain_position():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0], [5.0, 1.0, 2.0, 3.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert mean_token_entropy(logits, mask) == pytest.approx(math.log(4) / 2, abs=1e-12)


def test_slope_over_a_window():
    pts = [(1, 1.0), (2, 3.0), (3, 5.0), (4, 4.0)]
    assert slope(pts[:3], 3) == pytest.approx(2.0)
    # the last 3: (2, 3), (3, 5), (4, 4): mean step 3, mean 4, slope ((-1)(-1) + 0 + (1)(0)) / 2 = 0.5
    assert slope(pts, 3) == pytest.approx(0.5)
    assert slope(pts[:2], 3) is None


def test_kl_exact_and_the_sampled_estimators_on_two_tokens():
    # pi = (1/2, 1/2), pi_base = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3) = 0.143841
    kl = 0.5 * math.log(2) + 0.5 * math.log(2 / 3)
    logits = torch.log(torch.tensor([[[0.5, 0.5]]], dtype=torch.float64))
    base = torch.log(torch.tensor([[[0.25, 0.75]]], dtype=torch.float64))
    assert kl_exact(logits, base, torch.ones(1, 1)) == pytest.approx(kl, abs=1e-12)
    # one sampled token 0: log r = ln(1/4 / 1/2) = -ln 2; k1 = ln 2, k2 = (ln 2)^2 / 2, k3 = 1/2 - 1 + ln 2
    lp, lq, m = torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]]), torch.ones(1, 1)
    assert kl_estimate(lp, lq, m, "k1") == pytest.approx(math.log(2))
    assert kl_estimate(lp, lq, m, "k2") == pytest.approx(math.log(2) ** 2 / 2)
    assert kl_estimate(lp, lq, m, "k3") == pytest.approx(-0.5 + math.log(2))
    # tokens sampled from pi: k3 averages to the exact KL
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 2, (1, 200_000), generator=g)
    p, q = torch.tensor([0.5, 0.5]), torch.tensor([0.25, 0.75])
    est = kl_estimate(torch.log(p[tokens]), torch.log(q[tokens]), torch.ones_like(tokens))
    assert est == pytest.approx(kl, abs=0.005)


def test_canary_accuracy():
    assert canary_accuracy([1, 0, 1, 1]) == 0.75
    with pytest.raises(ValueError):
        canary_accuracy([])


# --- metric names, series, the registry -------------------------------------------------------------------


def test_precursor_keys_build_and_parse_back():
    assert precursor_key("canary_accuracy") == "precursor/canary_accuracy"
    assert precursor_key("update_ratio", "pol") == "precursor/pol/update_ratio"
    assert precursor_key("probe_ll", "pol", "worker") == "precursor/pol/worker/probe_ll"
    for key in ("precursor/canary_accuracy", "precursor/pol/update_ratio", "precursor/pol/worker/probe_ll"):
        assert parse_precursor_key(key).key == key
    assert parse_precursor_key("precursor/pol/worker/probe_ll") == PrecursorKey("probe_ll", "pol", "worker")
    assert parse_precursor_key("precursor/pol/worker/probe_ll").subject == "pol/worker"
    assert parse_precursor_key("update/pol/size") is None and parse_precursor_key("precursor//x") is None
    with pytest.raises(ValueError):
        precursor_key("probe_ll", role="worker")


def test_series_from_metric_rows_and_the_any_subject_rule():
    rows = [
        {"step": 1, "precursor/a/update_ratio": 0.01, "precursor/b/update_ratio": 0.03},
        {"step": 2, "precursor/a/update_ratio": 0.05, "precursor/b/update_ratio": float("nan")},
        {"step": 3, "precursor/b/update_ratio": 0.02, "precursor/a/head_update_ratio": 9.0},
    ]
    series = logged_series(rows, "update_ratio")
    assert series == {"a": [(1, 0.01), (2, 0.05)], "b": [(1, 0.03), (3, 0.02)]}
    assert get_precursor("update_ratio").series(rows) == series
    assert run_series(series, "above") == [(1, 0.03), (2, 0.05), (3, 0.02)]  # the largest at each step
    assert run_series(series, "below") == [(1, 0.01), (2, 0.05), (3, 0.02)]
    assert run_series(series, "above", subject="a") == [(1, 0.01), (2, 0.05)]


def test_the_logged_precursors_are_the_ones_the_loop_measures():
    """config/validate.py refuses a user precursor named like a built-in one by these lists alone."""
    measured = set(MEASURED_PERIODICALLY) | set(MEASURED_EACH_STEP)
    assert {name for name, _, _ in LOGGED} == measured
    assert len(measured) == len(MEASURED_PERIODICALLY) + len(MEASURED_EACH_STEP)
    assert not measured & set(DERIVED_EACH_STEP) and all(n in PRECURSORS for n in DERIVED_EACH_STEP)


def test_entropy_slope_is_derived_from_the_logged_role_entropy():
    rows = [{"step": s, "role/gen/entropy": 1.0 - 0.1 * (s - 1), "role/agg/entropy": 2.0} for s in range(1, 7)]
    slopes = get_precursor("entropy_slope").series(rows)
    assert [s for s, _ in slopes["gen"]] == [5, 6] and all(v == pytest.approx(-0.1) for _, v in slopes["gen"])
    assert all(v == pytest.approx(0.0) for _, v in slopes["agg"])
    assert get_precursor("entropy").direction == "below" and get_precursor("kl_to_base").direction == "above"


def test_a_user_registers_a_precursor():
    @register_precursor("test_reward_drop", "below", "the step's mean reward")
    def reward(rows):
        return {"run": [(r["step"], r["reward"]) for r in rows]}

    try:
        p = get_precursor("test_reward_drop")
        assert (p.direction, p.description) == ("below", "the step's mean reward")
        assert p.series([{"step": 1, "reward": 0.5}]) == {"run": [(1, 0.5)]}
        with pytest.raises(ValueError, match="already registered"):
            register_precursor("test_reward_drop", "above")(lambda rows: {})
        with pytest.raises(ValueError, match="unknown precursor"):
            get_precursor("no_such_precursor")
    finally:
        PRECURSORS._entries.pop("test_reward_drop", None)


def test_probe_sums_add_up_over_chunks_to_the_whole_sets_log_likelihood_and_kl():
    # two positions over a 3-token vocabulary; worked by hand: log_softmax([0, 0, ln 2]) = ln([1/4, 1/4, 1/2])
    logits = torch.tensor([[0.0, 0.0, math.log(2.0)], [0.0, 0.0, 0.0]])
    base = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    targets = torch.tensor([2, 0])
    mask = torch.tensor([1, 1])
    whole = probe_sums(logits, base, targets, mask)
    assert whole.tokens == 2
    assert whole.ll == pytest.approx(math.log(0.5) + math.log(1 / 3))
    # KL([1/4, 1/4, 1/2] || uniform) = 2 (1/4) ln(3/4) + (1/2) ln(3/2); the second position's distributions agree
    assert whole.kl == pytest.approx(0.5 * math.log(0.75) + 0.5 * math.log(1.5))
    chunks = probe_sums(logits[:1], base[:1], targets[:1], mask[:1]) + probe_sums(
        logits[1:], base[1:], targets[1:], mask[1:]
    )
    assert (chunks.ll, chunks.kl, chunks.tokens) == pytest.approx((whole.ll, whole.kl, whole.tokens))
    # the means are the set-level measures
    logp = torch.log_softmax(logits, -1).gather(-1, targets[:, None])[:, 0]
    assert whole.mean_ll == pytest.approx(probe_log_likelihood(logp[None], mask[None]))
    assert whole.mean_kl == pytest.approx(kl_exact(logits[None], base[None], mask[None]))
    masked = probe_sums(logits, base, targets, torch.tensor([0, 1]))  # a padding position adds nothing
    assert (masked.tokens, masked.kl) == (1.0, pytest.approx(0.0))
    with pytest.raises(ValueError, match="no token"):
        _ = ProbeSums().mean_ll


def _turn(pid: str, role: str, completion: list[int]) -> Turn:
    return Turn(role, role, pid, [1, 2], completion, [-0.1] * len(completion), "", "stop")


def test_probes_are_turns_of_correct_episodes_spread_over_problems():
    eps = [
        Episode("p1", 0, [_turn("a", "solver", [11]), _turn("b", "judge", [12])], reward=1.0),
        Episode("p1", 1, [_turn("a", "solver", [13]), _turn("b", "judge", [])], reward=1.0),  # empty: left out
        Episode("p2", 0, [_turn("a", "solver", [21])], reward=0.0),  # wrong: left out
        Episode("p3", 0, [_turn("a", "solver", [31])], reward=1.0),
        Episode("p3", 1, [_turn("a", "solver", [33])], reward=1.0),
    ]
    probes = select_probes(eps, k=3)
    # first each problem's first correct turn (p1, p3), then the second ones in episode order (p1's)
    assert [t.completion_ids for t in probes["a"]["solver"]] == [[11], [31], [13]]
    assert [t.completion_ids for t in probes["b"]["judge"]] == [[12]]
    assert [t.completion_ids for t in select_probes(eps, k=10)["a"]["solver"]] == [[11], [31], [13], [33]]
    assert select_probes([eps[2]], k=3) == {}
    with pytest.raises(ValueError, match="k must be"):
        select_probes(eps, k=0)


def test_a_trigger_fires_on_the_most_alarming_subject_at_its_step():
    series = {"a": [(1, 0.1), (2, 0.5)], "b": [(2, 0.7)], "c": [(1, 0.9)]}
    assert values_at(series, 2) == {"a": 0.5, "b": 0.7}
    assert fired_at(series, "above", 0.6, 2) == ("b", 0.7)
    assert fired_at(series, "above", 0.7, 2) is None  # strictly past the threshold
    assert fired_at(series, "above", 0.6, 2, subject="a") is None
    assert fired_at(series, "below", 0.6, 2) == ("a", 0.5)
    assert fired_at(series, "above", 0.0, 3) is None  # no value at the step: no alarm


def plain_reward(rows):
    return {"run": [(r["step"], r["reward"]) for r in rows]}


def test_a_precursor_named_by_its_function(tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text("def reward_level(rows):\n    return {'run': [(r['step'], r['reward']) for r in rows]}\n")
    p = resolve_precursor(f"{plugin}:reward_level", "below")
    assert (p.name, p.direction) == ("reward_level", "below")
    assert p.series([{"step": 3, "reward": 0.25}]) == {"run": [(3, 0.25)]}
    with pytest.raises(ValueError, match="needs its direction"):
        resolve_precursor(f"{plugin}:reward_level")
    with pytest.raises(ConfigError, match="no function 'nope'"):
        resolve_precursor(f"{plugin}:nope", "below")
    assert resolve_precursor("kl_to_base") is get_precursor("kl_to_base")
    # a function registered with @register_precursor keeps its registered name and direction
    register_precursor("test_named_reward", "above")(plain_reward)
    try:
        p = resolve_precursor(f"{__name__}:plain_reward")
        assert (p.name, p.direction) == ("test_named_reward", "above")
    finally:
        PRECURSORS._entries.pop("test_named_reward", None)


# --- scoring against labelled runs ------------------------------------------------------------------------


def test_an_alarm_is_a_stretch_of_firing_steps():
    assert alarm_onsets([1, 2, 3, 4, 5, 6], {2, 3, 5}) == [2, 5]
    assert alarm_onsets([1, 2, 3], set()) == []


def series(values, start=1):
    return [(start + i, v) for i, v in enumerate(values)]


def test_score_on_hand_built_runs():
    runs = [
        # warned: fires at 3-4 and 6-8; the first alarm (3) is before the deadline 7: lead 8 - 3 = 5, of 10 steps
        (LabelledRun("A", 0, 10, cliff_step=8), series([0.1, 0.1, 0.5, 0.6, 0.2, 0.7, 0.8, 0.9])),
        (LabelledRun("B", 1, 10, cliff_step=5), series([0.1, 0.2, 0.1, 0.2, 0.9])),  # fires only at the cliff
        (LabelledRun("C", 2, 10), series([0.1, 0.5, 0.1, 0.6, 0.6, 0.1])),  # two alarms: at 2 and at 4-5
        (LabelledRun("D", 3, 10), series([0.1, 0.2, 0.3])),
    ]
    s = score_precursor(runs, 0.45, "above")
    assert (s.recall.k, s.recall.n) == (1, 2)
    assert (s.recall.low, s.recall.high) == pytest.approx(clopper_pearson(1, 2))
    assert s.leads == [5] and s.lead_fractions == [0.5] and s.median_lead == 5
    assert (s.false_alarms.count, s.false_alarms.exposure, s.false_alarms.value) == (2, 2, 1.0)
    low, high = poisson_interval(2)
    assert (s.false_alarms.low, s.false_alarms.high) == pytest.approx((low / 2, high / 2))
    assert (s.calm_alarmed.k, s.calm_alarmed.n) == (1, 2)
    # a later deadline (the step of the cliff itself) warns B too, with lead 0
    late = [(LabelledRun("B", 1, 10, cliff_step=5, deadline=5), runs[1][1])]
    assert score_precursor(late, 0.45, "above").leads == [0]


FIT = [
    (LabelledRun("X", 0, 20, cliff_step=10), series([0.1, 0.1, 0.2, 0.2, 0.3, 0.5, 0.6, 0.8, 0.9])),
    (LabelledRun("Y", 1, 20, cliff_step=10), series([0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.4, 0.45])),
    (LabelledRun("Z", 2, 20), series([0.1, 0.2, 0.35, 0.2, 0.1])),
    (LabelledRun("W", 3, 20), series([0.1, 0.1, 0.1, 0.42, 0.1])),
]


def test_the_fitted_threshold_maximises_recall_within_the_false_alarm_budget():
    # 0.1 false alarms per calm run over 2 calm runs allows none: the threshold must be >= 0.42 (W's peak).
    # At 0.42 X fires from step 6 (0.5) and Y at step 9 (0.45): recall 2/2; at 0.45 Y is missed.
    fitted = fit_threshold(FIT, "above", max_false_alarms_per_calm_run=0.1)
    assert fitted.threshold == pytest.approx(0.42)
    assert fitted.fit.recall.k == 2 and fitted.fit.false_alarms.count == 0
    assert sorted(fitted.fit.leads) == [1, 4]
    # with one alarm per calm run allowed, 0.35 (Z's peak) would do as well; fewer false alarms win the tie
    assert fit_threshold(FIT, "above", max_false_alarms_per_calm_run=1.0).threshold == pytest.approx(0.42)
    # the same rule read the other way up: values negated, "below"
    negated = [(run, [(s, -v) for s, v in pts]) for run, pts in FIT]
    assert fit_threshold(negated, "below").threshold == pytest.approx(-0.42)
    with pytest.raises(ValueError, match="cliff run and one calm run"):
        fit_threshold(FIT[2:], "above")


def test_a_threshold_fitted_on_one_half_is_scored_on_the_other():
    held = [
        (LabelledRun("H1", 4, 20, cliff_step=15), series([0.1] * 9 + [0.5] * 5)),  # fires from 10: lead 5
        (LabelledRun("H2", 5, 20), series([0.1, 0.6, 0.1, 0.1])),  # one false alarm
        (LabelledRun("H3", 6, 20), series([0.3] * 10)),
    ]
    fit, out = split_by_seed(FIT + held, fit_seeds=[0, 1, 2, 3], held_out_seeds=[4, 5, 6])
    assert [r.name for r, _ in fit] == ["X", "Y", "Z", "W"] and [r.name for r, _ in out] == ["H1", "H2", "H3"]
    t = fit_threshold(fit, "above").threshold
    s = score_precursor(out, t, "above")
    assert (s.recall.k, s.recall.n, s.leads, s.lead_fractions) == (1, 1, [5], [0.25])
    assert (s.false_alarms.count, s.false_alarms.exposure) == (1, 2)
    with pytest.raises(ValueError, match="both halves"):
        split_by_seed(FIT, [0, 1], [1, 2])


def test_the_combined_rule_fires_when_any_precursor_does():
    run = LabelledRun("R", 0, 10, cliff_step=6)
    calm = LabelledRun("C", 1, 10)
    a = series([0.1, 0.1, 0.1, 0.9, 0.1])  # fires at 4 above 0.5
    b = series([1.0, 0.2, 1.0, 1.0, 1.0])  # fires at 2 below 0.5
    s = score_combined([(run, [(a, 0.5, "above"), (b, 0.5, "below")]), (calm, [(series([0.1] * 5), 0.5, "above")])])
    assert s.leads == [4] and s.recall.k == 1 and s.false_alarms.count == 0
