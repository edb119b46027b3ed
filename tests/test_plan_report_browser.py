"""A report with a registered, amended plan in a real headless Chromium: the registration line, the amendment
with its reason, the post hoc marks and the cliff-type table are on the page, nothing is wider than the window
(long paths and hashes included), and the map's numbers are still the text map's."""

from __future__ import annotations

import pytest
from report_fixtures import build_sweep
from test_report_browser import check_what_a_person_sees, chromium_path, open_report

from rolecast.cli import main
from rolecast.plan.registration import Design, GitState, record_first_cell, register_start

pytest.importorskip("matplotlib", reason="the report's plots need the `plots` extra (make setup installs it)")

PLAN = """\
title: the hand-built sweep's plan
arms: [shared, isolated]
cliff: {min_drop: 0.02}
"""
LONG = "configs/experiments/a_directory_with_a_long_name_for_its_experiment/and_a_subdirectory_too"


@pytest.fixture(scope="module")
def chromium():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the `test` extra)")
    exe = chromium_path()
    if exe is None:
        pytest.skip("no chromium found (scripts/install-browser.sh installs it; or set ROLECAST_CHROMIUM)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


def test_registered_and_amended_plan_in_the_report(chromium, tmp_path):
    root = build_sweep(tmp_path / "sweep")
    git = GitState("0123456789abcdef0123456789abcdef01234567", False, {f"{LONG}/matrix.yaml": True})
    times = iter(f"2026-12-05T10:00:0{i}+00:00" for i in range(1, 10))
    design = Design(f"{LONG}/matrix.yaml", "cells: []\n", f"{LONG}/plan.yaml", PLAN, {}, ("a",))
    register_start(root, design, jobs=6, git=git, now=lambda: next(times))
    record_first_cell(root, "base-testbed-single-testbed", now=lambda: next(times))
    amended = PLAN.replace("0.02", "0.05") + (
        "amendments:\n  - {date: 2026-12-06, fields: [cliff.min_drop], reason: "
        + "'"
        + "a reason long enough to wrap over several lines of the page " * 4
        + "'}\n"
    )
    register_start(
        root,
        Design(design.matrix_path, design.matrix_text, design.plan_path, amended, {}, ("a",)),
        jobs=0,
        git=git,
        now=lambda: next(times),
    )
    assert main(["report", str(root)]) == 0
    path = root / "report.html"
    names = {f"testbed-{w}-testbed-{s}-s0" for w in ("single", "voting", "eval_opt") for s in ("shared", "isolated")}
    info = open_report(chromium, path)
    # what the report tests check of any page (the number of figures is theirs to check)
    assert sorted(info["rows"]) == sorted(names) and info["console"] == []
    assert all(u.startswith("data:") for u in info["requests"][1:]), info["requests"]
    check_what_a_person_sees(info)
    html = path.read_text()
    assert f"plan {LONG}/plan.yaml (sha256 " in html
    assert (
        "registered at 2026-12-05T10:00:01+00:00 (commit 0123456789), first run started at 2026-12-05T10:00:02" in html
    )
    assert "post hoc: rests on cliff.min_drop, amended after the first run (2026-12-05T10:00:03+00:00)" in html
    assert 'id="cliff-types"' in html and "fall after gain" in html
    assert "map: post hoc: rests on cliff.min_drop" in info["textMap"]
