"""Training mechanics the study's recipe relies on: the per-minibatch update schedule, per-role generation caps
(generation and the loss's length normaliser), epoch-based sampling, and the named evaluation protocols."""

from __future__ import annotations

import json

import pytest
import torch

from rolecast.config.load import load_config
from rolecast.core.episode import Turn
from rolecast.core.errors import ConfigError
from rolecast.objectives.losses import aggregate
from rolecast.policies.models import PolicySet, load_tokenizer
from rolecast.rollout.engine import GenRequest, run_episodes
from rolecast.rollout.hf import HFBackend
from rolecast.rollout.scripted import ScriptedBackend
from rolecast.training.batching import collate, generation_caps
from rolecast.training.grpo import train
from rolecast.training.logprobs import completion_logprobs
from rolecast.training.sampling import step_problems


def _cfg(model_dir, run_dir, **overrides):
    base = {
        "model.path": model_dir,
        "model.trainable": "lora",
        "model.lora.r": 4,
        "model.lora.alpha": 8,
        "run_dir": str(run_dir),
        "train.steps": 1,
        "train.problems_per_step": 2,
        "train.group_size": 4,
        "train.lr": 1e-3,
        "rollout.max_new_tokens": 6,
        "rollout.temperature": 1.0,
        "eval.at_start": False,
        "eval.at_end": False,
        "logging.progress": False,
        "checkpoint.every": 0,
        "threads": 2,
        "workflow.name": "voting",
        "routing.sharing": "isolated",
        "train.epochs": 1,
    }
    return load_config(None, {**base, **overrides})


@pytest.mark.parametrize("schedule,expected", [("per_minibatch", (3, 1)), ("per_step", (1, 1))])
def test_three_copies_get_three_times_the_optimizer_steps(tiny_model_dir, tmp_path, schedule, expected):
    # 2 problems x 4 samples: 8 aggregator turns and 3 x 8 = 24 generator turns; mini-batches of 8 turns
    cfg = _cfg(tiny_model_dir, tmp_path / schedule, **{"train.update_schedule": schedule, "train.mini_batch_size": 8})
    train(cfg)
    row = json.loads((tmp_path / schedule / "metrics.jsonl").read_text().splitlines()[0])
    assert row["role/generator/turns"] == 24 and row["role/aggregator/turns"] == 8
    assert (row["policy/generator/optimizer_steps"], row["policy/aggregator/optimizer_steps"]) == expected


