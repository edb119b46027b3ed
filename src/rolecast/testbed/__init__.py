"""The embedded testbed: a tiny tokenizer + Qwen3 model warm-started on every role of the `testbed` tasks.

It exists so `rolecast train` works offline, on a CPU, in minutes. The shipped build lives in
`artifact/` and loads like any Hugging Face checkpoint:

    AutoModelForCausalLM.from_pretrained(default_path()); AutoTokenizer.from_pretrained(default_path())

`build()` reproduces it (same seed and steps -> same weights on the same machine and thread count).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
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


def _format_info(d: dict[str, Any]) -> str:
    lines = [f"seed {d['seed']}  steps {d['steps']}  params {d['params']:,}  vocab {d['vocab_size']}  "
             f"build {d.get('wall_seconds', '?')}s (training {d['train_seconds']}s)"]
    for key, r in d.get("roles", {}).items():
        extra = ""
        if "said_correct" in r:
            extra = f"  says Correct {r['said_correct']:.2f} (truly {r['truly_correct']:.2f}), balanced {r['balanced_accuracy']:.2f}"
        elif "baseline_first" in r:
            extra = f"  (always-first baseline {r['baseline_first']:.2f})"
        lines.append(f"  {key:26s} n={r['n']:<4d} format {r['format']:.2f}  accuracy {r['accuracy']:.2f}{extra}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """`rolecast testbed build [--out DIR] [--seed N] [--steps N]` and `rolecast testbed info [DIR]`."""
    from .builder import DEFAULT_SEED, DEFAULT_STEPS

    ap = argparse.ArgumentParser(prog="rolecast testbed", description="Build or inspect the embedded testbed model.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="train tokenizer + model from scratch (deterministic for a seed)")
    b.add_argument("--out", default=None, help=f"output directory (default: the shipped artifact, {ARTIFACT_DIR})")
    b.add_argument("--seed", type=int, default=DEFAULT_SEED)
    b.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="warm-start optimizer steps (batch 64; the first 500 train the solver only)")
    b.add_argument("--no-eval", action="store_true", help="skip the per-role evaluation")
    i = sub.add_parser("info", help="print a build's per-role numbers")
    i.add_argument("dir", nargs="?", default=None)
    args = ap.parse_args(argv)
    if args.cmd == "build":
        out = build(args.out or ARTIFACT_DIR, seed=args.seed, steps=args.steps, evaluate=not args.no_eval)
        print(_format_info(info(out)))
    else:
        print(_format_info(info(args.dir)))
    return 0


main_build = main  # the name the CLI wiring was promised


__all__ = ["default_path", "build", "info", "load", "main", "main_build", "ARTIFACT_DIR"]

if __name__ == "__main__":
    sys.exit(main())
