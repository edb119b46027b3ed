"""Every workflow x sharing mode trains on the embedded testbed, with its workflow metrics logged."""

from __future__ import annotations

import json

import pytest

from rolecast.config.load import load_config
from rolecast.training.grpo import train

WF_METRICS = {
    "single": [],
    "voting": ["wf/agree_majority", "wf/aggregator_solvable", "wf/distinct_answers"],
    "eval_opt": ["wf/rounds", "wf/evaluator_accept_rate", "wf/evaluator_accuracy"],
    "orch_workers": ["wf/strategy_count", "wf/strategy_distinct", "wf/worker_diversity"],
}
ROLES = {
    "single": ["solver"],
    "voting": ["generator", "aggregator"],
    "eval_opt": ["generator", "evaluator"],
    "orch_workers": ["orchestrator", "worker", "synthesizer"],
}


@pytest.mark.parametrize("sharing", ["shared", "isolated"])
@pytest.mark.parametrize("workflow", sorted(WF_METRICS))
def test_workflow_trains_on_the_testbed(workflow, sharing, tmp_path):
    cfg = load_config(
        None,
        {
            "workflow.name": workflow,
            "routing.sharing": sharing,
            "train.steps": 1,
            "train.problems_per_step": 2,
            "train.group_size": 4,
            "eval.at_start": False,
            "eval.at_end": False,
            "logging.progress": False,
            "run_dir": str(tmp_path / "run"),
        },
    )
    summary = train(cfg)
    [row] = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for key in WF_METRICS[workflow]:
        assert row.get(key) is not None, key
    for role in ROLES[workflow]:
        assert row[f"role/{role}/turns"] > 0 and f"role/{role}/entropy" in row
    expected_policies = ["shared"] if sharing == "shared" else sorted(ROLES[workflow])
    assert summary["policies"] == expected_policies
    for pid in expected_policies:
        assert row[f"policy/{pid}/optimizer_steps"] >= 1
