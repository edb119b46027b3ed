"""Generation with Hugging Face models: one KV-cached decode loop per batch of calls for the same model.

A hand-written loop instead of `model.generate` because we need, for every sampled token, the exact
log-prob under the sampling distribution (the trainer's importance ratio starts from it), a sampler
that is exact but faster than `torch.multinomial` on large vocabularies, and one mixed-adapter batch
across LoRA policies. Prefill is the stock transformers forward; decode steps of Qwen3 / Qwen2 / Llama
models, plain or with one LoRA adapter active per batch, run `fast_qwen3.FastDecoder` (the same function with
far fewer ops per token, LoRA merged into a weight copy); mixed-adapter batches and other models the stock
forward.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from rolecast.core.episode import distinct_rows
from rolecast.policies.models import PolicySet, base_model, cache_keyword
from rolecast.rollout import fast_qwen3
from rolecast.rollout.engine import Generation, GenRequest, Sampling
from rolecast.rollout.sampler import sample_tokens


def chat_prompt_ids(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Render with the model's own chat template (Qwen3 in non-thinking mode) and tokenize."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, enable_thinking=False, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def stop_token_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """The tokens that end a completion, from the model's own files: its generation config's `eos_token_id` (one id
    or a list; Qwen's lists <|im_end|> and <|endoftext|>), the tokenizer's EOS, and the tokenizer's padding token
    (what a finished row is padded with, never text: the testbed's <|endoftext|>)."""
    eos = getattr(generation_config, "eos_token_id", None)
    ids = {tokenizer.eos_token_id, tokenizer.pad_token_id, *(eos if isinstance(eos, (list, tuple)) else [eos])}
    return sorted(i for i in ids if isinstance(i, int) and i >= 0)


@dataclass
class GenStats:
    seconds: float = 0.0
    tokens: int = 0
    forward_passes: int = 0
    batches: list[int] = field(default_factory=list)


# "auto" decode threads: below this many FLOPs per decode step (2 x parameters x rows) one thread is used. On a
# loaded machine (more runnable threads than cores) every parallel region of a small decode step waits for a
# descheduled OpenMP worker, and one thread was up to several times faster; on a quiet machine two threads were
# 3-12% faster at every batch size measured (docs/benchmarks.md), hence not the default.
AUTO_SINGLE_THREAD_FLOPS = 5e8


class HFBackend:
    def __init__(
        self,
        policies: PolicySet,
        tokenizer,
        *,
        max_new_tokens: int,
        temperature: float = 0.7,
        top_p: float = 1.0,
        max_batch: int = 256,
        seed: int = 0,
        ignore_eos: bool = False,
        fast: bool = True,
        decode_threads: int | str | None = None,
        cpu_kernels: bool = True,
        share_prefill: bool = True,
        max_new_tokens_by_role: dict[str, int] | None = None,
        seed_per_prompt: bool = False,
        drop_finished: bool = True,
    ):
        """`fast`: decode steps through `fast_qwen3` where `fast_qwen3.supports(model)`; False: every decode step
        through the stock forward. `cpu_kernels`: the fast path's and the sampler's numba kernels where installed
        (False: torch ops only). `share_prefill`: rows that repeat a prompt are prefilled once (False: every row).
        `decode_threads`: torch intra-op threads while generating (None: unchanged). "auto" uses one thread
        when a decode step is under AUTO_SINGLE_THREAD_FLOPS (2 x parameters x rows), else leaves threads as
        set: for loaded machines, where small decode steps lose most to waiting threads.
        `max_new_tokens_by_role`: a generation cap per calling role (a judge needs fewer tokens than a solver);
        other roles use `max_new_tokens`. Rows with different caps decode in separate batches, each exact.
        `seed_per_prompt`: each distinct prompt decodes in its own batch from a seed of (the last `reseed`,
        the prompt), so what a row samples does not depend on the other rows of the call (a run split over
        several processes samples what one process would); slower, as batches are smaller.
        `drop_finished`: on the fast path, once half a batch's rows have stopped, the loop decodes only the others
        (issue 25: evaluation batches of 256 rows ran at 61% useful rows, one long answer holding 255 finished rows);
        the draws and so the outputs are those of the full batch (False: every row to the end, for comparison)."""
        self.fast = fast
        self.cpu_kernels = cpu_kernels
        self.share_prefill = share_prefill
        self.drop_finished = drop_finished
        self.decode_threads = decode_threads
        self.policies = policies
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.max_new_tokens_by_role = dict(max_new_tokens_by_role or {})
        self.temperature = temperature
        self.top_p = top_p
        self.max_batch = max_batch
        self.device = policies.device
        self.seed_per_prompt = seed_per_prompt
        self._seed = seed
        # on the weights' device: the sampler draws its uniforms where the logits are
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.pad_id = tokenizer.pad_token_id
        stops = stop_token_ids(tokenizer, getattr(policies.unique_models()[0], "generation_config", None))
        # ignore_eos: always generate max_new_tokens (benchmarks that must compare equal work)
        self.stop_ids = torch.tensor([] if ignore_eos else stops, dtype=torch.long)
        self.stats = GenStats()
        self._prompt_cache: dict[str, list[int]] = {}
        self._param_counts: dict[int, int] = {}

    def _threads_for(self, model, rows: int, default: int) -> int:
        if self.decode_threads == "auto":
            key = id(model)
            if key not in self._param_counts:
                self._param_counts[key] = sum(p.numel() for p in model.parameters())
            return 1 if 2 * self._param_counts[key] * rows < AUTO_SINGLE_THREAD_FLOPS else default
        return int(self.decode_threads) if self.decode_threads else default

    def reseed(self, seed: int) -> None:
        self._seed = seed
        self.generator.manual_seed(seed)

    def encode(self, messages: list[dict[str, str]]) -> list[int]:
        key = repr(messages)
        if key not in self._prompt_cache:
            if len(self._prompt_cache) > 50_000:
                self._prompt_cache.clear()
            self._prompt_cache[key] = chat_prompt_ids(self.tokenizer, messages)
        return list(self._prompt_cache[key])

    def cap_for(self, request: GenRequest) -> int:
        """The generation cap of a request: its role's, else the default."""
        return self.max_new_tokens_by_role.get(request.role or "", self.max_new_tokens)

    def generate(self, requests: Sequence[GenRequest], sampling: Sampling | None = None) -> list[Generation]:
        params = (sampling or Sampling()).over(self.temperature, self.top_p)
        if self.seed_per_prompt:
            return self._generate_per_prompt(requests, params)
        return self._generate(requests, params)

    def _generate_per_prompt(self, requests: Sequence[GenRequest], params: tuple[float, float]) -> list[Generation]:
        """Each distinct (prompt, policy) in its own `_generate` call, seeded from (step seed, prompt, policy)."""
        groups: dict[tuple[str, str], list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault((repr(r.messages), r.policy_id), []).append(i)
        out: list[Generation | None] = [None] * len(requests)
        for (messages, pid), idx in groups.items():
            digest = hashlib.sha256(f"{self._seed}|{pid}|{messages}".encode()).digest()
            self.generator.manual_seed(int.from_bytes(digest[:8], "little") % (2**63))
            for i, gen in zip(idx, self._generate([requests[i] for i in idx], params), strict=True):
                out[i] = gen
        done = [gen for gen in out if gen is not None]
        assert len(done) == len(out), "every request is generated"
        return done

    def _generate(self, requests: Sequence[GenRequest], params: tuple[float, float]) -> list[Generation]:
        """`params`: this call's (temperature, top_p)."""
        t0 = time.perf_counter()
        prompts = [self.encode(r.messages) for r in requests]
        caps = [self.cap_for(r) for r in requests]
        out: list[Generation | None] = [None] * len(requests)
        threads = torch.get_num_threads()
        try:
            for model, idx, adapters in self.policies.generation_groups([r.policy_id for r in requests]):
                # one decode batch per cap: a row stops at its own cap, and no row decodes past it
                for cap in sorted({caps[i] for i in idx}):
                    pos = [j for j, i in enumerate(idx) if caps[i] == cap]
                    for s in range(0, len(pos), self.max_batch):
                        part = pos[s : s + self.max_batch]
                        chunk = [idx[j] for j in part]
                        names = [adapters[j] for j in part] if adapters is not None else None
                        torch.set_num_threads(self._threads_for(model, len(chunk), threads))
                        gens = self._decode(model, [prompts[i] for i in chunk], names, cap, params)
                        for i, gen in zip(chunk, gens, strict=True):
                            out[i] = gen
        finally:
            torch.set_num_threads(threads)
        self.stats.seconds += time.perf_counter() - t0
        done = [gen for gen in out if gen is not None]
        assert len(done) == len(out), "every request is generated"
        return done

    @torch.inference_mode()
    def _decode(
        self,
        model,
        prompts: list[list[int]],
        adapter_names: list[str] | None,
        max_new_tokens: int,
        params: tuple[float, float],
    ) -> list[Generation]:
        B, P, T = len(prompts), max(len(p) for p in prompts), max_new_tokens
        temperature, top_p = params
        input_ids = torch.full((B, P), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, P), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: every row's next token sits in the last column
            input_ids[i, P - len(p) :] = torch.tensor(p)
            mask[i, P - len(p) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        dev = self.device
        if dev.type != "cpu":
            input_ids, mask, positions = input_ids.to(dev), mask.to(dev), positions.to(dev)
        # Decode-step inputs are views of buffers allocated once: the KV cache (no per-step torch.cat per
        # layer), the attention mask and the position ids. Without padding the single-query decode steps need
        # no mask at all; with padding and SDPA, a ready 4D boolean mask skips transformers' mask building.
        cache = _preallocated_cache(P + T)
        kwargs = {cache_keyword(model): cache, "use_cache": True, "logits_to_keep": 1}
        # Each distinct (prompt, adapter) is prefilled once (a group samples one prompt G times), then its
        # cache rows and next-token logits are copied to every row that shares it.
        first, of_row = distinct_rows(
            (tuple(p), adapter_names[i] if adapter_names else None) for i, p in enumerate(prompts)
        )
        share = self.share_prefill and len(first) < B
        rows = torch.tensor(first, device=dev) if share else slice(None)
        if adapter_names is not None:
            kwargs["adapter_names"] = [adapter_names[i] for i in first] if share else adapter_names
        logits = model(
            input_ids=input_ids[rows], attention_mask=mask[rows], position_ids=positions[rows], **kwargs
        ).logits[:, -1]
        if share:
            expand = torch.tensor(of_row, device=dev)
            logits = logits[expand]
            for layer in _preallocated_layers(cache):
                layer.select_rows(expand)
            if adapter_names is not None:
                kwargs["adapter_names"] = adapter_names
        step_pos = positions[:, -1:] + torch.arange(1, T + 1, device=dev)  # [B, T]: position of new token t+1
        fast = None
        if self.fast and adapter_names is None and fast_qwen3.supports(model):
            # built per call: the trainer updates weights in place between calls (fused copies would go stale)
            fast = fast_qwen3.FastDecoder(model, rows=B, kernels=self.cpu_kernels)
            cos, sin = fast.rope_tables(step_pos)
            keys, values = (
                [layer._k for layer in _preallocated_layers(cache)],
                [layer._v for layer in _preallocated_layers(cache)],
            )
        step_mask = _decode_mask(model, mask, T, bool_4d=fast is not None)
        stops = self.stop_ids.to(dev) if self.stop_ids.numel() else None
        finished = torch.zeros(B, dtype=torch.bool, device=dev)
        # rows dropped from the loop keep pad tokens after their stop token (never read: outputs end at the stop)
        toks = torch.full((B, T), self.pad_id, dtype=torch.long, device=dev)
        lps = torch.zeros((B, T), dtype=torch.float32, device=dev)
        pad = torch.full((B,), self.pad_id, dtype=torch.long, device=dev)
        self.stats.batches.append(B)
        n = 0
        live: torch.Tensor | None = None  # the rows still decoding once finished ones were dropped (None: all B)
        for step in range(T):
            tok, lp = sample_tokens(
                logits,
                temperature,
                self.generator,
                top_p,
                kernels=self.cpu_kernels,
                rows_of=None if live is None else (B, live),
            )
            if stops is not None:
                tok = torch.where(finished, pad, tok)
                finished |= torch.isin(tok, stops)
            rows = slice(None) if live is None else live
            toks[rows, step] = tok
            lps[rows, step] = lp
            n = step + 1
            if step == T - 1 or (stops is not None and bool(finished.all())):
                break
            if (
                fast is not None
                and stops is not None
                and self.drop_finished
                and 2 * int(finished.sum()) >= len(finished)
            ):
                # half the rows have stopped: decode only the others from here on (their K/V caches, RoPE tables and
                # masks gathered once); each row computes and samples what it would in the full batch
                keep = (~finished).nonzero().squeeze(1)
                live = keep if live is None else live[keep]
                tok, finished, pad = tok[keep], finished[keep], pad[keep]
                keys, values = [k[keep] for k in keys], [v[keep] for v in values]
                cos, sin = cos[:, keep], sin[:, keep]
                step_mask = None if step_mask is None else step_mask[keep]
            am = None if step_mask is None else step_mask[..., : P + n]
            if fast is not None:  # writes the new token's K/V at cache index P + step, as the stock cache would
                logits = fast.step(tok, cos[step], sin[step], keys, values, P + step, am)
            else:
                logits = model(
                    input_ids=tok[:, None], attention_mask=am, position_ids=step_pos[:, step : step + 1], **kwargs
                ).logits[:, -1]
            self.stats.forward_passes += 1
        toks_l = toks[:, :n].tolist()
        lps_l = lps[:, :n].tolist()
        stop = set(self.stop_ids.tolist())
        gens = []
        for i in range(B):
            row = toks_l[i]
            end = next((j for j, t in enumerate(row) if t in stop), None) if stop else None
            m = len(row) if end is None else end + 1  # keep the stop token: the policy must learn to emit it
            ids = row[:m]
            self.stats.tokens += m
            gens.append(
                Generation(
                    prompt_ids=prompts[i],
                    completion_ids=ids,
                    logprobs=lps_l[i][:m],
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                    finish_reason="length" if end is None else "stop",
                )
            )
        return gens


class _PreallocatedLayer(DynamicLayer):
    """A DynamicLayer whose keys/values live in one buffer sized for the whole generation: `update` copies
    the new states into place and returns views, instead of concatenating (a full copy per layer per step)."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        b, h, _, dk = key_states.shape
        self._k = key_states.new_empty((b, h, self.capacity, dk))
        self._v = value_states.new_empty((b, value_states.shape[1], self.capacity, value_states.shape[-1]))
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:  # never in _decode; grow rather than fail if a caller feeds more
            grow = end - self.capacity
            self._k = torch.cat([self._k, self._k.new_empty(*self._k.shape[:2], grow, self._k.shape[-1])], dim=-2)
            self._v = torch.cat([self._v, self._v.new_empty(*self._v.shape[:2], grow, self._v.shape[-1])], dim=-2)
            self.capacity = end
        self._k[:, :, self.length : end].copy_(key_states)
        self._v[:, :, self.length : end].copy_(value_states)
        self.length = end
        self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
        return self.keys, self.values

    def select_rows(self, index: torch.Tensor) -> None:
        """Row i of the cache becomes old row index[i] (one prefill shared by several rows)."""
        self._k, self._v = self._k[index], self._v[index]
        self.keys, self.values = self._k[:, :, : self.length], self._v[:, :, : self.length]

    def reset(self) -> None:
        self.length = 0
        super().reset()


def _preallocated_cache(capacity: int) -> DynamicCache:
    class _Layer(_PreallocatedLayer):
        def __init__(self) -> None:
            super().__init__(capacity)

    cache = DynamicCache()
    cache.layer_class_to_replicate = _Layer
    return cache


def _preallocated_layers(cache: DynamicCache) -> list[_PreallocatedLayer]:
    """The layers of a cache made by `_preallocated_cache`."""
    layers = [layer for layer in cache.layers if isinstance(layer, _PreallocatedLayer)]
    assert len(layers) == len(cache.layers)
    return layers


def _decode_mask(model, prompt_mask: torch.Tensor, new_tokens: int, bool_4d: bool = False) -> torch.Tensor | None:
    """The attention mask for decode steps over [prompt | generated]: None when no row is padded (a single
    query attends to every cached position); else a buffer sliced per step, 4D boolean for SDPA (used as is
    by transformers, and always by the fast path: `bool_4d`) or 2D for other attention implementations."""
    if bool(prompt_mask.all()):
        return None
    B, P = prompt_mask.shape
    base = base_model(model)
    if bool_4d or getattr(base.config, "_attn_implementation", None) == "sdpa":
        full = torch.ones((B, 1, 1, P + new_tokens), dtype=torch.bool, device=prompt_mask.device)
        full[:, 0, 0, :P] = prompt_mask.bool()
        return full
    full = torch.ones((B, P + new_tokens), dtype=prompt_mask.dtype, device=prompt_mask.device)
    full[:, :P] = prompt_mask
    return full