def test_per_role_caps_stop_each_row_at_its_roles_cap_with_exact_logprobs(tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    policies = PolicySet(tiny_model_dir, ["p"], mode="lora", lora={"r": 4, "alpha": 8})
    backend = HFBackend(
        policies,
        tok,
        max_new_tokens=9,
        temperature=1.0,
        seed=1,
        ignore_eos=True,
        max_new_tokens_by_role={"aggregator": 3, "verifier": 5},
    )
    reqs = [
        GenRequest("p", [{"role": "user", "content": f"solve: {i} + 1"}], role=role)
        for i in range(3)
        for role in ("generator", "aggregator")
    ]
    reqs.append(GenRequest("p", [{"role": "user", "content": "pick"}], role="verifier"))
    gens = backend.generate(reqs)  # one mixed request list: the backend decodes one batch per cap
    assert [len(g.completion_ids) for g in gens] == [9, 3, 9, 3, 9, 3, 5]
    assert all(g.finish_reason == "length" for g in gens)
    turns = [
        Turn(r.role, r.role, "p", g.prompt_ids, g.completion_ids, g.logprobs, g.text, g.finish_reason)
        for r, g in zip(reqs, gens, strict=True)
    ]
    batch = collate(turns, tok.pad_token_id)
    with torch.no_grad(), policies.training("p") as model:
        logp, _ = completion_logprobs(model, batch, 1.0)
    assert float(((logp - batch["old_logp"]).abs() * batch["mask"]).max()) < 1e-4


def test_engine_sends_the_calling_role_with_each_request():
    from rolecast.prompts import PromptBook
    from rolecast.tasks import make_task
    from rolecast.workflows import get_workflow

    task = make_task("testbed")
    backend = ScriptedBackend(lambda pid, msgs: "\\boxed{1}")
    run_episodes(
        get_workflow("voting"),
        list(task.problems("train"))[:1],
        1,
        task=task,
        prompts=PromptBook(task.family),
        router=lambda role, inst: role,
        backend=backend,
    )
    assert [[r.role for r in b] for b in backend.batches] == [["generator"] * 3, ["aggregator"]]


def test_length_normaliser_uses_each_rows_role_cap(tiny_model_dir, tmp_path):
    cfg = _cfg(
        tiny_model_dir, tmp_path, **{"rollout.max_new_tokens": 8, "rollout.max_new_tokens_by_role": {"aggregator": 2}}
    )
    turns = [Turn(role, role, "p", [1], [2, 3], [0.0, 0.0], "", "stop") for role in ("generator", "aggregator")]
    caps = generation_caps(cfg, turns)
    assert caps.tolist() == [8.0, 2.0]
    loss = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    mask = torch.ones(2, 2)
    # seq-mean-token-sum-norm: (2/8 + 2/2) / 2 sequences
    assert float(aggregate(loss, mask, "seq-mean-token-sum-norm", max_len=caps)) == pytest.approx((2 / 8 + 2 / 2) / 2)
    no_caps = _cfg(tiny_model_dir, tmp_path, **{"rollout.max_new_tokens": 8})
    assert generation_caps(no_caps, turns) == 8


def test_caps_config_names_unknown_roles(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="max_new_tokens_by_role.*no role.*judge"):
        _cfg(tiny_model_dir, tmp_path, **{"rollout.max_new_tokens_by_role": {"judge": 5}})


def test_epoch_sampling_covers_every_problem_once_per_epoch_and_reshuffles():
    pool = list(range(10))
    steps = [step_problems(pool, seed=3, step=s, per_step=3, mode="epoch") for s in range(6)]
    first, second = sum(steps[:3], []), sum(steps[3:], [])  # 10 // 3 = 3 batches per epoch (1 left over)
    assert len(set(first)) == 9 and len(set(second)) == 9  # no problem twice within an epoch
    assert first != second  # reshuffled
    # a pure function of (seed, step): a resumed run needs no cursor
    assert step_problems(pool, seed=3, step=4, per_step=3, mode="epoch") == steps[4]
    # with random sampling a problem can repeat within 3 steps: the difference the option makes
    rand = sum((step_problems(pool, seed=3, step=s, per_step=3) for s in range(3)), [])
    assert len(set(rand)) < 9


def test_random_sampling_is_the_trainers_former_draw():
    import random

    pool = list(range(50))
    old = random.Random((7 * 1_000_003 + 5 * 97 + 0) % (2**63)).sample(pool, 4)
    assert step_problems(pool, seed=7, step=5, per_step=4) == old


def test_eval_protocols():
    study = load_config(None, {"eval.protocol": "study", "eval.n_samples": 4})
    assert (study.eval.temperature, study.eval.n_samples) == (0.7, 4)
    with pytest.raises(ConfigError, match="protocol study samples at temperature 0.7"):
        load_config(None, {"eval.protocol": "study", "eval.temperature": 0.0})
    with pytest.raises(ConfigError, match="protocol greedy"):
        load_config(None, {"eval.protocol": "greedy", "eval.n_samples": 4})
    assert load_config(None, {"eval.protocol": "greedy"}).eval.temperature == 0.0
    # the embedded recipe evaluates by the study's protocol, 4 samples per problem unless eval.n_samples says
    recipe = load_config(None).eval
    assert (recipe.protocol, recipe.temperature, recipe.n_samples) == ("study", 0.7, 4)
    assert recipe.describe() == "study protocol: T=0.7, pass@1 over 4 samples"
    assert load_config(None, {"eval.protocol": "greedy"}).eval.describe() == (
        "greedy protocol: T=0 (greedy: parallel calls of one role write the same answer), one sample"
    )
