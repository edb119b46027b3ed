"""Judging roles measured on the testbed model's own workflow rollouts.

`builder.evaluate_roles` shows each role candidates drawn by a noise model. What the map trains on is
different: the candidates a workflow's judging role reads are what the same model just wrote (traces,
slips, truncations, at the map's sampling temperature). The first rebuild's synthesizer beat candidate 1
by 0.20 on the noise model and lost to worker 1 on real rollouts, so both measures are reported.

Each multi-agent workflow runs the held-out arithmetic problems through the real rollout path, and every
number comes from the claims scored by the trainer's own `score_episodes`. Intervals are clustered
(`stats.clustered_*`): a problem's samples, and an episode's several verdicts, are not independent draws. The
cluster is the problem, and on the code task the hidden function (`cluster_of`): its held-out split is 40
functions each shown from two starts, and the two problems of one function share what makes it hard.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rolecast.config.load import load_config
from rolecast.core.episode import AnswerClaim, Episode, PickClaim, Turn, VerdictClaim
from rolecast.evaluation import EvalPlan
from rolecast.rewards.code import score_code_many
from rolecast.rollout.engine import Sampling
from rolecast.runtime import build_runtime
from rolecast.tasks.base import Problem
from rolecast.tasks.testbed import CodeTestbed, extract_program
from rolecast.testbed.stats import clustered_balanced_accuracy, clustered_margin, clustered_rate, rate
from rolecast.testbed.transcripts import boxed_integer, majority_holders

WORKFLOWS = ("eval_opt", "voting", "orch_workers")
CODE_MAX_NEW_TOKENS = 128


def rollout_competence(
    path: str | Path,
    *,
    task: str = "testbed",
    problems: int = 200,
    samples: int | None = None,
    temperature: float = 0.7,
    seed: int = 0,
    threads: int = 1,
    task_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Per workflow: its pass@1 and what its judging role did with the candidates the model itself wrote.

    `task` "testbed_code": the code task's held-out problems (80 of them), every program run in the sandbox by
    the task's own scorer, as training runs it. `samples` per problem: 2 for arithmetic's 200 problems, 4 for
    code's 80 (default), so both measure a few hundred episodes per workflow. `task_options`: the task's own
    (default: the build's own split, `build_split`), recorded in the protocol when any.
    """
    samples = samples if samples is not None else 4 if task == "testbed_code" else 2
    task_options = task_options if task_options is not None else build_split(path)
    out: dict[str, Any] = {
        "protocol": {
            "task": task,
            "problems": problems,
            "samples": samples,
            "temperature": temperature,
            "intervals": "clustered by function" if task == "testbed_code" else "clustered by problem",
            **({"task_options": task_options} if task_options else {}),
        }
    }
    for name in WORKFLOWS:
        episodes, pass1, n_problems = workflow_episodes(
            path, name, task=task, problems=problems, samples=samples, temperature=temperature, seed=seed,
            threads=threads, task_options=task_options,
        )  # fmt: skip
        out["protocol"]["problems"] = n_problems
        out[name] = {
            "n_episodes": len(episodes),
            "pass1": round(pass1, 4),
            **SUMMARIES[name](episodes, task == "testbed_code"),
        }
    return out


def workflow_episodes(
    path: str | Path,
    workflow: str,
    *,
    task: str = "testbed",
    problems: int = 200,
    samples: int = 2,
    temperature: float = 0.7,
    seed: int = 0,
    threads: int = 1,
    task_options: dict[str, Any] | None = None,
) -> tuple[list[Episode], float, int]:
    """One workflow's scored episodes on the first `problems` held-out problems x `samples`, through the real
    rollout path (the trainer's runtime and `score_episodes`); (episodes, pass@1, the number of problems)."""
    pick = build_synthesis(path) == "pick"
    task_options = task_options if task_options is not None else build_split(path)
    cfg = load_config(
        overrides={
            "model.path": str(path),
            "workflow.name": workflow,
            "task.name": task,
            # the code build's roles derive before they decide (configs/testbed_code.yaml)
            **({"rollout.max_new_tokens": CODE_MAX_NEW_TOKENS} if task == "testbed_code" else {}),
            "seed": seed,
            "threads": threads,
            **({"task.options": task_options} if task_options else {}),
            # the contract the build's synthesizer was taught
            **({"workflow.options.synthesis": "pick"} if workflow == "orch_workers" and pick else {}),
        }
    )
    rt = build_runtime(cfg, data_splits=[cfg.task.eval_split])
    probs = list(rt.task.problems(cfg.task.eval_split))[:problems]
    plan = EvalPlan(n_samples=samples, sampling=Sampling(temperature=temperature), seed=seed)
    res = rt.evaluate(probs, plan, options=cfg.workflow.options)
    return list(res.episodes), res.pass1, len(probs)


def cluster_of(problem_id: str) -> str:
    """The unit a rollout interval treats as independent: a code problem's hidden function
    (`testbed_code/<split>/<expr>/<start>` -> `testbed_code/<split>/<expr>`), any other problem itself. Until
    2026-12-08 code intervals were clustered by problem, which counted a function's two starts as independent."""
    return problem_id.rsplit("/", 1)[0] if problem_id.startswith("testbed_code/") else problem_id


