"""The registration of a sweep's design: `<out>/registration.jsonl`, append-only (every version of the file is
the previous one plus new rows, written whole and atomically, so a reader sees the old file or the new one), one
JSON object per event:

    registered   the sweep's first start, before its first cell: time, git commit and whether the tree was dirty,
                 the machine (core/machine.py: CPU, the vector code torch runs, versions),
                 the matrix's and the plan's path, sha256 and text, whether each was committed as registered,
                 the --set overrides, the training cells; `cells_already_run` lists cells that had run before
                 it (a late registration: every table is then post hoc)
    amended      a later start whose matrix, plan or --set differ from the last registered version: time,
                 commit, dirty, sha256 before and after, the plan fields that changed (`rule_fields`: those a
                 table can rest on), the plan's new `amendments` entries (the user's reasons), the training
                 cells added and removed, and the new texts
    started      every start: time, commit, dirty, the machine, and how many cells it runs
    first_cell   once: when the first cell started, and which

A change to a plan's rules must come with a new entry in its `amendments` list (the date, the reason, the
fields), and earlier entries may not change; otherwise the sweep refuses to start (`DesignChange.refusal`).
Changes to the matrix or to --set are recorded, never refused (cells whose settings changed are refused by the
sweep's own check). The report reads this file (`read_registration`) to say when the plan was registered, list
the amendments and mark the tables that rest on a rule amended after the first run as post hoc.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rolecast.core.errors import ConfigError
from rolecast.core.machine import machine_fingerprint
from rolecast.core.rundir import read_jsonl, write_jsonl
from rolecast.plan.schema import RULE_FIELDS, Plan, is_rule_field, parse_plan, sha256_text

REGISTRATION = "registration.jsonl"
_MISSING = object()


def now_iso() -> str:
    """The local time with its UTC offset, to the second: 2026-12-05T10:00:00+01:00."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


@dataclass(frozen=True)
class Design:
    """What a sweep registers: the matrix and the plan as read (their texts), --set and the training cells."""

    matrix_path: str
    matrix_text: str
    plan_path: str | None = None
    plan_text: str | None = None
    extra_set: dict[str, Any] = field(default_factory=dict)
    cells: tuple[str, ...] = ()

    @property
    def matrix_sha256(self) -> str:
        return sha256_text(self.matrix_text)

    @property
    def plan_sha256(self) -> str | None:
        return None if self.plan_text is None else sha256_text(self.plan_text)


@dataclass(frozen=True)
class GitState:
    commit: str | None  # HEAD of the repository holding the matrix; None outside a git repository
    dirty: bool | None  # tracked files differ from HEAD
    committed: dict[str, bool] = field(default_factory=dict)  # file -> tracked and unchanged since HEAD


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None


def git_state(files: Sequence[str | Path]) -> GitState:
    """The commit and dirtiness of the repository holding the first file, and for each file whether it is
    tracked and unchanged since that commit (so the commit holds it as registered)."""
    if not files:
        return GitState(None, None)
    where = Path(files[0]).resolve().parent
    head = _git(where, "rev-parse", "HEAD")
    if head is None or head.returncode != 0:
        return GitState(None, None)
    status = _git(where, "status", "--porcelain", "--untracked-files=no")
    dirty = None if status is None or status.returncode != 0 else bool(status.stdout.strip())
    committed = {}
    for f in files:
        p = Path(f).resolve()
        tracked = _git(p.parent, "ls-files", "--error-unmatch", "--", p.name)
        same = _git(p.parent, "diff", "--quiet", "HEAD", "--", p.name)
        committed[str(f)] = bool(tracked and tracked.returncode == 0 and same and same.returncode == 0)
    return GitState(head.stdout.strip(), dirty, committed)


def _git_fields(git: GitState) -> dict[str, Any]:
    return {"commit": git.commit, "dirty": git.dirty}


# ---------------------------------------------------------------------------------------------------------
# What changed between two versions of the design


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, path + "."))
        else:
            out[path] = v
    return out


