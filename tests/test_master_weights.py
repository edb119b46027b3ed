"""fp32 master weights for bf16 full fine-tuning: updates below bf16's rounding step add up, resume is exact."""

from __future__ import annotations

import pytest
import torch
from test_trainer import tiny_config

from rolecast.training.checkpoint import load_checkpoint
from rolecast.training.grpo import train
from rolecast.training.master_weights import MASTER_KEY, MasterWeightAdamW, needs_master


def _steps(opt, params, grads):
    for g in grads:
        for p in params:
            p.grad = g.to(p.dtype).clone()
        opt.step()
        opt.zero_grad()


def test_small_updates_add_up_on_the_master_and_match_float32_adamw():
    # lr 1e-4 moves a weight of 1.0 by ~1e-4 per step: far below bf16's step at 1.0 (2^-7 = 0.0078).
    grads = [torch.full((4,), g) for g in (1.0, 0.5, -0.25, 1.0, 2.0)] * 20
    plain = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    _steps(torch.optim.AdamW([plain], lr=1e-4), [plain], grads)
    assert torch.equal(plain, torch.ones(4, dtype=torch.bfloat16))  # every update rounded away

    low = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    opt = MasterWeightAdamW([low], lr=1e-4)
    ref = torch.nn.Parameter(torch.ones(4))
    _steps(opt, [low], grads)
    _steps(torch.optim.AdamW([ref], lr=1e-4), [ref], grads)
    # The master is exactly float32 AdamW on the same (bf16-representable) gradients; the model holds it rounded.
    assert torch.equal(opt.masters[0], ref.detach())
    assert torch.equal(low.detach(), ref.detach().to(torch.bfloat16))
    assert low[0].item() < 1.0 and opt.state[opt.masters[0]]["exp_avg"].dtype == torch.float32
    assert needs_master([low]) and not needs_master([ref])


def test_a_reloaded_optimizer_continues_from_the_same_masters():
    grads = [torch.full((3,), g) for g in (0.3, -1.0, 0.7)] * 5

    def fresh():
        p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5], dtype=torch.bfloat16))
        return p, MasterWeightAdamW([p], lr=3e-4, weight_decay=0.01)

    p, opt = fresh()
    _steps(opt, [p], grads * 2)
    q, opt_q = fresh()
    _steps(opt_q, [q], grads)
    saved_weights, saved_state = q.detach().clone(), opt_q.state_dict()
    assert saved_state[MASTER_KEY][0].dtype == torch.float32
    r, opt_r = fresh()
    with torch.no_grad():
        r.copy_(saved_weights)  # the checkpoint's (rounded) model weights, as restore_trainer_state does first
    opt_r.load_state_dict(saved_state)
    _steps(opt_r, [r], grads)
    assert torch.equal(r, p) and torch.equal(opt_r.masters[0], opt.masters[0])

    # A state saved by a float32 run has no masters: they start from the restored weights.
    s, opt_s = fresh()
    plain = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(3))], lr=1e-3).state_dict()
    with torch.no_grad():
        s.copy_(torch.tensor([4.0, 5.0, 6.0]))
    opt_s.load_state_dict(plain)
    assert torch.equal(opt_s.masters[0], torch.tensor([4.0, 5.0, 6.0]))


@pytest.mark.parametrize("master", [True, False])
def test_bf16_full_fine_tuning_keeps_float32_masters_in_its_checkpoints(tiny_model_dir, tmp_path, master):
    cfg = tiny_config(
        tiny_model_dir,
        tmp_path / "run",
        **{
            "model.trainable": "full",
            "model.dtype": "bfloat16",
            "train.fp32_master_weights": master,
            "train.attribution": "token_rewards:even_tokens",
        },
    )
    train(cfg)
    _, state = load_checkpoint(tmp_path / "run")
    optim, weights = state["optim/shared"], state["policy/shared"]
    exp_avg = [v["exp_avg"] for v in optim["state"].values()]
    assert exp_avg and {t.dtype for t in exp_avg} == {torch.float32 if master else torch.bfloat16}
    assert {v.dtype for v in weights.values() if v.is_floating_point()} == {torch.bfloat16}
    if not master:
        assert MASTER_KEY not in optim
        return
    masters = optim[MASTER_KEY]
    assert {m.dtype for m in masters} == {torch.float32} and len(masters) == len(exp_avg)
    # the model's weights are its masters rounded to bf16 (each parameter, in the optimizer's order)
    by_shape = {}
    for w in weights.values():
        by_shape.setdefault(tuple(w.shape), []).append(w)
    for m in masters:
        assert any(torch.equal(m.to(torch.bfloat16), w) for w in by_shape[tuple(m.shape)])


def test_a_closure_is_refused_rather_than_run_after_the_gradients_were_copied():
    p = torch.nn.Parameter(torch.ones(2, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="no closure"):
        MasterWeightAdamW([p], lr=1e-3).step(lambda: 0.0)
