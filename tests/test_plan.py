"""Registered analysis plans (plan/schema.py, plan/registration.py): the typed plan and its errors naming the
field, the append-only registration of a design and its amendments, and what a report reads back from it
(post hoc fields and cells). The sweep that registers a real matrix and restarts after its plan changed is in
tests/test_sweep.py."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest
import torch

from rolecast.core.errors import ConfigError
from rolecast.core.machine import machine_fingerprint
from rolecast.plan.registration import (
    REGISTRATION,
    Design,
    GitState,
    changed_fields,
    git_state,
    read_registration,
    record_first_cell,
    register_start,
)
from rolecast.plan.schema import RULE_FIELDS, is_plan_field, load_plan, parse_plan
from rolecast.report.plan_view import cliff_label, cliff_type_rows, posthoc_note, registration_lines

PLAN = """\
title: pilot
arms: [shared, isolated]
reference_arm: shared
cliff: {min_drop: 0.02, counts_as_cliff: [fall_after_gain]}
seeds: {fit: [0, 1], held_out: [2, 3]}
predictors:
  use: [{name: probe_ll_change}, {name: head_update_ratio, subject: pol}]
decisions:
  - {name: iso_falls_more, claim: "Isolated falls more often", measure: cliff_rate,
     compare: [isolated, shared], test: mcnemar_exact}