def _build_info(path: str | Path) -> dict[str, Any]:
    info = Path(path) / "build_info.json"
    return json.loads(info.read_text()) if info.exists() else {}


def build_synthesis(path: str | Path) -> str:
    """How a testbed build's code synthesizer was taught to decide (build_info.json's `code_synthesis`; "checks"
    for a build that does not record it): "pick" builds run Orch-Workers with `synthesis: pick`."""
    return str(_build_info(path).get("code_synthesis", "checks"))


def build_split(path: str | Path) -> dict[str, Any] | None:
    """The task options that hold out a build's own split: a build made with seed s trains on split s of the
    testbed tasks (`Curriculum(seed)`), so it is measured on split s; None for seed 0, the tasks' default."""
    seed = _build_info(path).get("seed", 0)
    return {"seed": seed} if seed != 0 else None


def _evaluator(episodes: Sequence[Episode], code: bool = False) -> dict[str, Any]:
    """Every verdict on a solution the generator wrote: accept rate and balanced accuracy."""
    judged = [
        (t.claim, cluster_of(ep.problem_id)) for ep in episodes for t in ep.turns if isinstance(t.claim, VerdictClaim)
    ]
    known = [(v, pid) for v, pid in judged if v.reviewed_correct is not None]
    tpr, tnr, balanced, ci = clustered_balanced_accuracy(
        [v.accept for v, _ in known], [bool(v.reviewed_correct) for v, _ in known], [pid for _, pid in known]
    )
    return {
        "n_verdicts": len(judged),
        "accept_rate": rate([v.accept for v, _ in judged])[0],
        "truly_correct": rate([bool(v.reviewed_correct) for v, _ in judged])[0],
        "accepts_correct": round(tpr, 4),
        "rejects_wrong": round(tnr, 4),
        "balanced_accuracy": round(balanced, 4),
        "balanced_accuracy_ci": round(ci, 4),
    }


def _aggregator(episodes: Sequence[Episode], code: bool = False) -> dict[str, Any]:
    """Picks where some voter was right: correct picks vs always voter 1 and vs a random voter."""
    picks = [
        (t.claim, cluster_of(ep.problem_id)) for ep in episodes for t in ep.turns if isinstance(t.claim, PickClaim)
    ]
    has = [(p, p.candidates_correct, pid) for p, pid in picks if p.candidates_correct and any(p.candidates_correct)]
    ids = [pid for _, _, pid in has]
    model = [bool(p.correct) for p, _, _ in has]
    first = [float(flags[0]) for _, flags, _ in has]
    rand = [sum(flags) / len(flags) for _, flags, _ in has]
    acc, ci = clustered_rate(model, ids)
    return {
        "n_with_correct": len(has),
        "accuracy_with_correct": acc,
        "accuracy_with_correct_ci": ci,
        "baseline_first": rate(first)[0],
        "baseline_random": rate(rand)[0],
        "vs_first": clustered_margin(model, first, ids),
        "vs_random": clustered_margin(model, rand, ids),
    }


def _synthesizer(episodes: Sequence[Episode], code: bool = False) -> dict[str, Any]:
    """The synthesizer's answer vs taking worker 1's, episode by episode; and what the workers gave it: how
    often they disagree, each worker position's accuracy, and what a majority vote over them would score
    (ties: worker 1), the ceiling of a synthesizer that only counts votes."""
    synth, first, disagree, majority, ids = [], [], [], [], []
    by_position: dict[int, list[bool]] = {}
    for ep in episodes:
        workers, final = _workers_and_synthesis(ep)
        if workers and final:
            synth.append(bool(final[-1][1].correct))
            ids.append(cluster_of(ep.problem_id))
            first.append(float(bool(workers[0].correct)))
            answers = [program_body(w.text) if code else boxed_integer(w.text) for w in workers]
            disagree.append(len(set(answers)) > 1)
            # a majority vote's pick: the first worker holding the majority answer, else worker 1
            majority.append(bool(workers[(majority_holders(answers) or [0])[0]].correct))
            for i, w in enumerate(workers):
                by_position.setdefault(i + 1, []).append(bool(w.correct))
    acc, ci = clustered_rate(synth, ids)
    return {
        "accuracy": acc,
        "accuracy_ci": ci,
        "baseline_first": rate(first)[0],
        "vs_first": clustered_margin(synth, first, ids),
        "workers_disagree": rate(disagree)[0],
        "worker_accuracy": {str(i): rate(v)[0] for i, v in sorted(by_position.items())},
        "majority_vote": rate(majority)[0],
    }


def _workers_and_synthesis(ep: Episode) -> tuple[list[AnswerClaim], list[tuple[Turn, AnswerClaim | PickClaim]]]:
    """An Orch-Workers episode's worker answers, and its synthesizer turns with their answers (`synthesis: pick`:
    their picks, right when the worker named is; `correct` is None when no worker was), in order."""
    workers = [t.claim for t in ep.turns if t.role == "worker" and isinstance(t.claim, AnswerClaim)]
    synth = [(t, t.claim) for t in ep.turns if t.role == "synthesizer" and isinstance(t.claim, AnswerClaim | PickClaim)]
    return workers, synth


