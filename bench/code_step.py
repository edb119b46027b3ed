"""A training step of a code cell against the same workflow's math step, on the embedded testbed, side by side.

    .venv/bin/python bench/code_step.py                                   # this tree, every workflow
    .venv/bin/python bench/code_step.py --tree /path/to/baseline --tree . # before/after, interleaved
    .venv/bin/python bench/code_step.py --workflows voting,eval_opt --steps 6 --rounds 2
    .venv/bin/python bench/code_step.py --size large                      # testbed-large vs testbed-code-large

For each tree, workflow and task (`testbed`, the arithmetic task, and `testbed_code`, whose programs are graded in
the sandbox) a fresh process (PYTHONPATH=<tree>/src, the tree's own python if given) trains `--steps` steps through
`rolecast.training.grpo.train` with the settings `make run` trains its cells with (configs/testbed_matrix.yaml: 8
problems x group 8 a step, one pass per batch; gradient diagnostics off, since they cost both tasks alike; the code
task on its own model, `testbed-code`, with 128 new tokens, where the tree has it) and reads
`time/rollout`, `time/reward`, `time/update` and `time/step` of each step from metrics.jsonl. The first step is a
warm-up (it starts the sandbox pool and the math verifier's workers) and is left out of the medians.

The worker also counts, per step, the texts the task scored (`score_many`'s inputs) and the sandbox jobs the pool ran
(`SandboxPool.run_many`'s inputs, the programs actually started), by wrapping those two public calls; both exist in
every tree since issue 21, so the same script measures a baseline.

Processes alternate math/code and tree by tree within a workflow, and the order flips every round, so a change in the
machine's load hits both alike. The table gives medians per step, the code/math ratio of the whole step, and of the
step without its reward phase (rollout, update and the rest: what grading cannot change), per workflow and tree.
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

WORKFLOWS = ("single", "voting", "eval_opt", "orch_workers")
TASKS = ("testbed", "testbed_code")
MATRIX = {
    "train.problems_per_step": 8,
    "train.epochs": 1,
    "diagnostics.gradients.every": 0,
    "checkpoint.every": 0,
    "logging.episodes_every": 0,
    "logging.progress": False,
    "eval.at_start": False,
    "eval.at_end": False,
    "eval.every": 0,
}
PHASES = ("rollout", "reward", "update", "step")
# what configs/testbed_matrix.yaml sets for its code cells since the code build (2026-12-02)
CODE_CELL = {"model.path": "testbed-code", "rollout.max_new_tokens": 128}
# --size large: each task on its large build (the large maps' models)
LARGE_MODELS = {"testbed": "testbed-large", "testbed_code": "testbed-code-large"}


def _has_code_model() -> bool:
    try:
        from rolecast.policies.shipped import MODEL_NAMES
    except ImportError:
        return False
    return "testbed-code" in MODEL_NAMES


def worker(workflow: str, task: str, sharing: str, steps: int, threads: int, out: Path, size: str = "small") -> None:
    """Train `steps` steps of one cell; write each step's times and counts to `out` (JSON)."""
    import torch

    from rolecast.sandbox import SandboxPool
    from rolecast.tasks.base import Task

    try:
        from rolecast.training.grpo import train
    except ImportError:  # a tree from before issue 37 (the training code was rolecast.train)
        from rolecast.train.grpo import train

    try:
        from rolecast.config.load import load_config
    except ImportError:  # a tree from before issue 24
        from rolecast.config import load_config

    counts = {"texts": 0, "jobs": 0, "pool_s": 0.0}
    per_step: list[dict[str, float]] = []
    run_many = SandboxPool.run_many

    def counted_run_many(self, jobs, **kw):
        jobs = list(jobs)
        counts["jobs"] += len(jobs)
        t = time.perf_counter()
        try:
            return run_many(self, jobs, **kw)
        finally:
            counts["pool_s"] += time.perf_counter() - t

    SandboxPool.run_many = counted_run_many
    task_cls = _task_class(task)
    score_many = task_cls.score_many

    def counted_score_many(self, problems, texts):
        counts["texts"] += len(texts)
        out = score_many(self, problems, texts)
        per_step.append(dict(counts))
        counts.update(texts=0, jobs=0, pool_s=0.0)
        return out

    task_cls.score_many = counted_score_many
    assert issubclass(task_cls, Task)
    overrides = {
        **MATRIX,
        "task.name": task,
        "workflow.name": workflow,
        "routing.sharing": sharing,
        "train.steps": steps,
        "threads": threads,
        # each task on the model `make run` trains it on (a tree from before the code build: the math testbed)
        **(CODE_CELL if task == "testbed_code" and _has_code_model() else {}),
        **({"model.path": LARGE_MODELS[task]} if size == "large" else {}),
    }
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, {**overrides, "run_dir": str(Path(tmp) / "run")})
        train(cfg)
        rows = [json.loads(line) for line in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
    steps_out = [{p: r[f"time/{p}"] for p in PHASES} | {"reward_mean": r["reward"]} for r in rows]
    out.write_text(json.dumps({"steps": steps_out, "scoring": per_step}))


def _task_class(name: str) -> type:
    import rolecast.tasks  # noqa: F401 - registers the shipped tasks
    from rolecast.tasks.base import TASKS

    entry = TASKS.get(name)
    if not isinstance(entry, type):
        raise SystemExit(f"task {name!r} is not registered as a class in this tree")
    return entry


def _run(tree: Path, python: str, workflow: str, task: str, a: argparse.Namespace, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": str(a.threads)}
    cmd = [python, str(Path(__file__).resolve()), "--worker", f"{workflow}:{task}", "--out", str(out)]
    cmd += ["--steps", str(a.steps), "--threads", str(a.threads), "--sharing", a.sharing, "--size", a.size]
    subprocess.run(cmd, env=env, check=True, cwd=str(tree), stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def _medians(runs: list[dict]) -> dict[str, float]:
    plain = [s for r in runs for s in r["steps"][1:]]
    scoring = [s for r in runs for s in r["scoring"][1:]]
    med = {p: statistics.median(s[p] for s in plain) for p in PHASES}
    for k in ("texts", "jobs", "pool_s"):
        med[k] = statistics.median(s[k] for s in scoring) if scoring else float("nan")
    return med


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", help="a source tree, PATH or PATH=PYTHON (default: this one)")
    ap.add_argument("--workflows", default=",".join(WORKFLOWS))
    ap.add_argument("--sharing", default="shared")
    ap.add_argument("--steps", type=int, default=5, help="training steps per process (the first is a warm-up)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--size", choices=("small", "large"), default="small", help="the testbed builds' size")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        workflow, task = a.worker.split(":")
        worker(workflow, task, a.sharing, a.steps, a.threads, Path(a.out), a.size)
        return 0
    here = Path(__file__).resolve().parent.parent
    trees = []
    for spec in a.tree or [str(here)]:
        path, _, python = spec.partition("=")
        trees.append((Path(path).resolve(), python or sys.executable))
    workflows = [w.strip() for w in a.workflows.split(",") if w.strip()]
    cells = [(ti, t) for ti in range(len(trees)) for t in TASKS]
    results: dict[tuple[int, str, str], list[dict]] = {}
    print(f"{a.size} builds; load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            for wf in workflows:
                order = cells if rnd % 2 == 0 else cells[::-1]
                for ti, task in order:
                    tree, python = trees[ti]
                    out = Path(tmp) / f"{ti}-{wf}-{task}-{rnd}.json"
                    r = _run(tree, python, wf, task, a, out)
                    results.setdefault((ti, wf, task), []).append(r)
                    plain = r["steps"][1:]
                    print(
                        f"round {rnd + 1}, {wf}, {task}, {tree.name}: "
                        + ", ".join(f"{p} {statistics.median(s[p] for s in plain):.2f}" for p in PHASES)
                        + f" s; load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}\n")
    print(
        "| workflow | tree | math step s | code step s | code/math step | code/math without reward "
        "| code rollout / reward / update s | math rollout / reward / update s "
        "| code texts scored / sandbox jobs / pool s per step |"
    )
    print("|---|---|---:|---:|---:|---:|---|---|---|")
    for wf in workflows:
        for ti, (tree, _) in enumerate(trees):
            m = _medians(results[(ti, wf, "testbed")])
            c = _medians(results[(ti, wf, "testbed_code")])
            rest = (c["step"] - c["reward"]) / (m["step"] - m["reward"])  # what grading cannot change
            print(
                f"| {wf} | {tree.name} | {m['step']:.2f} | {c['step']:.2f} | **{c['step'] / m['step']:.2f}x** | "
                f"{rest:.2f}x | {c['rollout']:.2f} / {c['reward']:.2f} / {c['update']:.2f} | "
                f"{m['rollout']:.2f} / {m['reward']:.2f} / {m['update']:.2f} | "
                f"{c['texts']:.0f} / {c['jobs']:.0f} / {c['pool_s']:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
