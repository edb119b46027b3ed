"""The update's fine print as the reference study trains (docs/study_recipe.md, "The update's fine print"): dual-clip
PPO, old log-probs recomputed by the trainer, partial mini-batches scaled by rows / nominal size, singleton GRPO
groups, per-position voting groups, the prompt-length cap, and Eval-Opt's shared history. Each against numbers
worked by hand; rolecast's defaults are checked next to the study's option."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
from echo_task import PROBLEM, EchoTask

from rolecast.config.load import load_config
from rolecast.core.episode import Episode, Turn, group_turns
from rolecast.core.errors import ConfigError
from rolecast.objectives.advantages import compute_advantages
from rolecast.objectives.losses import clipped_surrogate
from rolecast.policies.models import PolicySet, load_tokenizer
from rolecast.policies.router import build_routing
from rolecast.prompts import PromptBook
from rolecast.rollout.engine import run_episodes
from rolecast.rollout.scripted import ScriptedBackend
from rolecast.scoring import assign_advantages
from rolecast.training.batching import collate
from rolecast.training.grpo import train
from rolecast.training.logprobs import completion_logprobs, trainer_logprobs
from rolecast.training.update import update_policy
from rolecast.workflows import get_workflow

# ------------------------------------------------------------------------------------------------ dual-clip


def test_dual_clip_hand_values():
    # ratios and advantages per token; clip [0.8, 1.28], c = 3
    ratio = torch.tensor([[4.0, 2.0], [0.5, 4.0]])
    adv = torch.tensor([[-1.0, -1.0], [-1.0, 1.0]])
    old = torch.zeros(2, 2)
    logp = ratio.log().requires_grad_(True)
    mask = torch.ones(2, 2)
    # PPO: max(-A r, -A clip(r)) = [4, 2 | 0.8, -1.28]; dual-clip caps A < 0 tokens at -A c = 3: [3, 2 | 0.8, -1.28]
    plain, _ = clipped_surrogate(logp, old, adv, mask, 0.2, 0.28, "token-mean")
    assert plain.item() == pytest.approx((4 + 2 + 0.8 - 1.28) / 4)
    dual, stats = clipped_surrogate(logp, old, adv, mask, 0.2, 0.28, "token-mean", dual_clip=3.0)
    assert dual.item() == pytest.approx((3 + 2 + 0.8 - 1.28) / 4)
    assert stats["dual_clip_fraction"] == pytest.approx(1 / 4)  # only the ratio-4, A < 0 token
    (grad,) = torch.autograd.grad(dual, logp)
    # d/dlogp of -A r / 4 = -A r / 4: the capped token and the clipped ones carry none
    assert grad.flatten().tolist() == pytest.approx([0.0, 2.0 / 4, 0.0, 0.0])
    assert "dual_clip_fraction" not in clipped_surrogate(logp, old, adv, mask)[1]
    with pytest.raises(ValueError, match="> 1"):
        clipped_surrogate(logp, old, adv, mask, dual_clip=1.0)


# ------------------------------------------------------------------------------------------------ singleton groups


def test_singleton_groups_zero_by_default_reward_as_verl():
    rewards = torch.tensor([1.0, 0.5, 0.0, 1.0, 0.0], dtype=torch.float64)
    groups = torch.tensor([0, 1, 1, 2, 3])  # singletons: 0 (r=1), 2 (r=1), 3 (r=0)
    pair = 0.25 / (math.sqrt(0.125) + 1e-6)  # group 1: mean 0.25, unbiased std sqrt(0.125)
    assert compute_advantages("grpo", rewards, groups).tolist() == pytest.approx([0, pair, -pair, 0, 0])
    got = compute_advantages("grpo", rewards, groups, singleton="reward")
    assert got.tolist() == pytest.approx([1 / (1 + 1e-6), pair, -pair, 1 / (1 + 1e-6), 0.0], abs=1e-12)
    assert compute_advantages("dr_grpo", rewards, groups, singleton="reward").tolist() == [1, 0.25, -0.25, 1, 0]
    with pytest.raises(ValueError, match="rloo"):
        compute_advantages("rloo", rewards, groups, singleton="reward")


def test_singleton_rule_checked_at_load(tiny_model_dir):
    with pytest.raises(ConfigError, match="singleton_advantage"):
        load_config(None, {"train.advantage": "rloo", "train.singleton_advantage": "reward"})
    with pytest.raises(ConfigError, match="per_minibatch"):
        load_config(None, {"train.minibatch_scale": "nominal", "train.update_schedule": "per_step"})


# ------------------------------------------------------------------------------------------------ voting groups


def _voting_episodes(team_rewards):
    eps = []
    for s, r in enumerate(team_rewards):
        turns = [Turn("generator", f"generator/{i}", "generator", [1], [2], [0.0], "", "stop") for i in range(3)]
        turns.append(Turn("aggregator", "aggregator", "aggregator", [1], [2], [0.0], "", "stop"))
        for t in turns:
            t.reward = r
        eps.append(Episode("p0", s, turns))
    return eps


def test_per_position_voting_groups_hand_values():
    """The study names math Voting's voters generator0..2, so each position is its own GRPO group (group_by:
    instance); in code Voting they share one name and one group (group_by: role). Team rewards 1 and 0 over two
    samples: per position each group is [1, 0], advantage +-0.5 / std([1, 0]) = +-0.7071; one group of six
    [1, 1, 1, 0, 0, 0] has unbiased std sqrt(1.5 / 5), advantage +-0.5 / 0.5477 = +-0.9129."""
    per_position = _voting_episodes([1.0, 0.0])
    groups = group_turns(per_position, "instance")
    assert sorted(len(g) for g in groups.values()) == [2, 2, 2, 2]
    assign_advantages(groups, "grpo")
    one = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert [t.advantage for t in per_position[0].turns] == pytest.approx([one] * 4)
    assert [t.advantage for t in per_position[1].turns] == pytest.approx([-one] * 4)

    shared = _voting_episodes([1.0, 0.0])
    assign_advantages(group_turns(shared, "role"), "grpo")
    six = 0.5 / (math.sqrt(1.5 / 5) + 1e-6)
    assert [t.advantage for t in shared[0].turns] == pytest.approx([six] * 3 + [one])
    assert [t.advantage for t in shared[1].turns] == pytest.approx([-six] * 3 + [-one])


# ------------------------------------------------------------------------------------------------ the update


def _generated_turns(policies, tok, advantages, shift):
    """Turns with real completions whose sampler log-probs are the trainer's minus `shift` on every token."""
    g = torch.Generator().manual_seed(0)
    turns = []
    for i, a in enumerate(advantages):
        prompt = torch.randint(3, len(tok), (5 + i,), generator=g).tolist()
        completion = torch.randint(3, len(tok), (3 + i % 2,), generator=g).tolist()
        t = Turn("generator", "generator", "generator", prompt, completion, [0.0] * len(completion), "", "stop")
        t.advantage = a
        turns.append(t)
    with torch.no_grad(), policies.training("generator") as model:
        logp, _ = completion_logprobs(model, collate(turns, tok.pad_token_id), 1.0)
    for i, t in enumerate(turns):
        t.logprobs = (logp[i, : len(t.completion_ids)] - shift).tolist()
    return turns


