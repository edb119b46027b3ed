"""The GRPO loop end to end on a tiny random Qwen3: metrics, resume, isolation, NaN steps, log-prob agreement."""

from __future__ import annotations

import json
import random

import pytest
import torch

from rolecast.config.load import load_config
from rolecast.core.episode import Turn
from rolecast.policies.models import PolicySet
from rolecast.training.batching import batching_order, collate, micro_batches
from rolecast.training.grpo import train
from rolecast.training.logprobs import completion_logprobs
from rolecast.training.update import update_policy


def tiny_config(model_dir, run_dir, **overrides):
    base = {
        "model.path": model_dir,
        "model.trainable": "lora",
        "model.lora.r": 4,
        "model.lora.alpha": 8,
        "run_dir": str(run_dir),
        "train.steps": 2,
        "train.problems_per_step": 2,
        "train.group_size": 4,
        "train.lr": 1e-3,
        "rollout.max_new_tokens": 6,
        "rollout.temperature": 1.0,
        "eval.size": 4,
        "logging.progress": False,
        "checkpoint.every": 1,
        "threads": 2,
    }
    return load_config(None, {**base, **overrides})


def read_metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_voting_isolated_lora_writes_per_role_metrics(tiny_model_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, tmp_path / "run", **{"workflow.name": "voting", "routing.sharing": "isolated"})
    summary = train(cfg)
    rows = read_metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2]
    r = rows[0]
    for key in [
        "reward",
        "role/generator/reward",
        "role/aggregator/adv_std",
        "policy/generator/grad_norm",
        "role/generator/entropy",
        "role/aggregator/clip_fraction",
        "role/generator/kl",
        "policy/aggregator/entropy",
        "policy/generator/clip_fraction",
        "wf/agree_majority",
        "time/rollout",
        "time/update",
        "role/generator/truncated",
    ]:
        assert key in r, key
    assert r["role/generator/turns"] == 3 * r["role/aggregator/turns"] == 3 * 2 * 4
    assert r["rollout/backend_calls"] == 2  # all generators in one wave, all aggregators in the next
    assert (tmp_path / "run" / "episodes" / "step_1.jsonl").exists()
    assert summary["policies"] == ["aggregator", "generator"]
    evals = [json.loads(x) for x in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    assert [e["tag"] for e in evals] == ["base", "final"]


@pytest.mark.parametrize(
    "cell",
    [
        {},  # single agent, one shared policy (full fine-tune, the testbed recipe)
        # several policies, each with its own optimizer: full copies, and LoRA adapters on one base
        {"workflow.name": "voting", "routing.sharing": "isolated"},
        {
            "workflow.name": "voting",
            "routing.sharing": "isolated",
            "model.trainable": "lora",
            "model.lora.r": 4,
            "train.lr": 1e-3,
        },
        # the study's Isolated-Policy schedule: one clock shared by the policies, kept in the checkpoint
        {
            "workflow.name": "voting",
            "routing.sharing": "isolated",
            "train.lr_schedule": "verl_cosine",
            "train.lr_clock": "role_update",
            "train.warmup_steps": 1,
        },
    ],
    ids=["single-shared", "voting-isolated-full", "voting-isolated-lora", "voting-isolated-role-update-clock"],
)
def test_resumed_run_equals_uninterrupted(tmp_path, cell):
    """The embedded testbed model solves about half the problems, so groups carry advantages and the weights
    really move (a random model's rewards are all 0: nothing would move, and nothing could differ)."""
    from rolecast.training.checkpoint import load_checkpoint

    def config(run_dir):
        return load_config(
            None,
            {
                "run_dir": str(run_dir),
                "train.steps": 4,
                "train.problems_per_step": 2,
                "train.group_size": 4,
                "train.lr_schedule": "cosine",
                "rollout.max_new_tokens": 12,
                "eval.at_start": False,
                "eval.at_end": False,
                "logging.progress": False,
                "checkpoint.every": 1,
                "checkpoint.keep_last": 4,
                **cell,
            },
        )

    train(config(tmp_path / "full"))
    # the interrupted run: same config, stopped after 2 steps (like a pre-empted job), then resumed
    part_cfg = config(tmp_path / "part")
    train(part_cfg, stop_after=2)
    train(part_cfg, resume=tmp_path / "part")
    full, part = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "part")
    assert [r["step"] for r in part] == [1, 2, 3, 4]

    def strip(rows):
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]

    assert strip(full) == strip(part)
    first = load_checkpoint(tmp_path / "full", 1)[1]
    (_, a), (_, b) = load_checkpoint(tmp_path / "full", 4), load_checkpoint(tmp_path / "part", 4)
    assert a.keys() == b.keys() and any(k.startswith("policy/") for k in a)
    for key in a:
        if key.startswith("policy/"):  # every policy's weights, bit for bit; and they did move
            assert a[key].keys() == b[key].keys()
            assert any(not torch.equal(a[key][n], first[key][n]) for n in a[key]), key
            assert all(torch.equal(a[key][n], b[key][n]) for n in a[key]), key
        elif key.startswith("optim/"):
            for i, s in a[key]["state"].items():
                assert all(torch.equal(s[x], b[key]["state"][i][x]) for x in s), key


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_sampling_does_not_depend_on_whether_training_ran_before(mode):
    """A fresh PolicySet (a resumed run's first step) samples exactly as one that has been through `training()`
    (the uninterrupted run): the weights' requires_grad state, which changed the sampled log-probs by ~1e-7,
    is the same in both (False outside training)."""
    from rolecast.policies.models import load_tokenizer
    from rolecast.rollout.engine import GenRequest
    from rolecast.rollout.hf import HFBackend

    tok = load_tokenizer("testbed")
    policies = PolicySet("testbed", ["aggregator", "generator"], mode=mode, lora={"r": 4, "alpha": 8})
    backend = HFBackend(policies, tok, max_new_tokens=12, temperature=1.0, seed=0)
    reqs = [
        GenRequest(pid, [{"role": "user", "content": f"{i % 7} + {i % 5} = ?"}])
        for i in range(8)
        for pid in ("generator", "aggregator")
    ]

    def sample():
        backend.reseed(1)
        return [(g.completion_ids, g.logprobs) for g in backend.generate(reqs)]

    fresh = sample()
    for pid in policies.policy_ids:
        with policies.training(pid):
            pass
    assert sample() == fresh


