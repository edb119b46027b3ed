"""Side-by-side tables of a role-dynamics sweep (docs/experiments/role_dynamics.md) from its run directories.

    python scripts/role_dynamics_table.py runs/role_dynamics [--plot accuracy.png]

Reads each training cell's metrics.jsonl and, where `rolecast analyze` has run, analysis/summary.json; prints
Markdown. Means are over the diagnosed steps; "first"/"last" are the means of the first and last 5 steps.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from rolecast.core.metric_keys import (
    GRAD,
    UPDATE,
    grad_key,
    grad_role_key,
    parse_named_key,
    parse_policy_key,
    parse_policy_role_key,
    policy_key,
    update_key,
)
from rolecast.core.rundir import SUMMARY, RunPaths, read_jsonl
from rolecast.report.runfiles import sweep_base_rows

WINDOW = 5
STATS = ("share", "amplification", "instance_cos", "persistence")  # per role, beside its gradient norm


def rows(path: Path) -> list[dict[str, Any]]:
    return read_jsonl(path)


def series(metrics: list[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in metrics if isinstance(r.get(key), (int, float))]


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def three(xs: list[float]) -> str:
    """mean (first 5 -> last 5)"""
    return f"{mean(xs):.2f} ({mean(xs[:WINDOW]):.2f} → {mean(xs[-WINDOW:]):.2f})" if xs else "–"


def fmt(point: dict[str, Any], z: float) -> str:
    return f"{point['value']:.3f} ± {z * point['se']:.3f}"


def interval(d: dict[str, Any] | None) -> str:
    return f"{d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]" if d else "–"


def cell_label(d: Path) -> str:
    return d.name.removeprefix("testbed-").replace("-testbed-", " ").removesuffix("-s0")


def main(out: Path) -> None:
    cells = sorted(d for d in out.iterdir() if d.is_dir() and not d.name.startswith(("base-", ".")))
    print("| cell | policy/role | grad norm | share | amplification | instance cos | persistence |")
    print("|---|---|---|---|---|---|---|")
    for d in cells:
        m = rows(RunPaths(d).metrics)
        norms = {
            k: g for r in m for k in r if (g := parse_policy_role_key(k)) and g.family == GRAD and g.stat == "norm"
        }
        for k, g in sorted(norms.items(), key=lambda kv: kv[0]):
            stats = {s: three(series(m, grad_role_key(g.pid, g.role, s))) for s in STATS}
            print(
                f"| {cell_label(d)} | {g.subject} | {three(series(m, k))} | {stats['share']} "
                f"| {stats['amplification']} | {stats['instance_cos']} | {stats['persistence']} |"
            )
    print()
    print("| cell | policy | update size | drift at end | capture index | capture role (steps) | lr |")
    print("|---|---|---|---|---|---|---|")
    for d in cells:
        m = rows(RunPaths(d).metrics)
        pids = sorted(
            {p.pid for r in m for k in r if (p := parse_policy_key(k)) and p.family == UPDATE and p.stat == "size"}
        )
        for pid in pids:
            drift = series(m, update_key(pid, "drift"))
            holder = grad_key(pid, "capture_role")
            holders = Counter(r.get(holder) for r in m if r.get(holder))
            lr = series(m, policy_key(pid, "lr"))
            print(
                f"| {cell_label(d)} | {pid} | {three(series(m, update_key(pid, 'size')))} "
                f"| {drift[-1] if drift else float('nan'):.2f} | {three(series(m, grad_key(pid, 'capture_index')))} "
                f"| {', '.join(f'{r} ({n})' for r, n in holders.most_common()) or '–'} "
                f"| {lr[0] if lr else float('nan'):g} |"
            )
    print()
    print(
        "| cell | train reward | base | peak (step) | final | final − base [95%] | final − peak [95%] | cliff "
        "| warnings (steps fired) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for d in cells:
        m = rows(RunPaths(d).metrics)
        fired = Counter(s for r in m for k in r if (s := parse_named_key(k, "warn")) is not None)
        warn = ", ".join(f"{k} ({n})" for k, n in sorted(fired.items())) or "none"
        s_path = RunPaths(d).analysis / SUMMARY
        base = peak = final = gain = drop = cliff = "–"
        if s_path.exists():
            c = json.loads(s_path.read_text())["curve"]
            if c:
                z = c["rule"]["interval_z"]
                base = fmt(c["base"], z) if c["base"] else "–"
                peak, final = f"{fmt(c['peak'], z)} ({c['peak']['step']})", fmt(c["final"], z)
                drop, gain = interval(c["final_vs_peak"]), interval(c["gain"])
                cliff = f"yes, from step {c['cliff']['step']}" if c["cliff"] else "no"
        print(
            f"| {cell_label(d)} | {three(series(m, 'reward'))} | {base} | {peak} | {final} | {gain} | {drop} | {cliff} "
            f"| {warn} |"
        )


def plot(out: Path, path: Path) -> None:
    """Every cell's held-out pass@1 (with 1.96-SE bars, cut at [0, 1]) on one figure in the project's style
    (report/style.py): Voting left, Orch-Workers right, each column's legend under it."""
    from rolecast.report import style

    cells = sorted(d for d in out.iterdir() if d.is_dir() and not d.name.startswith(("base-", ".")))
    workflows = [wf for wf in ("voting", "orch_workers") if any(f"-{wf}-" in d.name for d in cells)]
    with style.fonts():
        fig, columns = style.grid([1.6], len(workflows), extra=1.6)
        steps: list[int] = []
        for (ax,), wf in zip(columns, workflows, strict=True):
            for d in cells:
                if f"-{wf}-" not in d.name:
                    continue
                evals = rows(RunPaths(d).eval())
                if not any(r.get("tag") == "base" for r in evals):
                    evals += sweep_base_rows(d)[0]  # the sweep measured the base once, in the group's base cell
                pts = sorted((r["step"], r["pass@1"], r["stderr"]) for r in evals)
                steps += [p[0] for p in pts]
                style.errorbars(
                    ax,
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    [1.96 * p[2] for p in pts],
                    marker="o",
                    capsize=3,
                    label=cell_label(d).removeprefix(wf + " "),
                )
            ax.set_title(wf, fontsize=style.FONT)
            style.bound(ax)
            style.legend_outside(ax, below=True)
        for (ax,) in columns:
            style.step_axis([ax], min(steps, default=0), max(steps, default=1))
        style.ylabel(columns[0][0], "held-out pass@1 (greedy)")
        style.align(fig)
    style.save(fig, path)


if __name__ == "__main__":
    args = sys.argv[1:]
    out = Path(args[0] if args and not args[0].startswith("--") else "runs/role_dynamics")
    if "--plot" in args:
        plot(out, Path(args[args.index("--plot") + 1]))
    else:
        main(out)