def changed_fields(before: Plan, after: Plan) -> list[str]:
    """The dotted paths whose values differ (lists compare whole: `seeds.fit`, `decisions`), amendments aside."""
    a = _flatten(before.model_dump(mode="json", exclude={"amendments"}))
    b = _flatten(after.model_dump(mode="json", exclude={"amendments"}))
    return sorted(k for k in a.keys() | b.keys() if a.get(k, _MISSING) != b.get(k, _MISSING))


def covers(listed: str, path: str) -> bool:
    """Whether a field named in an amendment or a table's rule list covers `path` (one is a prefix of the other:
    `cliff` covers `cliff.min_drop` and the reverse)."""
    return path == listed or path.startswith(listed + ".") or listed.startswith(path + ".")


@dataclass
class DesignChange:
    matrix: tuple[str, str] | None = None  # sha256 before, after
    plan: tuple[str | None, str | None] | None = None
    plan_fields: list[str] = field(default_factory=list)  # every changed field
    rule_fields: list[str] = field(default_factory=list)  # those a table can rest on
    new_amendments: list[dict[str, Any]] = field(default_factory=list)
    extra_set: tuple[dict[str, Any], dict[str, Any]] | None = None
    cells_added: list[str] = field(default_factory=list)
    cells_removed: list[str] = field(default_factory=list)
    refusal: str | None = None  # why the sweep may not start with this change

    def __bool__(self) -> bool:
        return bool(self.matrix or self.plan or self.extra_set)


def _parse_or_none(text: str | None, source: str) -> Plan | None:
    if text is None:
        return None
    try:
        return parse_plan(text, source)
    except ConfigError:
        return None


def _plan_change(before_text: str | None, after_text: str | None, source: str, change: DesignChange) -> None:
    before, after = _parse_or_none(before_text, source), _parse_or_none(after_text, source)
    if before is None or after is None:  # a plan added or removed (or one today's schema cannot read): every rule
        change.plan_fields = change.rule_fields = list(RULE_FIELDS)
        change.new_amendments = [a.model_dump(mode="json") for a in after.amendments] if after else []
        return
    change.plan_fields = changed_fields(before, after)
    change.rule_fields = [f for f in change.plan_fields if is_rule_field(f)]
    old = [a.model_dump(mode="json") for a in before.amendments]
    new = [a.model_dump(mode="json") for a in after.amendments]
    if new[: len(old)] != old:
        change.refusal = (
            f"{source}: amendments: entries are append-only; an entry registered before was changed or removed "
            "(add a new entry instead)"
        )
        return
    change.new_amendments = new[len(old) :]
    if change.rule_fields and not change.new_amendments:
        change.refusal = (
            f"{source}: rule field(s) {change.rule_fields} changed since the plan was registered, and its "
            "`amendments` list has no new entry; add one: {date: ..., reason: ..., fields: [...]}"
        )
        return
    listed = [f for a in change.new_amendments for f in a.get("fields", [])]
    uncovered = [f for f in change.rule_fields if listed and not any(covers(x, f) for x in listed)]
    if uncovered:
        change.refusal = (
            f"{source}: rule field(s) {uncovered} changed but the new amendment(s) list only {listed} in `fields`"
        )


def compare_designs(before: Design, after: Design) -> DesignChange:
    """What changed from the registered design `before` to `after`."""
    change = DesignChange()
    if before.matrix_sha256 != after.matrix_sha256:
        change.matrix = (before.matrix_sha256, after.matrix_sha256)
        change.cells_added = [c for c in after.cells if c not in before.cells]
        change.cells_removed = [c for c in before.cells if c not in after.cells]
    if before.plan_sha256 != after.plan_sha256:
        change.plan = (before.plan_sha256, after.plan_sha256)
        _plan_change(before.plan_text, after.plan_text, after.plan_path or before.plan_path or "plan", change)
    if before.extra_set != after.extra_set:
        change.extra_set = (before.extra_set, after.extra_set)
    return change


# ---------------------------------------------------------------------------------------------------------
# Writing


