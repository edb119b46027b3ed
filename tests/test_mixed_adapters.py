"""Mixed-adapter batches (PEFT adapter_names) generate exactly what one pass per adapter generates."""

from __future__ import annotations

import pytest
import torch

from rolecast.policies.models import PolicySet, load_tokenizer
from rolecast.rollout.engine import GenRequest
from rolecast.rollout.hf import HFBackend


@pytest.fixture(scope="module")
def two_adapters(tiny_model_dir):
    torch.set_num_threads(2)
    ps = PolicySet(tiny_model_dir, ["gen", "agg"], mode="lora", lora={"r": 4, "alpha": 8}, seed=0)
    # PEFT initialises lora_B to zero (every adapter = the base model); make each adapter its own function
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in ps.models["gen"].named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return ps, load_tokenizer(tiny_model_dir)


def _requests() -> list[GenRequest]:
    # interleaved policies and prompts of different lengths (left padding), several rows per adapter; every
    # prompt goes to both adapters twice (a shared prefill must never cross adapters)
    texts = ["solve: 1 + 2", "solve: 3 + 4 - 5 check", "plan 2: 4 + 4 - 1 work"]
    return [GenRequest(["gen", "agg"][i % 2], [{"role": "user", "content": texts[i % len(texts)]}]) for i in range(12)]


def _generate(ps, tok, requests, *, mixed: bool, **kw):
    ps.mixed_adapters = mixed
    try:
        backend = HFBackend(ps, tok, max_new_tokens=12, temperature=0.0, seed=0, **kw)
        return backend.generate(requests), backend.stats
    finally:
        ps.mixed_adapters = True


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_mixed_batch_equals_one_pass_per_adapter(two_adapters, ignore_eos):
    ps, tok = two_adapters
    reqs = _requests()
    mixed, mixed_stats = _generate(ps, tok, reqs, mixed=True, ignore_eos=ignore_eos)
    split, split_stats = _generate(ps, tok, reqs, mixed=False, ignore_eos=ignore_eos)
    assert mixed_stats.batches == [12] and sorted(split_stats.batches) == [6, 6]  # really one vs two passes
    for i, (a, b) in enumerate(zip(mixed, split, strict=True)):
        assert a.prompt_ids == b.prompt_ids
        assert a.completion_ids == b.completion_ids, f"request {i} ({reqs[i].policy_id})"
        assert a.finish_reason == b.finish_reason
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=1e-5)


def test_adapters_really_differ(two_adapters):
    """The equality above means something only if the two adapters generate different things."""
    ps, tok = two_adapters
    msgs = [{"role": "user", "content": "solve: 3 + 4 - 5 check"}]
    reqs = [GenRequest("gen", msgs), GenRequest("agg", msgs)]
    for mixed in (True, False):
        (gen, agg), _ = _generate(ps, tok, reqs, mixed=mixed, ignore_eos=True)
        assert gen.prompt_ids == agg.prompt_ids
        assert gen.completion_ids != agg.completion_ids
        assert gen.logprobs != agg.logprobs


def test_per_adapter_passes_make_nothing_trainable(two_adapters):
    ps, tok = two_adapters
    model = ps.models["gen"]
    before = {n for n, p in model.named_parameters() if p.requires_grad}
    _generate(ps, tok, _requests()[:4], mixed=False)
    assert {n for n, p in model.named_parameters() if p.requires_grad} <= before


def test_single_adapter_request_list_uses_set_adapter(two_adapters):
    """All rows on one adapter: no adapter_names (PEFT's per-row routing is pure overhead), same outputs."""
    ps, tok = two_adapters
    groups = list(ps.generation_groups(["gen", "gen", "gen"]))
    assert [(idx, names) for _, idx, names in groups] == [([0, 1, 2], None)]
    reqs = [GenRequest("gen", r.messages) for r in _requests()[:6]]
    base = HFBackend(ps, tok, max_new_tokens=12, temperature=0.0, seed=0)
    prompts = [base.encode(r.messages) for r in reqs]
    mixed = base._decode(
        ps.models["gen"], prompts, ["gen"] * len(reqs), base.max_new_tokens, (base.temperature, base.top_p)
    )
    plain, _ = _generate(ps, tok, reqs, mixed=True)
    for a, b in zip(mixed, plain, strict=True):
        assert a.completion_ids == b.completion_ids
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=1e-5)


@pytest.mark.parametrize("mixed", [True, False])
def test_config_chooses_mixed_batches_or_one_pass_per_adapter(tiny_model_dir, mixed):
    from rolecast.config.load import load_config
    from rolecast.runtime import build_runtime

    cfg = load_config(
        None,
        {
            "model.path": tiny_model_dir,
            "model.trainable": "lora",
            "model.lora.r": 4,
            "routing.sharing": "isolated",
            "workflow.name": "voting",
            "rollout.mixed_adapters": mixed,
        },
    )
    rt = build_runtime(cfg)
    assert rt.policies.mixed_adapters is mixed
    groups = rt.policies.generation_groups(["generator", "aggregator", "generator"])
    assert [len(idx) for _, idx, _ in groups] == ([3] if mixed else [2, 1])
