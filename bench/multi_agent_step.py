"""One multi-agent training step and one evaluation on the embedded testbed, per phase, before/after in one sitting.

    .venv/bin/python bench/multi_agent_step.py                        # this tree's rolecast
    .venv/bin/python bench/multi_agent_step.py --tree /path/to/baseline --tree .   # two trees, interleaved
    .venv/bin/python bench/multi_agent_step.py --tree /path/to/baseline=/path/to/baseline/.venv/bin/python --tree .

Cells: Voting and Orch-Workers, shared and isolated (`--cells` to choose), with the settings `make run` trains them
with (configs/testbed_matrix.yaml: 8 problems x group 8 per step, one pass per batch, gradient diagnostics every 5
steps, evaluation on 200 problems x 4 samples at temperature 0.7; one torch thread, as the pool runs each cell).

For each tree and cell a fresh process (PYTHONPATH=<tree>/src, the tree's own python if given) trains `--steps`
steps through `rolecast.training.grpo.train` (the public entry point, so the same script runs on an older or a
refactored tree), reads `time/rollout`, `time/reward` and `time/update` of each step from metrics.jsonl, then times
one evaluation (`eval.size` problems x `eval.n_samples`) on the trained weights. The first step is a warm-up; step 1
(0-based 0) is a diagnosed step in the matrix settings (diagnostics.gradients.every 5 counts steps from 1: steps 5,
10, ...), so with the default 6 steps the table's medians are plain steps and the diagnosed step 5 is shown apart.
With several trees the processes alternate tree by tree, cell by cell and round by round (`--rounds`), so a change
in machine load hits every tree alike; the table reports medians and the ratio to the first tree. The rewards and
losses of each step are printed as a fingerprint: equal numbers mean the trees trained the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CELLS = ("voting:shared", "voting:isolated", "orch_workers:shared", "orch_workers:isolated")
MATRIX = {
    "train.problems_per_step": 8,
    "train.epochs": 1,
    "eval.protocol": "study",
    "eval.n_samples": 4,
    "eval.size": 200,
    "diagnostics.gradients.every": 5,
    "checkpoint.every": 0,
    "logging.episodes_every": 0,
    "logging.progress": False,
}


def worker(cell: str, steps: int, eval_size: int, threads: int, out: Path) -> None:
    """Train `steps` steps of one cell and time one evaluation; write the numbers to `out` (JSON)."""
    import torch

    from rolecast.runtime import build_runtime
    from rolecast.training.grpo import train

    try:  # since issue 24: config/load.py, and sampling parameters passed per evaluation
        from rolecast.config.load import load_config
        from rolecast.evaluation import EvalPlan
        from rolecast.rollout.engine import Sampling
    except ImportError:  # a tree from before issue 24 (the baseline of the before/after comparison)
        from rolecast.config import load_config

        EvalPlan = Sampling = None

    workflow, sharing = cell.split(":")
    overrides = {
        **MATRIX,
        "workflow.name": workflow,
        "routing.sharing": sharing,
        "train.steps": steps,
        "threads": threads,
        "eval.at_start": False,
        "eval.at_end": False,
        "eval.every": 0,
        "eval.size": eval_size,
    }
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, {**overrides, "run_dir": str(Path(tmp) / "run")})
        t0 = time.perf_counter()
        train(cfg)
        train_s = time.perf_counter() - t0
        rows = [json.loads(line) for line in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
        # one evaluation of the base model's workflow, as `make run`'s evaluations run (the same backend path)
        rt = build_runtime(cfg)
        problems = list(rt.task.problems(cfg.task.eval_split))[: cfg.eval.size]
        if EvalPlan is not None:
            sampling = Sampling(temperature=cfg.eval.temperature)
            plan = EvalPlan(n_samples=cfg.eval.n_samples, ks=(1,), sampling=sampling, seed=12345)
            t1 = time.perf_counter()
            res = rt.evaluate(problems, plan, options=cfg.workflow.options)
        else:
            backend = rt.backend
            backend.temperature = cfg.eval.temperature
            backend.reseed(12345)
            t1 = time.perf_counter()
            res = rt.evaluate(problems, n_samples=cfg.eval.n_samples, options=cfg.workflow.options, ks=(1,))
        eval_s = time.perf_counter() - t1
    keys = ("time/rollout", "time/reward", "time/update", "time/step", "reward", "policy/")
    steps_out = [{k: v for k, v in r.items() if any(k.startswith(p) for p in keys)} for r in rows]
    out.write_text(
        json.dumps({"cell": cell, "train_s": train_s, "steps": steps_out, "eval_s": eval_s, "eval_pass1": res.pass1})
    )


def fingerprint(steps: list[dict]) -> str:
    parts = []
    for r in steps:
        losses = [v for k, v in sorted(r.items()) if k.endswith("/loss")]
        parts.append(f"{r['reward']:.4f}/" + ",".join(f"{x:.6g}" for x in losses))
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", help="a source tree, PATH or PATH=PYTHON (default: this one)")
    ap.add_argument("--cells", default=",".join(CELLS), help="workflow:sharing, comma-separated")
    ap.add_argument("--steps", type=int, default=6, help="training steps per process (the first is a warm-up)")
    ap.add_argument("--eval-size", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker, a.steps, a.eval_size, a.threads, Path(a.out))
        return 0
    here = Path(__file__).resolve().parent.parent
    trees = []
    for spec in a.tree or [str(here)]:
        path, _, python = spec.partition("=")
        trees.append((Path(path).resolve(), python or sys.executable))
    cells = [c.strip() for c in a.cells.split(",") if c.strip()]
    results: dict[tuple[int, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            for cell in cells:
                order = range(len(trees)) if rnd % 2 == 0 else reversed(range(len(trees)))
                for ti in order:
                    tree, python = trees[ti]
                    out = Path(tmp) / f"{ti}-{cell}-{rnd}.json"
                    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": str(a.threads)}
                    cmd = [python, str(Path(__file__).resolve()), "--worker", cell, "--out", str(out)]
                    cmd += ["--steps", str(a.steps), "--eval-size", str(a.eval_size), "--threads", str(a.threads)]
                    print(f"round {rnd + 1}, {cell}, {tree} ...", flush=True)
                    subprocess.run(cmd, env=env, check=True, cwd=str(tree), stdout=subprocess.DEVNULL)
                    r = json.loads(out.read_text())
                    results.setdefault((ti, cell), []).append(r)
                    print(f"  steps: {fingerprint(r['steps'])}", flush=True)
                    print(
                        "  "
                        + ", ".join(
                            f"{k.split('/')[1]} {statistics.median(s[k] for s in r['steps'][1:]):.2f}" for k in _T
                        )
                        + f" s/step; eval {r['eval_s']:.1f} s (pass@1 {r['eval_pass1']:.3f})",
                        flush=True,
                    )
    print()
    print("| cell | tree | rollout s/step | update s/step | step s/step | diagnosed step s | eval s | vs first tree |")
    print("|---|---|---|---|---|---|---|---|")
    for cell in cells:
        base = None
        for ti, (tree, _) in enumerate(trees):
            runs = results[(ti, cell)]
            plain = [s for r in runs for i, s in enumerate(r["steps"]) if i > 0 and (i + 1) % 5]
            diag = [s["time/step"] for r in runs for i, s in enumerate(r["steps"]) if (i + 1) % 5 == 0]
            med = {k: statistics.median(s[k] for s in plain) for k in _T}
            ev = statistics.median(r["eval_s"] for r in runs)
            total = med["time/step"] + ev / 5  # per step of the matrix: evaluation every 5 steps
            base = base or total
            d = f"{statistics.median(diag):.2f}" if diag else "-"
            print(
                f"| {cell} | {tree.name} | {med['time/rollout']:.2f} | {med['time/update']:.2f} | "
                f"{med['time/step']:.2f} | {d} | {ev:.1f} | {base / total:.2f}x (step + eval/5) |"
            )
    return 0


_T = ("time/rollout", "time/update", "time/step")

if __name__ == "__main__":
    sys.exit(main())
