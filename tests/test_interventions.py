"""Interventions: each does what it says on hand-built cases, each changes the real update as computed by
separate autograd per role, and each, off (or at a value that changes nothing), leaves the update bit-identical."""

from __future__ import annotations

import math

import pytest
import torch
from gradient_cases import config, on_policy, reference_grad, setup, sgd_update, voting_turns

from rolecast.config.load import load_config
from rolecast.core.errors import ConfigError
from rolecast.diagnostics.gradients import DirectionEMA, RoleEMAs, gram
from rolecast.training.interventions import Interventions, balance_coefficients, damping_factor, projection_shares

# ---------------------------------------------------------------------------------------------------------
# Hand-built cases


def test_damping_halves_a_role_that_repeats_its_direction():
    ema = DirectionEMA(0.9)
    g = torch.tensor([1.0, 2.0, -1.0])
    assert damping_factor(ema.observe(g), 0.5) == 1.0  # first gradient: no history, no damping
    assert damping_factor(ema.observe(g), 0.5) == pytest.approx(0.5)  # identical again: cos 1 -> 1 - 0.5
    assert damping_factor(ema.observe(-g), 0.5) == 1.0  # reversing direction is never damped (max(0, cos))
    assert damping_factor(math.cos(math.pi / 3), 0.4) == pytest.approx(1 - 0.4 * 0.5)


def test_interventions_damping_state_per_policy_and_role():
    cfg = load_config(None, {"workflow.name": "voting", "interventions.coherence_damping": 0.5})
    iv = Interventions.from_config(cfg.interventions, cfg.train.kl_coef)
    assert iv is not None and iv.rescales
    g = {"generator": torch.tensor([1.0, 0.0]), "aggregator": torch.tensor([0.0, 1.0])}
    assert iv.role_coefficients("shared", g) == {"generator": 1.0, "aggregator": 1.0}
    assert iv.role_coefficients("shared", {"generator": g["generator"], "aggregator": -g["aggregator"]}) == {
        "generator": pytest.approx(0.5),
        "aggregator": 1.0,
    }
    assert iv.role_coefficients("other", g) == {"generator": 1.0, "aggregator": 1.0}  # its own history
    assert iv.pop_metrics()["intervention/shared/generator/damping"] == pytest.approx(0.75)


def test_balancing_orthogonal_roles_gives_equal_shares_and_keeps_the_norm():
    G = torch.diag(torch.tensor([9.0, 1.0], dtype=torch.float64))  # |g_a| = 3, |g_b| = 1, orthogonal
    c = balance_coefficients(G, torch.tensor([1.0, 1.0]))
    assert c.tolist() == pytest.approx([math.sqrt(5) / 3, math.sqrt(5)])  # 3 c_a = c_b, (3 c_a)^2 + c_b^2 = 10
    assert projection_shares(G, c).tolist() == pytest.approx([0.5, 0.5])
    c = balance_coefficients(G, torch.tensor([3.0, 1.0]))  # configured 0.75 / 0.25
    assert projection_shares(G, c).tolist() == pytest.approx([0.75, 0.25])
    assert float(c @ G @ c) == pytest.approx(10.0)


def test_balancing_correlated_roles_and_a_role_without_gradient():
    vecs = [torch.tensor([3.0, 1.0, 0.0]), torch.tensor([1.0, 1.0, 0.5]), torch.tensor([0.0, 0.2, 1.0])]
    G = gram(vecs)
    c = balance_coefficients(G, torch.ones(3))
    assert projection_shares(G, c).tolist() == pytest.approx([1 / 3] * 3, abs=1e-6)
    assert float(c @ G @ c) == pytest.approx(float(G.sum()))
    G0 = gram([vecs[0], torch.zeros(3), vecs[2]])
    c0 = balance_coefficients(G0, torch.ones(3))
    assert float(c0[1]) == 1.0
    assert projection_shares(G0[[0, 2]][:, [0, 2]], c0[[0, 2]]).tolist() == pytest.approx([0.5, 0.5], abs=1e-6)