def _update(tiny_model_dir, turns, policies, tok, **train_overrides):
    overrides = {
        "model.path": tiny_model_dir,
        "rollout.temperature": 1.0,
        "train.epochs": 1,
        "train.loss_agg": "seq-mean-token-mean",
        "train.update_schedule": "per_minibatch",
        **{f"train.{k}": v for k, v in train_overrides.items()},
    }
    cfg = load_config(None, overrides)
    opt = torch.optim.AdamW(policies.parameters("generator"), lr=1e-12)  # weights stay put: ratios stay exact
    stats = update_policy(
        "generator",
        turns,
        cfg=cfg,
        policies=policies,
        optimizer=opt,
        pad_id=tok.pad_token_id,
        rng=random.Random(0),
        check_logprobs=False,
    ).stats
    return stats


@pytest.fixture(scope="module")
def generator_policy(tiny_model_dir):
    return PolicySet(tiny_model_dir, ["generator"], mode="lora", lora={"r": 4, "alpha": 8}), load_tokenizer(
        tiny_model_dir
    )


def test_trainer_logprobs_equal_the_update_forward(generator_policy):
    policies, tok = generator_policy
    turns = _generated_turns(policies, tok, [1.0, -1.0, 0.5], shift=0.0)
    with policies.training("generator") as model:
        got = trainer_logprobs(model, turns, tok.pad_token_id, policies.device, 1.0, 8192)
    for t in turns:
        assert got[id(t)].tolist() == pytest.approx(t.logprobs, abs=1e-6)


