"""Rollouts on a vLLM engine (`rollout.backend: vllm`): one engine, one LoRA adapter per policy.

vLLM is an optional extra (`pip install 'rolecast[vllm]'`, a CUDA machine), imported only when this backend
is built. What it does, behind the same `engine.Backend` protocol as `hf.HFBackend`:
- one `vllm.LLM` over the base model with `enable_lora` (each request routed to its policy's adapter by a
  `LoRARequest`, all roles in one engine and one batch), `enable_prefix_caching` (the parallel same-role calls
  of Voting and Orch-Workers, and a GRPO group's G samples, share their prompt's KV blocks) and
  `enable_sleep_mode` (`sleep()` frees the engine's weights and KV cache for the update; the next `generate`
  wakes it);
- prompts are tokenized here with the model's chat template (`hf.chat_prompt_ids`) and passed as token ids,
  so the trainer re-scores exactly the tokens that were sampled;
- log-probs are those of the sampling distribution (`logprobs_mode="processed_logprobs"`: after temperature
  and top-p, as the HF sampler records them); the trainer's step-1 check compares them with its own;
- adapter sync without restarting the engine: before each `generate`, every adapter whose parameters changed
  since it was last exported (torch's in-place version counters, so no weight is compared) is saved to a
  fresh directory and served under a new LoRA id; the old id is removed from the engine.

Limits: LoRA policies only (`model.trainable: full` would need a weight push into the engine's workers, not
implemented); not yet run on a GPU (docs/benchmarks.md); `seed_per_prompt` is not supported (each request
carries its own seed, derived from the step seed and its position in the call).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rolecast.core.errors import ConfigError, require
from rolecast.policies.models import PolicySet, resolve_model_path
from rolecast.rollout.engine import Generation, GenRequest, Sampling
from rolecast.rollout.hf import chat_prompt_ids, stop_token_ids


def load_vllm() -> Any:
    """The vllm module, or a one-line MissingPackageError naming the install command."""
    return require("vllm", "vllm", purpose="rollout.backend: vllm")


class VLLMBackend:
    def __init__(
        self,
        policies: PolicySet,
        tokenizer: Any,
        *,
        model_path: str,
        max_new_tokens: int,
        temperature: float = 0.7,
        top_p: float = 1.0,
        seed: int = 0,
        max_new_tokens_by_role: dict[str, int] | None = None,
        gpu_memory_utilization: float = 0.35,
        sleep_between_calls: bool | None = None,
        max_model_len: int | None = None,
        engine_options: dict[str, Any] | None = None,
        llm: Any = None,
    ):
        """`sleep_between_calls`: `sleep()` (level 1: weights to CPU RAM, KV cache dropped) frees the GPU for
        the update; the next `generate` wakes the engine. Default: on a GPU only (vLLM's CPU backend has no
        sleep mode, and no device memory to hand over). `engine_options`: more `vllm.LLM` arguments (e.g.
        `enforce_eager`). `llm`: an engine built elsewhere (tests, sharing)."""
        vllm = load_vllm()
        from vllm.lora.request import LoRARequest

        if policies.mode != "lora":
            raise ConfigError(
                "rollout.backend: vllm serves LoRA policies (model.trainable: lora); full fine-tuning would need "
                "the trainer's weights pushed into the engine, which is not implemented: use rollout.backend: hf"
            )
        self._LoRARequest, self._SamplingParams = LoRARequest, vllm.SamplingParams
        self.policies, self.tokenizer = policies, tokenizer
        self.max_new_tokens = max_new_tokens
        self.max_new_tokens_by_role = dict(max_new_tokens_by_role or {})
        self.temperature, self.top_p = temperature, top_p
        self._seed = seed
        if sleep_between_calls is None:
            sleep_between_calls = policies.device.type == "cuda"
        self.sleep_between_calls = sleep_between_calls
        self.sleeping = False
        self.stop_ids = stop_token_ids(tokenizer, getattr(policies.unique_models()[0], "generation_config", None))
        rank = max(int(getattr(policies, "lora_rank", 0) or 0), 8)
        self.llm = llm or vllm.LLM(
            model=resolve_model_path(model_path),
            dtype=str(policies.dtype).removeprefix("torch."),
            seed=seed,
            enable_lora=True,
            max_loras=len(policies.policy_ids),
            max_lora_rank=_lora_rank_bucket(rank),
            enable_prefix_caching=True,
            enable_sleep_mode=sleep_between_calls,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            logprobs_mode="processed_logprobs",
            **(engine_options or {}),
        )
        self._dir = Path(tempfile.mkdtemp(prefix="rolecast-vllm-adapters-"))
        self._served: dict[str, tuple[tuple[int, ...], Any]] = {}  # pid -> (param versions, LoRARequest)
        self._next_id = 1
        self.syncs = 0  # adapter exports so far (tests and the GPU check read it)

    # --- the Backend protocol ---------------------------------------------------------------------------

    def reseed(self, seed: int) -> None:
        self._seed = seed

    def generate(self, requests: Sequence[GenRequest], sampling: Sampling | None = None) -> list[Generation]:
        if not requests:
            return []
        temperature, top_p = (sampling or Sampling()).over(self.temperature, self.top_p)
        self.wake_up()
        adapters = self.sync_adapters()
        prompts = [chat_prompt_ids(self.tokenizer, r.messages) for r in requests]
        params = [
            self._SamplingParams(
                n=1,
                temperature=temperature,
                top_p=top_p,
                max_tokens=self._cap(r),
                logprobs=0,  # the sampled token's own log-prob
                seed=_request_seed(self._seed, i),
                stop_token_ids=self.stop_ids,
            )
            for i, r in enumerate(requests)
        ]
        outputs = self.llm.generate(
            [{"prompt_token_ids": p} for p in prompts],
            sampling_params=params,
            lora_request=[adapters[r.policy_id] for r in requests],
            use_tqdm=False,
        )
        gens = [_generation(p, out.outputs[0]) for p, out in zip(prompts, outputs, strict=True)]
        if self.sleep_between_calls:
            self.sleep()
        return gens

    # --- engine memory and adapters -------------------------------------------------------------------

    def sleep(self) -> None:
        """Hand the GPU to the trainer: the engine's weights go to CPU RAM and its KV cache is dropped."""
        if self.sleep_between_calls and not self.sleeping:
            self.llm.sleep(level=1)
            self.sleeping = True

    def wake_up(self) -> None:
        if self.sleeping:
            self.llm.wake_up()
            self.sleeping = False

    def sync_adapters(self) -> dict[str, Any]:
        """{policy id: the LoRARequest serving its current weights}, exporting the adapters that changed."""
        out = {}
        for pid in self.policies.policy_ids:
            versions = tuple(p._version for p in self.policies.parameters(pid))
            served = self._served.get(pid)
            if served is None or served[0] != versions:
                path = self._dir / f"{pid}-{self._next_id}"
                self.policies.save_pretrained(pid, path)
                exported = path / pid if (path / pid / "adapter_config.json").exists() else path
                request = self._LoRARequest(f"{pid}-{self._next_id}", self._next_id, str(exported))
                self._next_id += 1
                self.syncs += 1
                if served is not None:
                    self._drop(served[1])
                served = (versions, request)
                self._served[pid] = served
            out[pid] = served[1]
        return out

    def _drop(self, request: Any) -> None:
        """Forget an outdated adapter in the engine (ids are never reused, so a stale one is never served)."""
        remove = getattr(self.llm.llm_engine, "remove_lora", None)
        if remove is not None:
            remove(request.lora_int_id)
        shutil.rmtree(Path(request.lora_path), ignore_errors=True)

    def _cap(self, request: GenRequest) -> int:
        return self.max_new_tokens_by_role.get(request.role or "", self.max_new_tokens)

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


def _lora_rank_bucket(rank: int) -> int:
    """vLLM accepts max_lora_rank from a fixed set; the smallest one that holds `rank`."""
    for r in (8, 16, 32, 64, 128, 256, 320, 512):
        if rank <= r:
            return r
    raise ConfigError(f"model.lora.r {rank} is above vLLM's largest max_lora_rank (512)")


def _request_seed(step_seed: int, index: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{step_seed}|{index}".encode()).digest()[:4], "little")


def _generation(prompt: list[int], out: Any) -> Generation:
    ids = list(out.token_ids)
    logprobs = [float(entry[t].logprob) for t, entry in zip(ids, out.logprobs or [], strict=True)]
    return Generation(
        prompt_ids=prompt,
        completion_ids=ids,
        logprobs=logprobs,
        text=out.text,
        finish_reason="length" if out.finish_reason == "length" else "stop",
    )