def _turns(policies, tokenizer, n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        prompt = torch.randint(3, len(tokenizer), (5 + i,), generator=g).tolist()
        completion = torch.randint(3, len(tokenizer), (3 + i % 2,), generator=g).tolist()
        t = Turn("generator", "generator", "generator", prompt, completion, [0.0] * len(completion), "", "stop")
        t.advantage = 1.0 if i % 2 else -1.0
        out.append(t)
    return out


def _with_sampler_logprobs(turns, policies, pid, pad_id):
    batch = collate(turns, pad_id)
    with torch.no_grad(), policies.training(pid) as model:
        logp, _ = completion_logprobs(model, batch, 1.0)
    for i, t in enumerate(turns):
        t.logprobs = logp[i, : len(t.completion_ids)].tolist()
    return turns


@pytest.mark.parametrize("mode", ["lora", "full"])
def test_isolated_update_changes_no_other_policy(tiny_model_dir, mode):
    from rolecast.policies.models import load_tokenizer

    tok = load_tokenizer(tiny_model_dir)
    policies = PolicySet(tiny_model_dir, ["aggregator", "generator"], mode=mode, lora={"r": 4, "alpha": 8})
    before = {pid: {k: v.clone() for k, v in policies.state_dict(pid).items()} for pid in policies.policy_ids}
    cfg = load_config(None, {"model.path": tiny_model_dir, "train.lr": 1e-2, "rollout.temperature": 1.0})
    opt = torch.optim.AdamW(policies.parameters("generator"), lr=1e-2)
    turns = _with_sampler_logprobs(_turns(policies, tok), policies, "generator", tok.pad_token_id)
    update = update_policy(
        "generator",
        turns,
        cfg=cfg,
        policies=policies,
        optimizer=opt,
        pad_id=tok.pad_token_id,
        rng=random.Random(0),
        check_logprobs=True,
    )
    stats, tally = update.stats, update.tally
    # both epochs' tokens are tallied under the turns' role
    assert tally["generator"]["tokens"] == 2 * sum(len(t.completion_ids) for t in turns)
    assert stats["optimizer_steps"] == 2  # testbed recipe: 2 epochs, one step per epoch
    after = {pid: policies.state_dict(pid) for pid in policies.policy_ids}
    assert any(not torch.equal(before["generator"][k], after["generator"][k]) for k in before["generator"])
    for k in before["aggregator"]:
        assert torch.equal(before["aggregator"][k], after["aggregator"][k]), k  # bit for bit


def test_nan_step_is_skipped_and_logged(tiny_model_dir, caplog):
    from rolecast.policies.models import load_tokenizer

    tok = load_tokenizer(tiny_model_dir)
    policies = PolicySet(tiny_model_dir, ["generator"], mode="lora", lora={"r": 4, "alpha": 8})
    cfg = load_config(None, {"model.path": tiny_model_dir, "rollout.temperature": 1.0})
    turns = _with_sampler_logprobs(_turns(policies, tok), policies, "generator", tok.pad_token_id)
    turns[1].advantage = float("nan")
    before = policies.state_dict("generator")
    opt = torch.optim.AdamW(policies.parameters("generator"), lr=1e-2)
    with caplog.at_level("WARNING"):
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
    assert stats["skipped_nan"] == 2 and stats["optimizer_steps"] == 0
    assert "non-finite" in caplog.text
    after = policies.state_dict("generator")
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_logprob_mismatch_is_caught_on_the_first_step(tiny_model_dir):
    from rolecast.policies.models import load_tokenizer

    tok = load_tokenizer(tiny_model_dir)
    policies = PolicySet(tiny_model_dir, ["generator"], mode="lora", lora={"r": 4, "alpha": 8})
    cfg = load_config(None, {"model.path": tiny_model_dir, "rollout.temperature": 1.0})
    turns = _turns(policies, tok)  # sampler log-probs left at 0.0: far from the model's
    opt = torch.optim.AdamW(policies.parameters("generator"), lr=1e-2)
    with pytest.raises(RuntimeError, match="differ from the sampler"):
        update_policy(
            "generator",
            turns,
            cfg=cfg,
            policies=policies,
            optimizer=opt,
            pad_id=tok.pad_token_id,
            rng=random.Random(0),
            check_logprobs=True,
        )


def test_sampler_logprobs_match_trainer_logprobs(tiny_model_dir):
    """The backend's recorded log-probs equal a fresh training forward over the same tokens."""
    from rolecast.policies.models import load_tokenizer
    from rolecast.rollout.engine import GenRequest
    from rolecast.rollout.hf import HFBackend

    tok = load_tokenizer(tiny_model_dir)
    policies = PolicySet(tiny_model_dir, ["alpha", "beta"], mode="lora", lora={"r": 4, "alpha": 8})
    backend = HFBackend(policies, tok, max_new_tokens=8, temperature=0.7, seed=3)
    reqs = [
        GenRequest(pid, [{"role": "user", "content": f"solve: {i} + {i}"}])
        for i in range(3)
        for pid in ("alpha", "beta")
    ]
    gens = backend.generate(reqs)
    for pid in ("alpha", "beta"):
        turns = [
            Turn("r", "r", pid, g.prompt_ids, g.completion_ids, g.logprobs, g.text, g.finish_reason)
            for r, g in zip(reqs, gens, strict=True)
            if r.policy_id == pid
        ]
        batch = collate(turns, tok.pad_token_id)
        with torch.no_grad(), policies.training(pid) as model:
            logp, _ = completion_logprobs(model, batch, 0.7)
        gap = ((logp - batch["old_logp"]).abs() * batch["mask"]).max()
        assert gap < 1e-4, (pid, float(gap))


def test_micro_batches_respect_the_token_budget():
    # cost of a chunk = distinct prompts x longest prompt + rows x longest completion
    turns = [Turn("r", "r", "p", [1] * n, [2] * 2, [0.0] * 2, "", "stop") for n in (3, 3, 8, 1)]
    chunks = micro_batches(turns, token_budget=12)
    assert [len(c) for c in chunks] == [2, 1, 1]  # 1x3 + 2x2 = 7 fits; adding [1]*8: 2x8 + 3x2 = 22 > 12
    # one shared prompt is counted once: 1x3 + 4x2 = 11 fits, where four separate prompts would cost 20
    same = [Turn("r", "r", "p", [1] * 3, [2] * 2, [0.0] * 2, "", "stop") for _ in range(4)]
    assert [len(c) for c in micro_batches(same, token_budget=12)] == [4]
    assert [len(c) for c in micro_batches(same, token_budget=10)] == [3, 1]  # 1x3 + 4x2 = 11 > 10


def test_batching_order_keeps_a_prompts_rows_together():
    rows = [([5, 6], [1] * 3), ([7], [1]), ([5, 6], [1]), ([7], [1] * 4), ([5, 6], [1] * 2), ([4, 4], [1])]
    turns = [Turn("r", "r", "p", p, c, [0.0] * len(c), "", "stop") for p, c in rows]
    order = [(t.prompt_ids, len(t.completion_ids)) for t in batching_order(turns)]
    assert order == [([7], 1), ([7], 4), ([4, 4], 1), ([5, 6], 1), ([5, 6], 2), ([5, 6], 3)]


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_shared_prompt_forward_equals_the_full_forward(tiny_model_dir, mode):
    """Rows that repeat a prompt run it once; log-probs, entropies and gradients equal the [B, P + L] forward,
    with prompts of different lengths (left padding) and completions of different lengths (right padding)."""
    from rolecast.policies.models import load_tokenizer

    tok = load_tokenizer(tiny_model_dir)
    policies = PolicySet(tiny_model_dir, ["generator"], mode=mode, lora={"r": 4, "alpha": 8})
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, len(tok), (n,), generator=g).tolist() for n in (6, 9, 4)]
    turns = []
    which = [0, 0, 1, 0, 2, 1, 2, 1]  # a prompt's first row is not its index
    for i, k in enumerate(which):
        completion = torch.randint(3, len(tok), (2 + i % 4,), generator=g).tolist()
        t = Turn("generator", "generator", "generator", prompts[k], completion, [0.0] * len(completion), "", "stop")
        t.advantage = float(i % 3) - 1.0
        turns.append(t)
    shared, full = collate(turns, tok.pad_token_id), collate(turns, tok.pad_token_id, share_prompts=False)
    assert shared["prompt_rows"].tolist() == [0, 2, 4] and shared["prompt_of_row"].tolist() == which
    assert "prompt_rows" not in full
    assert "prompt_rows" not in collate([turns[i] for i in (0, 2, 4)], tok.pad_token_id)  # no repeats: one forward
    results = []
    for batch in (shared, full):
        with policies.training("generator") as model:
            model.zero_grad()
            logp, ent = completion_logprobs(model, batch, 0.7)
            (logp * batch["mask"] * batch["advantages"][:, None]).sum().backward()
            grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        results.append((logp.detach() * batch["mask"], ent * batch["mask"], grads))
    (lp_a, ent_a, g_a), (lp_b, ent_b, g_b) = results
    assert len(g_a) == len(g_b) > 0 and any(g.abs().sum() > 0 for g in g_a)
    torch.testing.assert_close(lp_a, lp_b, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent_a, ent_b, atol=1e-5, rtol=0)
    for a, b in zip(g_a, g_b, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_empty_completions_train_without_error(tiny_model_dir):
    """A backend may return an empty completion (e.g. a stop on the first token elsewhere): no crash, no NaN."""
    from rolecast.policies.models import load_tokenizer

    tok = load_tokenizer(tiny_model_dir)
    policies = PolicySet(tiny_model_dir, ["generator"], mode="lora", lora={"r": 4, "alpha": 8})
    cfg = load_config(None, {"model.path": tiny_model_dir, "rollout.temperature": 1.0})
    turns = _with_sampler_logprobs(_turns(policies, tok), policies, "generator", tok.pad_token_id)
    empty = Turn("generator", "generator", "generator", [5, 6, 7], [], [], "", "stop")
    empty.advantage = 1.0
    opt = torch.optim.AdamW(policies.parameters("generator"), lr=1e-2)
    update = update_policy(
        "generator",
        turns + [empty],
        cfg=cfg,
        policies=policies,
        optimizer=opt,
        pad_id=tok.pad_token_id,
        rng=random.Random(0),
        check_logprobs=True,
    )
    stats, tally = update.stats, update.tally
    assert stats["skipped_nan"] == 0 and stats["optimizer_steps"] == 2
    assert tally["generator"]["tokens"] == 2 * sum(len(t.completion_ids) for t in turns)
    # only empty completions: nothing to learn from, still no error
    stats = update_policy(
        "generator",
        [empty],
        cfg=cfg,
        policies=policies,
        optimizer=opt,
        pad_id=tok.pad_token_id,
        rng=random.Random(0),
        check_logprobs=False,
    ).stats
    assert stats["skipped_nan"] == 0


def test_fused_head_equals_the_head_module_path(tiny_model_dir):
    """The fused log-prob function (plain linear heads) and the per-chunk head-module path (other heads, e.g.
    LoRA-wrapped) give the same log-probs, entropies and gradients, with ragged chunks on both."""
    from rolecast.policies.models import load_tokenizer

    tok = load_tokenizer(tiny_model_dir)
    policies = PolicySet(tiny_model_dir, ["generator"], mode="full")
    batch = collate(_turns(policies, tok, n=5), tok.pad_token_id)
    results = []
    for fused, chunk in [(True, 7), (False, 7), (False, 1024)]:
        with policies.training("generator") as model:
            model.zero_grad()
            logp, ent = completion_logprobs(model, batch, 0.7, chunk_tokens=chunk, fused_head=fused)
            (logp * batch["mask"]).sum().backward()
            grads = [p.grad.clone() for p in model.parameters()]
        results.append((logp.detach(), ent, grads))
    (lp_a, ent_a, g_a) = results[0]
    for lp_b, ent_b, g_b in results[1:]:
        assert torch.allclose(lp_a, lp_b, atol=1e-5) and torch.allclose(ent_a, ent_b, atol=1e-5)
        assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g_a, g_b, strict=True))
    assert any(g.abs().sum() > 0 for g in g_a)


