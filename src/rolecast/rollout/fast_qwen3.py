"""One KV-cached decode step of a Qwen3 (or Qwen2 / Llama) causal LM as a flat sequence of tensor ops.

Why: for a small model on CPU, the stock transformers forward spends most of a decode step outside the math:
module calls and hooks, decorators, output dataclasses, mask and cache bookkeeping, and several small ops
per layer that a single-token step does not need. `FastDecoder.step` computes the same function as
`Qwen3ForCausalLM.forward` for one new token per row (read from the model's own weights, no copies
except the fused projections below) with far fewer ops: per layer, two fused projections (q|k|v and
gate|up), one RMSNorm over q and k together, RoPE on q and k together, attention as two matmuls in the
grouped-query layout (no K/V repeat; cheaper than an SDPA call at a decode step's sizes), and the output / down
projections.

On CPU in fp32 with numba installed, the residual adds, RMSNorms, RoPE and cache writes run as three fused
kernels per layer (`cpu_kernels`), the projections and attention stay torch ops; without numba every op is
a torch op.

Prefill stays on the stock forward (one call per batch); it fills the preallocated KV cache of
`rollout.hf` whose buffers the steps here extend in place. A PEFT model with plain LoRA adapters decodes here
too, with its active adapters merged into copies of the projection weights (W + scaling * B A); rows routed to
several adapters at once stay on PEFT's forward.

Exactness: every op mirrors modeling_qwen3.py (RMSNorm in fp32 then cast back, then weight *, RoPE as
`x * cos + rotate_half(x) * sin` with cos/sin from the model's own rotary module, softmax attention with the
model's scaling, SiLU MLP, final norm, lm_head); the fused projections only concatenate output rows, so they
compute the same dot products. In fp32 the projections run on oneDNN-prepacked weights (`_Linear`), which
sum in a different order than F.linear (~1e-6), attention sums in a different order than SDPA (~7e-7), and
merged LoRA weights round differently from PEFT's two low-rank matmuls (log-probs within ~1e-5 relative).
tests/test_fast_decode.py checks per-step logits against the stock forward (within 1e-5 here) and LoRA generation
against PEFT's.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rolecast.rollout import cpu_kernels

# Architectures with exactly this layer: Qwen3 has q/k RMSNorm per head, Qwen2 and Llama do not (biases,
# where a config has them, are handled generically).
ARCHITECTURES = ("Qwen3ForCausalLM", "Qwen2ForCausalLM", "LlamaForCausalLM")


def supports(model: Any) -> bool:
    """True for a model of a supported architecture whose layers are the stock ones: every projection an
    `nn.Linear`, or a PEFT LoRA layer over one whose active adapters are plain LoRA (merged into a weight copy
    per generation call, `_projection`), full attention only, SiLU MLP, fp32 or bf16 weights, and a static
    RoPE (cos/sin are tabulated once per call; dynamic and longrope variants recompute frequencies from the
    sequence length as it grows), on the CPU. Rows routed to different adapters (PEFT `adapter_names`) stay on the stock
    forward: the caller passes those separately."""
    model = model.get_base_model() if hasattr(model, "get_base_model") else model
    if type(model).__name__ not in ARCHITECTURES:
        return False
    cfg = model.config
    inner = model.model
    if inner.embed_tokens.weight.device.type != "cpu":
        return False  # a CPU path: on a GPU the stock forward's fused kernels and CUDA graphs are the fast choice
    if getattr(cfg, "hidden_act", None) != "silu" or inner.embed_tokens.weight.dtype not in (
        torch.float32,
        torch.bfloat16,
    ):
        return False
    rope_type = getattr(getattr(inner, "rotary_emb", None), "rope_type", None)
    if rope_type is None or "dynamic" in rope_type or rope_type == "longrope":
        return False
    if any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or []):
        return False
    if type(model.lm_head) is not nn.Linear or len(inner.layers) != cfg.num_hidden_layers:
        return False
    for layer in inner.layers:
        a, m = layer.self_attn, layer.mlp
        if not all(
            _mergeable(p) for p in (a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj)
        ):
            return False
        if getattr(a, "sliding_window", None) is not None or getattr(m, "act_fn", None) is None:
            return False
    return True


def _mergeable(module: Any) -> bool:
    """A plain nn.Linear, or a PEFT LoRA layer over one computing x W^T + b + sum of its active adapters'
    scaling * B(A(x)) (dropout is off in eval mode): no DoRA or other variant, no LoRA bias, not merged."""
    if type(module) is nn.Linear:
        return True
    if type(getattr(module, "base_layer", None)) is not nn.Linear or not hasattr(module, "get_delta_weight"):
        return False
    if module.merged or module.disable_adapters or module.training or getattr(module, "fan_in_fan_out", False):
        return False
    return all(
        a not in getattr(module, "lora_variant", {}) and module.lora_B[a].bias is None
        for a in module.active_adapters
        if a in module.lora_A
    )


def _projection(module: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(W, b) with module(x) == x W^T + b: the layer's own weight, or for LoRA the base weight plus the active
    adapters' deltas (a copy; the same sum `merge_and_unload` would make)."""
    if type(module) is nn.Linear:
        return module.weight, module.bias
    weight = module.base_layer.weight
    for a in module.active_adapters:
        if a in module.lora_A:
            weight = weight + module.get_delta_weight(a).to(weight.dtype)
    return weight, module.base_layer.bias


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # exactly Qwen3RMSNorm.forward: in fp32, cast back, then the weight (torch's F.rms_norm gave the same values
    # but no measurable speed-up on CPU: it runs the same reductions plus two dtype copies)
    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


