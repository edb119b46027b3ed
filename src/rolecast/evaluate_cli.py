"""`rolecast eval`: the base model, a run's latest checkpoint, or every Nth checkpoint, on an eval split.

Rows are appended to eval.jsonl keyed by (run, step, workflow, task, split, sharing, model); the base
model's row is the reference line for every gain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rolecast.config import RunConfig
from rolecast.evaluation import append_eval_row, eval_key
from rolecast.runtime import build_runtime
from rolecast.train.checkpoint import list_checkpoints, load_checkpoint, restore_policies


def run_eval_command(
    cfg: RunConfig,
    *,
    checkpoint: str | None = None,
    every: int = 0,
    n_samples: int | None = None,
    size: int | None = None,
    out: str | None = None,
) -> int:
    n = n_samples or cfg.eval.n_samples
    rt = build_runtime(cfg, data_splits=[cfg.task.eval_split])
    problems = list(rt.task.problems(cfg.task.eval_split))[: size or cfg.eval.size]
    if not problems:
        raise ValueError(f"task {cfg.task.name!r} has no problems in split {cfg.task.eval_split!r}")
    rt.backend.temperature = cfg.eval.temperature if n == 1 else (cfg.eval.temperature or cfg.rollout.temperature)
    if cfg.eval.top_p is not None and hasattr(rt.backend, "top_p"):  # the evaluation's own nucleus, as in training
        backend: Any = rt.backend
        backend.top_p = cfg.eval.top_p
    if checkpoint:
        run_dir = Path(checkpoint)
        steps = list_checkpoints(run_dir)
        if not steps:
            raise ValueError(f"{run_dir} has no complete checkpoint under {run_dir / 'checkpoints'}")
        chosen = [s for s in steps if s % every == 0] if every else steps[-1:]
        targets: list[tuple[int, Path | None]] = [(s, run_dir) for s in chosen]
    else:
        run_dir = None
        targets = [(0, None)]
    out_path = Path(out) if out else (run_dir / "eval.jsonl" if run_dir else Path("runs") / "eval.jsonl")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    ks = sorted({1, n})
    print(f"{'step':>6} {'pass@1':>8} {'stderr':>7} " + " ".join(f"pass@{k:<3}" for k in ks if k > 1))
    for step, src in targets:
        if src is not None:
            _, state = load_checkpoint(src, step)
            restore_policies(state, rt.policies)
        rt.backend.reseed(cfg.seed)
        res = rt.evaluate(problems, n_samples=n, options=cfg.workflow.options, ks=ks)
        key = eval_key(
            cfg, run=str(src) if src else "base", step=step, tag="checkpoint" if src else "base", workflow=rt.spec.name
        )
        append_eval_row(out_path, key, res)
        print(
            f"{step:>6} {res.pass1:>8.3f} {res.stderr:>7.3f} " + " ".join(f"{res.pass_k[k]:<8.3f}" for k in ks if k > 1)
        )
    print(f"rows appended to {out_path}")
    return 0
