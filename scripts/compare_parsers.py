"""Run rolecast's and the study's parsers/graders on the same inputs and print where they disagree.

Inputs: real role outputs of the embedded testbed model (Voting, Eval-Opt and Orch-Workers sampled on the
testbed's held-out arithmetic problems at temperature 1.0), plus the edge cases of tests/test_study_parsers.py.
Prints markdown (docs/study_recipe.md holds a copy of the output).

    PYTHONPATH=src python scripts/compare_parsers.py [--problems 100] [--seed 0]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from rolecast.config.load import load_config
from rolecast.rewards.math import extract_answer, score_math
from rolecast.rewards.math_study import study_equivalent, study_extract
from rolecast.rollout.engine import run_episodes
from rolecast.runtime import build_runtime
from rolecast.workflows.parsing import (
    parse_choice,
    parse_strategies,
    parse_verdict,
    study_parse_choice,
    study_parse_strategies,
    study_parse_verdict,
)

EDGE: dict[str, list[Any]] = {
    "solver": [
        (r"so \boxed{3+4}", "7"),
        (r"\boxed{17 \times 3}", "51"),
        (r"\boxed 5", "5"),
        (r"\fbox{5}", "5"),
        (r"so \boxed{5", "5"),
        (r"\boxed{2/4}", "1/2"),
        (r"\boxed{\dfrac12}", "0.5"),
    ],
    "aggregator": [
        r"= 24 \boxed{4}",
        r"\boxed{2} on reflection \boxed{3}",
        "I pick solution 3.",
        r"\boxed{Solution 2}",
        "candidate 12 or 3",
        "none",
    ],
    "evaluator": [
        r"\boxed{Correct}",
        r"\boxed{incorrect}",
        "Looks fine to me.",
        r"\boxed{Incorrect} ... actually \boxed{Correct}",
    ],
    "orchestrator": [
        "1. algebra on the equation\n2. a diagram and geometry\n3. small cases",
        "1) algebra on the equation\n2) a diagram and geometry",
        "- algebra on the equation\n- a diagram and geometry\n- small cases first",
        "Strategy 1 - algebra on the equation\nStrategy 2 - a diagram and geometry",
        "STRATEGY 2: geometry\nSTRATEGY 1: algebra\nSTRATEGY 1: algebra",
    ],
}


def role_outputs(problems: int, seed: int) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {"solver": [], "aggregator": [], "evaluator": [], "orchestrator": []}
    for wf in ("voting", "eval_opt", "orch_workers"):
        cfg = load_config(
            None,
            {
                "workflow.name": wf,
                "routing.sharing": "shared",
                "seed": seed,
                "rollout.temperature": 1.0,
                "logging.progress": False,
            },
        )
        rt = build_runtime(cfg)
        probs = list(rt.task.problems("test"))[:problems]
        eps = run_episodes(rt.spec, probs, 1, task=rt.task, prompts=rt.prompts, router=rt.routing, backend=rt.backend)
        gold = {p.id: str(p.reference) for p in probs}
        for ep in eps:
            for t in ep.turns:
                if t.role in ("generator", "worker", "synthesizer"):
                    out["solver"].append((t.text, gold[ep.problem_id]))
                elif t.role in out:
                    out[t.role].append(t.text)
    return out


def disagreements(items: Sequence[Any], a: Callable[[Any], Any], b: Callable[[Any], Any]) -> tuple[int, list[str]]:
    diff = [x for x in items if a(x) != b(x)]
    return len(diff), [f"`{x!r}`: rolecast {a(x)!r}, study {b(x)!r}" for x in diff[:3]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    real = role_outputs(args.problems, args.seed)
    checks = {
        "solver (answer scores 1)": (
            "solver",
            lambda x: score_math(x[0], x[1]).reward == 1.0,
            lambda x: study_extract(x[0]) is not None and study_equivalent(x[1], study_extract(x[0])),
        ),
        "solver (extracted answer)": ("solver", lambda x: extract_answer(x[0]), lambda x: study_extract(x[0])),
        "aggregator (candidate, n=3)": (
            "aggregator",
            lambda x: parse_choice(x, 3) + 1,
            lambda x: study_parse_choice(x, 3) + 1,
        ),
        "evaluator (verdict)": (
            "evaluator",
            lambda x: "correct" if parse_verdict(x) else "incorrect",
            study_parse_verdict,
        ),
        "orchestrator (workers, k=3)": (
            "orchestrator",
            lambda x: len(parse_strategies(x, 3)) or 1,
            lambda x: len(study_parse_strategies(x, 3)),
        ),
    }
    print(
        f"Real role outputs: the embedded testbed model, {args.problems} held-out problems per workflow, "
        f"temperature 1.0, seed {args.seed}.\n"
    )
    print("| decision | real outputs: differ / total | edge cases: differ / total | examples where they differ |")
    print("|---|---|---|---|")
    for name, (role, a, b) in checks.items():
        n_real, ex_real = disagreements(real[role], a, b)
        n_edge, ex_edge = disagreements(EDGE[role], a, b)
        examples = "; ".join((ex_real[:2] + ex_edge[:2])[:3]).replace("|", "\\|").replace("\n", "\\n")
        print(f"| {name} | {n_real} / {len(real[role])} | {n_edge} / {len(EDGE[role])} | {examples} |")


if __name__ == "__main__":
    main()