@pytest.mark.parametrize("mini_batch", [4, 2])  # one mini-batch (verl's on-policy shortcut), or two (recomputed)
def test_recomputed_old_logprobs_hand_values(tiny_model_dir, generator_policy, mini_batch):
    """Sampler log-probs 0.1 below the trainer's on every token: with the sampler's as the denominator the ratio
    is e^0.1 = 1.1052 (inside the clip), so the seq-mean-token-mean loss is -mean(A) x 1.1052 = -1.1052 for
    A = [2, -1, 1, 2]; recomputed by the trainer the ratio is 1 and the loss -1 (two equal mini-batches average
    to the same), and the gap 0.1 is logged."""
    policies, tok = generator_policy
    adv = [2.0, -1.0, 1.0, 2.0]
    sampler = _update(tiny_model_dir, _generated_turns(policies, tok, adv, 0.1), policies, tok, mini_batch_size=4)
    assert sampler["loss"] == pytest.approx(-math.exp(0.1), rel=1e-5)
    assert "logprob_gap" not in sampler
    trainer = _update(
        tiny_model_dir,
        _generated_turns(policies, tok, adv, 0.1),
        policies,
        tok,
        mini_batch_size=mini_batch,
        old_logprobs="trainer",
    )
    assert trainer["optimizer_steps"] == 4 // mini_batch
    assert trainer["loss"] == pytest.approx(-1.0, rel=1e-5)
    assert trainer["logprob_gap"] == pytest.approx(0.1, rel=1e-4)
    assert trainer["approx_kl"] == pytest.approx(0.0, abs=1e-6)  # old == new at the start of the update


def test_partial_minibatch_scaled_by_rows_over_nominal_size(tiny_model_dir, generator_policy):
    """Three turns, all A = 1, mini-batches of 2 (ratio 1): mean over actual rows gives -1 for both mini-batches;
    the study's scaling gives -1 x 2/2 and -1 x 1/2, so the logged mean loss is -0.75; one turn in a mini-batch of
    4 gives -1/4 and a gradient norm a quarter of the unscaled one."""
    policies, tok = generator_policy
    three = dict(mini_batch_size=2, old_logprobs="trainer")
    actual = _update(tiny_model_dir, _generated_turns(policies, tok, [1.0] * 3, 0.0), policies, tok, **three)
    nominal = _update(
        tiny_model_dir,
        _generated_turns(policies, tok, [1.0] * 3, 0.0),
        policies,
        tok,
        minibatch_scale="nominal",
        **three,
    )
    assert actual["loss"] == pytest.approx(-1.0, rel=1e-5)
    assert nominal["loss"] == pytest.approx(-0.75, rel=1e-5)
    one = dict(mini_batch_size=4, old_logprobs="trainer")
    a = _update(tiny_model_dir, _generated_turns(policies, tok, [1.0], 0.0), policies, tok, **one)
    n = _update(
        tiny_model_dir, _generated_turns(policies, tok, [1.0], 0.0), policies, tok, minibatch_scale="nominal", **one
    )
    assert (a["loss"], n["loss"]) == pytest.approx((-1.0, -0.25), rel=1e-5)
    assert n["grad_norm"] == pytest.approx(a["grad_norm"] / 4, rel=1e-5)


# ------------------------------------------------------------------------------------------------ prompt cap


class CountingBackend(ScriptedBackend):
    """A scripted backend that can count a prompt's tokens before generating (as the HF backend can)."""

    def encode(self, messages):
        return list("".join(m["content"] for m in messages).encode())


