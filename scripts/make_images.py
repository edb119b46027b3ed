"""Regenerate the report's screenshots in docs/images and the cliff lab's figures, from the lab's committed raw
results (docs/experiments/cliff_lab/raw: config, metrics and evaluations of 54 runs; no training), after checking
every figure against the project's plotting style (report/figure_checks.py).

    .venv/bin/python scripts/make_images.py [--raw DIR] [--images docs/images] [--lab docs/experiments/cliff_lab]

Writes, in a 1400 x 900 headless Chromium window (the one test_report_browser.py uses):
  docs/images/report_top.png        the top of the report: the map
  docs/images/report_overlay.png    one figure: Orch-Workers' arms at lr 3e-4 over three seeds, lr under them
  docs/images/report_gain_grid.png  the grid of gains
  docs/images/report_cell.png       one cell: its heading and its figure (accuracy, lr, per-role gradients)
  docs/images/lab_lr1e-4.png, lab_lr3e-4.png   two of the cliff lab's figures as the page shows them
and the cliff lab's figures themselves (docs/experiments/cliff_lab/cliff_lab_*.png, as `cliff_lab.py tables`
draws them). Stops, writing nothing, when a figure has a problem (each is listed).
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import cliff_lab

from rolecast.report import style
from rolecast.report.figure_checks import figure_problems
from rolecast.report.html import cell_figure, collect_map, design_of, row_labels, sweep_figures, write_report

ROOT = Path(__file__).resolve().parents[1]
VIEWPORT = {"width": 1400, "height": 900}
OVERLAY = "overlay orch_workers lr3e-4"
CELL = "testbed-orch_workers-lr3e-4-isolated-roleclock-s0"
LAB_ARMS = ("shared", "isolated", "isolated-roleclock")


def check_report_figures(raw: Path) -> list[str]:
    """Every figure the report draws for these runs, through figure_checks: one line per problem."""
    smap = collect_map(raw)
    problems = [f"{alt}: {p}" for alt, fig in sweep_figures(smap) for p in figure_problems(fig)]
    labels = row_labels(smap.train_cells, design_of(smap.train_cells))
    for c in smap.train_cells:
        drawn = cell_figure(c, labels[c.name])
        if drawn is not None and drawn.figure is not None:
            problems += [f"cell {c.name}: {p}" for p in figure_problems(drawn.figure)]
    return problems


def lab_figures(raw_root: Path) -> dict[str, Any]:
    """File name -> figure of the cliff lab (cliff_lab.tables draws the same)."""
    recs = cliff_lab.records(raw_root)
    interventions = sorted({r["arm"] for r in recs} - set(LAB_ARMS))
    out = {}
    for lr in sorted({r["lr"] for r in recs}, key=cliff_lab._lr_value):
        out[f"cliff_lab_curves_{lr}.png"] = cliff_lab.lab_figure(recs, lr, LAB_ARMS)
        if any(r["lr"] == lr and r["arm"] in interventions for r in recs):
            arms = ("isolated", "isolated-roleclock", *interventions)
            out[f"cliff_lab_interventions_{lr}.png"] = cliff_lab.lab_figure(recs, lr, arms)
    return out


def chromium() -> str:
    exe = os.environ.get("ROLECAST_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        sys.exit("no chromium found (scripts/install-browser.sh installs it; or set ROLECAST_CHROMIUM)")
    return exe


def screenshots(report: Path, lab: dict[str, Path], images: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    shots = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(report.resolve().as_uri(), wait_until="load")
        page.screenshot(path=images / "report_top.png")
        shots.append(images / "report_top.png")
        for name, selector in (
            ("report_overlay.png", f'img[alt="{OVERLAY}"]'),
            ("report_gain_grid.png", 'img[alt="gain grid"]'),
            ("report_cell.png", f"#cell-{CELL}"),
        ):
            page.locator(selector).screenshot(path=images / name)
            shots.append(images / name)
        for name, png in lab.items():  # a lab figure as a page shows it, at its own size
            data = base64.b64encode(png.read_bytes()).decode("ascii")
            page.set_content(
                f'<body style="margin:1.5em"><img src="data:image/png;base64,{data}" style="max-width:100%">'
            )
            page.locator("img").screenshot(path=images / name)
            shots.append(images / name)
        browser.close()
    return shots


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--raw", type=Path, default=ROOT / "docs/experiments/cliff_lab/raw")
    ap.add_argument("--images", type=Path, default=ROOT / "docs/images")
    ap.add_argument("--lab", type=Path, default=ROOT / "docs/experiments/cliff_lab")
    a = ap.parse_args(argv)
    os.chdir(ROOT)  # the report names its directory as given: a path relative to the repository
    sweep = (
        a.raw.resolve().relative_to(ROOT) / "cliff_lab" if a.raw.resolve().is_relative_to(ROOT) else a.raw / "cliff_lab"
    )
    lab = lab_figures(a.raw)
    problems = check_report_figures(sweep)
    problems += [f"{name}: {p}" for name, fig in lab.items() for p in figure_problems(fig)]
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    written = [style.save(fig, a.lab / name) for name, fig in lab.items()]
    with tempfile.TemporaryDirectory(prefix="rolecast-images-") as tmp:
        report, _ = write_report(sweep, Path(tmp) / "report.html")
        shown = {f"lab_{lr}.png": a.lab / f"cliff_lab_curves_{lr}.png" for lr in ("lr1e-4", "lr3e-4")}
        written += screenshots(report, shown, a.images)
    for path in written:
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
