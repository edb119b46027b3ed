"""core/metric_keys.py: the names the trainer writes, parsed back into records; names of other shapes rejected."""

from __future__ import annotations

import pytest

from rolecast.core import metric_keys as mk
from rolecast.core.metric_keys import EvalPassKey, PolicyKey, PolicyRoleKey, RoleKey, RolePairKey


def test_builders_spell_the_names_metrics_jsonl_holds():
    assert mk.role_key("solver", "length") == "role/solver/length"
    assert mk.policy_key("shared", "lr") == "policy/shared/lr"
    assert mk.grad_key("shared", "capture_index") == "grad/shared/capture_index"
    assert mk.grad_role_key("shared", "worker", "share") == "grad/shared/worker/share"
    assert mk.grad_cos_key("shared", "orchestrator", "worker") == "grad/shared/cos/orchestrator|worker"
    assert mk.update_key("p0", "drift") == "update/p0/drift"
    assert mk.update_role_key("p0", "voter", "optimizer_steps") == "update/p0/voter/optimizer_steps"
    assert mk.intervention_key("p0", "voter", "damping") == "intervention/p0/voter/damping"
    assert mk.wf_key("evaluator_precision") == "wf/evaluator_precision"
    assert mk.time_key("rollout") == "time/rollout"
    assert mk.rollout_key("requests") == "rollout/requests"
    assert mk.warn_key("capture") == "warn/capture"
    assert mk.rollback_key("to_step") == "rollback/to_step"
    assert mk.eval_pass_key() == "eval/pass@1"
    assert mk.eval_pass_key(tag="final") == "eval/final/pass@1"
    assert mk.eval_pass_key("gsm8k") == "eval/gsm8k/pass@1"
    assert mk.eval_pass_key("gsm8k", "periodic") == "eval/gsm8k/periodic/pass@1"


def test_hand_written_names_parse():
    assert mk.parse_role_key("role/aggregator/truncated") == RoleKey("aggregator", "truncated")
    assert mk.parse_policy_key("policy/shared/grad_norm") == PolicyKey("policy", "shared", "grad_norm")
    assert mk.parse_policy_key("grad/shared/norm") == PolicyKey("grad", "shared", "norm")
    assert mk.parse_policy_key("update/p1/size") == PolicyKey("update", "p1", "size")
    r = mk.parse_policy_role_key("grad/shared/worker/alignment")
    assert r == PolicyRoleKey("grad", "shared", "worker", "alignment")
    assert r is not None and r.subject == "shared/worker"
    assert mk.parse_policy_role_key("update/p/r/optimizer_steps") == PolicyRoleKey(
        "update", "p", "r", "optimizer_steps"
    )
    assert mk.parse_policy_role_key("intervention/p/r/balance") == PolicyRoleKey("intervention", "p", "r", "balance")
    assert mk.parse_role_pair_key("grad/shared/cos/orchestrator|worker") == RolePairKey(
        "shared", "orchestrator", "worker"
    )
    assert mk.parse_named_key("warn/rubber_stamping", "warn") == "rubber_stamping"
    assert mk.parse_named_key("wf/evaluator_accept_rate", "wf") == "evaluator_accept_rate"
    assert mk.parse_named_key("time/step", "time") == "step"
    assert mk.parse_eval_key("eval/pass@1") == EvalPassKey()
    assert mk.parse_eval_key("eval/final/pass@1") == EvalPassKey(tag="final")
    assert mk.parse_eval_key("eval/gsm8k/pass@1") == EvalPassKey(set_name="gsm8k")
    assert mk.parse_eval_key("eval/gsm8k/final/pass@1") == EvalPassKey("gsm8k", "final")


@pytest.mark.parametrize(
    "record",
    [
        RoleKey("solver", "entropy"),
        PolicyKey("policy", "p_0", "loss"),
        PolicyKey("grad", "shared", "capture_role"),
        PolicyKey("update", "shared", "size_last"),
        PolicyRoleKey("grad", "shared", "worker", "persistence"),
        PolicyRoleKey("grad", "shared", "norm", "share"),  # a role named like a stat
        PolicyRoleKey("update", "shared", "worker", "optimizer_steps"),
        PolicyRoleKey("intervention", "shared", "worker", "damping"),
        RolePairKey("shared", "a", "b"),
        EvalPassKey(),
        EvalPassKey(set_name="math500"),
        EvalPassKey(tag="periodic"),
        EvalPassKey("math500", "periodic"),
    ],
)
def test_round_trip(record):
    parse = {
        RoleKey: mk.parse_role_key,
        PolicyKey: mk.parse_policy_key,
        PolicyRoleKey: mk.parse_policy_role_key,
        RolePairKey: mk.parse_role_pair_key,
        EvalPassKey: mk.parse_eval_key,
    }[type(record)]
    assert parse(record.key) == record


def test_the_segment_count_decides_the_shape():
    # a policy's own norm is never read as a role's, nor a role's stat as the policy's
    assert mk.parse_policy_role_key("grad/shared/norm") is None
    assert mk.parse_policy_key("grad/shared/worker/norm") is None
    assert mk.parse_policy_key("grad/shared/capture_index") == PolicyKey("grad", "shared", "capture_index")
    # the role-pair cosine is not a role's stat, and a role's stat is not a pair
    assert mk.parse_policy_role_key("grad/shared/cos/a|b") is None
    assert mk.parse_role_pair_key("grad/shared/cos/share") is None
    assert mk.parse_policy_role_key("grad/shared/cos/norm") == PolicyRoleKey("grad", "shared", "cos", "norm")


@pytest.mark.parametrize(
    "name",
    [
        "reward",
        "step",
        "role/solver",
        "role/solver/length/x",
        "role//length",
        "role/solver/",
        "roles/solver/length",
        "grad/p",
        "grad/p/r/norm/x",
        "grad//norm",
        "policy/p/r/lr",
        "warn/capture",
        "time/step",
        "eval/pass@1",
    ],
)
def test_names_of_other_shapes_do_not_parse_as_role_or_policy_keys(name):
    assert mk.parse_role_key(name) is None
    assert mk.parse_policy_key(name) is None
    assert mk.parse_policy_role_key(name) is None


@pytest.mark.parametrize(
    "name",
    ["eval", "eval/", "eval/pass@2", "eval//pass@1", "eval/a/b/c/pass@1", "grad/p/norm", "evals/pass@1"],
)
def test_eval_names_that_do_not_parse(name):
    assert mk.parse_eval_key(name) is None


def test_named_families():
    assert mk.parse_named_key("warn/", "warn") is None
    assert mk.parse_named_key("warning/x", "warn") is None
    assert mk.parse_named_key("wf/x", "warn") is None
    assert mk.parse_named_key("rollback/to_step", "rollback") == "to_step"
    for bad in ("grad/p/cos/a|", "grad/p/cos/|b", "grad/p/cos/a|b|c", "grad/p/kos/a|b", "update/p/cos/a|b"):
        assert mk.parse_role_pair_key(bad) is None


def test_key_family():
    assert mk.key_family("grad/p/norm") == "grad"
    assert mk.key_family("wf/x") == "wf"
    for plain in ("reward", "grad/", "/x", ""):
        assert mk.key_family(plain) is None