@pytest.mark.parametrize("backend_cls", [ScriptedBackend, CountingBackend])
def test_an_over_long_prompt_ends_the_episode(backend_cls):
    """Eval-Opt, scripted: the solve prompt "solve: 2 + 3" is 12 bytes, the generator answers 10 bytes, so the
    evaluator's prompt (the testbed's evaluate prompt restating the solution, 28 bytes) exceeds a cap of 20: the
    episode ends there with the generator's turn only, no final text, reward 0."""
    spec = get_workflow("eval_opt")
    backend = backend_cls(lambda pid, m: r"\boxed{5}!" if pid == "generator" else r"\boxed{Correct}")
    kwargs = dict(
        task=EchoTask(),
        prompts=PromptBook("testbed"),
        router=build_routing(spec.roles, "isolated"),
        backend=backend,
        options={"max_rounds": 2},
    )
    free = run_episodes(spec, [PROBLEM], 2, **kwargs)
    assert [[t.role for t in ep.turns] for ep in free] == [["generator", "evaluator"]] * 2
    assert [len(t.prompt_ids) for t in free[0].turns] == [12, 28]
    backend.batches.clear()
    capped = run_episodes(spec, [PROBLEM], 2, max_prompt_tokens=20, **kwargs)
    for ep in capped:
        assert [t.role for t in ep.turns] == ["generator"]
        assert ep.final_text is None and ep.metadata["ended"] == "max_prompt_tokens"
    # counted before generating, the over-long calls are never made
    made = [r.role for batch in backend.batches for r in batch]
    assert made == (["generator"] * 2 if backend_cls is CountingBackend else ["generator"] * 2 + ["evaluator"] * 2)


# ------------------------------------------------------------------------------------------------ Eval-Opt history


def _exchange(tmp_path, conversation):
    override = tmp_path / "turns.yaml"
    override.write_text("solve:\n  user: S\nevaluate_turn:\n  user: E\nrefine_turn:\n  user: R\n")
    verdicts = iter([r"\boxed{Incorrect}", r"\boxed{Incorrect}", r"\boxed{Correct}"])
    drafts = iter(["g1", "g2", "g3"])
    respond = lambda pid, m: next(verdicts) if pid == "evaluator" else next(drafts)  # noqa: E731
    spec = get_workflow("eval_opt")
    backend = ScriptedBackend(respond)
    run_episodes(
        spec,
        [PROBLEM],
        1,
        task=EchoTask(),
        prompts=PromptBook("testbed", override),
        router=build_routing(spec.roles, "isolated"),
        backend=backend,
        options={"max_rounds": 3, "parsers": "first_match", "conversation": conversation},
    )
    return [(r.role, [(m["role"][0], m["content"]) for m in r.messages]) for b in backend.batches for r in b]


def test_eval_opt_study_history_exact_messages(tmp_path):
    """The study (rllm's evaluator_optimizer_workflow.py, share_conversation_history=True) never adds its evaluate
    or refine prompts to the history: each call sees the first prompt, every earlier reply as consecutive
    assistant messages, then only its own prompt."""
    I1, I2 = r"\boxed{Incorrect}", r"\boxed{Incorrect}"
    assert _exchange(tmp_path, "replies") == [
        ("generator", [("u", "S")]),
        ("evaluator", [("u", "S"), ("a", "g1"), ("u", "E")]),
        ("generator", [("u", "S"), ("a", "g1"), ("a", I1), ("u", "R")]),
        ("evaluator", [("u", "S"), ("a", "g1"), ("a", I1), ("a", "g2"), ("u", "E")]),
        ("generator", [("u", "S"), ("a", "g1"), ("a", I1), ("a", "g2"), ("a", I2), ("u", "R")]),
        ("evaluator", [("u", "S"), ("a", "g1"), ("a", I1), ("a", "g2"), ("a", I2), ("a", "g3"), ("u", "E")]),
    ]
    # multi_turn keeps every prompt: an alternating conversation
    assert _exchange(tmp_path, "multi_turn")[-1] == (
        "evaluator",
        [("u", "S"), ("a", "g1"), ("u", "E"), ("a", I1), ("u", "R"), ("a", "g2"), ("u", "E")]
        + [("a", I2), ("u", "R"), ("a", "g3"), ("u", "E")],
    )


# ------------------------------------------------------------------------------------------------ a whole step


