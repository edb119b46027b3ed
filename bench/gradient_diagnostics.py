"""What gradient diagnostics cost: plain steps vs diagnostics every step vs every k steps, side by side.

    .venv/bin/python bench/gradient_diagnostics.py                 # voting, isolated and shared, testbed model

The embedded testbed recipe (trained 2.5M-parameter model, full fine-tuning, 2 epochs per step) with the
Voting workflow, smaller batches so the whole comparison stays within a few minutes. For each routing, each
variant trains its own short run from the same seed; the variants alternate in rounds (plain, every 1,
every k, then again) so a change in machine load hits all of them alike. Reported per variant: median
seconds per training step and per update phase (rollout and reward excluded) over the timed steps (the first
step of each run, which also checks log-probs, is not timed), and the ratio to plain.

A diagnosed step differs from a plain one in its update only: each agent instance's rows are micro-batched
on their own (a prompt shared by the three voters runs once per voter instead of once), each instance's
gradient is copied into a flat vector, their Gram matrix gives the statistics, and each optimizer step's
|delta theta| is measured. Rollouts and rewards are the same work either way.
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


def run(sharing: str, every: int, args: argparse.Namespace, root: Path, tag: str) -> list[dict]:
    from rolecast.config.load import load_config
    from rolecast.training.grpo import train

    run_dir = root / f"{sharing}-{tag}"
    over = {
        "workflow.name": args.workflow,
        "routing.sharing": sharing,
        "train.steps": args.steps,
        "train.problems_per_step": args.problems,
        "train.group_size": args.group,
        "rollout.max_new_tokens": args.max_new_tokens,
        "eval.at_start": False,
        "eval.at_end": False,
        "logging.progress": False,
        "logging.episodes_every": 0,
        "checkpoint.every": 0,
        "run_dir": str(run_dir),
        "diagnostics.gradients.every": every,
        "threads": args.threads,
    }
    train(load_config(None, over))
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return rows[1:]  # the first step also runs the log-prob check


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workflow", default="voting")
    ap.add_argument("--sharing", nargs="+", default=["isolated", "shared"])
    ap.add_argument("--steps", type=int, default=4, help="steps per run (the first is not timed)")
    ap.add_argument("--rounds", type=int, default=2, help="runs per variant, alternating variants")
    ap.add_argument("--every-k", type=int, default=4)
    ap.add_argument("--problems", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    print(machine())
    print(
        f"workflow {args.workflow}, testbed recipe (full fine-tuning, 2 epochs), {args.problems} problems x group "
        f"{args.group}, {args.steps} steps per run ({args.steps - 1} timed), {args.rounds} rounds\n"
    )
    variants = [("plain", 0), ("every 1", 1), (f"every {args.every_k}", args.every_k)]
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for sharing in args.sharing:
            rows: dict[str, list[dict]] = {name: [] for name, _ in variants}
            for r in range(args.rounds):
                order = variants if r % 2 == 0 else variants[::-1]
                for name, every in order:
                    rows[name] += run(sharing, every, args, Path(tmp), f"{name.replace(' ', '')}-{r}")
            step = {n: statistics.median(x["time/step"] for x in v) for n, v in rows.items()}
            upd = {n: statistics.median(x["time/update"] for x in v) for n, v in rows.items()}
            diag_upd = [
                x["time/update"] for x in rows[f"every {args.every_k}"] if any(k.startswith("grad/") for k in x)
            ]
            print(f"{args.workflow}, {sharing}: median s/step (update s) over {len(rows['plain'])} timed steps each")
            print(f"  {'variant':<10} {'s/step':>8} {'ratio':>7} {'update s':>9} {'ratio':>7}")
            for n in step:
                print(
                    f"  {n:<10} {step[n]:8.3f} {step[n] / step['plain']:6.2f}x {upd[n]:9.3f} "
                    f"{upd[n] / upd['plain']:6.2f}x"
                )
            if diag_upd:
                print(
                    f"  (every {args.every_k}: its diagnosed steps' updates took median "
                    f"{statistics.median(diag_upd):.3f} s)"
                )
            keys = sorted(k for k in rows["every 1"][-1] if k.startswith(("grad/", "update/")))
            print(
                f"  {len(keys)} grad/ and update/ metrics per diagnosed step, e.g. "
                + ", ".join(
                    f"{k}={_fmt(rows['every 1'][-1][k])}" for k in keys if k.endswith(("/share", "/amplification"))
                )
            )
            print()
    print(f"total wall time {time.perf_counter() - t_start:.0f} s")


def _fmt(v: object) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


if __name__ == "__main__":
    main()
