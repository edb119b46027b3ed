"""What a report says about a sweep's registered design (plan/registration.py) and its cliff types: when the plan
was registered and the first run started, the amendments, which tables rest on a rule amended after the first
run (post hoc), and the cliff types per arm with exact intervals. Plain lines and rows: html.py puts them in the
page and the text map.

Which plan fields each table of the report rests on (`TABLE_RULES`; docs/sweep.md says the same):
- the map: `cliff` (its cliff and cliff-type columns are the plan's cliff rule);
- cliff types per arm: `cliff`;
- Shared vs Isolated and the figures: no plan field (fixed rules of the report: every arm against the
  reference, paired by seed). Every table is post hoc when the registration came after cells had run, and each
  names the cells an amendment added after the first run started.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from rolecast.diagnostics.curves import CLIFF_TYPES
from rolecast.diagnostics.intervals import proportion
from rolecast.plan.registration import RegistrationLog

TABLE_RULES: dict[str, tuple[str, ...]] = {
    "map": ("cliff",),
    "cliff_types": ("cliff",),
    "sharing": (),
    "figures": (),
}

# the text map's cliff column (short: the map must fit 120 columns) and the HTML map's cliff-type column
CLIFF_TYPE_SHORT = {
    "fall_after_gain": "cliff",
    "decline_from_base": "decline",
    "fall_without_gain": "fall?",
    "none": "no",
}
CLIFF_TYPE_NAMES = {
    "fall_after_gain": "fall after gain",
    "decline_from_base": "decline from base",
    "fall_without_gain": "fall without gain",
    "none": "none",
}
CLIFF_TYPE_LEGEND = (
    "cliff@s: a fall from step s after a significant gain (the study's cliff); decline: no significant gain, the",
    "  end significantly below the base (@s: the fall rule fired too); fall?@s: the fall rule without either",
)

CLIFF_TYPE_HTML_LEGEND = (
    "fall after gain: some evaluation significantly above the base, then the terminal-fall rule (the study's "
    "cliff); decline from base: no evaluation significantly above the base, and the final significantly below "
    'it; fall without gain: the terminal-fall rule without either (docs/analysis.md, "Cliff types").'
)


def _sha(sha: Any) -> str:
    return str(sha)[:12] if sha else "-"


def _commit(row: dict[str, Any]) -> str:
    commit = row.get("commit")
    if not commit:
        return "no git commit"
    dirty = row.get("dirty")
    return f"commit {str(commit)[:10]}" + (", uncommitted changes" if dirty else "")


def registration_lines(log: RegistrationLog) -> list[str]:
    """The header: "plan P registered at T (commit C), first run started at T'", then each amendment."""
    reg = log.registered
    if reg is None:
        return ["registration.jsonl holds no registration"] + log.notes
    plan = reg.get("plan")
    matrix = reg.get("matrix") or {}
    what = f"plan {plan.get('path')} (sha256 {_sha(plan.get('sha256'))})" if plan else "design (no analysis plan)"
    first = log.first_cell
    started = f"first run started at {first.get('time')}" if first else "no run started yet"
    lines = [f"{what} registered at {reg.get('time')} ({_commit(reg)}), {started}"]
    lines.append(f"  matrix {matrix.get('path')} (sha256 {_sha(matrix.get('sha256'))})")
    machines = log.machines
    if len(machines) == 1:
        lines.append(f"  machine: {_machine(machines[0])}")
    elif machines:  # the same cells can round differently on another CPU (core/machine.py)
        lines.append(f"  started on {len(machines)} machines: " + "; ".join(map(_machine, machines)))
    uncommitted = [name for name, entry in (("plan", plan), ("matrix", matrix)) if entry and not entry.get("committed")]
    if uncommitted and reg.get("commit"):
        lines.append(f"  not committed as registered: {', '.join(uncommitted)} (git cannot show it preceded the runs)")
    if log.late:
        lines.append(f"  registered after {len(log.late)} cell(s) had run: every table below is post hoc")
    for i, row in enumerate(log.amendments, 1):
        lines.append(f"  amendment {i} at {row.get('time')} ({_commit(row)}), {_when(log, row)}: {_amended(row)}")
        for entry in (row.get("plan") or {}).get("amendments", []):
            fields = f" [{', '.join(entry.get('fields', []))}]" if entry.get("fields") else ""
            lines.append(f"    reason ({entry.get('date')}){fields}: {entry.get('reason')}")
    return lines + log.notes


def _machine(m: dict[str, Any]) -> str:
    return f"{m.get('cpu', '?')} ({m.get('torch_cpu_capability', '?')}, torch {m.get('torch', '?')})"


def _when(log: RegistrationLog, row: dict[str, Any]) -> str:
    return "after the first run started" if log.after_first_run(row) else "before the first run"


def _amended(row: dict[str, Any]) -> str:
    parts = []
    plan = row.get("plan")
    if plan:
        fields = plan.get("fields") or []
        parts.append(
            f"plan {_sha(plan.get('before'))} -> {_sha(plan.get('after'))}"
            + (f", fields {', '.join(fields)}" if fields else ", no field changed")
        )
    matrix = row.get("matrix")
    if matrix:
        added, removed = matrix.get("cells_added") or [], matrix.get("cells_removed") or []
        parts.append(
            f"matrix {_sha(matrix.get('before'))} -> {_sha(matrix.get('after'))}"
            + (f", cells added {added}" if added else "")
            + (f", cells removed {removed}" if removed else "")
        )
    if row.get("set"):
        parts.append(f"--set {row['set'].get('before')} -> {row['set'].get('after')}")
    return "; ".join(parts) or "?"


def posthoc_note(log: RegistrationLog | None, table: str, cells: Sequence[str] | None = None) -> str | None:
    """Why `table` is post hoc, or None: the rules it rests on that an amendment after the first run changed
    (or a late registration), and the cells in it (`cells`; None: every cell) that such an amendment added."""
    if log is None or log.registered is None:
        return None
    if log.late:
        return "post hoc: the design was registered after cells had run"
    parts = []
    amended = log.posthoc(TABLE_RULES.get(table, ()))
    if amended:
        fields = sorted({f for f, _ in amended})
        times = sorted({str(row.get("time")) for _, row in amended})
        parts.append(f"rests on {', '.join(fields)}, amended after the first run ({', '.join(times)})")
    added = log.posthoc_cells()
    shown = sorted(c for c in added if cells is None or c in cells)
    if shown:
        parts.append(f"holds cells added after the first run: {', '.join(shown)}")
    return "post hoc: " + "; ".join(parts) if parts else None


def cliff_label(cliff_type: str | None, cliff_step: int | None) -> str:
    """The text map's cliff column: the type's short name, with the cliff's first step when the fall rule
    fired (`decline@10`, `gain>fall@20`, `decline` for a decline without the fall rule, `no`)."""
    if cliff_type is None:
        return f"yes@{cliff_step}" if cliff_step is not None else "no"
    short = CLIFF_TYPE_SHORT.get(cliff_type, cliff_type)
    return f"{short}@{cliff_step}" if cliff_step is not None and cliff_type != "none" else short


def cliff_type_rows(runs: Sequence[tuple[dict[str, Any], str | None]]) -> list[dict[str, Any]]:
    """Per (workflow, task, model) and arm (sharing), over finished runs with a type: how many runs, and for each
    type (in `CLIFF_TYPES` order) k/n with its exact 95% (Clopper-Pearson) interval. `runs`: (axes, cliff type) of each finished cell."""
    groups: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    for axes, kind in runs:
        if kind is not None:
            wf, task, model, arm = (str(axes.get(k)) for k in ("workflow", "task", "model", "sharing"))
            groups[(wf, task, model, arm)].append(kind)
    rows = []
    for (wf, task, model, arm), kinds in sorted(groups.items()):
        counts = []  # in CLIFF_TYPES order
        for t in CLIFF_TYPES:
            p = proportion(kinds.count(t), len(kinds))
            counts.append(f"{p.k}/{p.n} [{p.low:.2f}, {p.high:.2f}]")
        rows.append({"workflow": wf, "task": task, "model": model, "arm": arm, "n": len(kinds), "counts": counts})
    return rows