# ---------------------------------------------------------------------------------------------------------
# Diverged runs stop; temperature 0 cannot train


def test_training_at_temperature_zero_is_refused_at_load():
    from rolecast.config import ConfigError

    with pytest.raises(
        ConfigError, match=r"rollout.temperature: 0 .*every completion of a GRPO group would be the same"
    ):
        load_config(None, {"rollout.temperature": 0})
    # greedy evaluation is fine; the recipe evaluates by the study's protocol, so it takes a protocol that allows it
    assert load_config(None, {"eval.protocol": "greedy"}).eval.temperature == 0
    assert load_config(None, {"eval.protocol": "custom", "eval.temperature": 0}).eval.temperature == 0
    with pytest.raises(ConfigError, match=r"study samples at temperature 0.7 \(got 0.0\); .*eval.protocol: custom"):
        load_config(None, {"eval.temperature": 0})
    assert load_config(None, {"rollout.temperature": 0, "train.steps": 0}).train.steps == 0  # nothing to train


def test_divergence_guard_counts_streaks_per_policy():
    from rolecast.training.guard import DivergenceGuard

    settings = load_config(
        None, {"train.max_skipped_updates": 3, "train.max_entropy_steps": 2, "train.max_entropy_tol": 0.01}
    ).train
    guard = DivergenceGuard(settings, vocab_size=100)  # max entropy log(100) = 4.605; at max from 4.559
    ok = {"optimizer_steps": 2.0, "entropy": 2.0}
    guard.update("a", ok, 0.0, outputs_finite=True)
    guard.update("b", {"optimizer_steps": 1.0, "entropy": 2.0}, 1.0, outputs_finite=True)  # 2 epochs: ok, skip
    assert guard.reason(1) is None
    guard.update("b", {"optimizer_steps": 0.0, "entropy": 2.0}, 2.0, outputs_finite=True)  # skip, skip: 3 in a row
    assert "policy 'b': 3 optimizer updates in a row skipped" in guard.reason(2)
    guard.update("b", {"optimizer_steps": 1.0, "entropy": 2.0}, 0.0, outputs_finite=True)  # a good update resets
    assert guard.reason(3) is None
    guard.update("a", {"optimizer_steps": 2.0, "entropy": 4.57}, 0.0, outputs_finite=True)
    assert guard.reason(4) is None and guard.suspect()  # one step at the maximum: not yet
    guard.update("a", {"optimizer_steps": 2.0, "entropy": 4.6}, 0.0, outputs_finite=True)
    assert "policy 'a': token entropy at its maximum log|V| = 4.605" in guard.reason(5)
    # a policy that starts at the maximum (random weights) was not driven there by training: no stop
    fresh = DivergenceGuard(settings, vocab_size=100)
    for step in range(5):
        fresh.update("c", {"optimizer_steps": 1.0, "entropy": 4.6}, 0.0, outputs_finite=True)
        assert fresh.reason(step) is None
    fresh.update("c", {"optimizer_steps": 1.0, "entropy": 4.6}, 0.0, outputs_finite=True, norms=(10.0, 19.0))
    assert fresh.reason(6) is None  # grown, but less than max_weight_growth (2x)
    fresh.update("c", {"optimizer_steps": 1.0, "entropy": 4.6}, 0.0, outputs_finite=True, norms=(10.0, 21.0))
    assert "grew its weight norm from 10 to 21" in fresh.reason(7)
    broken = DivergenceGuard(settings, vocab_size=100)
    broken.update("d", {"optimizer_steps": 1.0, "entropy": 1.0}, 0.0, outputs_finite=False)
    assert "non-finite outputs" in broken.reason(1)


