"""The report in a real headless Chromium (the distribution's package, driven by Playwright; installed by
scripts/install-browser.sh from `make setup`) in a 1400-px window: a real tiny sweep's report, a directory of
real ad-hoc runs, and a hand-built sweep with failed, half-written and pending cells. The map table has one row
per training cell, every image decoded, no console errors, and the page requested nothing but itself and its
data URIs; and what a person sees: no table wider than the window or cut inside a scroll box, no cell whose
text is cut, no text rotated beyond 45 degrees, every figure shown at its own size (its text as large as it was
drawn) and using the page's width. (The figures' own geometry, labels inside, intervals within [0, 1], legends
off the data, is checked from matplotlib in test_report_figures.py.)"""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest
from report_fixtures import ADHOC_RUNS, adhoc_runs, build_sweep

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


VIEWPORT = {"width": 1400, "height": 900}


def open_report(browser, path: Path) -> dict:
    page = browser.new_page(viewport=VIEWPORT)
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
            const name = el => el.id ? '#' + el.id : el.tagName.toLowerCase() + (el.className ? '.' + el.className : '');
            // what hides content: a box scrolled sideways, a table cell whose text is clipped
            const clipped = Array.from(document.querySelectorAll('body *')).filter(el => {
                const st = getComputedStyle(el);
                return el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0
                    && (['auto', 'scroll', 'hidden'].includes(st.overflowX) || ['TD', 'TH'].includes(el.tagName));
            }).map(el => `${name(el)}: ${el.scrollWidth} px of content in ${el.clientWidth}`);
            // text turned beyond 45 degrees (a CSS transform or vertical writing)
            const rotated = [];
            for (const el of document.querySelectorAll('body *')) {
                const st = getComputedStyle(el);
                if (st.writingMode && !st.writingMode.startsWith('horizontal')) rotated.push(`${name(el)}: ${st.writingMode}`);
                if (st.transform && st.transform !== 'none') {
                    const m = new DOMMatrix(st.transform);
                    const deg = Math.abs(Math.atan2(m.b, m.a) * 180 / Math.PI) % 180;
                    if (Math.min(deg, 180 - deg) > 45) rotated.push(`${name(el)}: rotated ${deg.toFixed(0)} degrees`);
                }
            }
            const view = document.documentElement.clientWidth;
            const content = document.body.clientWidth;
            return {
                rows: Array.from(document.querySelectorAll('#map tbody tr')).map(r => r.dataset.cell),
                numbers: Array.from(document.querySelectorAll('#map tbody tr')).map(r => ({
                    cell: r.dataset.cell, label: r.dataset.label, base: r.dataset.base, final: r.dataset.final})),
                imgs: Array.from(document.images).map(i => {
                    const r = i.getBoundingClientRect();
                    return {complete: i.complete, w: i.naturalWidth, h: i.naturalHeight, rw: r.width, rh: r.height,
                            alt: i.alt};
                }),
                tables: Array.from(document.querySelectorAll('table')).map(t => {
                    const r = t.getBoundingClientRect();
                    return {id: t.id, left: r.left, right: r.right, width: r.width};
                }),
                view: view,
                content: content,
                clipped: clipped,
                rotated: rotated,
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


def layout_problems(info: dict) -> list[str]:
    """What a person would find wrong with the page's layout in a 1400-px window: one line per problem."""
    problems = []
    if info["overflow"] > 0:
        problems.append(f"the page is {info['overflow']} px wider than the window")
    for t in info["tables"]:
        if t["right"] > info["view"] + 0.5 or t["left"] < -0.5:
            problems.append(f"table #{t['id']} reaches {t['right']:.0f} px in a {info['view']}-px window")
    problems += [f"content cut: {c}" for c in info["clipped"]]
    problems += [f"rotated text: {r}" for r in info["rotated"]]
    for i in info["imgs"]:
        if i["rw"] < 0.95 * i["w"]:  # shrunk: its text is smaller than drawn (style.MIN_TEXT_PX)
            problems.append(f"figure {i['alt']!r} drawn {i['w']} px wide is shown at {i['rw']:.0f} px")
        if i["rw"] < 0.9 * info["content"]:
            problems.append(f"figure {i['alt']!r} uses {i['rw']:.0f} of the page's {info['content']} px")
    if info["minText"] < 10:
        problems.append(f"text of {info['minText']} px")
    return problems


def check_what_a_person_sees(info: dict) -> None:
    """Each image drawn at its own aspect ratio (within 2%), the layout problems above absent, and the map
    table's numbers are the text map's (rows matched by their names)."""
    for i in info["imgs"]:
        assert i["rw"] > 0 and i["rh"] > 0, i
        assert abs((i["rw"] / i["rh"]) / (i["w"] / i["h"]) - 1) <= 0.02, i
    assert layout_problems(info) == []
    lines = info["textMap"].splitlines()
    for row in info["numbers"]:
        i = next(k for k, ln in enumerate(lines) if ln.startswith(row["label"] + "  ") or ln == row["label"])
        line = lines[i] if lines[i] != row["label"] else lines[i + 1]  # a long name has a line of its own
        fields = line.removeprefix(row["label"]).split()
        assert fields[0] == row["base"], (line, row)
        if row["final"] != "-":  # a finished cell's final; an unfinished one's "(x@s)" is the last so far
            assert fields[2].strip("()").split("@")[0] == row["final"], (line, row)


def test_hand_built_sweep_with_failed_and_half_written_cells(browser, tmp_path):
    root = build_sweep(tmp_path / "sweep")
    assert main(["report", str(root)]) == 0
    names = {f"testbed-{w}-testbed-{s}-s0" for w in ("single", "voting", "eval_opt") for s in ("shared", "isolated")}
    # a figure for each of the 5 cells with evaluations (accuracy, lr and per-role gradients on one step axis);
    # an overlay per workflow (single, voting, eval_opt) and the gain grid
    check_page(open_report(browser, root / "report.html"), root / "report.html", names, 5 + 3 + 1)


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
    # a figure per cell (the voting cell's with its per-role gradient share and alignment), an overlay per
    # workflow and the gain grid
    check_page(open_report(browser, out / "report.html"), out / "report.html", cells, 2 + 2 + 1)


@pytest.fixture(scope="module")
def adhoc(tmp_path_factory):
    return adhoc_runs(tmp_path_factory.mktemp("adhoc"))


def test_a_directory_of_ad_hoc_train_runs(browser, adhoc, tmp_path):
    """Five `rolecast train` runs side by side (no sweep, all seed 0): all reported done, rows named by the
    config fields that tell them apart, drawn as a person would see them."""
    out = tmp_path / "report.html"
    assert main(["report", str(adhoc), "--out", str(out)]) == 0
    info = open_report(browser, out)
    # a figure per run; an overlay per workflow (single, voting) and the gain grid
    check_page(info, out, set(ADHOC_RUNS), len(ADHOC_RUNS) + 2 + 1)
    assert "incomplete" not in info["textMap"]
    assert {r["label"] for r in info["numbers"]} == {
        "single-shared lr=0.0001",
        "single-shared lr=0.0003",
        "voting-shared every=1 steps=2",
        "voting-isolated every=1 steps=2",
        "voting-isolated every=4 steps=3",
    }


BAD_PAGE = """<!DOCTYPE html><html><head><style>
body{margin:1.5em;max-width:1400px} .scroll{overflow-x:auto;max-width:100%} td{white-space:nowrap}
img{display:block;max-width:min(100%,800px)}</style></head><body>
<div class="scroll"><table id="map"><tr><td>WIDE</td></tr></table></div>
<table id="narrow" style="width:100px;table-layout:fixed"><tr><td style="overflow:hidden">CUT</td></tr></table>
<p style="transform:rotate(90deg)">an alert name, vertical</p>
<img alt="wide" src="data:image/png;base64,PNG1"><img alt="small" src="data:image/png;base64,PNG2">
<pre id="text-map"></pre></body></html>"""


def _png(width: int, height: int) -> str:
    """A blank PNG of the given size, base64 (written with matplotlib, which the report needs anyway)."""
    import base64
    import io

    from matplotlib.figure import Figure

    buf = io.BytesIO()
    Figure(figsize=(width / 100, height / 100), dpi=100).savefig(buf, format="png", dpi=100)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def test_the_layout_checks_find_what_the_old_report_did(browser, tmp_path):
    """The checks fail on a page with the old report's faults: the map wider than the window inside a
    scroll box (its last columns hidden), a cell whose text is cut, text turned 90 degrees, a figure drawn 2650
    px wide squeezed into 800 (its text a third of its size: the old gain grid), and an 800-px figure in a
    1352-px page (the old cell figures)."""
    page = tmp_path / "bad.html"
    html = BAD_PAGE.replace("WIDE", "x" * 400).replace("CUT", "y" * 60)
    page.write_text(html.replace("PNG1", _png(2650, 370)).replace("PNG2", _png(800, 520)))
    problems = layout_problems(open_report(browser, page))
    text = "\n".join(problems)
    assert "table #map reaches" in text and "content cut: div.scroll" in text
    assert "content cut: td" in text  # the narrow table's clipped cell
    assert "rotated text: p: rotated 90 degrees" in text
    assert "figure 'wide' drawn 2650 px wide is shown at 800 px" in text
    assert "figure 'small' uses 800 of the page's 1352 px" in text