def test_balance_shares_needs_every_role_of_the_policy():
    cfg = load_config(None, {"workflow.name": "voting", "interventions.balance_shares": {"generator": 1.0}})
    iv = Interventions.from_config(cfg.interventions, cfg.train.kl_coef)
    with pytest.raises(ValueError, match="balance_shares.*aggregator"):
        iv.role_coefficients("shared", {"generator": torch.ones(2), "aggregator": torch.ones(2)})


def test_loss_side_coefficients():
    cfg = load_config(
        None,
        {
            "workflow.name": "voting",
            "train.kl_coef": 0.01,
            "interventions.kl_coef_by_role": {"aggregator": 0.5},
            "interventions.multiplicity_norm": True,
        },
    )
    iv = Interventions.from_config(cfg.interventions, cfg.train.kl_coef)
    assert not iv.rescales
    assert iv.kl_coefs(["generator", "aggregator"]).tolist() == pytest.approx([0.01, 0.5])
    assert iv.row_weights(["generator", "aggregator"], {"generator": 3, "aggregator": 1}).tolist() == pytest.approx(
        [1 / 3, 1]
    )


def test_all_off_builds_nothing_and_config_errors_name_the_field():
    assert Interventions.from_config(load_config(None, {"workflow.name": "voting"}).interventions, 0.0) is None
    with pytest.raises(ConfigError, match=r"interventions.kl_coef_by_role: 'voter' is not a role"):
        load_config(None, {"workflow.name": "voting", "interventions.kl_coef_by_role": {"voter": 0.1}})
    with pytest.raises(ConfigError, match=r"interventions.balance_shares.generator: must be > 0"):
        load_config(None, {"workflow.name": "voting", "interventions.balance_shares": {"generator": 0}})
    with pytest.raises(ConfigError, match="coherence_damping"):
        load_config(None, {"interventions.coherence_damping": 1.5})


# ---------------------------------------------------------------------------------------------------------
# On the real update (tiny model, SGD with lr 1 and no clipping: the parameter change is the gradient applied)


def _case(model_dir, **over):
    tok, policies = setup(model_dir)
    cfg = config(model_dir, **over)
    turns = on_policy(voting_turns(tok), policies, "shared", tok.pad_token_id)
    return tok, policies, cfg, turns


def _role_grads(policies, cfg, turns, pad, **kw):
    return {
        r: reference_grad(policies, "shared", [t for t in turns if t.role == r], turns, cfg, pad, **kw.get(r, {}))
        for r in ("generator", "aggregator")
    }


def _close(a, b):
    torch.testing.assert_close(a, b, atol=1e-5 * float(b.abs().max()), rtol=1e-4)


def test_multiplicity_norm_divides_a_parallel_roles_loss_by_its_instances(tiny_model_dir):
    tok, policies, cfg, turns = _case(tiny_model_dir, **{"interventions.multiplicity_norm": True})
    g = _role_grads(policies, cfg, turns, tok.pad_token_id)
    applied, _ = sgd_update(policies, "shared", turns, cfg, tok.pad_token_id)
    _close(applied, g["generator"] / 3 + g["aggregator"])


def test_kl_coef_by_role_anchors_each_role_with_its_coefficient(tiny_model_dir):
    over = {"train.kl_coef": 0.0, "interventions.kl_coef_by_role": {"generator": 0.0, "aggregator": 2.0}}
    tok, policies, cfg, turns = _case(tiny_model_dir, **over)
    g = _role_grads(policies, cfg, turns, tok.pad_token_id, aggregator={"kl_coef": 2.0})
    g_no_kl = reference_grad(
        policies, "shared", [t for t in turns if t.role == "aggregator"], turns, cfg, tok.pad_token_id
    )
    assert float((g["aggregator"] - g_no_kl).norm()) > 1e-3 * float(g_no_kl.norm())  # the KL term is there
    applied, stats = sgd_update(policies, "shared", turns, cfg, tok.pad_token_id)
    _close(applied, g["generator"] + g["aggregator"])
    assert stats["kl"] > 0