_CHECK_ROW = re.compile(r"(?:^|\s)(\d+):\S*(?:\s(?!\d+:)\S+)*?\s(yes|no)\b")


def checked_worker(text: str) -> int | None:
    """The worker (1-based) a code synthesizer's check rows pass (`1:<check> no 2:<check> yes ...`): the first row
    it said yes to, or None when it said yes to none (then it writes its own program)."""
    for m in _CHECK_ROW.finditer(text):
        if m.group(2) == "yes":
            return int(m.group(1))
    return None


def synthesizer_picks(episodes: Sequence[Episode]) -> dict[str, Any]:
    """A code synthesizer's own answer against what its checks chose, episode by episode: `checked` takes the
    program of the worker its rows said yes to (its own where it said yes to none), the answer a synthesizer
    would give that names a worker and lets the workflow copy its program. Beside them worker 1 and any worker
    right (the ceiling of picking). Margins over worker 1, clustered (`cluster_of`)."""
    own, checked, first, oracle, ids = [], [], [], [], []
    copy_slips = 0
    for ep in episodes:
        workers, synth = _workers_and_synthesis(ep)
        if not (workers and synth):
            continue
        turn, claim = synth[-1]
        s = bool(claim.correct)
        k = checked_worker(turn.text)
        pick = bool(workers[k - 1].correct) if k is not None and 1 <= k <= len(workers) else s
        copy_slips += pick and not s
        own.append(s)
        checked.append(pick)
        first.append(float(bool(workers[0].correct)))
        oracle.append(any(bool(w.correct) for w in workers))
        ids.append(cluster_of(ep.problem_id))
    return {
        "n_episodes": len(own),
        "own": clustered_rate(own, ids),
        "checked": clustered_rate(checked, ids),
        "worker_1": rate(first)[0],
        "any_worker": rate(oracle)[0],
        "own_vs_first": clustered_margin(own, first, ids),
        "checked_vs_first": clustered_margin(checked, first, ids),
        "checked_right_own_wrong": copy_slips,
    }


def shown_check_picks(episodes: Sequence[Episode]) -> dict[str, Any]:
    """The ceiling of a code synthesizer that checks the shown examples, as the testbed's synthesizer is taught to:
    the first worker whose program passes the problem's shown examples when run in the sandbox (worker 1 when none
    does), that is, checks without a slip and a copy without one, against worker 1. What such checks cannot see is
    a program that fits the shown examples and fails the hidden inputs. Margin clustered (`cluster_of`)."""
    rows = [(ep, _workers_and_synthesis(ep)[0]) for ep in episodes]
    rows = [(ep, w) for ep, w in rows if w]
    task = CodeTestbed()  # the task's own asserts and timeout, as training grades a program
    shown = [task.tests(code_problem(ep.problem_id), shown_only=True) for ep, _ in rows]
    texts = [w.text for _, workers in rows for w in workers]
    tests = [t for (_, workers), t in zip(rows, shown, strict=True) for _ in workers]
    passes = iter(s.reward == 1.0 for s in score_code_many(texts, tests))
    picked, first, ids = [], [], []
    for ep, workers in rows:
        ok = [next(passes) for _ in workers]
        k = ok.index(True) if any(ok) else 0
        picked.append(bool(workers[k].correct))
        first.append(float(bool(workers[0].correct)))
        ids.append(cluster_of(ep.problem_id))
    return {"shown_checks": clustered_rate(picked, ids), "shown_checks_vs_first": clustered_margin(picked, first, ids)}


def code_problem(problem_id: str) -> Problem:
    """A testbed_code problem from its id (`testbed_code/<split>/<expr>/<start>`), as the task makes it."""
    _, split, expr, start = problem_id.split("/")
    return CodeTestbed.make_problem(expr, int(start), split)


def code_synthesizer_picks(path: str | Path, threads: int = 1, ceiling: bool = True) -> dict[str, Any]:
    """`synthesizer_picks` of a code build's Orch-Workers episodes under `rollout_competence`'s protocol (the 80
    held-out code problems x 4 samples at T 0.7, its seed), the episodes `rolecast testbed rollouts` measured, and
    with `ceiling` also `shown_check_picks` (one sandbox run per worker program)."""
    episodes, _, _ = workflow_episodes(
        path, "orch_workers", task="testbed_code", problems=80, samples=4, threads=threads
    )
    return synthesizer_picks(episodes) | (shown_check_picks(episodes) if ceiling else {})


def program_body(text: str | None) -> str | None:
    """A code worker's answer for counting agreement: its program, whitespace-normalized, after `def f(x): return`."""
    program = extract_program(text)
    return (
        None if program is None else " ".join(program.removeprefix("def f(x):").strip().removeprefix("return").split())
    )


SUMMARIES = {"eval_opt": _evaluator, "voting": _aggregator, "orch_workers": _synthesizer}
