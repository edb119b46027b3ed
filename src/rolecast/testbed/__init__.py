"""The embedded testbed: a tiny tokenizer + Qwen3 model warm-started on every role of the `testbed` tasks.

It exists so `rolecast train` works offline, on a CPU, in minutes. The shipped build lives in
`artifact/` and loads like any Hugging Face checkpoint:

    AutoModelForCausalLM.from_pretrained(default_path()); AutoTokenizer.from_pretrained(default_path())

`build()` reproduces it (same seed and steps -> same weights on the same machine and thread count).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ARTIFACT_DIR = Path(__file__).parent / "artifact"


def default_path() -> Path:
    """The shipped testbed model + tokenizer directory."""
    if not (ARTIFACT_DIR / "config.json").exists():
        raise FileNotFoundError(
            f"the shipped testbed is missing from {ARTIFACT_DIR}; rebuild it with `rolecast testbed build --out {ARTIFACT_DIR}`"
        )
    return ARTIFACT_DIR


def build(out_dir: str | Path, **kwargs: Any) -> Path:
    """Build a testbed into `out_dir`; see rolecast.testbed.builder.build for the options."""
    from .builder import build as _build

    return _build(out_dir, **kwargs)


def info(path: str | Path | None = None) -> dict[str, Any]:
    """The build_info.json of a testbed directory (default: the shipped one)."""
    p = Path(path) if path else default_path()
    f = p / "build_info.json"
    if not f.exists():
        raise FileNotFoundError(f"{p} has no build_info.json; is it a testbed build?")
    return json.loads(f.read_text())


def load(path: str | Path | None = None, dtype: str = "float32"):
    """(model, tokenizer) of a testbed directory (default: the shipped one), model in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = str(path or default_path())
    model = AutoModelForCausalLM.from_pretrained(p, dtype=getattr(torch, dtype))
    return model.eval(), AutoTokenizer.from_pretrained(p)


def format_info(d: dict[str, Any]) -> str:
    """A build_info.json as a few lines: the build, then each role's format and accuracy."""
    lines = [
        f"seed {d['seed']}  steps {d['steps']}  params {d['params']:,}  vocab {d['vocab_size']}  "
        f"build {d.get('wall_seconds', '?')}s (training {d['train_seconds']}s)"
    ]
    for key, r in d.get("roles", {}).items():
        extra = ""
        if "said_correct" in r:
            extra = f"  says Correct {r['said_correct']:.2f} (truly {r['truly_correct']:.2f}), balanced {r['balanced_accuracy']:.2f}"
        elif "baseline_first" in r:
            extra = f"  (always-first baseline {r['baseline_first']:.2f})"
        lines.append(f"  {key:26s} n={r['n']:<4d} format {r['format']:.2f}  accuracy {r['accuracy']:.2f}{extra}")
    return "\n".join(lines)


__all__ = ["default_path", "build", "info", "load", "format_info", "ARTIFACT_DIR"]
