"""Continuing the shipped code builds at a decaying rate: does it bring their judging roles to issue 36's bars?

Exploratory and post hoc (2026-12-07): every recipe below was chosen after seeing the shipped builds miss the bars,
and each was measured on the same 80 held-out problems that measure the shipped builds (`rolecast testbed
rollouts`' protocol), so reading the best of them as a new build's figure would be tuning on the test set. Results
and what they say: docs/testbed.md, "Continuing the code builds".

    python scripts/code_build_probes.py build A --out /tmp/probeA   # one recipe (small: ~10 min, large: ~16-30 min)
    python scripts/code_build_probes.py table /tmp/probeA /tmp/probeB ...

Each recipe starts from the shipped code build of its size (`init_from`), trains `steps` batches of 32 on code only
with the role mix given (no solver-only phase), the rate warmed up over 30 steps and then a cosine to 0
(`decay=True`), the judges' decision tokens at the shipped weight, and then measures every role as the shipped
builds were measured (build_info.json's `roles` and `rollouts`). `table` adds what the synthesizer's own check rows
chose (`synthesizer_picks`: what a synthesizer that names a worker would score).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from rolecast.policies.shipped import default_path
from rolecast.testbed.builder import build
from rolecast.testbed.rollouts import code_synthesizer_picks
from rolecast.testbed.stats import margin_text

ALL_ROLES = {"solve": 1.0, "work": 1.5, "evaluate": 3.0, "aggregate": 1.5, "refine": 0.5, "synthesize": 4.0}


@dataclass(frozen=True)
class Recipe:
    size: str
    role_weights: dict[str, float]
    code_synthesis: str = "checks"
    steps: int = 300
    lr: float = 3e-4
    threads: int = 1  # the probes ran two at a time on the 2 cores; a build's bytes depend on its thread count
    note: str = ""


RECIPES = {
    "A": Recipe("small", {"synthesize": 3.0, "evaluate": 2.0, "aggregate": 1.0}, note="judges only"),
    "B": Recipe("small", {**ALL_ROLES, "evaluate": 2.0, "orchestrate": 0.25}, note="every role"),
    "C": Recipe("small", {**ALL_ROLES, "orchestrate": 0.25}, "agreement", note="every role"),
    "L1": Recipe("large", {**ALL_ROLES, "orchestrate": 0.25}, threads=2, note="every role"),
    "L2": Recipe("large", {**ALL_ROLES, "orchestrate": 0.25}, "agreement", threads=2, note="every role"),
    "L3": Recipe("large", {"synthesize": 3.0, "evaluate": 2.0, "aggregate": 1.0}, note="judges only"),
    # the synthesizer names a worker (Orch-Workers' `synthesis: pick`), otherwise A and L3 (2026-12-08)
    "AP": Recipe("small", {"synthesize": 3.0, "evaluate": 2.0, "aggregate": 1.0}, "pick", note="judges only"),
    "L3P": Recipe("large", {"synthesize": 3.0, "evaluate": 2.0, "aggregate": 1.0}, "pick", note="judges only"),
    # AP with the evaluator weighed above the pick rows: on split 1 AP's evaluator drifted into them (2026-12-08)
    "APE": Recipe("small", {"synthesize": 3.0, "evaluate": 5.0, "aggregate": 1.0}, "pick", note="judges, evaluator 5"),
}


def build_recipe(name: str, out: str, seed: int = 0, init_from: Path | None = None) -> None:
    """Recipe `name` continued from the shipped code build of its size, or from `init_from` (a code build of
    `seed`: another seed holds out another split of the code task's functions, so its rollouts are measured on
    problems no recipe was chosen on)."""
    r = RECIPES[name]
    build(
        out,
        seed=seed,
        size=r.size,
        kind="code",
        init_from=init_from or default_path(r.size, "code"),
        steps=r.steps,
        lr=r.lr,
        solver_steps=0,
        role_weights=r.role_weights,
        decay=True,
        code_synthesis=r.code_synthesis,
        threads=r.threads,
        eval_every=0,
    )
    info = json.loads((Path(out) / "build_info.json").read_text())
    info["probe_recipe"] = name
    (Path(out) / "build_info.json").write_text(json.dumps(info, indent=1) + "\n")


def row(path: Path, threads: int) -> str:
    info = json.loads((path / "build_info.json").read_text())
    ro = info["rollouts"]
    ev, vo, ow = ro["eval_opt"], ro["voting"], ro["orch_workers"]
    picks = code_synthesizer_picks(path, threads, ceiling=False)
    name = info.get("probe_recipe") or f"shipped {info['size']}"
    recipe = RECIPES.get(name)
    how = f"{recipe.note} ({recipe.code_synthesis})" if recipe else f"{info['steps']} steps, constant rate"
    workers = " / ".join(f"{v:.2f}" for v in ow["worker_accuracy"].values())
    return (
        f"| {name} | {info['size']} | {how} | {info['roles']['testbed_code/solve']['accuracy']:.2f} | "
        f"{ev['balanced_accuracy']:.3f} ± {ev['balanced_accuracy_ci']:.3f} | {margin_text(vo['vs_first'], 3)} | "
        f"{margin_text(ow['vs_first'], 3)} | {margin_text(picks['checked_vs_first'], 3)} | {workers} | "
        f"{ow['majority_vote']:.3f} | "
        f"{ev['pass1']:.2f} / {vo['pass1']:.2f} / {ow['pass1']:.2f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="action", required=True)
    b = sub.add_parser("build")
    b.add_argument("recipe", choices=list(RECIPES))
    b.add_argument("--out", required=True)
    b.add_argument("--seed", type=int, default=0, help="the build's seed, and the code task's split")
    b.add_argument("--init-from", type=Path, default=None, help="a code build of that seed (default: the shipped)")
    t = sub.add_parser("table")
    t.add_argument("dirs", nargs="+", type=Path)
    t.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.action == "build":
        build_recipe(a.recipe, a.out, a.seed, a.init_from)
        return
    print(
        "| recipe | size | what it trains | solver | evaluator balanced accuracy | aggregator - voter 1 "
        "| synthesizer - worker 1 | its checks' pick - worker 1 | workers 1 / 2 / 3 right | majority vote "
        "| pass@1 Eval-Opt / Voting / Orch-Workers |"
    )
    print("|---|---|---|---:|---|---|---|---|---|---:|---|")
    for d in a.dirs:
        print(row(d, a.threads), flush=True)


if __name__ == "__main__":
    main()
