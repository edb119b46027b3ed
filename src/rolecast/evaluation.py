"""Evaluation: run a workflow on an eval split and report pass@1 (with its standard error) and pass@k."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rolecast.core.episode import Episode
from rolecast.prompts import PromptBook
from rolecast.rollout.engine import Backend, Router, run_episodes
from rolecast.scoring import score_episodes
from rolecast.tasks.base import Problem, Task
from rolecast.workflows.api import WorkflowSpec


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


@dataclass
class EvalResult:
    pass1: float
    stderr: float  # standard error of pass@1 across problems
    pass_k: dict[int, float]
    n_problems: int
    n_samples: int
    episodes: list[Episode]

    def row(self) -> dict[str, Any]:
        return {
            "pass@1": self.pass1,
            "stderr": self.stderr,
            **{f"pass@{k}": v for k, v in self.pass_k.items()},
            "n_problems": self.n_problems,
            "n_samples": self.n_samples,
        }


def evaluate(
    spec: WorkflowSpec,
    problems: Sequence[Problem],
    *,
    task: Task,
    prompts: PromptBook,
    router: Router,
    backend: Backend,
    n_samples: int = 1,
    options: dict[str, Any] | None = None,
    ks: Sequence[int] = (1,),
) -> EvalResult:
    episodes = run_episodes(
        spec, problems, n_samples, task=task, prompts=prompts, router=router, backend=backend, options=options
    )
    score_episodes(episodes, {p.id: p for p in problems}, task)
    per_problem: list[float] = []
    correct: list[int] = []
    for i in range(len(problems)):
        eps = episodes[i * n_samples : (i + 1) * n_samples]
        c = sum(ep.reward >= 1.0 for ep in eps)
        correct.append(c)
        per_problem.append(c / n_samples)
    mean = sum(per_problem) / max(len(per_problem), 1)
    var = sum((x - mean) ** 2 for x in per_problem) / max(len(per_problem) - 1, 1)
    stderr = math.sqrt(var / max(len(per_problem), 1))
    pk = {k: sum(pass_at_k(n_samples, c, k) for c in correct) / max(len(correct), 1) for k in ks if k <= n_samples}
    return EvalResult(mean, stderr, pk, len(problems), n_samples, episodes)


def eval_key(cfg: Any, *, run: str, step: int, tag: str, workflow: str) -> dict[str, Any]:
    """The key of an eval.jsonl row: (run, step, workflow, task, split, sharing, model), plus a tag."""
    return {
        "run": run,
        "step": step,
        "tag": tag,
        "workflow": workflow,
        "task": cfg.task.name,
        "split": cfg.task.eval_split,
        "sharing": cfg.routing.sharing,
        "model": cfg.model.path,
        "protocol": cfg.eval.protocol,
    }


def append_eval_row(path: Path, key: dict[str, Any], result: EvalResult) -> dict[str, Any]:
    row = {**key, **result.row()}
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
    return row