# Measured on the testbed shape, 16 rows (docs/benchmarks.md): packed vs F.linear per call 52 vs 32 us for q|k|v
# (320 x 192), 37 vs 18 us for o (192 x 192), 109 vs 129 us for gate|up (1536 x 192), 137 vs 157 us for a
# 2048-token head.
PACK_MIN_ELEMENTS = 1 << 17


class _Linear:
    """y = x W^T + b for one projection of a decode step. In fp32 with oneDNN available, a weight of at least
    PACK_MIN_ELEMENTS is reordered once into oneDNN's blocked layout for the decode batch (what torch.compile's
    CPU freezing does): the small [rows x hidden] matmuls of a decode step then skip re-packing the weight every
    call, ~15% of a decode step on the 2-core dev machine (docs/benchmarks.md). Smaller weights (the testbed's
    q|k|v and o projections) were faster through F.linear, whose fixed cost per call is lower. Elsewhere, or
    where packing fails, F.linear."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, rows: int):
        self.weight, self.bias, self.packed = weight, bias, None
        ops = _packed_ops()
        if weight.dtype == torch.float32 and ops is not None and weight.numel() >= PACK_MIN_ELEMENTS:
            try:
                self.packed, self.packed_linear = ops[0](weight, batch_size=rows), ops[1]
            except RuntimeError:
                pass

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return self.packed_linear(x, self.packed, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


@functools.cache
def _packed_ops():
    """oneDNN's weight reorder and prepacked linear (private ops used by torch.compile), or None where torch
    lacks them or they disagree with F.linear on a probe."""
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        reorder, linear = torch.ops.mkldnn._reorder_linear_weight, torch.ops.mkldnn._linear_pointwise
        g = torch.Generator().manual_seed(0)
        w, b, x = torch.randn(24, 16, generator=g), torch.randn(24, generator=g), torch.randn(5, 16, generator=g)
        if torch.allclose(
            linear(x, reorder(w, batch_size=5), b, "none", [], ""), F.linear(x, w, b), rtol=1e-4, atol=1e-5
        ):
            return reorder, linear
    except (AttributeError, RuntimeError):
        pass
    return None


def _fused(*modules: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One projection computing several at once: their weights (and biases, zero where absent) stacked."""
    projections = [_projection(m) for m in modules]
    weight = torch.cat([w for w, _ in projections])
    if all(b is None for _, b in projections):
        return weight, None
    return weight, torch.cat([b if b is not None else w.new_zeros(w.shape[0]) for w, b in projections])