"""


def test_a_plan_reads_into_its_typed_fields(tmp_path):
    p = tmp_path / "plan.yaml"
    p.write_text(PLAN)
    pf = load_plan(p)
    assert pf.sha256 == hashlib.sha256(PLAN.encode()).hexdigest() and pf.text == PLAN
    plan = pf.plan
    assert plan.cliff.curve_kwargs() == {
        "alpha": 0.05,
        "min_points": 2,
        "min_drop": 0.02,
        "gain_alpha": 0.05,
        "decline_alpha": 0.05,
    }
    assert (plan.seeds.fit, plan.seeds.held_out) == ([0, 1], [2, 3])
    assert [(u.name, u.subject) for u in plan.predictors.use] == [
        ("probe_ll_change", "any"),
        ("head_update_ratio", "pol"),
    ]
    assert plan.predictors.thresholds.max_false_alarms_per_calm_run == 0.1
    assert plan.decisions[0].test == "mcnemar_exact" and plan.decisions[0].alternative == "greater"
    assert set(RULE_FIELDS) == {"arms", "reference_arm", "cliff", "seeds", "predictors", "decisions"}
    assert is_plan_field("cliff.min_drop") and is_plan_field("predictors.targets.recall")
    assert not is_plan_field("cliff.mindrop") and not is_plan_field("seeds.fit.x")


@pytest.mark.parametrize(
    "change, needle",
    [
        ("cliff: {min_drop: 0.02, alpha: 1.5}", r"cliff\.alpha: Input should be less than 1 \(got 1\.5\)"),
        ("cliff: {counts_as_cliff: [none]}", r"cliff\.counts_as_cliff: 'none' is the absence of a fall"),
        ("cliff: {counts_as_cliff: [cliff]}", r"cliff\.counts_as_cliff\.0: Input should be 'fall_after_gain'"),
        ("seeds: {fit: [0, 1], held_out: [1, 2]}", r"seeds: seeds \[1\] are in both fit and held_out"),
        ("cliff: {min_dop: 0.02}", r"cliff\.min_dop: unknown field \(misspelled\?\)"),
        (
            "predictors: {use: [{name: probe_likelihood}]}",
            r"predictors\.use\.0: unknown precursor 'probe_likelihood'.*known: \[",
        ),
        (
            "predictors: {use: [{name: 'no_such_module_x:fn'}]}",
            r"predictors\.use\.0: .*needs its direction",
        ),
        ("reference_arm: isolated-kl", r"reference_arm 'isolated-kl' is not among arms"),
    ],
)
def test_bad_plans_name_the_field(tmp_path, change, needle):
    key = change.split(":", 1)[0]
    lines = [ln for ln in PLAN.splitlines() if not ln.startswith(key + ":")]
    text = "\n".join(lines) + "\n" + change + "\n"
    if key == "predictors":  # drop the original block's continuation line too
        text = text.replace("  use: [{name: probe_ll_change}, {name: head_update_ratio, subject: pol}]\n", "")
    with pytest.raises(ConfigError, match=needle):
        parse_plan(text, "plan.yaml")


def test_a_decision_needs_a_test_that_fits_its_measure():
    bad = PLAN.replace("test: mcnemar_exact", "test: paired_t")
    with pytest.raises(ConfigError, match=r"decisions\.0: measure cliff_rate is tested with fisher_exact or mcnemar"):
        parse_plan(bad, "plan.yaml")
    with pytest.raises(ConfigError, match=r"plan\.yaml: \(top level\)|plan\.yaml: title: Field required"):
        parse_plan("cliff: {}\n", "plan.yaml")


# --- registration -----------------------------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.t = 0

    def __call__(self):
        self.t += 1
        return f"2026-12-05T10:00:{self.t:02d}+00:00"


GIT = GitState("abc123", False, {"m.yaml": True, "plan.yaml": True})


def design(plan_text=PLAN, matrix_text="cells: []\n", cells=("c-s0", "c-s1"), extra_set=None):
    return Design("m.yaml", matrix_text, "plan.yaml", plan_text, dict(extra_set or {}), tuple(cells))


def test_registration_then_an_amendment_with_its_reason(tmp_path):
    clock = Clock()
    rows = register_start(tmp_path, design(), jobs=4, git=GIT, now=clock)
    assert [r["event"] for r in rows] == ["registered", "started"]
    reg = rows[0]
    assert reg["time"] == "2026-12-05T10:00:01+00:00" and (reg["commit"], reg["dirty"]) == ("abc123", False)
    assert reg["plan"]["sha256"] == hashlib.sha256(PLAN.encode()).hexdigest() and reg["plan"]["text"] == PLAN
    assert reg["matrix"]["sha256"] == hashlib.sha256(b"cells: []\n").hexdigest()
    assert reg["cells_already_run"] == [] and reg["cells"] == ["c-s0", "c-s1"]
    here = machine_fingerprint()  # the machine is recorded at registration and at every start
    assert rows[0]["machine"] == rows[1]["machine"] == here
    assert (
        here["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability() and here["torch"] == torch.__version__
    )
    assert record_first_cell(tmp_path, "c-s0", now=clock) and not record_first_cell(tmp_path, "c-s1", now=clock)

    # the same design again: only the start is recorded
    rows = register_start(tmp_path, design(), jobs=1, git=GIT, now=clock, machine={"cpu": "another"})
    assert [r["event"] for r in rows] == ["registered", "started", "first_cell", "started"]
    assert rows[-1]["machine"] == {"cpu": "another"} and rows[0]["machine"] == here  # each start its own

    # a rule changed without an amendment entry: refused, nothing written
    before = (tmp_path / REGISTRATION).read_bytes()
    changed = PLAN.replace("min_drop: 0.02", "min_drop: 0.05")
    with pytest.raises(ConfigError, match=r"rule field\(s\) \['cliff\.min_drop'\] changed .* no new entry"):
        register_start(tmp_path, design(changed), jobs=1, git=GIT, now=clock)
    assert (tmp_path / REGISTRATION).read_bytes() == before

    # with its amendment: recorded, with hashes before and after, the changed field and the reason
    amended = changed + 'amendments:\n  - {date: 2026-12-06, reason: "0.02 is inside one SE", fields: [cliff]}\n'
    rows = register_start(tmp_path, design(amended), jobs=1, git=GIT, now=clock)
    assert (tmp_path / REGISTRATION).read_bytes().startswith(before)  # append-only
    row = rows[-2]
    assert row["event"] == "amended" and "matrix" not in row
    assert row["plan"]["before"] == hashlib.sha256(PLAN.encode()).hexdigest()
    assert row["plan"]["after"] == hashlib.sha256(amended.encode()).hexdigest()
    assert row["plan"]["fields"] == row["plan"]["rule_fields"] == ["cliff.min_drop"]
    assert row["plan"]["amendments"] == [{"date": "2026-12-06", "reason": "0.02 is inside one SE", "fields": ["cliff"]}]

    # an earlier amendment edited: refused (append-only)
    edited = amended.replace("inside one SE", "noise")
    with pytest.raises(ConfigError, match="append-only"):
        register_start(tmp_path, design(edited), jobs=1, git=GIT, now=clock)

    # what a report reads back: the amendment came after the first cell started, so a table resting on `cliff`
    # is post hoc and one resting on `seeds` is not
    log = read_registration(tmp_path)
    assert log.first_cell["cell"] == "c-s0" and log.after_first_run(log.amendments[0])
    assert [f for f, _ in log.posthoc(["cliff"])] == ["cliff.min_drop"] and log.posthoc(["seeds"]) == []
    assert log.plan().cliff.min_drop == 0.05
    note = posthoc_note(log, "map")
    # (the refused start read the clock too: the amendment is the fifth reading)
    assert note == "post hoc: rests on cliff.min_drop, amended after the first run (2026-12-05T10:00:05+00:00)"
    assert posthoc_note(log, "sharing") is None
    lines = registration_lines(log)
    assert lines[0].startswith("plan plan.yaml (sha256 ") and lines[0].endswith(
        "registered at 2026-12-05T10:00:01+00:00 (commit abc123), first run started at 2026-12-05T10:00:02+00:00"
    )
    assert any("amendment 1 at 2026-12-05T10:00:05+00:00" in ln and "fields cliff.min_drop" in ln for ln in lines)
    assert "    reason (2026-12-06) [cliff]: 0.02 is inside one SE" in lines
    assert log.machines == [here, {"cpu": "another"}]  # registered here, started once on "another"
    mine = f"{here['cpu']} ({here['torch_cpu_capability']}, torch {here['torch']})"
    assert f"  started on 2 machines: {mine}; another (?, torch ?)" in lines


def test_an_amendment_listing_other_fields_than_those_changed_is_refused(tmp_path):
    register_start(tmp_path, design(), jobs=1, git=GIT, now=Clock())
    changed = PLAN.replace("held_out: [2, 3]", "held_out: [2, 3, 4]")
    changed += "amendments:\n  - {date: 2026-12-06, reason: r, fields: [cliff.min_drop]}\n"
    with pytest.raises(ConfigError, match=r"\['seeds\.held_out'\] changed but the new amendment\(s\) list only"):
        register_start(tmp_path, design(changed), jobs=1, git=GIT, now=Clock())


def test_an_amendment_before_the_first_run_is_not_post_hoc_and_matrix_changes_are_recorded(tmp_path):
    clock = Clock()
    register_start(tmp_path, design(), jobs=0, git=GIT, now=clock)
    changed = PLAN.replace("min_drop: 0.02", "min_drop: 0.03") + "amendments:\n  - {date: d, reason: r}\n"
    register_start(tmp_path, design(changed), jobs=2, git=GIT, now=clock)  # no cell has started yet
    record_first_cell(tmp_path, "c-s0", now=clock)
    rows = register_start(
        tmp_path, design(changed, "cells: [x]\n", cells=("c-s0", "c-s1", "c-s2")), jobs=1, git=GIT, now=clock
    )
    m = rows[-2]
    assert m["event"] == "amended" and m["matrix"]["cells_added"] == ["c-s2"] and m["matrix"]["cells_removed"] == []
    log = read_registration(tmp_path)
    assert not log.after_first_run(log.amendments[0]) and log.after_first_run(log.amendments[1])
    assert log.posthoc(["cliff"]) == []  # amended before the first run
    assert list(log.posthoc_cells()) == ["c-s2"]
    assert posthoc_note(log, "sharing") == "post hoc: holds cells added after the first run: c-s2"
    assert posthoc_note(log, "sharing", cells=["c-s0"]) is None


def test_a_late_registration_makes_every_table_post_hoc(tmp_path):
    register_start(tmp_path, design(), jobs=3, cells_run=["c-s0"], git=GIT, now=Clock())
    log = read_registration(tmp_path)
    assert log.late == ["c-s0"] and posthoc_note(log, "figures").startswith("post hoc: the design was registered after")
    assert any("registered after 1 cell(s) had run" in ln for ln in registration_lines(log))


def test_a_damaged_registration_stops_the_sweep_and_the_report_notes_it(tmp_path):
    register_start(tmp_path, design(), jobs=1, git=GIT, now=Clock())
    path = tmp_path / REGISTRATION
    path.write_text('{"event": "registered"\n' + path.read_text())
    with pytest.raises(ConfigError, match="registration.jsonl:1: not a JSON line"):
        register_start(tmp_path, design(), jobs=1, git=GIT, now=Clock())
    log = read_registration(tmp_path)
    assert log.notes and "line(s) [1]" in log.notes[0] and log.registered is not None


def test_changed_fields_compare_lists_whole_and_ignore_amendments():
    a = parse_plan(PLAN, "p")
    b = parse_plan(PLAN.replace("fit: [0, 1]", "fit: [0, 1, 5]") + "notes: later\n", "p")
    assert changed_fields(a, b) == ["notes", "seeds.fit"]


def test_git_state_of_a_committed_and_a_changed_file(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / "plan.yaml").write_text(PLAN)
    (tmp_path / "m.yaml").write_text("cells: []\n")
    git("add", "plan.yaml", "m.yaml")
    git("commit", "-qm", "plan")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    plan, matrix = str(tmp_path / "plan.yaml"), str(tmp_path / "m.yaml")
    state = git_state([matrix, plan])
    assert state == GitState(head.strip(), False, {matrix: True, plan: True})
    (tmp_path / "plan.yaml").write_text(PLAN + "notes: x\n")
    state = git_state([matrix, plan])
    assert state.dirty is True and state.committed == {matrix: True, plan: False}
    (tmp_path / "new.yaml").write_text("x")
    assert git_state([str(tmp_path / "new.yaml")]).committed == {str(tmp_path / "new.yaml"): False}
    outside = tmp_path.parent / f"{tmp_path.name}-no-git"
    outside.mkdir()
    (outside / "m.yaml").write_text("x")
    assert git_state([str(outside / "m.yaml")]).commit in (None, state.commit)  # tmp may itself sit in a repo


def test_cliff_labels_and_type_counts_with_exact_intervals():
    assert cliff_label("fall_after_gain", 20) == "cliff@20" and cliff_label("decline_from_base", None) == "decline"
    assert cliff_label("decline_from_base", 10) == "decline@10" and cliff_label("none", None) == "no"
    assert cliff_label(None, 15) == "yes@15"  # no base: the fall rule alone
    runs = (
        [({"workflow": "v", "sharing": "isolated"}, "fall_after_gain")] * 2
        + [
            ({"workflow": "v", "sharing": "isolated"}, "none"),
            ({"workflow": "v", "sharing": "shared"}, "decline_from_base"),
            ({"workflow": "v", "sharing": "shared"}, None),  # no base: not counted
        ]
        + [({"workflow": "v", "sharing": "shared"}, "none")] * 3
    )
    rows = {r["arm"]: r for r in cliff_type_rows(runs)}
    assert rows["isolated"]["n"] == 3 and rows["shared"]["n"] == 4
    # 2 of 3: Clopper-Pearson [0.0943, 0.9916]; 1 of 4: [1 - 0.975^(1/4), 0.8059] = [0.0063, 0.8059]
    assert rows["isolated"]["counts"][0] == "2/3 [0.09, 0.99]"
    assert rows["shared"]["counts"][1] == "1/4 [0.01, 0.81]" and rows["shared"]["counts"][3] == "3/4 [0.19, 0.99]"
    assert json.dumps(rows)  # plain data for the template


def test_a_plan_added_or_removed_after_registration_changes_every_rule(tmp_path):
    clock = Clock()
    no_plan = Design("m.yaml", "cells: []\n", None, None, {}, ("c-s0",))
    rows = register_start(tmp_path, no_plan, jobs=1, git=GIT, now=clock)
    assert rows[0]["plan"] is None
    record_first_cell(tmp_path, "c-s0", now=clock)
    rows = register_start(tmp_path, design(cells=("c-s0",)), jobs=0, git=GIT, now=clock)
    assert rows[-2]["plan"]["before"] is None and rows[-2]["plan"]["rule_fields"] == list(RULE_FIELDS)
    rows = register_start(tmp_path, no_plan, jobs=0, git=GIT, now=clock)
    assert rows[-2]["plan"]["after"] is None and rows[-2]["plan"]["rule_fields"] == list(RULE_FIELDS)
    log = read_registration(tmp_path)
    assert {f for f, _ in log.posthoc(["cliff"])} == {"cliff"} and log.plan() is None
    assert registration_lines(log)[0].startswith("design (no analysis plan) registered at")