def _design_fields(design: Design, git: GitState) -> dict[str, Any]:
    plan = None
    if design.plan_path is not None:
        plan = {
            "path": design.plan_path,
            "sha256": design.plan_sha256,
            "committed": git.committed.get(design.plan_path),
            "text": design.plan_text,
        }
    return {
        "matrix": {
            "path": design.matrix_path,
            "sha256": design.matrix_sha256,
            "committed": git.committed.get(design.matrix_path),
            "text": design.matrix_text,
        },
        "plan": plan,
        "set": design.extra_set,
        "cells": list(design.cells),
    }


def registered_design(rows: Sequence[dict[str, Any]]) -> Design | None:
    """The design as last registered: the `registered` row, updated by every `amended` row after it."""
    current: dict[str, Any] | None = None
    for row in rows:
        if row.get("event") == "registered":
            current = {k: row.get(k) for k in ("matrix", "plan", "set", "cells")}
        elif row.get("event") == "amended" and current is not None:
            for k in ("matrix", "plan", "set", "cells"):
                if k in row.get("now", {}):
                    current[k] = row["now"][k]
    if current is None:
        return None
    matrix, plan = current["matrix"] or {}, current["plan"] or {}
    return Design(
        str(matrix.get("path")),
        str(matrix.get("text", "")),
        plan.get("path"),
        plan.get("text"),
        dict(current.get("set") or {}),
        tuple(current.get("cells") or ()),
    )


def _amended_row(design: Design, change: DesignChange, git: GitState, now: str) -> dict[str, Any]:
    fields = _design_fields(design, git)
    keep = {"cells"} | ({"matrix"} if change.matrix else set()) | ({"plan"} if change.plan else set())
    keep |= {"set"} if change.extra_set else set()
    row: dict[str, Any] = {"event": "amended", "time": now, **_git_fields(git)}
    if change.matrix:
        row["matrix"] = {
            "before": change.matrix[0],
            "after": change.matrix[1],
            "cells_added": change.cells_added,
            "cells_removed": change.cells_removed,
        }
    if change.plan:
        row["plan"] = {
            "before": change.plan[0],
            "after": change.plan[1],
            "fields": change.plan_fields,
            "rule_fields": change.rule_fields,
            "amendments": change.new_amendments,
        }
    if change.extra_set:
        row["set"] = {"before": change.extra_set[0], "after": change.extra_set[1]}
    row["now"] = {k: v for k, v in fields.items() if k in keep}
    return row


