"""The report in a real headless Chromium (the distribution's package, driven by Playwright; installed by
scripts/install-browser.sh from `make setup`): a real tiny sweep's report and a hand-built one with failed,
half-written and pending cells. The map table has one row per training cell, every image decoded, no console
errors, and the page requested nothing but itself and its data URIs."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest
from report_fixtures import build_sweep

from rolecast.cli import main

pytest.importorskip("matplotlib", reason="the report's plots need the `plots` extra (make setup installs it)")


def chromium_path() -> str | None:
    env = os.environ.get("ROLECAST_CHROMIUM")
    if env:
        return env if Path(env).is_file() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (the `test` extra; make setup installs it)"
    )
    exe = chromium_path()
    if exe is None:
        pytest.skip("no chromium found (scripts/install-browser.sh installs it with apt; or set ROLECAST_CHROMIUM)")
    with sync_api.sync_playwright() as p:
        # --no-sandbox: Chromium's own sandbox needs user namespaces, which a root CI container may not allow
        b = p.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


def open_report(browser, path: Path) -> dict:
    page = browser.new_page()
    console: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.resolve().as_uri(), wait_until="load")
    info = page.evaluate(
        """() => {
            const textSizes = [];
            const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
            while (walker.nextNode()) {
                const el = walker.currentNode.parentElement;
                if (walker.currentNode.textContent.trim() && el.getClientRects().length)
                    textSizes.push(parseFloat(getComputedStyle(el).fontSize));
            }
            return {
                rows: Array.from(document.querySelectorAll('#map tbody tr')).map(r => r.dataset.cell),
                numbers: Array.from(document.querySelectorAll('#map tbody tr')).map(r => ({
                    cell: r.dataset.cell, base: r.dataset.base, final: r.dataset.final,
                    axes: Array.from(r.cells).slice(1, 6).map(td => td.textContent)})),
                imgs: Array.from(document.images).map(i => {
                    const r = i.getBoundingClientRect();
                    return {complete: i.complete, w: i.naturalWidth, h: i.naturalHeight, rw: r.width, rh: r.height};
                }),
                overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
                minText: Math.min(...textSizes),
                textMap: document.getElementById('text-map').textContent,
                title: document.title,
            };
        }"""
    )
    page.close()
    info["console"] = console
    info["requests"] = requests
    return info


def check_page(info: dict, path: Path, cells: set[str], n_images: int) -> None:
    assert sorted(info["rows"]) == sorted(cells)
    assert len(info["imgs"]) == n_images
    assert all(i["complete"] and i["w"] > 0 and i["h"] > 0 for i in info["imgs"]), info["imgs"]
    assert info["console"] == []
    assert info["requests"] and info["requests"][0] == path.resolve().as_uri()
    assert all(u.startswith("data:") for u in info["requests"][1:]), info["requests"]
    check_what_a_person_sees(info)


def check_what_a_person_sees(info: dict) -> None:
    """Each image drawn at its own aspect ratio (within 2%), nothing wider than the window, no text under
    10 px, and the map table's numbers are the text map's."""
    for i in info["imgs"]:
        assert i["rw"] > 0 and i["rh"] > 0, i
        assert abs((i["rw"] / i["rh"]) / (i["w"] / i["h"]) - 1) <= 0.02, i
    assert info["overflow"] <= 0, f"the page is {info['overflow']} px wider than the window"
    assert info["minText"] >= 10, info["minText"]
    lines = info["textMap"].splitlines()
    for row in info["numbers"]:
        workflow, _, _, sharing, seed = row["axes"]
        label = f"{workflow}-{sharing}" + (f"-s{seed}" if seed not in ("0", "-") else "")
        line = next(ln for ln in lines if ln.split("  ")[0].split("/")[-1] == label)
        fields = line.split()
        assert fields[1] == row["base"], (line, row)
        final = fields[3]
        if row["final"] != "-":  # a finished cell's final; an unfinished one's "(x@s)" is the last so far
            assert final.strip("()").split("@")[0] == row["final"], (line, row)


def test_hand_built_sweep_with_failed_and_half_written_cells(browser, tmp_path):
    root = build_sweep(tmp_path / "sweep")
    assert main(["report", str(root)]) == 0
    names = {f"testbed-{w}-testbed-{s}-s0" for w in ("single", "voting", "eval_opt") for s in ("shared", "isolated")}
    # accuracy for the 5 cells with evaluations, per-role gradients for the one that measured them; the figures:
    # an overlay per workflow (single, voting, eval_opt) and the gain grid
    check_page(open_report(browser, root / "report.html"), root / "report.html", names, 6 + 3 + 1)


def test_real_tiny_sweep_report(browser, tmp_path, capsys):
    """Two cells trained here (single, and voting with per-role gradient diagnostics), their base evaluations,
    the report written by `rolecast sweep --report`."""
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        textwrap.dedent(
            """\
            axes:
              workflow: [single, voting]
            overrides:
              workflow:
                voting: {diagnostics.gradients.every: 1}
            set:
              threads: 1
              train.steps: 2
              # 4 problems and room for the aggregator's derivation: voting steps with something to learn
              train.problems_per_step: 4
              train.group_size: 4
              train.epochs: 1
              rollout.max_new_tokens: 40
              eval.protocol: study
              eval.n_samples: 2
              eval.size: 2
              eval.every: 1
              checkpoint.every: 0
              logging.episodes_every: 1
              logging.progress: false
            """
        )
    )
    out = tmp_path / "sweep"
    assert main(["sweep", str(matrix), "--out", str(out), "--no-progress", "--report"]) == 0
    printed = capsys.readouterr().out
    assert f"report: {out / 'report.html'}" in printed and "evaluation: study T=0.7 x2" in printed
    cells = {"testbed-single-testbed-shared-s0", "testbed-voting-testbed-shared-s0"}
    # an accuracy plot per cell, the voting cell's per-role gradient share and alignment, an overlay per
    # workflow and the gain grid
    check_page(open_report(browser, out / "report.html"), out / "report.html", cells, 3 + 2 + 1)


def test_a_directory_of_plain_train_runs(browser, tmp_path):
    """Two `rolecast train` runs side by side (no sweep): both reported done, drawn as a person would see them."""
    runs = tmp_path / "runs"
    for wf in ("single", "voting"):
        args = ["train", "--workflow", wf, "--steps", "2", "--run-dir", str(runs / wf), "--set", "threads=1"]
        for kv in (
            "train.problems_per_step=2",
            "train.group_size=4",
            "eval.size=4",
            "eval.n_samples=2",
            "rollout.max_new_tokens=40",
            "logging.progress=false",
            "diagnostics.gradients.every=1",
        ):
            args += ["--set", kv]
        assert main(args) == 0
    assert main(["report", str(runs)]) == 0
    info = open_report(browser, runs / "report.html")
    # per run an accuracy plot and a gradient plot (single: the role's norm; voting: shares and alignment);
    # an overlay per workflow and the gain grid
    check_page(info, runs / "report.html", {"single", "voting"}, 2 * 2 + 2 + 1)
    assert "incomplete" not in info["textMap"]
