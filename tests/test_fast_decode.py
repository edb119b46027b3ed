"""The fast decode path (rollout/fast_qwen3.py) computes the stock transformers forward's function.

Reference for the per-step logits: one stock forward over the whole [prompt | tokens] sequence, no KV cache,
with transformers' own 2D padding mask and causal mask; the fast path runs stock prefill, then one
`FastDecoder.step` per token on the preallocated cache. Prompts are left-padded to different lengths, so a
wrong RoPE position, padding mask or cache index shows up (and the mutation tests check that it does).
"""

from __future__ import annotations

import pytest
import torch

from rolecast.policies.models import PolicySet, load_tokenizer
from rolecast.rollout import cpu_kernels, fast_qwen3, hf
from rolecast.rollout.engine import GenRequest
from rolecast.rollout.hf import HFBackend


def _randomize(model, seed: int):
    """HF initialises norms to 1 and biases to 0; make every weight matter (and logits far from uniform)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.2 if "norm" in name or "bias" in name else 0.08
            p.copy_((1.0 if "norm" in name else 0.0) + torch.randn(p.shape, generator=g) * scale)
    return model.eval()


def _qwen3(**shape):
    from rolecast.testbed.model import model_config, new_model

    return _randomize(new_model(model_config(300, 1, 0, **shape), seed=0), 1)


def _models():
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    small = dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
    )
    torch.manual_seed(0)
    return {
        "qwen3-tiny": _qwen3(**small),
        "qwen3-testbed": _qwen3(),  # hidden 192, 4 layers, 6 heads / 2 KV, head_dim 32, tied lm_head
        "qwen3-untied-theta1e6": _qwen3(**small, tie_word_embeddings=False, rope_theta=1e6),
        "qwen2-bias": _randomize(
            Qwen2ForCausalLM(
                Qwen2Config(
                    vocab_size=300,
                    hidden_size=64,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    num_key_value_heads=2,
                    intermediate_size=128,
                )
            ),
            2,
        ),
        "llama-bias": _randomize(
            LlamaForCausalLM(
                LlamaConfig(
                    vocab_size=300,
                    hidden_size=64,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    num_key_value_heads=1,
                    intermediate_size=128,
                    attention_bias=True,
                    mlp_bias=True,
                    rope_theta=5e5,
                )
            ),
            3,
        ),
    }


MODELS = _models()
LENGTHS = [3, 9, 14, 14, 6]  # left padding of 11, 5, 0, 0, 8


def _fast_vs_full_forward(
    model, steps: int = 10, *, shift_positions: int = 0, drop_mask: bool = False, kernels: bool = True
):
    """Max |fast step logits - full stock forward logits| over every step and row (teacher-forced tokens)."""
    g = torch.Generator().manual_seed(0)
    V, B, P = model.config.vocab_size, len(LENGTHS), max(LENGTHS)
    ids = torch.zeros((B, P + steps), dtype=torch.long)
    mask = torch.zeros((B, P + steps), dtype=torch.long)
    for i, n in enumerate(LENGTHS):
        ids[i, P - n :] = torch.randint(2, V, (n + steps,), generator=g)
        mask[i, P - n :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        full = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits  # [B, P + steps, V]
        cache = hf._preallocated_cache(P + steps)
        prefill = model(
            input_ids=ids[:, :P],
            attention_mask=mask[:, :P],
            position_ids=pos[:, :P],
            **{hf.cache_keyword(model): cache},
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        worst = (prefill - full[:, P - 1]).abs().max().item()
        fast = fast_qwen3.FastDecoder(model, rows=B, kernels=kernels)
        assert (fast.kernels is not None) == (cpu_kernels.load(kernels) is not None and model.dtype == torch.float32)
        cos, sin = fast.rope_tables(pos[:, P:] + shift_positions)
        step_mask = hf._decode_mask(model, mask[:, :P], steps, bool_4d=True)
        keys, values = [lay._k for lay in cache.layers], [lay._v for lay in cache.layers]
        for t in range(steps):
            am = None if drop_mask else step_mask[..., : P + t + 1]
            logits = fast.step(ids[:, P + t], cos[t], sin[t], keys, values, P + t, am)
            assert logits.shape == (B, V)
            worst = max(worst, (logits - full[:, P + t]).abs().max().item())
    return worst


@pytest.fixture(params=["kernels", "torch-ops"])
def small_ops(request) -> bool:
    """The decode step's norms, RoPE and cache writes as numba kernels (rollout/cpu_kernels.py) or as torch ops."""
    if request.param == "kernels":
        pytest.importorskip("numba")
    return request.param == "kernels"