@pytest.fixture(scope="module")
def one_good_testbed_step(tmp_path_factory):
    """The embedded testbed model after one ordinary step (tiny settings), checkpointed."""
    run_dir = tmp_path_factory.mktemp("diverge") / "run"
    # 4 problems x 4 samples: the testbed solves about half, so groups carry advantages and gradients are
    # non-zero (Adam does not move weights whose gradients were always 0, whatever the lr)
    cfg = load_config(
        None,
        {
            "run_dir": str(run_dir),
            "train.steps": 1,
            "train.problems_per_step": 4,
            "train.group_size": 4,
            "train.epochs": 1,
            "rollout.max_new_tokens": 8,
            "eval.at_start": False,
            "eval.at_end": False,
            "logging.progress": False,
            "checkpoint.every": 1,
        },
    )
    train(cfg)
    return run_dir


@pytest.mark.parametrize("lr", ["1e30", "1e38"])
def test_a_diverging_run_stops_and_keeps_its_last_good_checkpoint(one_good_testbed_step, tmp_path, capsys, lr):
    """lr 1e30 blows the weights up to huge finite values (the model then samples uniformly at random, and
    today trained on to accuracy 0); 1e38 overflows inside AdamW (today a traceback). Both stop with one line and a non-zero exit, and nothing after the good step is checkpointed."""
    import shutil

    from rolecast.cli import main
    from rolecast.training.checkpoint import latest_step, list_checkpoints

    run_dir = shutil.copytree(one_good_testbed_step, tmp_path / "run")
    good = load_checkpoint_weights(run_dir)
    assert main(["train", "--resume", str(run_dir), "--steps", "4", "--set", f"train.lr={lr}"]) == 2
    stderr = capsys.readouterr().err
    err = [line for line in stderr.splitlines() if line.startswith("rolecast:")]  # not the model-loading bar
    assert "Traceback" not in stderr
    assert len(err) == 1 and err[0].startswith(
        "rolecast: error: training diverged and stopped at step 2: policy 'shared'"
    )
    assert f"last good checkpoint, {run_dir}/checkpoints/step_1, is kept" in err[0]
    assert list_checkpoints(run_dir) == [1] and latest_step(run_dir) == 1
    after = load_checkpoint_weights(run_dir)
    assert all(torch.equal(good[k], after[k]) for k in good)


def load_checkpoint_weights(run_dir):
    from rolecast.training.checkpoint import load_checkpoint

    return load_checkpoint(run_dir)[1]["policy/shared"]
