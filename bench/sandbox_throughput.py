"""Code sandbox throughput and per-run overhead.

    .venv/bin/python bench/sandbox_throughput.py [--workers 2] [--limit 974] [--reps 30] [--batch 32]

1. Per-run overhead: median wall time of a trivial program (`pass`) run through the sandbox
   (rolecast.sandbox.run_python: cgroup + bwrap + seccomp + harness + uid drop + rlimits) vs a bare
   `subprocess.run([python, "-c", "pass"])`, run one at a time; and of one asserts job (`add(1, 2) == 3`:
   the program's process and the judge's).
2. Throughput: the MBPP (full) reference solutions with their tests, verified through SandboxPool(workers)
   vs the same programs as bare `python -c <code + setup + asserts>` subprocesses on as many threads. As root with
   bubblewrap the pool judges them in batches (`--batch`, the pool's default unless given; 1: one container per
   program).
Prints both and their ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from rolecast.rewards.code import CodeTests, score_code_many, score_program
from rolecast.sandbox import SandboxPool, run_bare, run_python, sandbox_mode
from rolecast.tasks.datasets import dataset_file


def bwrap_floor() -> None:
    """The container alone, as the sandbox starts it (same mounts and filter), running `python -I -S -c pass`."""
    run_bare("pass").check_returncode()


ADD = CodeTests(kind="asserts", asserts=("assert add(1, 2) == 3",))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--limit", type=int, default=974)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=None, help="programs per container in run_many (default: the pool's)")
    args = ap.parse_args()

    rows = [json.loads(line) for line in open(dataset_file("mbpp/mbpp.jsonl"))][: args.limit]
    with SandboxPool(args.workers, batch=args.batch) as pool:
        print(f"sandbox mode: {sandbox_mode()}, workers: {args.workers}, batch: {pool.batch if pool.batching else 1}")
        run_python("pass", pool=pool)  # warm up
        # interleaved, so a neighbour's load on a shared machine hits all variants alike
        variants = {
            "bare subprocess": lambda: subprocess.run([sys.executable, "-c", "pass"], capture_output=True, check=True),
            "bwrap + python only": bwrap_floor,
            "sandbox run_python": lambda: run_python("pass", pool=pool),
            "sandbox asserts job": lambda: score_program("def add(a, b):\n    return a + b\n", ADD, pool=pool),
        }
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.reps):
            for k, fn in variants.items():
                t = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t)
        med = {k: statistics.median(v) * 1000 for k, v in times.items()}
        bare, sand = med["bare subprocess"], med["sandbox run_python"]
        print("per-run medians: " + ", ".join(f"{k} {v:.1f} ms" for k, v in med.items()))
        print(
            f"per-run: bare subprocess {bare:.1f} ms, sandbox {sand:.1f} ms, overhead {sand - bare:.1f} ms, ratio {sand / bare:.2f}x"
        )

        texts = ["```python\n" + r["code"] + "\n```" for r in rows]
        tests = [CodeTests.mbpp(r) for r in rows]
        t = time.perf_counter()
        scores = score_code_many(texts, tests, pool=pool, timeout_s=30)
        sand_s = time.perf_counter() - t
        passed = sum(s.reward for s in scores)

    def bare_run(r):
        src = "\n".join([r["code"], r["test_setup_code"], *r["test_list"]])
        return subprocess.run([sys.executable, "-c", src], capture_output=True, timeout=60).returncode == 0

    t = time.perf_counter()
    with ThreadPoolExecutor(args.workers) as ex:
        bare_ok = sum(ex.map(bare_run, rows))
    bare_s = time.perf_counter() - t
    n = len(rows)
    print(f"throughput: sandbox {n / sand_s:.1f} programs/s ({passed:.0f}/{n} pass, {sand_s:.1f} s), "
          f"bare {n / bare_s:.1f} programs/s ({bare_ok}/{n} pass, {bare_s:.1f} s), ratio {sand_s / bare_s:.2f}x time")  # fmt: skip


if __name__ == "__main__":
    main()
