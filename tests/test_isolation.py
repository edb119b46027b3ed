"""LoRA policy isolation holds whatever the policy ids are called, including ids that are also module names
(`model`, `layers`, `mlp`, `self_attn`), which appear in every adapter's parameter names."""

from __future__ import annotations

import random

import pytest
import torch

from rolecast.config.load import load_config
from rolecast.core.episode import Turn
from rolecast.core.errors import ConfigError
from rolecast.policies.models import load_tokenizer
from rolecast.policies.router import build_routing
from rolecast.runtime import build_runtime
from rolecast.training.batching import collate
from rolecast.training.logprobs import completion_logprobs
from rolecast.training.update import update_policy


def _turns(policies, tok, pid: str, n: int = 4) -> list[Turn]:
    g = torch.Generator().manual_seed(0)
    turns = []
    for i in range(n):
        prompt = torch.randint(3, len(tok), (5 + i,), generator=g).tolist()
        completion = torch.randint(3, len(tok), (3,), generator=g).tolist()
        t = Turn("generator", "generator", pid, prompt, completion, [0.0] * 3, "", "stop")
        t.advantage = 1.0 if i % 2 else -1.0
        turns.append(t)
    with torch.no_grad(), policies.training(pid) as model:  # sampler log-probs = the current policy's
        logp, _ = completion_logprobs(model, collate(turns, tok.pad_token_id), 1.0)
    for i, t in enumerate(turns):
        t.logprobs = logp[i, :3].tolist()
    return turns


@pytest.mark.parametrize("generator_id,aggregator_id", [("model", "layers"), ("mlp", "self_attn")])
def test_policy_ids_that_are_module_names_stay_isolated(tiny_model_dir, generator_id, aggregator_id):
    cfg = load_config(
        None,
        {
            "model.path": tiny_model_dir,
            "model.trainable": "lora",
            "model.lora.r": 4,
            "model.lora.alpha": 8,
            "workflow.name": "voting",
            "routing.sharing": "map",
            "routing.map": {"generator": generator_id, "aggregator": aggregator_id},
            "rollout.temperature": 1.0,
            "train.epochs": 1,
            "threads": 2,
        },
    )
    policies = build_runtime(cfg).policies
    assert sorted(policies.policy_ids) == sorted([generator_id, aggregator_id])
    model = policies.models[generator_id]
    lora = {id(p) for n, p in model.named_parameters() if "lora_" in n}
    own = {pid: {id(p) for p in policies.parameters(pid)} for pid in policies.policy_ids}
    # each policy holds exactly its own adapter: disjoint halves of all LoRA parameters
    assert own[generator_id].isdisjoint(own[aggregator_id])
    assert own[generator_id] | own[aggregator_id] == lora and len(own[generator_id]) == len(lora) // 2
    for pid in policies.policy_ids:
        assert all(f".{pid}." in n.split(".lora_", 1)[1] for n in policies.state_dict(pid))

    tok = load_tokenizer(tiny_model_dir)
    for trained, other in ((generator_id, aggregator_id), (aggregator_id, generator_id)):
        before = {pid: policies.state_dict(pid) for pid in policies.policy_ids}
        opt = torch.optim.AdamW(policies.parameters(trained), lr=1e-2)
        stats = update_policy(
            trained,
            _turns(policies, tok, trained),
            cfg=cfg,
            policies=policies,
            optimizer=opt,
            pad_id=tok.pad_token_id,
            rng=random.Random(0),
            check_logprobs=True,
        ).stats
        assert stats["optimizer_steps"] == 1
        after = {pid: policies.state_dict(pid) for pid in policies.policy_ids}
        assert any(not torch.equal(before[trained][k], after[trained][k]) for k in before[trained])
        for k in before[other]:
            assert torch.equal(before[other][k], after[other][k]), k  # bit for bit
    # a checkpoint of one policy loads back into it alone
    saved = {pid: policies.state_dict(pid) for pid in policies.policy_ids}
    policies.load_state_dict(generator_id, {k: torch.zeros_like(v) for k, v in saved[generator_id].items()})
    assert all(torch.equal(v, policies.state_dict(aggregator_id)[k]) for k, v in saved[aggregator_id].items())


def test_policy_ids_that_torch_module_dicts_reserve_are_refused():
    # PEFT keeps adapters as ModuleDict keys; `keys` or `update` would fail deep inside get_peft_model
    for pid in ("keys", "update", "training"):
        with pytest.raises(ValueError, match=f"{pid!r}.*reserved"):
            build_routing(["generator", "aggregator"], "map", {"generator": pid, "aggregator": "agg"})
    with pytest.raises(ConfigError, match="reserved"):
        load_config(
            None,
            {
                "workflow.name": "voting",
                "routing.sharing": "map",
                "routing.map": {"generator": "values", "aggregator": "agg"},
            },
        )