class FastDecoder:
    """The model's weights arranged for decode steps. Build one per generation call: the fused q|k|v and
    gate|up weights (and LoRA-merged weights) are copies, so they go stale when the trainer updates the model
    in place."""

    @torch.no_grad()
    def __init__(self, model: Any, rows: int = 16, kernels: bool = True):
        """`rows`: the decode batch size (the packed weights' layout is chosen for it). `kernels`: the numba
        kernels where installed (fp32 CPU); False keeps every op a torch op."""
        model = model.get_base_model() if hasattr(model, "get_base_model") else model
        cfg, inner = model.config, model.model
        self.model = model
        self.embed = inner.embed_tokens.weight
        cpu_fp32 = self.embed.dtype == torch.float32 and self.embed.device.type == "cpu"
        self.kernels = cpu_kernels.load(kernels) if cpu_fp32 else None
        self.eps = cfg.rms_norm_eps
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scaling = inner.layers[0].self_attn.scaling
        self.norm = self._norm_weight(inner.norm.weight)
        self.lm_head = _Linear(*_projection(model.lm_head), rows)  # tied or not, as the module has it
        self.layers = []
        for layer in inner.layers:
            a, m = layer.self_attn, layer.mlp
            qk_norm: Any = None  # a tensor, or the numpy view the kernels take
            if hasattr(a, "q_norm"):
                # one RMSNorm over [q heads | k heads]: a per-head weight row for every head
                qk_norm = torch.cat([a.q_norm.weight.expand(self.n_heads, -1), a.k_norm.weight.expand(self.n_kv, -1)])
            if self.kernels is not None:  # the kernel's "no q/k norm" is an empty weight
                qk_norm = (qk_norm if qk_norm is not None else self.embed.new_empty(0, self.head_dim)).detach().numpy()
            self.layers.append(
                (
                    self._norm_weight(layer.input_layernorm.weight),
                    _Linear(*_fused(a.q_proj, a.k_proj, a.v_proj), rows),
                    qk_norm,
                    _Linear(*_projection(a.o_proj), rows),
                    self._norm_weight(layer.post_attention_layernorm.weight),
                    _Linear(*_fused(m.gate_proj, m.up_proj), rows),
                    _Linear(*_projection(m.down_proj), rows),
                )
            )

    @torch.no_grad()
    def rope_tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for positions [B, T] from the model's own rotary module (its rope_theta and scaling), laid
        out [T, B, 1, head_dim] so step t reads one contiguous slice that broadcasts over heads. The sin table
        is pre-signed, [-sin_1 | sin_2] by halves, so that `rotate_half(x) * sin == swap_halves(x) * sin_signed`
        (negation is exact)."""
        dummy = self.embed.new_empty(1)  # rotary_emb reads only the dtype and device of its first argument
        cos, sin = self.model.model.rotary_emb(dummy, positions)
        half = self.head_dim // 2
        sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
        return cos.transpose(0, 1)[:, :, None].contiguous(), sin.transpose(0, 1)[:, :, None].contiguous()

    @torch.no_grad()
    def step(
        self,
        tokens: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
        n: int,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """Logits [B, V] for `tokens [B]` at cache index `n` (positions n - padding, given through cos/sin
        [B, 1, head_dim]). `keys`/`values` per layer: [B, kv_heads, capacity, head_dim], filled for [0, n);
        this writes index n. `mask`: None or bool [B, 1, 1, n + 1] (True = attend), for left padding."""
        B, H, Hk, d = tokens.shape[0], self.n_heads, self.n_kv, self.head_dim
        x = F.embedding(tokens, self.embed)  # [B, hidden]: the residual stream
        out = None  # the last sublayer's output, not yet added to x
        padding = None if mask is None else mask.logical_not()  # once per step, for every layer's attention
        for (ln1, qkv_proj, qk_norm, o_proj, ln2, gate_up, down), K, V in zip(self.layers, keys, values, strict=True):
            x, h = self._add_norm(x, out, ln1)
            q = self._qk_rope_store(qkv_proj(h).view(B, H + 2 * Hk, d), qk_norm, cos, sin, K, V, n)
            attn = self._attend(q, K[:, :, : n + 1], V[:, :, : n + 1], padding)
            x, h = self._add_norm(x, o_proj(attn), ln2)
            gate, up = gate_up(h).chunk(2, dim=-1)
            out = down(F.silu(gate) * up)
        return self.lm_head(self._add_norm(x, out, self.norm)[1])

    def _attend(self, q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
        """One query per row against the cache, `[B, H * d]`: each KV head's query heads as the rows of one matmul
        (the grouped-query layout, no K/V repeat), softmax, matmul. Three ops instead of SDPA, whose per-call work
        dominates at a decode step's sizes: 1.5-1.9x faster (16 rows x 170 positions: 80 vs 130 us per layer on one
        thread; 142 x 45: 414 vs 614 us), equal to SDPA within ~7e-7 (float32 summation order)."""
        B, Hk, d = q.shape[0], self.n_kv, self.head_dim
        scores = torch.matmul(q.view(B, Hk, self.n_heads // Hk, d), K.transpose(-1, -2)).mul_(self.scaling)
        if padding is not None:  # [B, 1, 1, n + 1], True = a padding position: it gets no weight
            scores.masked_fill_(padding, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), V).view(B, self.n_heads * d)

    def _norm_weight(self, weight: torch.Tensor):
        """A norm weight as `_add_norm` takes it: a numpy view for the kernels, else the tensor."""
        return weight.detach().numpy() if self.kernels is not None else weight

    def _add_norm(self, x: torch.Tensor, delta: torch.Tensor | None, weight) -> tuple[torch.Tensor, torch.Tensor]:
        """(x + delta, rms_norm(x + delta) * weight); with the kernels x is updated in place (a step's own tensor)."""
        if self.kernels is None:
            x = x if delta is None else x + delta
            return x, _rms_norm(x, weight, self.eps)
        h = torch.empty_like(x)
        if delta is None:
            self.kernels.rms_norm(x.numpy(), weight, self.eps, h.numpy())
        else:
            self.kernels.add_rms_norm(x.numpy(), delta.numpy(), weight, self.eps, h.numpy())
        return x, h

    def _qk_rope_store(
        self, qkv: torch.Tensor, qk_norm, cos: torch.Tensor, sin: torch.Tensor, K: torch.Tensor, V: torch.Tensor, n: int
    ) -> torch.Tensor:
        """Queries [B, H, d] after the q/k RMSNorm and RoPE; the new key (normed, rotated) and value are written
        to cache index n."""
        B, H, Hk, d = qkv.shape[0], self.n_heads, self.n_kv, self.head_dim
        if self.kernels is not None:
            if not 0 <= n < K.shape[2]:  # the kernel does not bounds-check its cache writes
                raise IndexError(f"cache index {n} outside the KV cache's {K.shape[2]} positions")
            q = qkv.new_empty(B, H, d)
            self.kernels.qk_norm_rope_store(
                qkv.numpy(), qk_norm, cos.numpy(), sin.numpy(), self.eps, q.numpy(), K.numpy(), V.numpy(), n
            )
            return q
        qk, v = qkv[:, : H + Hk], qkv[:, H + Hk :]
        if qk_norm is not None:
            qk = _rms_norm(qk, qk_norm, self.eps)
        # RoPE: x * cos + rotate_half(x) * sin, with rotate_half(x) * sin == flip(halves of x) * signed sin
        qk = qk * cos + qk.view(B, H + Hk, 2, d // 2).flip(2).view(B, H + Hk, d) * sin
        K[:, :, n] = qk[:, H:]
        V[:, :, n] = v
        return qk[:, :H]