def test_coherence_damping_on_the_real_update(tiny_model_dir):
    tok, policies, cfg, turns = _case(tiny_model_dir, **{"interventions.coherence_damping": 0.5})
    g = _role_grads(policies, cfg, turns, tok.pad_token_id)
    iv = Interventions.from_config(cfg.interventions, cfg.train.kl_coef)
    # history: the generator's EMA points where its gradient does (cos 1: halved), the aggregator's opposite (kept)
    iv.ema = RoleEMAs(
        0.9,
        {
            "shared": {
                "generator": DirectionEMA(0.9, g["generator"].clone()),
                "aggregator": DirectionEMA(0.9, -g["aggregator"].clone()),
            }
        },
    )
    applied, _ = sgd_update(policies, "shared", turns, cfg, tok.pad_token_id, interventions=iv)
    _close(applied, 0.5 * g["generator"] + g["aggregator"])
    assert iv.pop_metrics() == {
        "intervention/shared/generator/damping": pytest.approx(0.5, abs=1e-5),
        "intervention/shared/aggregator/damping": 1.0,
    }


def test_balance_shares_on_the_real_update(tiny_model_dir):
    tok, policies, cfg, turns = _case(tiny_model_dir, **{"interventions.balance_shares": True})
    g = _role_grads(policies, cfg, turns, tok.pad_token_id)
    applied, _ = sgd_update(policies, "shared", turns, cfg, tok.pad_token_id)
    roles = ["aggregator", "generator"]
    c = balance_coefficients(gram([g[r] for r in roles]), torch.ones(2))
    _close(applied, float(c[0]) * g["aggregator"] + float(c[1]) * g["generator"])
    shares = [float(g[r] @ applied) * float(c[i]) / float(applied @ applied) for i, r in enumerate(roles)]
    assert shares == pytest.approx([0.5, 0.5], abs=1e-3)
    assert float(applied.norm()) == pytest.approx(float((g["generator"] + g["aggregator"]).norm()), rel=1e-4)


@pytest.mark.parametrize(
    ("over", "one_instance_per_role"),
    [
        ({"interventions.kl_coef_by_role": {"generator": 0.0, "aggregator": 0.0}}, False),  # coefficients of 0
        (
            {
                "interventions.coherence_damping": 0.0,
                "interventions.balance_shares": False,
                "interventions.multiplicity_norm": False,
            },
            False,
        ),  # every switch at its off value
        ({"interventions.multiplicity_norm": True}, True),  # no role has 2 instances: every weight is 1
        # rollback acts between steps, never inside an update (the loop, before and after one: test_rollback.py)
        ({"interventions.rollback.signals": ["grad_spike"], "interventions.rollback.lr_factor": 0.1}, False),
    ],
)
def test_interventions_that_change_nothing_leave_the_update_bit_identical(tiny_model_dir, over, one_instance_per_role):
    import random

    from rolecast.training.update import update_policy

    results = []
    for extra in ({}, over):
        tok, policies = setup(tiny_model_dir)
        cfg = config(tiny_model_dir, **{"train.epochs": 2, "train.max_grad_norm": 0.05, **extra})
        turns = on_policy(voting_turns(tok), policies, "shared", tok.pad_token_id)
        if one_instance_per_role:
            turns = [t for t in turns if t.instance in ("generator/0", "aggregator")]
        params = policies.parameters("shared")
        opt = torch.optim.AdamW(params, lr=1e-2)
        update = update_policy(
            "shared",
            turns,
            cfg=cfg,
            policies=policies,
            optimizer=opt,
            pad_id=tok.pad_token_id,
            rng=random.Random(0),
            check_logprobs=False,
        )
        stats, tally = update.stats, update.tally
        results.append((policies.state_dict("shared"), stats, tally))
    (w_a, s_a, t_a), (w_b, s_b, t_b) = results
    assert s_a == s_b and t_a == t_b
    assert all(torch.equal(w_a[k], w_b[k]) for k in w_a)
    assert any(not torch.equal(w_a[k], setup(tiny_model_dir)[1].state_dict("shared")[k]) for k in w_a)  # it trained
