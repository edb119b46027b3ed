"""Shared fixtures. Models here are tiny and random (fast); the embedded testbed is the trained one."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A random 2-layer Qwen3 with a 512-token byte-level BPE tokenizer and a Qwen-style chat template."""
    from rolecast.testbed.model import model_config, new_model
    from rolecast.testbed.tokenizer import train_tokenizer

    out = tmp_path_factory.mktemp("tiny_model")
    texts = [
        f"solve: {a} + {b} - {c} \\boxed{{{a + b - c}}} check try pick plan work merge fix way"
        for a in range(10)
        for b in range(10)
        for c in range(10)
    ]
    tok = train_tokenizer(texts, out, vocab_size=512)
    cfg = model_config(
        len(tok),
        tok.eos_token_id,
        tok.pad_token_id,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
    )
    new_model(cfg, seed=0).save_pretrained(out)
    return str(out)


@pytest.fixture(autouse=True)
def _two_threads():
    torch.set_num_threads(2)


@pytest.fixture(scope="session")
def data_dir():
    """The offline benchmark data root (ROLECAST_DATA_DIR or ../shared/data); skips when it is absent."""
    from rolecast.tasks.datasets import data_root

    root = data_root()
    if not (root / "MANIFEST.md").exists() and not (root / "gsm8k").is_dir():
        pytest.skip(f"offline datasets not found at {root}; set ROLECAST_DATA_DIR")
    return root
