"""Generation with Hugging Face models: one KV-cached decode loop per batch of calls for the same model.

A hand-written loop instead of `model.generate` because we need, for every sampled token, the exact
log-prob under the sampling distribution (the trainer's importance ratio starts from it), a sampler
that is exact but faster than `torch.multinomial` on large vocabularies, and one mixed-adapter batch
across LoRA policies. Everything else (the model, its cache, its attention) is stock transformers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import torch
from transformers import DynamicCache

from ..policies.models import PolicySet, cache_keyword
from .engine import GenRequest, Generation
from .sampler import sample_tokens


def chat_prompt_ids(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Render with the model's own chat template (Qwen3 in non-thinking mode) and tokenize."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, enable_thinking=False, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@dataclass
class GenStats:
    seconds: float = 0.0
    tokens: int = 0
    forward_passes: int = 0
    batches: list[int] = field(default_factory=list)


class HFBackend:
    def __init__(self, policies: PolicySet, tokenizer, *, max_new_tokens: int, temperature: float = 0.7,
                 top_p: float = 1.0, max_batch: int = 256, seed: int = 0, ignore_eos: bool = False):
        self.policies = policies
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.max_batch = max_batch
        self.generator = torch.Generator().manual_seed(seed)
        self.pad_id = tokenizer.pad_token_id
        stops = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>"),
                 tokenizer.convert_tokens_to_ids("<|endoftext|>")}
        # ignore_eos: always generate max_new_tokens (benchmarks that must compare equal work)
        self.stop_ids = torch.tensor([] if ignore_eos else sorted(s for s in stops if isinstance(s, int) and s >= 0),
                                     dtype=torch.long)
        self.stats = GenStats()
        self._prompt_cache: dict[str, list[int]] = {}

    def reseed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def encode(self, messages: list[dict[str, str]]) -> list[int]:
        key = repr(messages)
        if key not in self._prompt_cache:
            if len(self._prompt_cache) > 50_000:
                self._prompt_cache.clear()
            self._prompt_cache[key] = chat_prompt_ids(self.tokenizer, messages)
        return list(self._prompt_cache[key])

    def generate(self, requests: Sequence[GenRequest]) -> list[Generation]:
        t0 = time.perf_counter()
        prompts = [self.encode(r.messages) for r in requests]
        out: list[Generation | None] = [None] * len(requests)
        for model, idx, adapters in self.policies.generation_groups([r.policy_id for r in requests]):
            for s in range(0, len(idx), self.max_batch):
                chunk = idx[s:s + self.max_batch]
                names = [adapters[i] for i in range(s, s + len(chunk))] if adapters is not None else None
                for i, gen in zip(chunk, self._decode(model, [prompts[i] for i in chunk], names)):
                    out[i] = gen
        self.stats.seconds += time.perf_counter() - t0
        return out  # type: ignore[return-value]

    @torch.inference_mode()
    def _decode(self, model, prompts: list[list[int]], adapter_names: list[str] | None) -> list[Generation]:
        B, P = len(prompts), max(len(p) for p in prompts)
        input_ids = torch.full((B, P), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, P), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: every row's next token sits in the last column
            input_ids[i, P - len(p):] = torch.tensor(p)
            mask[i, P - len(p):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        kwargs = {cache_keyword(model): DynamicCache(), "use_cache": True, "logits_to_keep": 1}
        if adapter_names is not None:
            kwargs["adapter_names"] = adapter_names
        logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, **kwargs).logits[:, -1]
        next_pos = positions[:, -1] + 1
        finished = torch.zeros(B, dtype=torch.bool)
        tokens, logps = [], []
        self.stats.batches.append(B)
        for step in range(self.max_new_tokens):
            tok, lp = sample_tokens(logits.float(), self.temperature, self.generator, self.top_p)
            tok = torch.where(finished, torch.full_like(tok, self.pad_id), tok)
            tokens.append(tok)
            logps.append(lp)
            finished |= torch.isin(tok, self.stop_ids)
            if bool(finished.all()) or step == self.max_new_tokens - 1:
                break
            mask = torch.cat([mask, torch.ones((B, 1), dtype=torch.long)], dim=1)
            logits = model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos[:, None], **kwargs).logits[:, -1]
            next_pos = next_pos + 1
            self.stats.forward_passes += 1
        toks = torch.stack(tokens, 1).tolist()
        lps = torch.stack(logps, 1).tolist()
        stop = set(self.stop_ids.tolist())
        gens = []
        for i in range(B):
            row = toks[i]
            end = next((j for j, t in enumerate(row) if t in stop), None)
            n = len(row) if end is None else end + 1  # keep the stop token: the policy must learn to emit it
            ids = row[:n]
            self.stats.tokens += n
            gens.append(Generation(prompt_ids=prompts[i], completion_ids=ids, logprobs=lps[i][:n],
                                   text=self.tokenizer.decode(ids, skip_special_tokens=True),
                                   finish_reason="length" if end is None else "stop"))
        return gens
