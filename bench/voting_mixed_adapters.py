"""Voting rollout: one mixed-adapter batch vs one forward pass per role/adapter, same episodes, in one run.

    .venv/bin/python bench/voting_mixed_adapters.py

The `voting` workflow (3 generators + 1 aggregator) on the `testbed` arithmetic task, 16 problems x group 8
= 128 episodes (384 generator calls in the first scheduling wave, 128 aggregator calls in the second), on
a tiny random Qwen3 of the testbed shape with LoRA adapters (r 64, alpha 32, all linear layers; lora_B
initialised randomly so every adapter is its own function). Greedy decoding (temperature 0), so both
modes must produce identical episodes; the script checks that, then prints the time ratio.

Two routings:
- `per-voter`: generator/0, generator/1, generator/2 and the aggregator each have their own adapter. The
  generator wave holds three adapters: mixed = one batch of 384 rows (chunks of --max-batch), per-adapter =
  three passes of 128 rows.
- `isolated`: one `generator` and one `aggregator` adapter. Each wave holds a single adapter, so both modes
  run the same batches: a control (the ratio should be ~1.0; the difference is PEFT's adapter_names path).
Modes alternate (mixed, per-adapter, mixed, ...) so machine load changes hit both alike.
"""

from __future__ import annotations

import os

if "--omp-passive" in os.sys.argv:  # see bench/grpo_vs_trl.py: passive OpenMP waits on a shared CPU
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import build_tiny_model, machine  # noqa: E402

ROUTINGS = {
    "per-voter": {"generator": "gen0", "generator/1": "gen1", "generator/2": "gen2", "aggregator": "agg"},
    "isolated": None,
}


def problems(n: int):
    from rolecast.tasks import make_task
    from rolecast.tasks.base import Problem, Score, Task

    try:
        task = make_task("testbed")
        return task, list(task.problems("train"))[:n]
    except Exception as e:  # the testbed task needs reasoning-gym; fall back to a small problem list
        print(f"(testbed task unavailable: {e}; using a small problem list)")

    class Small(Task):
        name, family = "small", "testbed"

        def extract_answer(self, text):
            return text.strip().split()[-1] if text and text.strip() else None

        def score(self, problem, text):
            return Score(reward=float(self.extract_answer(text) == problem.reference))

    return Small(), [
        Problem(
            id=str(i),
            text=f"{i % 10} + {(3 * i) % 10} - {(7 * i) % 10}",
            reference=str(i % 10 + (3 * i) % 10 - (7 * i) % 10),
        )
        for i in range(n)
    ]


def run(args) -> int:
    from rolecast.policies.models import PolicySet, load_tokenizer
    from rolecast.policies.router import build_routing
    from rolecast.prompts import PromptBook
    from rolecast.rollout.engine import RolloutStats, run_episodes
    from rolecast.rollout.hf import HFBackend
    from rolecast.workflows import get_workflow

    spec = get_workflow("voting")
    task, probs = problems(args.problems)
    prompts = PromptBook("testbed")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "model", vocab="tiny")
        tok = load_tokenizer(model_dir)
        print(f"machine: {machine()}")
        from rolecast.core.devices import resolve_mixed_adapters

        auto = resolve_mixed_adapters("auto", "cpu")
        print(f"rollout.mixed_adapters auto on the CPU: {'mixed batch' if auto else 'one pass per adapter'}")
        print(
            f"workload: voting (n=3) x {len(probs)} problems x group {args.group} = {len(probs) * args.group} "
            f"episodes, greedy, max_new_tokens {args.max_new_tokens}, max_batch {args.max_batch}, "
            f"LoRA r {args.lora_r}",
            flush=True,
        )
        for name in args.routings:
            mapping = ROUTINGS[name]
            routing = build_routing(spec.roles, "map" if mapping else "isolated", mapping)
            policies = PolicySet(
                model_dir, routing.policy_ids, mode="lora", seed=0, lora={"r": args.lora_r, "alpha": args.lora_r // 2}
            )
            g = torch.Generator().manual_seed(1)
            with torch.no_grad():  # PEFT starts every adapter at lora_B = 0, i.e. as the base model
                for pname, p in policies.models[routing.policy_ids[0]].named_parameters():
                    if "lora_B" in pname:
                        p.copy_(torch.randn(p.shape, generator=g) * 0.02)
            backend = HFBackend(
                policies, tok, max_new_tokens=args.max_new_tokens, temperature=0.0, max_batch=args.max_batch, seed=0
            )
            times: dict[str, list[float]] = {"mixed": [], "per-adapter": []}
            batches: dict[str, list[int]] = {}
            texts: dict[str, list] = {}
            order = ["mixed", "per-adapter"] * args.repeats
            for i, mode in enumerate(["mixed"] + order):  # the first mixed run is a warm-up
                policies.mixed_adapters = mode == "mixed"
                backend.stats.batches.clear()
                stats = RolloutStats()
                t0 = time.perf_counter()
                eps = run_episodes(
                    spec,
                    probs,
                    args.group,
                    task=task,
                    prompts=prompts,
                    router=routing,
                    backend=backend,
                    options={"n": 3},
                    stats=stats,
                )
                dt = time.perf_counter() - t0
                if i > 0:
                    times[mode].append(dt)
                batches[mode] = list(backend.stats.batches)
                texts[mode] = [[(t.instance, t.completion_ids) for t in ep.turns] for ep in eps]
                print(
                    f"  {name:9s} {mode:11s} {dt:6.2f} s  decode batches {batches[mode]}"
                    f"{'  [warm-up]' if i == 0 else ''}",
                    flush=True,
                )
            same = texts["mixed"] == texts["per-adapter"]
            n_tok = sum(len(c) for ep in texts["mixed"] for _, c in ep)
            rows.append((name, routing.policy_ids, times, batches, same, n_tok))

    print()
    print(
        "| routing | adapters | mixed batch s (median) | one pass per adapter s (median) | per-adapter / mixed | "
        "decode batches mixed | per adapter | same episodes |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, pids, times, batches, same, n_tok in rows:
        m, s = statistics.median(times["mixed"]), statistics.median(times["per-adapter"])
        print(
            f"| {name} | {len(pids)} | {m:.2f} | {s:.2f} | {s / m:.2f}x | {batches['mixed']} | "
            f"{batches['per-adapter']} | {'yes' if same else 'NO'} ({n_tok} tokens) |"
        )
    return 0 if all(r[4] for r in rows) else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--lora-r", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per mode (alternating)")
    ap.add_argument("--routings", nargs="+", choices=list(ROUTINGS), default=list(ROUTINGS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--omp-passive", action="store_true", help="OMP_WAIT_POLICY=PASSIVE (for a loaded machine)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