def test_study_update_options_train_and_log(tiny_model_dir, tmp_path):
    """One voting step with every option of the study's update on: it trains, logs the sampler-vs-trainer gap per
    policy and the share of episodes a prompt cap ended."""
    overrides = {
        "model.path": tiny_model_dir,
        "model.trainable": "lora",
        "model.lora.r": 4,
        "model.lora.alpha": 8,
        "run_dir": str(tmp_path / "run"),
        "train.steps": 1,
        "train.problems_per_step": 2,
        "train.group_size": 4,
        "rollout.max_new_tokens": 6,
        "rollout.temperature": 1.0,
        "rollout.max_prompt_tokens": 4096,
        "rollout.ended_reward": "committed",
        "eval.at_start": False,
        "eval.at_end": False,
        "logging.progress": False,
        "checkpoint.every": 0,
        "threads": 2,
        "workflow.name": "voting",
        "routing.sharing": "isolated",
        "train.epochs": 1,
        "train.update_schedule": "per_minibatch",
        "train.mini_batch_size": 16,
        "train.group_by": "instance",
        "train.old_logprobs": "trainer",
        "train.dual_clip": 3.0,
        "train.minibatch_scale": "nominal",
        "train.singleton_advantage": "reward",
    }
    train(load_config(None, overrides))
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    for pid in ("generator", "aggregator"):
        assert 0 <= row[f"policy/{pid}/logprob_gap"] < 1e-3  # float32 on a CPU: sampler and trainer agree
        assert row[f"policy/{pid}/optimizer_steps"] >= 1
    assert row["rollout/ended_max_prompt_tokens"] == 0.0


def test_study_history_renders_with_the_qwen3_chat_template():
    """Consecutive assistant messages are legal for Qwen3's template: each its own turn, as the study renders them."""
    from transformers import AutoTokenizer

    from rolecast.policies.shapes import qwen_tokenizer_dir
    from rolecast.rollout.hf import chat_prompt_ids

    tok = AutoTokenizer.from_pretrained(qwen_tokenizer_dir())
    msgs = [
        {"role": "user", "content": "S"},
        {"role": "assistant", "content": "g1"},
        {"role": "assistant", "content": "e1"},
        {"role": "user", "content": "R"},
    ]
    assert tok.decode(chat_prompt_ids(tok, msgs)) == (
        "<|im_start|>user\nS<|im_end|>\n<|im_start|>assistant\ng1<|im_end|>\n<|im_start|>assistant\ne1<|im_end|>\n"
        "<|im_start|>user\nR<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_ended_episode_rewards_team_or_study():
    """Voting, scripted: the voters answer 5, 5, 6 (gold 5); the aggregator's prompt (it restates the three
    solutions) exceeds a cap of 20, so the episode ends with the three voter turns and no answer. team: every turn
    gets the episode's 0; study: each voter keeps its own correctness, 1, 1, 0, as the study's committed
    trajectories do; on a code task the study's are 0 too."""
    from rolecast.scoring import attribute, score_episodes

    def episode():
        answers = iter([r"\boxed{5}", r"\boxed{5}", r"\boxed{6}"])
        spec = get_workflow("voting")
        (ep,) = run_episodes(
            spec,
            [PROBLEM],
            1,
            task=EchoTask(),
            prompts=PromptBook("testbed"),
            router=build_routing(spec.roles, "isolated"),
            backend=CountingBackend(lambda pid, m: next(answers)),
            max_prompt_tokens=20,
        )
        score_episodes([ep], {PROBLEM.id: PROBLEM}, EchoTask())
        attribute([ep], "team")
        return ep

    team = episode()
    assert [t.role for t in team.turns] == ["generator"] * 3 and team.metadata["ended"] == "max_prompt_tokens"
    assert [t.reward for t in team.turns] == [0.0, 0.0, 0.0]
    study = episode()
    attribute([study], "team", ended_reward="committed", family="testbed")
    assert [t.reward for t in study.turns] == [1.0, 1.0, 0.0]
    code = episode()
    attribute([code], "team", ended_reward="committed", family="code")
    assert [t.reward for t in code.turns] == [0.0, 0.0, 0.0]
