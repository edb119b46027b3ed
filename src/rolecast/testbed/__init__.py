"""The embedded testbed: a tiny tokenizer + Qwen3 model warm-started on every role of the `testbed` tasks.

It exists so `rolecast train` works offline, on a CPU, in minutes. It ships in two sizes built by the
same recipe: `small` in `artifact/` (model path `testbed`) and `large`, ~4x the parameters, in
`artifact_large/` (model path `testbed-large`). Each loads like any Hugging Face checkpoint:

    AutoModelForCausalLM.from_pretrained(default_path()); AutoTokenizer.from_pretrained(default_path())

`build()` reproduces it (same seed and steps -> same weights on the same machine and thread count).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rolecast.core.errors import NotATestbedBuild
from rolecast.policies.shipped import ARTIFACT_DIR, ARTIFACT_DIRS, MODEL_NAMES, default_path
from rolecast.testbed.builder import build as _build
from rolecast.testbed.stats import margin_text


def build(out_dir: str | Path, **kwargs: Any) -> Path:
    """Build a testbed into `out_dir`; see rolecast.testbed.builder.build for the options."""
    return _build(out_dir, **kwargs)


def info(path: str | Path | None = None) -> dict[str, Any]:
    """The build_info.json of a testbed directory (default: the shipped one)."""
    p = Path(path) if path else default_path()
    f = p / "build_info.json"
    if not f.exists():
        raise NotATestbedBuild(
            f"{p} is not a testbed build: it has no build_info.json (`rolecast testbed build --out DIR` writes one)"
        )
    return json.loads(f.read_text())


def load(path: str | Path | None = None, dtype: str = "float32"):
    """(model, tokenizer) of a testbed directory (default: the shipped one), model in eval mode."""
    p = str(path or default_path())
    model = AutoModelForCausalLM.from_pretrained(p, dtype=getattr(torch, dtype))
    return model.eval(), AutoTokenizer.from_pretrained(p)


def format_info(d: dict[str, Any]) -> str:
    """A build_info.json as a few lines: the build, then each role's competence next to its trivial policy."""
    lines = [
        f"size {d.get('size', 'small')}  seed {d['seed']}  steps {d['steps']}  params {d['params']:,}  "
        f"vocab {d['vocab_size']}  build {d.get('wall_seconds', '?')}s (training {d['train_seconds']}s)",
        "greedy, held-out problems; ± is a 95% interval",
    ]
    for key, r in d.get("roles", {}).items():
        ci = f" ± {r['accuracy_ci']:.2f}" if "accuracy_ci" in r else ""
        lines.append(f"  {key:26s} n={r['n']:<4d} format {r['format']:.2f}  accuracy {r['accuracy']:.2f}{ci}")
        if "balanced_accuracy" in r:
            lines.append(
                f"    says Correct {r['said_correct']:.2f} (truly {r['truly_correct']:.2f}); balanced accuracy "
                f"{r['balanced_accuracy']:.2f} ± {r.get('balanced_accuracy_ci', 0):.2f}"
            )
        if "accuracy_with_correct" in r:
            lines.append(
                f"    a correct candidate exists (n={r['n_with_correct']}): picks one {r['accuracy_with_correct']:.2f}"
                f"; always-1 {r['baseline_first']:.2f} (margin {margin_text(r['vs_first'])}), random "
                f"{r['baseline_random']:.2f} (margin {margin_text(r['vs_random'])})"
            )
        elif "vs_first" in r:
            lines.append(f"    copying candidate 1: {r['baseline_first']:.2f} (margin {margin_text(r['vs_first'])})")
        if "strategies" in r:
            s = r["strategies"]
            by = ", ".join(f"{k} {v:.2f}" for k, v in s["accuracy_by_strategy"].items())
            lines.append(
                f"    same {s['n_problems']} problems under each strategy: outputs differ {s['outputs_differ']:.2f}, "
                f"answers differ {s['answers_differ']:.2f}; accuracy {by}"
            )
    if "rollouts" in d:
        lines.append(format_rollouts(d["rollouts"]))
    return "\n".join(lines)


def format_rollouts(r: dict[str, Any]) -> str:
    """`rollout_competence`'s numbers: each judging role on what the same model wrote in its workflow."""
    p = r["protocol"]
    ev, agg, syn = r["eval_opt"], r["voting"], r["orch_workers"]
    lines = [
        f"own workflow rollouts: {p['problems']} held-out {'code' if p.get('task') == 'testbed_code' else 'arithmetic'} "
        f"problems x {p['samples']} samples, "
        f"temperature {p['temperature']}" + (f"; ± 95% intervals {p['intervals']}" if "intervals" in p else ""),
        f"  eval_opt     pass@1 {ev['pass1']:.2f}  evaluator: says Correct {ev['accept_rate']:.2f} "
        f"(truly {ev['truly_correct']:.2f}), balanced accuracy {ev['balanced_accuracy']:.2f} "
        f"± {ev['balanced_accuracy_ci']:.2f} (n={ev['n_verdicts']})",
        f"  voting       pass@1 {agg['pass1']:.2f}  aggregator, a voter right (n={agg['n_with_correct']}): picks one "
        f"{agg['accuracy_with_correct']:.2f}; voter 1 {agg['baseline_first']:.2f} (margin "
        f"{margin_text(agg['vs_first'])}), random {agg['baseline_random']:.2f} (margin {margin_text(agg['vs_random'])})",
        f"  orch_workers pass@1 {syn['pass1']:.2f}  synthesizer {syn['accuracy']:.2f}; worker 1 "
        f"{syn['baseline_first']:.2f} (margin {margin_text(syn['vs_first'])})",
    ]
    if "workers_disagree" in syn:  # builds recorded before 2026-12-01 lack it
        lines.append(
            f"               workers disagree {syn['workers_disagree']:.2f}; right by position "
            + " / ".join(f"{a:.2f}" for a in syn["worker_accuracy"].values())
            + f"; a majority vote over them {syn['majority_vote']:.2f}"
        )
    return "\n".join(lines)


__all__ = [
    "default_path",
    "build",
    "info",
    "load",
    "format_info",
    "format_rollouts",
    "ARTIFACT_DIR",
    "ARTIFACT_DIRS",
    "MODEL_NAMES",
]