def register_start(
    out_dir: str | Path,
    design: Design,
    *,
    jobs: int,
    cells_run: Sequence[str] = (),
    git: GitState | None = None,
    now: Callable[[], str] = now_iso,
    machine: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Record a sweep's start in `<out_dir>/registration.jsonl` before any cell starts: the design on the first
    start (with the cells that had already run, if any), an amendment when the design changed since, and the
    start itself. Raises ConfigError (writing nothing) when the plan's rules changed without a new entry in its
    `amendments`, or an earlier entry was edited. Returns every row."""
    path = Path(out_dir) / REGISTRATION
    try:
        rows = read_jsonl(path)
    except ConfigError as e:
        raise ConfigError(f"{e} (the sweep's registration; it is append-only, restore it from a copy)") from None
    files = [design.matrix_path] + ([design.plan_path] if design.plan_path else [])
    git = git or git_state(files)
    machine = machine if machine is not None else machine_fingerprint()
    t = now()
    new: list[dict[str, Any]] = []
    before = registered_design(rows)
    if before is None:
        new.append(
            {"event": "registered", "time": t, **_git_fields(git), "machine": machine, **_design_fields(design, git)}
            | {"cells_already_run": list(cells_run)}
        )
    else:
        change = compare_designs(before, design)
        if change.refusal:
            raise ConfigError(change.refusal)
        if change:
            new.append(_amended_row(design, change, git, t))
    new.append({"event": "started", "time": t, **_git_fields(git), "machine": machine, "jobs": jobs})
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    write_jsonl(path, [*rows, *new])
    return [*rows, *new]


def record_first_cell(out_dir: str | Path, cell: str, now: Callable[[], str] = now_iso) -> bool:
    """Record when the sweep's first cell started (once; later calls do nothing). True when it wrote."""
    path = Path(out_dir) / REGISTRATION
    rows = read_jsonl(path)
    if any(r.get("event") == "first_cell" for r in rows):
        return False
    write_jsonl(path, [*rows, {"event": "first_cell", "time": now(), "cell": cell}])
    return True


# ---------------------------------------------------------------------------------------------------------
# Reading (the report)


@dataclass
class RegistrationLog:
    """`registration.jsonl` as read by a report: tolerant (a damaged line is skipped and noted)."""

    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    @property
    def machines(self) -> list[dict[str, Any]]:
        """The distinct machines the sweep was registered and started on, in order (rows before the machine was
        recorded, 2026-12-07, have none)."""
        seen: list[dict[str, Any]] = []
        for r in self.rows:
            m = r.get("machine")
            if r.get("event") in ("registered", "started") and isinstance(m, dict) and m not in seen:
                seen.append(m)
        return seen

    def _first(self, event: str) -> tuple[int, dict[str, Any]] | None:
        return next(((i, r) for i, r in enumerate(self.rows) if r.get("event") == event), None)

    @property
    def registered(self) -> dict[str, Any] | None:
        hit = self._first("registered")
        return hit[1] if hit else None

    @property
    def first_cell(self) -> dict[str, Any] | None:
        hit = self._first("first_cell")
        return hit[1] if hit else None

    @property
    def late(self) -> list[str]:
        """The cells that had run before the design was registered (then every table is post hoc)."""
        reg = self.registered
        return list(reg.get("cells_already_run") or []) if reg else []

    @property
    def amendments(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("event") == "amended"]

    def after_first_run(self, row: dict[str, Any]) -> bool:
        """Whether an amendment was recorded after the first cell started (rows are in time order)."""
        if self.late:
            return True
        first = self._first("first_cell")
        index = next((i for i, r in enumerate(self.rows) if r is row), -1)
        return first is not None and index > first[0]

    def plan(self) -> Plan | None:
        """The plan as last registered (None without one, or when its text no longer parses: noted)."""
        design = registered_design(self.rows)
        if design is None or design.plan_text is None:
            return None
        try:
            return parse_plan(design.plan_text, f"{REGISTRATION}: plan {design.plan_path}")
        except ConfigError as e:
            self.notes.append(f"the registered plan cannot be read today: {e}")
            return None

    def posthoc(self, rests_on: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
        """(field, amendment) for every rule field a table rests on (`rests_on`: plan fields, prefixes count)
        that an amendment recorded after the first run changed. A late registration makes every field post hoc."""
        if self.late:
            reg = self.registered or {}
            return [(f, reg) for f in rests_on]
        out = []
        for row in self.amendments:
            if not self.after_first_run(row):
                continue
            for changed in (row.get("plan") or {}).get("rule_fields", []):
                if any(covers(f, changed) for f in rests_on):
                    out.append((changed, row))
        return out

    def posthoc_cells(self) -> dict[str, dict[str, Any]]:
        """Training cells added to the matrix by an amendment recorded after the first run started."""
        out: dict[str, dict[str, Any]] = {}
        for row in self.amendments:
            if self.after_first_run(row):
                for cell in (row.get("matrix") or {}).get("cells_added", []):
                    out.setdefault(cell, row)
        return out


def read_registration(out_dir: str | Path) -> RegistrationLog | None:
    """The registration of the sweep in `out_dir`, or None when it has none (a sweep from before 2026-12, or a
    directory of `rolecast train` runs)."""
    path = Path(out_dir) / REGISTRATION
    if not path.is_file():
        return None
    skipped: list[int] = []
    rows = read_jsonl(path, skipped=skipped)
    log = RegistrationLog(rows)
    if skipped:
        log.notes.append(f"{REGISTRATION}: line(s) {skipped} not valid JSON, skipped")
    return log
