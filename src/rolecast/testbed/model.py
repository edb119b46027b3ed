"""The testbed models: Qwen3-architecture models small enough to train with RL on two CPU cores.

Two sizes built by one recipe, so a map on a laptop has a scale axis: `small` (2.6M parameters, the
default) and `large` (~4x the parameters and compute per token: twice the width).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

SMALL_SHAPE = dict(
    hidden_size=192,
    num_hidden_layers=4,
    num_attention_heads=6,
    num_key_value_heads=2,
    head_dim=32,
    intermediate_size=768,
    max_position_embeddings=512,
    tie_word_embeddings=True,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
)
SHAPES: dict[str, dict[str, Any]] = {
    "small": SMALL_SHAPE,
    "large": {**SMALL_SHAPE, "hidden_size": 384, "head_dim": 64, "intermediate_size": 1536},
}


def model_config(vocab_size: int, eos_id: int, pad_id: int, size: str = "small", **overrides: Any):
    cfg = Qwen3Config(
        vocab_size=vocab_size,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=None,
        **{**SHAPES[size], **overrides},
    )
    return cfg


def new_model(config, seed: int):
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config).float()
