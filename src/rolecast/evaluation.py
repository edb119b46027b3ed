"""Evaluation: run a workflow on an eval split and report pass@1 (with its standard error) and pass@k.

One path for the trainer's periodic evaluations and `rolecast eval`: `eval_plan` resolves how an evaluation
samples from the config's eval section (samples per problem, temperature, top-p, the seed of the step it
evaluates), and `evaluate` passes that sampling with every generate call instead of setting it on the backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rolecast.config.schema import RunConfig
from rolecast.core.episode import Episode
from rolecast.core.errors import ConfigError
from rolecast.core.rundir import append_jsonl
from rolecast.prompts import PromptBook
from rolecast.rollout.engine import Backend, Router, Sampling, run_episodes, step_seed
from rolecast.scoring import score_episodes
from rolecast.tasks.base import Problem, Task
from rolecast.workflows.api import WorkflowSpec

EVAL_SEED_STREAM = 2  # `step_seed`'s stream of evaluations (1: a training step's rollouts)
CANARY_SEED_STREAM = 6  # the precursors' canary (training/precursors.py; 5: the probe set's base rollouts)


@dataclass(frozen=True)
class EvalPlan:
    """How one evaluation runs: samples per problem, the pass@k it reports, how it samples and the seed it starts
    from. `eval_plan` makes it from a config; the defaults are what the backend is set to, from where it is."""

    n_samples: int = 1
    ks: tuple[int, ...] = (1,)
    sampling: Sampling = Sampling()  # a None field: the backend's own (the rollout's)
    seed: int | None = None  # the backend is reseeded with it first (None: it samples on from where it is)


def eval_plan(cfg: RunConfig, step: int, n_samples: int | None = None) -> EvalPlan:
    """The evaluation at training step `step` (0: the base model): eval.n_samples samples per problem (or
    `n_samples`, `rolecast eval --n`) at eval.temperature with eval.top_p (None: rollout.top_p), from the seed of
    (run seed, step), so `rolecast eval` of a checkpoint samples what the trainer's evaluation of that step did.
    pass@k for k in {1, n_samples}."""
    n = n_samples or cfg.eval.n_samples
    if n > 1 and cfg.eval.temperature == 0:  # eval.n_samples itself is checked by the schema (EvalSettings)
        raise ConfigError(
            f"--n {n} at eval.temperature 0 decodes the same greedy answer {n} times; sample with "
            f"--set eval.temperature=0.7 (or eval.protocol: study) or evaluate once"
        )
    return EvalPlan(
        n_samples=n,
        ks=tuple(sorted({1, n})),
        sampling=Sampling(temperature=cfg.eval.temperature, top_p=cfg.eval.top_p),
        seed=step_seed(cfg.seed, step, EVAL_SEED_STREAM),
    )


def canary_plan(cfg: RunConfig, step: int) -> EvalPlan:
    """The precursors' canary evaluation at training step `step` (0: the base): greedy, one sample per problem, so
    its pass@1 is the share of the canary problems answered right, whatever eval.protocol says; seeded from its own
    stream of (run seed, step), which only breaks ties."""
    return EvalPlan(
        n_samples=1, ks=(1,), sampling=Sampling(temperature=0.0), seed=step_seed(cfg.seed, step, CANARY_SEED_STREAM)
    )


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
    plan: EvalPlan,
    *,
    task: Task,
    prompts: PromptBook,
    router: Router,
    backend: Backend,
    options: dict[str, Any] | None = None,
) -> EvalResult:
    """`spec` on `problems` as `plan` says, scored by `task`; the backend's own settings are left as they were."""
    if plan.seed is not None:
        backend.reseed(plan.seed)
    n_samples, ks = plan.n_samples, plan.ks
    episodes = run_episodes(
        spec,
        problems,
        n_samples,
        task=task,
        prompts=prompts,
        router=router,
        backend=backend,
        options=options,
        sampling=plan.sampling,
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


def eval_key(cfg: RunConfig, *, run: str, step: int, tag: str, workflow: str) -> dict[str, Any]:
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
    append_jsonl(path, row)
    return row
