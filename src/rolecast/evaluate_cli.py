"""`rolecast eval`: the base model, a run's latest checkpoint, or every Nth checkpoint, on an eval split.

Rows are appended to eval.jsonl keyed by (run, step, workflow, task, split, sharing, model); the base
model's row is the reference line for every gain. Each step is evaluated as the trainer evaluates it
(`evaluation.eval_plan`: the same sampling, from the same seed of (run seed, step)).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rolecast.config import RunConfig
from rolecast.core.errors import CheckpointError
from rolecast.core.rundir import EVAL
from rolecast.core.writable import check_writable_file
from rolecast.evaluation import EvalResult, append_eval_row, eval_key, eval_plan
from rolecast.runtime import build_runtime
from rolecast.training.checkpoint import list_checkpoints, load_checkpoint, restore_policies


def _targets(checkpoint: str | None, every: int) -> list[tuple[int, Path | None]]:
    """(step, run directory) of each checkpoint to evaluate; [(0, None)] for the base model. A CheckpointError
    (one line) when the run has none, or none at a multiple of `every`."""
    if not checkpoint:
        return [(0, None)]
    run_dir = Path(checkpoint)
    steps = list_checkpoints(run_dir)
    if not steps:
        raise CheckpointError(
            f"--checkpoint {run_dir}: no complete checkpoint under {run_dir / 'checkpoints'} (the run stopped "
            f"before writing one); to evaluate the base model, leave out --checkpoint"
        )
    chosen = [s for s in steps if s % every == 0] if every else steps[-1:]
    if not chosen:
        raise CheckpointError(
            f"--every {every}: no checkpoint of {run_dir} is at a multiple of {every} (it has {steps})"
        )
    return [(s, run_dir) for s in chosen]


def evaluate_steps(
    cfg: RunConfig,
    *,
    checkpoint: str | None = None,
    every: int = 0,
    n_samples: int | None = None,
    size: int | None = None,
    out: str | None = None,
    echo: Callable[[str], None] = print,
) -> list[EvalResult]:
    """Evaluate the base model (no `checkpoint`) or the checkpoints of the run directory `checkpoint`, append a
    row per step to `out` (default: the run's eval.jsonl, or runs/eval.jsonl) and return the results."""
    # what can be wrong with the arguments is found before the model loads
    targets = _targets(checkpoint, every)
    run_dir = Path(checkpoint) if checkpoint else None
    out_path = Path(out) if out else (run_dir or Path("runs")) / EVAL
    what = f"--out {out_path}" if out else str(out_path)
    check_writable_file(out_path, what, "the file to append the rows to", EVAL)
    rt = build_runtime(cfg, data_splits=[cfg.task.eval_split])
    problems = list(rt.task.problems(cfg.task.eval_split))[: size or cfg.eval.size]
    if not problems:
        raise ValueError(f"task {cfg.task.name!r} has no problems in split {cfg.task.eval_split!r}")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    ks = eval_plan(cfg, 0, n_samples).ks
    echo(f"{'step':>6} {'pass@1':>8} {'± 1 SE':>7} " + " ".join(f"pass@{k:<3}" for k in ks if k > 1))
    results = []
    for step, src in targets:
        if src is not None:
            _, state = load_checkpoint(src, step)
            restore_policies(state, rt.policies)
        res = rt.evaluate(problems, eval_plan(cfg, step, n_samples), options=cfg.workflow.options)
        key = eval_key(
            cfg, run=str(src) if src else "base", step=step, tag="checkpoint" if src else "base", workflow=rt.spec.name
        )
        append_eval_row(out_path, key, res)
        echo(
            f"{step:>6} {res.pass1:>8.3f} {res.stderr:>7.3f} " + " ".join(f"{res.pass_k[k]:<8.3f}" for k in ks if k > 1)
        )
        results.append(res)
    echo(f"rows appended to {out_path}")
    return results
