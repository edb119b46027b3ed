"""What the precursors cost (diagnostics.precursors): off vs every step vs every k steps, side by side.

    .venv/bin/python bench/precursors.py            # Orch-Workers isolated, the Lab II pilot's cell, 10 steps

The cell is Lab II's pilot (configs/experiments/lab2_pilot.yaml, arm full-lr1e-3 / isolated): the embedded
testbed recipe (2.5M-parameter model, full fine-tune) with Orch-Workers, one policy per role, 8 problems x group
8 per step, one epoch, lr 1e-3 on the verl cosine; evaluations and checkpoints off so only the step is timed.
Precursors at their defaults: probe sets of 16 per (policy, role) from one base rollout batch of 16 problems, a
canary of 16 held-out problems. Each variant trains its own run from the same seed; the variants alternate in
rounds (off, every 1, every k, then the reverse) so a change in machine load hits all of them alike.

Reported per variant, over the timed steps (the first step of each run, which also checks log-probs, is not
timed): the median and mean seconds of a step (time/step: rollout, reward, update, where the update ratios are
taken) plus its precursor phase (time/precursors: the probe forwards, the canary, the derived precursors), their
ratio to off, and the one-time set-up before step 1 (the probe rollouts and the base measurements) from the run's
wall time. Runs on a shared machine differ by more than the precursors cost, so beside the ratio across runs the
ratio within each run: the precursors change no training metric, so a step with them is the same work as one
without plus what they took, which the run times itself (time/precursors, and time/update_ratios inside
time/update): sum(step + precursor phase) / sum(step - update ratios), over the same steps, under the same load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402


def run(every: int, args: argparse.Namespace, root: Path, tag: str) -> tuple[list[dict], float]:
    from rolecast.config.load import load_config
    from rolecast.training.grpo import train

    run_dir = root / tag
    over = {
        "workflow.name": "orch_workers",
        "routing.sharing": "isolated",
        "model.trainable": "full",
        "train.lr": 1e-3,
        "train.steps": args.steps,
        "train.problems_per_step": 8,
        "train.epochs": 1,
        "train.lr_schedule": "verl_cosine",
        "train.warmup_steps": 1,
        "train.min_lr_ratio": 0.0,
        "eval.at_start": False,
        "eval.at_end": False,
        "logging.progress": False,
        "logging.episodes_every": 0,
        "checkpoint.every": 0,
        "diagnostics.gradients.every": 0,
        "diagnostics.precursors.every": every,
        "run_dir": str(run_dir),
        "threads": args.threads,
        "seed": 100,
    }
    t0 = time.perf_counter()
    train(load_config(None, over))
    wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return rows, wall


def step_seconds(row: dict) -> float:
    return row["time/step"] + row.get("time/precursors", 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10, help="steps per run (the first is not timed)")
    ap.add_argument("--rounds", type=int, default=2, help="runs per variant, alternating variants")
    ap.add_argument("--every-k", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    print(machine())
    print(
        f"Orch-Workers isolated, testbed full fine-tune, 8 problems x group 8, {args.steps} steps per run "
        f"({args.steps - 1} timed), {args.rounds} rounds\n"
    )
    variants = [("off", 0), ("every 1", 1), (f"every {args.every_k}", args.every_k)]
    rows: dict[str, list[dict]] = {name: [] for name, _ in variants}
    walls: dict[str, list[float]] = {name: [] for name, _ in variants}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = variants if r % 2 == 0 else variants[::-1]
            for name, every in order:
                got, wall = run(every, args, Path(tmp), f"{name.replace(' ', '')}-{r}")
                rows[name] += got[1:]
                walls[name].append(wall - sum(step_seconds(x) for x in got))
    med = {n: statistics.median(step_seconds(x) for x in v) for n, v in rows.items()}
    mean = {n: statistics.fmean(step_seconds(x) for x in v) for n, v in rows.items()}
    pre = {n: statistics.fmean(x.get("time/precursors", 0.0) for x in v) for n, v in rows.items()}
    upd = {n: statistics.median(x["time/update"] for x in v) for n, v in rows.items()}
    within = {
        n: sum(step_seconds(x) for x in v) / sum(x["time/step"] - x.get("time/update_ratios", 0.0) for x in v)
        for n, v in rows.items()
    }
    print(f"median / mean s per step (step + precursor phase) over {len(rows['off'])} timed steps each")
    print(
        f"  {'variant':<9} {'median':>7} {'ratio':>6} {'mean':>7} {'ratio':>6} {'within run':>11} {'prec. s':>8} "
        f"{'update s':>9} {'outside steps s':>16}"
    )
    for n in med:
        outside = statistics.median(walls[n])
        print(
            f"  {n:<9} {med[n]:7.2f} {med[n] / med['off']:5.2f}x {mean[n]:7.2f} {mean[n] / mean['off']:5.2f}x "
            f"{within[n]:10.3f}x {pre[n]:8.2f} {upd[n]:9.2f} {outside:16.1f}"
        )
    print(
        "  (outside steps: the run's wall time less its steps' = model load, the precursors' set-up before step 1, "
        "logging; the set-up is the difference to off)"
    )
    print(f"total wall time {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