@pytest.mark.parametrize("name", list(MODELS))
def test_step_logits_equal_full_forward(name, small_ops):
    model = MODELS[name]
    assert fast_qwen3.supports(model)
    assert _fast_vs_full_forward(model, kernels=small_ops) < 1e-4


@pytest.mark.parametrize("mutation", [dict(shift_positions=1), dict(drop_mask=True)])
def test_comparison_catches_wrong_positions_or_mask(mutation, small_ops):
    """The check above is sensitive: a RoPE position off by one, or no padding mask, breaks it."""
    assert _fast_vs_full_forward(MODELS["qwen3-testbed"], kernels=small_ops, **mutation) > 1e-2


def test_bf16_close_to_stock_bf16():
    model = _qwen3(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
    ).to(torch.bfloat16)
    assert fast_qwen3.supports(model)
    # bf16 full forward vs incremental decode differ by bf16 rounding (~1e-2 relative), not by a wrong function
    # (a wrong position or mask gives errors of order 1, see the mutation test)
    assert _fast_vs_full_forward(model) < 0.1


def test_kernels_compute_the_torch_ops():
    """Each kernel against the torch ops it replaces, on hand-built arrays: a residual add + RMSNorm, and a
    layer's q/k RMSNorm + RoPE + cache write, with and without q/k norm weights."""
    kernels = pytest.importorskip("rolecast.rollout._numba_kernels")
    g = torch.Generator().manual_seed(0)
    B, H, Hk, d, cap, n, eps = 3, 4, 2, 8, 6, 4, 1e-6
    x, delta, w = torch.randn(B, 16, generator=g), torch.randn(B, 16, generator=g), torch.randn(16, generator=g)
    out = torch.empty(B, 16)
    kernels.rms_norm(x.numpy(), w.numpy(), eps, out.numpy())
    torch.testing.assert_close(out, w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    expect_x = x + delta
    kernels.add_rms_norm(x.numpy(), delta.numpy(), w.numpy(), eps, out.numpy())
    torch.testing.assert_close(x, expect_x)  # the residual stream, updated in place
    torch.testing.assert_close(out, w * expect_x * torch.rsqrt(expect_x.pow(2).mean(-1, keepdim=True) + eps))

    qkv = torch.randn(B, H + 2 * Hk, d, generator=g)
    angle = torch.randn(B, 1, d // 2, generator=g)
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    signed_sin = torch.cat([-sin[..., : d // 2], sin[..., d // 2 :]], -1)
    rotate_half = lambda t: torch.cat([-t[..., d // 2 :], t[..., : d // 2]], -1)  # noqa: E731 (modeling_qwen3's)
    for qk_w in (torch.randn(H + Hk, d, generator=g), torch.empty(0, d)):
        K, V = torch.zeros(B, Hk, cap, d), torch.zeros(B, Hk, cap, d)
        q = torch.empty(B, H, d)
        kernels.qk_norm_rope_store(
            qkv.numpy(), qk_w.numpy(), cos.numpy(), signed_sin.numpy(), eps, q.numpy(), K.numpy(), V.numpy(), n
        )
        qk = qkv[:, : H + Hk]
        if len(qk_w):
            qk = qk_w * qk * torch.rsqrt(qk.pow(2).mean(-1, keepdim=True) + eps)
        rotated = qk * cos + rotate_half(qk) * sin
        torch.testing.assert_close(q, rotated[:, :H])
        torch.testing.assert_close(K[:, :, n], rotated[:, H:])
        torch.testing.assert_close(V[:, :, n], qkv[:, H + Hk :])
        assert not K[:, :, :n].any() and not V[:, :, n + 1 :].any()  # only index n is written


def test_without_numba_the_torch_ops_run(monkeypatch):
    import sys

    import rolecast.rollout

    monkeypatch.setitem(sys.modules, "rolecast.rollout._numba_kernels", None)  # import fails as without numba
    monkeypatch.delattr(rolecast.rollout, "_numba_kernels", raising=False)
    monkeypatch.setattr(cpu_kernels, "_import", cpu_kernels._import.__wrapped__)  # no cached module
    assert cpu_kernels.load() is None
    assert fast_qwen3.FastDecoder(MODELS["qwen3-tiny"], rows=2).kernels is None
    assert _fast_vs_full_forward(MODELS["qwen3-tiny"]) < 1e-4


def test_kernels_only_for_fp32_on_cpu():
    pytest.importorskip("numba")
    model = MODELS["qwen3-tiny"]
    assert fast_qwen3.FastDecoder(model, rows=2).kernels is not None
    assert fast_qwen3.FastDecoder(model, rows=2, kernels=False).kernels is None
    bf16 = _qwen3(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        intermediate_size=64,
    ).to(torch.bfloat16)
    assert fast_qwen3.FastDecoder(bf16, rows=2).kernels is None


def test_lora_is_merged_and_other_peft_variants_are_not_supported(tiny_model_dir):
    """Plain LoRA layers decode on the fast path (adapter merged into a weight copy); DoRA, a merged adapter or
    disabled adapters fall back to the stock forward."""
    from peft import LoraConfig, get_peft_model

    ps = PolicySet(tiny_model_dir, ["a"], mode="lora", lora={"r": 4, "alpha": 8}, seed=0)
    assert fast_qwen3.supports(ps.models["a"]) and fast_qwen3.supports(ps.models["a"].get_base_model())
    dora = get_peft_model(
        PolicySet(tiny_model_dir, ["b"], mode="full").models["b"],
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", use_dora=True),
    )
    assert not fast_qwen3.supports(dora.eval())
    with ps.models["a"].disable_adapter():
        assert not fast_qwen3.supports(ps.models["a"])


def _random_lora(ps, seed: int):
    """PEFT initialises lora_B to zero (adapter = base model); give every adapter its own function."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in ps.models[ps.policy_ids[0]].named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)


# --- HFBackend end to end: fast=True vs fast=False -------------------------------------------------------


@pytest.fixture(scope="module")
def testbed_shape_dir(tiny_model_dir, tmp_path_factory):
    """The tiny tokenizer with a randomised Qwen3 of the testbed shape."""
    from rolecast.testbed.model import model_config, new_model

    out = tmp_path_factory.mktemp("testbed_shape")
    tok = load_tokenizer(tiny_model_dir)
    tok.save_pretrained(out)
    _randomize(new_model(model_config(len(tok), tok.eos_token_id, tok.pad_token_id), seed=0), 4).save_pretrained(out)
    return str(out)


def _requests(pid: str = "p") -> list[GenRequest]:
    texts = [
        "solve: 1 + 2",
        "solve: 3 + 4 - 5 check the way",
        "pick: 7 - 2",
        "solve: 9",
        "plan: 4 + 4 - 1 work fix",
        "fix: 6",
    ]
    return [GenRequest(pid, [{"role": "user", "content": t}]) for t in texts]


def _generate(ps, tok, *, fast: bool, temperature: float, seed: int = 0, requests=None, max_new_tokens=24, **kw):
    calls = []
    original = fast_qwen3.FastDecoder.step

    def counting(self, *a, **k):
        calls.append(1)
        return original(self, *a, **k)

    fast_qwen3.FastDecoder.step = counting
    try:
        backend = HFBackend(ps, tok, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, fast=fast, **kw)
        gens = backend.generate(requests or _requests())
    finally:
        fast_qwen3.FastDecoder.step = original
    assert (len(calls) > 0) == fast  # the fast path really ran (or really did not)
    return gens


@pytest.mark.parametrize("which", ["tiny", "testbed_shape"])
@pytest.mark.parametrize("temperature,ignore_eos", [(0.0, False), (1.0, True), (1.0, False), (0.7, True)])
def test_backend_fast_equals_stock(request, which, temperature, ignore_eos):
    path = request.getfixturevalue("tiny_model_dir" if which == "tiny" else "testbed_shape_dir")
    ps, tok = PolicySet(path, ["p"], mode="full", seed=0), load_tokenizer(path)
    stock = _generate(ps, tok, fast=False, temperature=temperature, ignore_eos=ignore_eos)
    fast = _generate(ps, tok, fast=True, temperature=temperature, ignore_eos=ignore_eos)
    assert len({len(g.prompt_ids) for g in fast}) > 2  # really left-padded
    for a, b in zip(stock, fast, strict=True):
        assert a.completion_ids == b.completion_ids and a.finish_reason == b.finish_reason
        # fp32 summation order (packed projections, kernel norms, matmul attention): ~1e-6 relative on log-probs
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=1e-5, atol=1e-5)
    if temperature > 0:  # a different seed samples something else: the equality above is not vacuous
        other = _generate(ps, tok, fast=True, temperature=temperature, seed=1, ignore_eos=ignore_eos)
        assert [g.completion_ids for g in other] != [g.completion_ids for g in fast]


def test_backend_sees_in_place_weight_updates(testbed_shape_dir):
    """The trainer updates weights in place between rollouts: the fast path must never use stale weights."""
    ps, tok = PolicySet(testbed_shape_dir, ["p"], mode="full", seed=0), load_tokenizer(testbed_shape_dir)
    before = _generate(ps, tok, fast=True, temperature=0.0, ignore_eos=True)
    with torch.no_grad():
        for p in ps.models["p"].parameters():
            p.add_(torch.randn_like(p) * 0.05)
    after_fast = _generate(ps, tok, fast=True, temperature=0.0, ignore_eos=True)
    after_stock = _generate(ps, tok, fast=False, temperature=0.0, ignore_eos=True)
    assert [g.completion_ids for g in after_fast] == [g.completion_ids for g in after_stock]
    assert [g.completion_ids for g in after_fast] != [g.completion_ids for g in before]


def test_fast_false_forces_stock(tiny_model_dir, monkeypatch):
    ps, tok = PolicySet(tiny_model_dir, ["p"], mode="full", seed=0), load_tokenizer(tiny_model_dir)
    calls = []
    monkeypatch.setattr(fast_qwen3.FastDecoder, "step", lambda *a, **k: calls.append(1))
    HFBackend(ps, tok, max_new_tokens=4, temperature=0.0, fast=False).generate(_requests())
    assert not calls


def test_decode_threads_same_outputs_and_restored(tiny_model_dir):
    ps, tok = PolicySet(tiny_model_dir, ["p"], mode="full", seed=0), load_tokenizer(tiny_model_dir)
    torch.set_num_threads(2)
    runs = [
        HFBackend(ps, tok, max_new_tokens=16, temperature=1.0, seed=0, ignore_eos=True, decode_threads=n).generate(
            _requests()
        )
        for n in (None, 1)
    ]
    assert torch.get_num_threads() == 2
    assert [g.completion_ids for g in runs[0]] == [g.completion_ids for g in runs[1]]


@pytest.mark.parametrize("fast", [True, False])
def test_repeated_prompts_are_prefilled_once_with_the_same_outputs(testbed_shape_dir, fast):
    """A group's rows share one prefill (cache rows copied): same tokens and log-probs as prefilling every row,
    and the prefill forward sees only the distinct prompts."""
    ps, tok = PolicySet(testbed_shape_dir, ["p"], mode="full", seed=0), load_tokenizer(testbed_shape_dir)
    reqs = [r for r in _requests() for _ in range(3)][::-1]  # 6 distinct prompts x 3, of different lengths
    prefill_rows = []
    model = ps.models["p"]
    hook = model.register_forward_pre_hook(
        lambda m, a, kw: prefill_rows.append(kw["input_ids"].shape) if kw["input_ids"].shape[1] > 1 else None,
        with_kwargs=True,
    )
    try:
        outs = {}
        for share in (True, False):
            backend = HFBackend(
                ps, tok, max_new_tokens=12, temperature=1.0, seed=0, ignore_eos=True, fast=fast, share_prefill=share
            )
            outs[share] = backend.generate(reqs)
    finally:
        hook.remove()
    assert [s[0] for s in prefill_rows] == [6, 18]
    for a, b in zip(outs[True], outs[False], strict=True):
        assert a.completion_ids == b.completion_ids
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=1e-5)
    assert len({tuple(g.completion_ids) for g in outs[True]}) > 6  # rows of one prompt sample differently


def test_distinct_rows():
    from rolecast.core.episode import distinct_rows

    assert distinct_rows(["a", "b", "a", "c", "b"]) == ([0, 1, 3], [0, 1, 0, 2, 1])


def test_projections_are_prepacked_where_onednn_is_available(monkeypatch):
    """The fp32 projections of at least PACK_MIN_ELEMENTS use oneDNN's prepacked weights when torch has oneDNN
    (x86 / arm64 builds), and compute what F.linear computes, for the batch size they were packed for and any
    other; smaller ones use F.linear."""
    model = MODELS["qwen2-bias"]  # hidden 64: every weight under the default threshold
    assert all(
        p.packed is None
        for layer in fast_qwen3.FastDecoder(model, rows=6).layers
        for p in layer
        if isinstance(p, fast_qwen3._Linear)
    )
    monkeypatch.setattr(fast_qwen3, "PACK_MIN_ELEMENTS", 0)
    fast = fast_qwen3.FastDecoder(model, rows=6)
    linears = [fast.lm_head] + [p for layer in fast.layers for p in layer if isinstance(p, fast_qwen3._Linear)]
    assert len(linears) == 1 + 4 * len(fast.layers)
    if fast_qwen3._packed_ops() is not None:
        assert all(lin.packed is not None for lin in linears)
    g = torch.Generator().manual_seed(0)
    for lin in linears:
        for rows in (6, 1, 7):
            x = torch.randn(rows, lin.weight.shape[1], generator=g)
            torch.testing.assert_close(
                lin(x), torch.nn.functional.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5
            )
    bf16 = fast_qwen3._Linear(linears[1].weight.bfloat16(), None, rows=6)
    assert bf16.packed is None  # only fp32 is packed


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_lora_adapters_decode_fast_with_the_stock_outputs(testbed_shape_dir, temperature):
    """Two LoRA policies generated one adapter at a time (set_adapter): the fast path on merged weights gives the
    stock PEFT forward's tokens and log-probs for each, and the adapters really differ."""
    ps, tok = (
        PolicySet(
            testbed_shape_dir, ["gen", "agg"], mode="lora", lora={"r": 8, "alpha": 16}, seed=0, mixed_adapters=False
        ),
        load_tokenizer(testbed_shape_dir),
    )
    _random_lora(ps, seed=1)
    reqs = [GenRequest(pid, r.messages) for r in _requests() for pid in ("gen", "agg")]
    outs = {
        fast: _generate(ps, tok, fast=fast, temperature=temperature, requests=reqs, max_new_tokens=10, ignore_eos=True)
        for fast in (True, False)
    }
    for a, b in zip(outs[True], outs[False], strict=True):
        assert a.completion_ids == b.completion_ids
        # x (W + s B A)^T rounds differently from x W^T + s (x A^T) B^T: relative 1e-5 on log-probs of ~-4
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=1e-5, atol=1e-5)
    gen, agg = outs[True][0::2], outs[True][1::2]
    assert [g.completion_ids for g in gen] != [g.completion_ids for g in agg]
