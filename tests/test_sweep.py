"""`rolecast sweep`: matrix expansion and overrides, bad input rejected at load, failing cells recorded while
the others finish, kill-and-rerun resuming to the same results as an uninterrupted sweep, the process pool
and the Ray executor. Cells train the embedded testbed for 2-3 tiny steps on one thread."""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from rolecast.cli import main
from rolecast.sweep import LocalExecutor, MatrixError, PoolExecutor, cell_summary, executors, load_matrix, run_sweep
from rolecast.sweep.cell import CellJob
from rolecast.training.checkpoint import latest_step, load_checkpoint

SRC = Path(__file__).resolve().parents[1] / "src"

# small enough for a few seconds per cell on one loaded core
TINY = """\
set:
  threads: 1
  train.steps: {steps}
  train.problems_per_step: 2
  train.group_size: 4
  train.epochs: 1
  rollout.max_new_tokens: 8
  eval.size: 2
  checkpoint.every: 1
  checkpoint.keep_last: 2
  logging.episodes_every: 0
  logging.progress: false
"""


def write(tmp_path: Path, text: str, name: str = "matrix.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


# ---------------------------------------------------------------------------------------------------------
# Expansion


def test_cartesian_product_names_overrides_and_base_evaluations(tmp_path):
    p = write(
        tmp_path,
        """\
        axes:
          workflow: [single, voting]
          sharing: [shared, isolated]
          seed: [0, 1]
        overrides:
          workflow:
            voting: {workflow.options.n: 2, train.group_size: 3}
          sharing:
            isolated: {train.lr: 0.001}
        set: {train.steps: 7, train.group_size: 5}
        """,
    )
    m = load_matrix(p, out=tmp_path / "out")
    train = [c.name for c in m.train_cells]
    assert train == [
        "testbed-single-testbed-shared-s0",
        "testbed-single-testbed-shared-s1",
        "testbed-single-testbed-isolated-s0",
        "testbed-single-testbed-isolated-s1",
        "testbed-voting-testbed-shared-s0",
        "testbed-voting-testbed-shared-s1",
        "testbed-voting-testbed-isolated-s0",
        "testbed-voting-testbed-isolated-s1",
    ]
    # one base evaluation per (workflow, task, model, seed): each seed's cells get a base evaluated with their seed
    assert [c.name for c in m.cells if c.kind == "base_eval"] == [
        "base-testbed-single-testbed-s0",
        "base-testbed-single-testbed-s1",
        "base-testbed-voting-testbed-s0",
        "base-testbed-voting-testbed-s1",
    ]
    for c in m.train_cells:
        cfg = c.config
        assert cfg.run_dir == str(tmp_path / "out" / c.name)
        assert (cfg.workflow.name, cfg.routing.sharing, cfg.seed) == (
            c.axes["workflow"],
            c.axes["sharing"],
            c.axes["seed"],
        )
        assert cfg.train.steps == 7  # set
        # the per-value override beats `set`; other values keep `set` / the base config
        assert cfg.train.group_size == (3 if c.axes["workflow"] == "voting" else 5)
        assert cfg.workflow.options == ({"n": 2} if c.axes["workflow"] == "voting" else {})
        assert cfg.train.lr == (0.001 if c.axes["sharing"] == "isolated" else 1e-4)  # testbed.yaml's lr
        assert cfg.eval.at_start is False and cfg.eval.at_end is True  # the base cell gives the start number
        assert c.base_cell == f"base-testbed-{c.axes['workflow']}-testbed-s{c.axes['seed']}"
        assert m.cell(c.base_cell).config.seed == c.config.seed  # so the base is evaluated with the cell's seed
    base = m.cell("base-testbed-voting-testbed-s1").config
    assert (base.train.steps, base.eval.at_start, base.eval.at_end, base.seed) == (0, True, False, 1)
    assert base.workflow.options == {"n": 2}
    assert base.run_dir == str(tmp_path / "out" / "base-testbed-voting-testbed-s1")
    assert m.cell("base-testbed-voting-testbed-s1").axes == {
        "workflow": "voting",
        "task": "testbed",
        "model": "testbed",
        "seed": 1,
    }


def test_explicit_cells_labels_and_no_base_eval(tmp_path):
    p = write(
        tmp_path,
        """\
        cells:
          - {workflow: eval_opt, sharing: isolated, seed: 3, set: {train.steps: 2}}
          - {task: arith}
        overrides:
          task:
            arith: {task.name: testbed, eval.size: 9}
        base_eval: false
        out: OUTDIR
        """.replace("OUTDIR", str(tmp_path / "o")),
    )
    m = load_matrix(p)
    assert [c.name for c in m.cells] == ["testbed-eval_opt-testbed-isolated-s3", "arith-single-testbed-shared-s0"]
    a, b = (c.config for c in m.cells)
    assert (a.workflow.name, a.routing.sharing, a.seed, a.train.steps, a.eval.at_start) == (
        "eval_opt",
        "isolated",
        3,
        2,
        True,
    )
    assert (b.task.name, b.eval.size, b.train.steps) == ("testbed", 9, 60)  # a label mapped to a task
    assert m.out == tmp_path / "o" and all(c.base_cell is None for c in m.cells)


# ---------------------------------------------------------------------------------------------------------
# Bad input: one clear error at load, naming the file, the axis or field, and the value


@pytest.mark.parametrize(
    "body,needles",
    [
        ("axes: {workflow: [single, debate_club]}\n", ["axes.workflow", "debate_club", "unknown workflow"]),
        ("axes: {task: [testbed, gsm9k]}\n", ["axes.task", "gsm9k", "unknown task"]),
        ("axes: {sharing: [shared, pooled]}\n", ["axes.sharing", "pooled"]),
        ("axes: {workflow: []}\n", ["axes.workflow", "empty"]),
        (
            "axes: {workflow: [voting]}\noverrides: {workflow: {voting: {train.lernrate: 0.1}}}\n",
            ["train.lernrate", "unknown field", "overrides.workflow.voting"],
        ),
        (
            "axes: {workflow: [voting]}\noverrides: {workflow: {voting: {workflow.options.voters: 3}}}\n",
            ["voters", "overrides.workflow.voting", "workflow=voting"],
        ),
        ("set: {train.steps: many}\n", ["train.steps", "many"]),
        (
            "axes: {workflow: [single]}\noverrides: {workflow: {votin: {train.steps: 1}}}\n",
            ["overrides.workflow.votin", "not a value of axis workflow"],
        ),
        ("set: {workflow.name: voting}\n", ["set", "workflow.name", "axes.workflow"]),
        ("axes: {seed: [0]}\ncells: [{seed: 1}]\n", ["either `axes`", "not both"]),
        ("axes: {colour: [red]}\n", ["axes.colour", "unknown field"]),
    ],
)
def test_bad_matrix_is_rejected_at_load(tmp_path, body, needles):
    p = write(tmp_path, body)
    with pytest.raises(MatrixError) as e:
        load_matrix(p, out=tmp_path / "out")
    msg = str(e.value)
    assert str(p) in msg, msg
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_cells_for_another_machine_list_here_and_fail_only_when_they_run(tmp_path, capsys):
    """The device and the model path are the running machine's to provide: a matrix of `cuda` cells, one with a
    model path this machine lacks, loads and lists here; the dry run marks each cell that cannot run here, and
    running them records each failed, naming the field and the machine, without starting it."""
    if torch.cuda.is_available():
        pytest.skip("a machine without CUDA")
    body = TINY.format(steps=1) + "  model.device: cuda\naxes: {model: [testbed, ./no/such/model]}\nbase_eval: false\n"
    p = write(tmp_path, body)
    m = load_matrix(p, out=tmp_path / "out")
    assert [c.config.model.device for c in m.cells] == ["cuda", "cuda"]
    assert main(["sweep", str(p), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert "cannot run here: model.device: 'cuda' asked for" in listed[0], listed
    assert "cannot run here: model.path: './no/such/model' does not exist" in listed[1], listed
    outcome = run_sweep(m, LocalExecutor(), progress=False)
    assert outcome.failed == [c.name for c in m.cells]
    for cell, field in zip(m.cells, ("model.device", "model.path"), strict=True):
        assert f"on {socket.gethostname()}: {field}: " in (outcome.results[cell.name].error or "")
        assert not (cell.run_dir / "checkpoints").exists() and not (cell.run_dir / "config.yaml").exists()


def test_cli_refuses_a_bad_matrix_before_anything_runs(tmp_path, capsys):
    p = write(tmp_path, "axes: {workflow: [single, voting, debate_club]}\n")
    assert main(["sweep", str(p), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "axes.workflow" in err and "debate_club" in err and str(p) in err
    assert not (tmp_path / "out").exists()


def test_a_cell_directory_from_other_settings_is_refused_not_skipped(tmp_path):
    from rolecast.config import dump_config

    p = write(tmp_path, TINY.format(steps=2) + "base_eval: false\n")
    m = load_matrix(p, out=tmp_path / "out")
    [cell] = m.cells
    cell.run_dir.mkdir(parents=True)
    (cell.run_dir / "DONE.json").write_text("{}")  # finished, under 5 steps rather than the matrix's 2
    (cell.run_dir / "config.yaml").write_text(dump_config(cell.config.model_copy(update={"threads": 2})))
    assert run_sweep(m, LocalExecutor(), progress=False).skipped == [cell.name]  # threads alone do not matter
    # nor which checkpoints a run without rollback keeps (keep_every "auto" followed eval.every before)
    kept = cell.config.checkpoint.model_copy(update={"keep_every": 5, "keep_last": 6})
    (cell.run_dir / "config.yaml").write_text(dump_config(cell.config.model_copy(update={"checkpoint": kept})))
    assert run_sweep(m, LocalExecutor(), progress=False).skipped == [cell.name]
    (cell.run_dir / "config.yaml").write_text(
        dump_config(load_matrix(p, out=tmp_path / "out", extra_set={"train.steps": 5}).cells[0].config)
    )
    with pytest.raises(MatrixError, match=cell.name):
        run_sweep(m, LocalExecutor(), progress=False)


def test_the_sweep_header_stays_one_line_in_a_log(tmp_path):
    import io

    from rich.console import Console

    from rolecast.config import dump_config

    p = write(tmp_path, TINY.format(steps=2) + "base_eval: false\n")
    m = load_matrix(p, out=tmp_path / "out")
    [cell] = m.cells
    cell.run_dir.mkdir(parents=True)
    (cell.run_dir / "DONE.json").write_text("{}")
    (cell.run_dir / "config.yaml").write_text(dump_config(cell.config))
    buf = io.StringIO()  # not a terminal: rich would wrap at its 80-column default
    run_sweep(m, LocalExecutor(), progress=False, console=Console(file=buf, width=80, highlight=False))
    header = buf.getvalue().splitlines()[0]
    assert header.startswith("sweep ") and header.endswith("executor local") and len(header) > 80


def test_two_sweeps_cannot_share_a_directory(tmp_path):
    import fcntl

    p = write(tmp_path, TINY.format(steps=2) + "base_eval: false\n")
    m = load_matrix(p, out=tmp_path / "out")
    m.out.mkdir()
    with open(m.out / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running sweep holds it
        with pytest.raises(MatrixError, match="another sweep is running"):
            run_sweep(m, LocalExecutor(), progress=False)
    assert not m.cells[0].run_dir.exists()


# ---------------------------------------------------------------------------------------------------------
# Running


def _files(root: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(f.relative_to(root)): (f.stat().st_mtime_ns, f.read_bytes()) for f in sorted(root.rglob("*")) if f.is_file()
    }


def _jsonl(path: Path, drop: tuple[str, ...]) -> list[dict]:
    return [{k: v for k, v in json.loads(ln).items() if not k.startswith(drop)} for ln in path.read_text().splitlines()]


def test_a_failing_cell_is_recorded_and_the_others_finish(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    broken = tmp_path / "broken-model"
    broken.mkdir()  # exists (passes validation), but holds no model: fails when the cell loads it
    p = write(tmp_path, TINY.format(steps=2) + f"axes: {{model: [{broken}, testbed]}}\nbase_eval: false\n")
    m = load_matrix(p, out=tmp_path / "out")
    outcome = run_sweep(m, LocalExecutor(), progress=False)
    bad, good = "testbed-single-broken-model-shared-s0", "testbed-single-testbed-shared-s0"
    assert [c.name for c in m.cells] == [bad, good]  # the failing cell runs first; the next still runs
    assert outcome.results[bad].status == "failed" and outcome.results[good].status == "done"
    assert (m.out / bad / "ERROR.txt").read_text().startswith("Traceback")
    assert not (m.out / bad / "DONE.json").exists() and (m.out / good / "DONE.json").exists()
    status = {c["name"]: c for c in json.loads((m.out / "sweep.json").read_text())["cells"]}
    assert status[bad]["status"] == "failed" and status[bad]["error"] and status[bad]["attempts"] == 1
    assert status[good]["status"] == "done"
    assert cell_summary(m, m.cell(bad))["state"] == "failed"
    assert len(_jsonl(m.out / good / "metrics.jsonl", ())) == 2
    from rolecast.report.html import collect_map

    cells = {c.name: c for c in collect_map(m.out).cells}  # the report shows the failure, with its error
    assert cells[bad].state == "failed" and cells[bad].error == status[bad]["error"]
    assert cells[good].state == "done" and [p.step for p in cells[good].curve.points] == [0, 2]

    # a rerun skips the finished cell and retries the failed one
    outcome = run_sweep(load_matrix(p, out=tmp_path / "out"), LocalExecutor(), progress=False)
    assert outcome.skipped == [good] and list(outcome.results) == [bad] and outcome.failed == [bad]
    status = {c["name"]: c for c in json.loads((m.out / "sweep.json").read_text())["cells"]}
    assert status[bad]["attempts"] == 2


def test_a_diverged_cell_is_final_stopped_not_failed_and_a_rerun_skips_it(tmp_path, monkeypatch, capsys):
    """lr 1e30 grows the weights past train.max_weight_growth on step 1: the run stops itself. Resumed with the same
    settings it would diverge again (runs are bit-exact), so the sweep records it as stopped, with the reason, and
    never retries it; the report shows it as stopped, with no final accuracy claimed."""
    from rolecast.cli import main
    from rolecast.report.html import collect_map
    from rolecast.report.labs import collect_sweep

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    text = (
        TINY.format(steps=3)
        + "  train.problems_per_step: 4\n  train.lr: 1.0e+30\naxes: {seed: [0]}\nbase_eval: false\n"
    )
    p = write(tmp_path, text.replace("  train.problems_per_step: 2\n", ""))
    m = load_matrix(p, out=tmp_path / "out")
    [cell] = m.train_cells
    outcome = run_sweep(m, PoolExecutor(workers=1, threads_per_cell=1), progress=False)
    result = outcome.results[cell.name]
    assert result.status == "stopped" and outcome.failed == [] and outcome.stopped == [cell.name]
    assert result.error.startswith("training diverged and stopped at step 1: policy 'shared': the update of step 1")
    stopped = json.loads((cell.run_dir / "STOPPED.json").read_text())
    assert stopped["reason"] == result.error and not (cell.run_dir / "ERROR.txt").exists()
    assert cell_summary(m, cell)["state"] == "stopped"
    [row] = json.loads((m.out / "sweep.json").read_text())["cells"]
    assert row["status"] == "stopped" and row["attempts"] == 1 and row["error"] == result.error

    # a rerun skips it: nothing runs, the cell stays stopped, and the command exits 0 saying so
    assert main(["sweep", str(p), "--out", str(m.out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "1 cell(s) stopped themselves (training diverged" in err and "failed" not in err
    [row] = json.loads((m.out / "sweep.json").read_text())["cells"]
    assert row["status"] == "stopped" and row["attempts"] == 1
    [view] = [c for c in collect_map(m.out).cells if c.name == cell.name]
    assert view.state == "stopped" and view.error == result.error and not view.complete
    collect_sweep(m.out, tmp_path / "raw")  # a lab's raw copy keeps the record
    assert (tmp_path / "raw" / cell.name / "STOPPED.json").is_file()


def test_process_pool_runs_cells_in_their_own_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    broken = tmp_path / "broken-model"
    broken.mkdir()
    p = write(tmp_path, TINY.format(steps=2) + f"axes: {{model: [testbed, {broken}]}}\nbase_eval: false\n")
    m = load_matrix(p, out=tmp_path / "pool")
    outcome = run_sweep(m, PoolExecutor(workers=2, threads_per_cell=1), progress=False)
    good, bad = (c.name for c in m.cells)
    assert outcome.results[good].status == "done" and outcome.results[bad].status == "failed"
    assert "ERROR.txt" in os.listdir(m.out / bad) and outcome.results[bad].error
    done = json.loads((m.out / good / "DONE.json").read_text())
    assert done["pid"] != os.getpid()  # ran in a child process
    assert json.loads((m.out / "sweep.json").read_text())["executor"] == "pool"

    # the same cell in this process gives the same run (one thread each)
    local = load_matrix(p, out=tmp_path / "local")
    run_sweep(local, LocalExecutor(), progress=False)
    assert _jsonl(local.out / good / "metrics.jsonl", ("time/",)) == _jsonl(m.out / good / "metrics.jsonl", ("time/",))


def test_pool_cells_fork_from_a_server_with_every_preload_importable():
    """The fork server skips a preload module that fails to import without a word: each must import (a renamed
    module would silently give back the ~4 s of imports per cell)."""
    assert executors.cell_context().get_start_method() == "forkserver"
    assert "rolecast.sweep.cell" in executors.PRELOAD
    for name in executors.PRELOAD:
        assert importlib.import_module(name).__name__ == name


def _job(name: str, kind: str = "train", base: Path | None = None) -> CellJob:
    return CellJob(name, kind, f"/runs/{name}", {}, f"/logs/{name}.log", 1, None if base is None else str(base))


def test_pool_starts_base_evaluations_then_the_cells_whose_base_evaluation_took_longest():
    seconds = {"single": 2.0, "voting": 6.7, "orch": 10.8, "failed": None}
    jobs = [_job(f"{w}-{s}") for w in seconds for s in ("shared", "isolated")] + [_job("nobase")]
    estimate = {j.name: seconds.get(j.name.split("-")[0]) for j in jobs}
    base = [_job("base-x", "base_eval"), _job("base-y", "base_eval")]

    order = []
    pending = jobs[:3] + base + jobs[3:]  # the base evaluations first, in their own order, wherever they are
    while pending:
        order.append(pending.pop(executors.next_job(pending, lambda j: estimate.get(j.name))).name)
    assert order == [
        "base-x",
        "base-y",
        "orch-shared",  # longest first; a tie keeps matrix order
        "orch-isolated",
        "voting-shared",
        "voting-isolated",
        "single-shared",
        "single-isolated",
        "failed-shared",  # no estimate: matrix order, after every cell with one
        "failed-isolated",
        "nobase",
    ]


def test_a_cells_estimate_is_its_base_evaluations_time_finished_or_so_far(tmp_path):
    import time

    done, running, failed = tmp_path / "done", tmp_path / "running", tmp_path / "failed"
    done.mkdir()
    (done / "DONE.json").write_text(json.dumps({"seconds": 7.5}))
    started, finished = {str(running): time.perf_counter() - 3.0}, {}
    assert executors.base_seconds(_job("a", base=done), started, finished) == 7.5
    assert 3.0 <= executors.base_seconds(_job("b", base=running), started, finished) < 60  # running for 3 s so far
    assert executors.base_seconds(_job("c", base=failed), started, finished) is None
    assert executors.base_seconds(_job("d"), started, finished) is None
    # a DONE.json is read once: what it said is kept (the pool asks for every waiting cell at every start)
    assert finished == {str(done): 7.5}
    (done / "DONE.json").unlink()
    assert executors.base_seconds(_job("e", base=done), started, finished) == 7.5


def test_a_matrix_gives_each_training_cell_its_base_evaluations_run_dir(tmp_path):
    p = write(tmp_path, TINY.format(steps=1) + "axes: {workflow: [single, voting]}\n")
    m = load_matrix(p, out=tmp_path / "out")
    seen = []

    class Recorder:
        name, threads_per_cell = "recorder", 1

        def run(self, jobs, on_start, on_finish):
            seen.extend(jobs)

    run_sweep(m, Recorder(), progress=False)
    bases = {c.name: str(c.run_dir) for c in m.cells if c.kind == "base_eval"}
    assert len(bases) == 2
    for job in seen:
        cell = m.cell(job.name)
        assert job.base_run_dir == (bases[cell.base_cell] if cell.kind == "train" else None)
    assert {j.base_run_dir for j in seen if j.kind == "train"} == set(bases.values())


PLAN = """\
title: a tiny registered sweep
arms: [shared]
cliff: {min_drop: 0.02}
seeds: {fit: [0], held_out: [1]}
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_a_sweep_registers_its_plan_before_the_first_cell_and_records_its_amendments(tmp_path):
    """The issue-35 feature end to end on real cells: the registration (hashes, commit, clean tree, time) is
    written before the first cell starts; a restart after the plan's rule changed is refused until the plan
    carries an amendment; then the amendment (hashes before and after, the field, the reason) and a seed added
    to the matrix are recorded, and the report says when the plan was registered and marks what is post hoc.
    Each seed's training cell gets the base evaluation of its own seed."""
    from rolecast.core.errors import ConfigError
    from rolecast.report.html import collect_map, render_html, text_map

    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / "plan.yaml").write_text(PLAN)
    matrix_text = TINY.format(steps=1) + "plan: plan.yaml\naxes: {seed: [0, 1]}\n"
    matrix = write(repo, matrix_text)
    _git(repo, "add", "plan.yaml", "matrix.yaml")
    _git(repo, "commit", "-qm", "the plan, before any run")
    head = _git(repo, "rev-parse", "HEAD")
    out = tmp_path / "out"

    run_sweep(load_matrix(matrix, out=out), LocalExecutor(), progress=False)
    rows = _jsonl(out / "registration.jsonl", ())
    assert [r["event"] for r in rows] == ["registered", "started", "first_cell"]
    reg = rows[0]
    assert (reg["commit"], reg["dirty"], reg["plan"]["committed"], reg["matrix"]["committed"]) == (
        head,
        False,
        True,
        True,
    )
    assert reg["plan"]["sha256"] == hashlib.sha256(PLAN.encode()).hexdigest()
    assert reg["matrix"]["sha256"] == hashlib.sha256((repo / "matrix.yaml").read_bytes()).hexdigest()
    assert reg["cells_already_run"] == [] and rows[2]["cell"] == "base-testbed-single-testbed-s0"
    cells = {c["name"]: c for c in json.loads((out / "sweep.json").read_text())["cells"]}
    # sweep.json's local times carry no UTC offset: compare the first 19 characters
    assert reg["time"] <= rows[2]["time"] and rows[2]["time"][:19] <= cells["base-testbed-single-testbed-s0"]["started"]
    registered = (out / "registration.jsonl").read_bytes()

    # the plan's rule changed after the runs, with no amendment entry: refused before anything runs
    (repo / "plan.yaml").write_text(PLAN.replace("min_drop: 0.02", "min_drop: 0.05"))
    with pytest.raises(ConfigError, match=r"cliff\.min_drop.*amendments"):
        run_sweep(load_matrix(matrix, out=out), LocalExecutor(), progress=False)
    assert (out / "registration.jsonl").read_bytes() == registered

    # with its amendment, and a third seed in the matrix (uncommitted): both recorded; only the new cells run
    (repo / "plan.yaml").write_text(
        PLAN.replace("min_drop: 0.02", "min_drop: 0.05")
        + "amendments:\n  - {date: 2026-12-06, reason: a drop of 0.02 is within noise here, fields: [cliff.min_drop]}\n"
    )
    (repo / "matrix.yaml").write_text(matrix_text.replace("seed: [0, 1]", "seed: [0, 1, 2]"))
    outcome = run_sweep(load_matrix(matrix, out=out), LocalExecutor(), progress=False)
    assert sorted(outcome.results) == ["base-testbed-single-testbed-s2", "testbed-single-testbed-shared-s2"]
    rows = _jsonl(out / "registration.jsonl", ())
    assert (out / "registration.jsonl").read_bytes().startswith(registered)
    assert [r["event"] for r in rows] == ["registered", "started", "first_cell", "amended", "started"]
    amended = rows[3]
    assert amended["dirty"] is True and amended["commit"] == head
    assert amended["plan"]["before"] == reg["plan"]["sha256"]
    assert amended["plan"]["after"] == hashlib.sha256((repo / "plan.yaml").read_bytes()).hexdigest()
    assert amended["plan"]["rule_fields"] == ["cliff.min_drop"]
    assert amended["plan"]["amendments"][0]["reason"] == "a drop of 0.02 is within noise here"
    assert amended["matrix"]["cells_added"] == ["testbed-single-testbed-shared-s2"]

    smap = collect_map(out)
    text = " ".join(text_map(smap).split())  # the text map folds long lines
    assert f"registered at {reg['time']} (commit {head[:10]}), first run started at {rows[2]['time']}" in text
    assert f"amendment 1 at {amended['time']} (commit {head[:10]}, uncommitted changes)" in text
    assert f"map: post hoc: rests on cliff.min_drop, amended after the first run ({amended['time']})" in text
    assert "sharing: post hoc: holds cells added after the first run: testbed-single-testbed-shared-s2" in text
    html = render_html(smap)
    assert 'class="posthoc"' in html and "a drop of 0.02 is within noise here" in html
    # the report reads the curves with the registered (amended) plan's rule
    cells_s1_base = _jsonl(out / "base-testbed-single-testbed-s1" / "eval.jsonl", ())[0]["pass@1"]
    for c in smap.train_cells:
        assert c.curve.rule["min_drop"] == 0.05
        # each seed's cell against the base evaluated with its own seed
        seed = c.axes["seed"]
        base = _jsonl(out / f"base-testbed-single-testbed-s{seed}" / "eval.jsonl", ())[0]
        assert c.curve.base.value == base["pass@1"] and c.curve.base.step == 0
    cfgs = [load_matrix(matrix, out=out).cell(f"base-testbed-single-testbed-s{s}").config.seed for s in (0, 1, 2)]
    assert cfgs == [0, 1, 2]
    # `rolecast analyze` of a cell reads it with the same registered rule
    from rolecast.report.analyze import analyze

    summary = analyze(out / "testbed-single-testbed-shared-s1", plots=False)
    assert summary["curve"]["rule"]["min_drop"] == 0.05 and summary["curve"]["base"]["value"] == cells_s1_base


def test_a_plan_that_names_what_the_matrix_lacks_is_refused_at_load(tmp_path):
    (tmp_path / "plan.yaml").write_text(PLAN.replace("held_out: [1]", "held_out: [7]").replace("[shared]", "[kl]"))
    p = write(tmp_path, TINY.format(steps=1) + "plan: plan.yaml\naxes: {seed: [0, 1]}\n")
    with pytest.raises(MatrixError, match=r"arms: \['kl'\] not a sharing label of the matrix \(\['shared'\]\)"):
        load_matrix(p)
    with pytest.raises(MatrixError, match=r"seeds\.held_out: seed\(s\) \[7\] not in the matrix"):
        load_matrix(p)
    (tmp_path / "plan.yaml").write_text(PLAN.replace("min_drop: 0.02", "min_drop: -1"))
    with pytest.raises(
        MatrixError, match=r"matrix\.yaml: plan: invalid analysis plan:\n  .*plan\.yaml: cliff\.min_drop"
    ):
        load_matrix(p)
    (tmp_path / "plan.yaml").unlink()
    with pytest.raises(MatrixError, match=r"analysis plan .*plan\.yaml does not exist"):
        load_matrix(p)


KILLER = """\
import os, signal, sys
from pathlib import Path
from rolecast.sweep import LocalExecutor, load_matrix, run_sweep
from rolecast.training import checkpoint

matrix, out = sys.argv[1], Path(sys.argv[2])
victim = out / "testbed-single-testbed-shared-s1" / "checkpoints" / "step_2"

replace_dir = checkpoint._replace_dir

def kill_after_second_checkpoint_of_second_cell(src, dst):
    replace_dir(src, dst)
    # step_2 renamed into place, `latest` still says 1: SIGKILL, as a pre-empted node would
    if victim.is_dir():
        os.kill(os.getpid(), signal.SIGKILL)

checkpoint._replace_dir = kill_after_second_checkpoint_of_second_cell
run_sweep(load_matrix(matrix, out=out), LocalExecutor(), progress=False)
"""


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid`, from /proc (the cells are forked by the pool's fork server, a child)."""
    parent = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parent[int(d.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigterm_to_a_pool_sweep_ends_its_cells_too(tmp_path):
    """`kill <driver>` ends the cells it started (they stay resumable), as Ctrl-C does: before, the driver died
    alone and its cells trained on as orphans."""
    import signal
    import time

    p = write(tmp_path, TINY.format(steps=400) + "base_eval: false\naxes: {seed: [0, 1]}\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    args = [sys.executable, "-m", "rolecast.cli", "sweep", str(p), "--out", str(out), "--executor", "pool"]
    driver = subprocess.Popen([*args, "--workers", "2"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 300
        while not list(out.glob("*/checkpoints/step_1")) and time.time() < deadline and driver.poll() is None:
            time.sleep(0.5)
        assert list(out.glob("*/checkpoints/step_1")), "no cell started training"
        below = _descendants(driver.pid)
        assert len(below) >= 3  # the fork server and two cells (and multiprocessing's resource tracker)
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(timeout=60) == 128 + signal.SIGTERM
        deadline = time.time() + 30
        while below and time.time() < deadline:
            below = {q for q in below if _state(q) != "Z"}  # gone or a zombie: ended
            time.sleep(0.2)
        assert not below, f"still running after the driver's SIGTERM: {sorted(below)}"
    finally:
        if driver.poll() is None:
            driver.kill()
    assert not any((c / "DONE.json").exists() for c in out.iterdir() if c.is_dir())  # stopped mid-run, resumable


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_killed_sweep_resumes_and_ends_as_an_uninterrupted_one(tmp_path):
    p = write(tmp_path, TINY.format(steps=3) + "  eval.every: 2\naxes: {seed: [0, 1]}\n")
    first, second, base, base1 = (
        "testbed-single-testbed-shared-s0",
        "testbed-single-testbed-shared-s1",
        "base-testbed-single-testbed-s0",
        "base-testbed-single-testbed-s1",
    )
    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [sys.executable, "-c", KILLER, str(p), str(killed)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == -9, proc.stderr[-3000:]
    assert all((killed / c / "DONE.json").exists() for c in (base, base1, first))
    assert not (killed / second / "DONE.json").exists() and latest_step(killed / second) == 1
    # the periodic evaluation at step 2 was written before the kill; the resumed run redoes it
    assert [r["step"] for r in _jsonl(killed / second / "eval.jsonl", ())] == [2]
    before = {c: _files(killed / c) for c in (base, base1, first)}
    step1 = (killed / second / "metrics.jsonl").read_text().splitlines()[0]  # with its wall times

    m = load_matrix(p, out=killed)
    outcome = run_sweep(m, LocalExecutor(), progress=False)
    assert outcome.skipped == [base, base1, first] and outcome.resumed == {second: 1}
    assert list(outcome.results) == [second] and outcome.results[second].resumed_from == 1
    assert {c: _files(killed / c) for c in (base, base1, first)} == before  # finished cells untouched
    assert "resume from step 1" in (killed / ".logs" / f"{second}.log").read_text()
    assert (killed / second / "metrics.jsonl").read_text().splitlines()[0] == step1  # step 1 was not redone

    clean = load_matrix(p, out=tmp_path / "clean")
    run_sweep(clean, LocalExecutor(), progress=False)
    for cell in (base, base1, first, second):
        # the map's numbers (evaluations) exactly; every logged statistic to float rounding (see below)
        assert _jsonl(killed / cell / "eval.jsonl", ("run",)) == _jsonl(clean.out / cell / "eval.jsonl", ("run",))
        if cell not in (base, base1):
            got, want = (
                _jsonl(killed / cell / "metrics.jsonl", ("time/",)),
                _jsonl(clean.out / cell / "metrics.jsonl", ("time/",)),
            )
            assert [r.keys() for r in got] == [r.keys() for r in want]
            for r, w in zip(got, want, strict=True):
                for k in r:
                    assert r[k] == w[k] or (
                        isinstance(w[k], float) and math.isclose(r[k], w[k], rel_tol=1e-6, abs_tol=1e-9)
                    ), (cell, r["step"], k, r[k], w[k])
        assert cell_summary(m, m.cell(cell)) == cell_summary(clean, clean.cell(cell))
    # the weight comparison is not vacuous: the resumed cell learned (non-zero updates) after the kill
    assert any(r["policy/shared/grad_norm"] for r in _jsonl(killed / second / "metrics.jsonl", ())[1:])
    for cell in (first, second):
        _, a = load_checkpoint(killed / cell, 3)
        _, b = load_checkpoint(clean.out / cell, 3)
        assert a["policy/shared"].keys() == b["policy/shared"].keys()
        # Bit-identical in our runs; a tolerance far below one update's size (lr 1e-4) leaves room for
        # last-bit differences of CPU kernels (once seen in approx_kl only, 3e-12, at the resumed step).
        for k in a["policy/shared"]:
            assert torch.allclose(a["policy/shared"][k], b["policy/shared"][k], rtol=0, atol=1e-7), (cell, k)
    assert [r["step"] for r in _jsonl(killed / second / "eval.jsonl", ())] == [2, 3]


def test_ray_executor_runs_two_cells_on_a_local_ray(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    from rolecast.sweep import RayExecutor

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("PYTHONPATH", f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")  # for Ray's workers
    p = write(tmp_path, TINY.format(steps=2) + "axes: {seed: [0, 1]}\nbase_eval: false\n")
    m = load_matrix(p, out=tmp_path / "ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        outcome = run_sweep(m, RayExecutor(num_cpus=1), progress=False)
    finally:
        ray.shutdown()
    assert sorted(outcome.results) == [c.name for c in m.cells]
    assert all(r.status == "done" for r in outcome.results.values()), outcome.results
    for c in m.cells:
        done = json.loads((c.run_dir / "DONE.json").read_text())
        assert done["pid"] != os.getpid()  # a Ray worker ran it
        assert len(_jsonl(c.run_dir / "metrics.jsonl", ())) == 2 and latest_step(c.run_dir) == 2
    assert json.loads((m.out / "sweep.json").read_text())["executor"] == "ray"


# ---------------------------------------------------------------------------------------------------------
# Shipped matrices


def test_shipped_testbed_matrix_is_every_workflow_and_sharing_mode_on_both_tasks():
    """`make run`: {math, code} x every workflow x both sharing modes (the single agent in one), each task on its own
    testbed model, the code cells evaluated less often than the math ones."""
    from rolecast.config import CONFIG_DIR

    m = load_matrix(CONFIG_DIR / "testbed_matrix.yaml")
    workflows = ["single", "voting", "eval_opt", "orch_workers"]
    tasks = [("testbed", "testbed"), ("testbed_code", "testbed-code")]
    # the single agent in Shared only: one role is one policy under either mode (traded for time)
    assert [c.name for c in m.train_cells] == [
        f"{t}-{w}-{model}-{s}-s0"
        for w in workflows
        for t, model in tasks
        for s in ("shared", "isolated")
        if (w, s) != ("single", "isolated")
    ]
    assert [c.name for c in m.cells if c.kind == "base_eval"] == [
        f"base-{t}-{w}-{model}-s0" for w in workflows for t, model in tasks
    ]
    for c in m.cells:
        code = c.config.task.name == "testbed_code"
        assert c.config.model.path == ("testbed-code" if code else "testbed")
        assert c.config.rollout.max_new_tokens == (128 if code else 64)  # the code roles' derivations fit
    for c in m.train_cells:  # periodic evaluations: peaks are visible (code: at 15 and 30)
        cfg = c.config
        assert (cfg.eval.every, cfg.train.steps) == ((15 if cfg.task.name == "testbed_code" else 10), 30)
    for c in m.cells:  # sampled as the study does, so Voting's voters can disagree (greedy: identical votes)
        assert (c.config.eval.protocol, c.config.eval.temperature) == ("study", 0.7) and c.config.eval.n_samples >= 2


def test_make_runs_matrix_evaluates_the_same_base_as_before_per_seed_bases():
    """`make run` has one seed (0): its per-seed base cells run exactly the evaluation the one base cell per
    (workflow, task, model) ran before 2026-12 (the settings of the group's first training cell, seed 0, no
    training, only the start evaluation); only the directory name gained "-s0"."""
    from rolecast.config import CONFIG_DIR

    m = load_matrix(CONFIG_DIR / "testbed_matrix.yaml")
    bases = [c for c in m.cells if c.kind == "base_eval"]
    assert len(bases) == 8
    for base in bases:
        first = next(c for c in m.train_cells if c.base_cell == base.name)
        assert first.axes["sharing"] == "shared" and first.config.seed == base.config.seed == 0
        old_rule = first.config.model_copy(deep=True)
        old_rule.train.steps, old_rule.eval.at_start, old_rule.eval.at_end = 0, True, False
        assert base.config.model_dump(exclude={"run_dir"}) == old_rule.model_dump(exclude={"run_dir"}), base.name


def test_shipped_scale_matrix_adds_the_large_testbed_and_nothing_else():
    """configs/testbed_scale_matrix.yaml is the math half of the map with a model axis over both testbed sizes (the
    large code build has its own plan, map_power_code_large_plan.yaml), on the untraded protocol: `make run`'s math
    cells but for what `make run` trades for time (problems a step, how often it evaluates and checkpoints, the
    single agent's Isolated cell)."""
    from rolecast.config import CONFIG_DIR

    small, scaled = (load_matrix(CONFIG_DIR / f) for f in ("testbed_matrix.yaml", "testbed_scale_matrix.yaml"))
    math = [c for c in small.cells if c.config.task.name == "testbed"]
    assert {c.config.model.path for c in scaled.train_cells} == {"testbed", "testbed-large"}
    assert len(scaled.train_cells) == 2 * 4 * 2 and len(scaled.cells) - len(scaled.train_cells) == 2 * 4
    by_name = {c.name: c for c in scaled.cells}
    traded = {"run_dir": True, "train": {"problems_per_step"}, "eval": {"every", "n_samples"}, "checkpoint": {"every"}}
    for c in math:  # every small math cell is there, with the same settings but the traded ones
        twin = by_name[c.name]
        assert twin.config.model_dump(exclude=traded) == c.config.model_dump(exclude=traded), c.name
        assert (twin.config.train.problems_per_step, twin.config.eval.every) == (8, 5)


def test_shipped_study_matrix_spans_the_study():
    """configs/study/matrix.yaml: each cell starts from its (task, workflow) recipe (a `base` naming axes),
    single-agent Shared-Policy is excluded, one base evaluation per (workflow, task, model)."""
    from rolecast.config import CONFIG_DIR

    m = load_matrix(CONFIG_DIR / "study" / "matrix.yaml")
    assert len(m.train_cells) == 4 * 2 * 3 * 2 - 2 * 3 and len(m.cells) - len(m.train_cells) == 4 * 2 * 3
    assert not [c for c in m.train_cells if c.axes["workflow"] == "single" and c.axes["sharing"] == "shared"]
    assert {c.config.model.path for c in m.cells} == {"Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B"}
    for c in m.train_cells:  # the recipe's own settings, not the first file's
        assert c.config.workflow.name == c.axes["workflow"]
        assert c.config.task.name == {"math": "dapo_math", "code": "deepcoder"}[c.axes["task"]]
        assert c.config.rollout.max_new_tokens == {"math": 5120, "code": 2048}[c.axes["task"]]
    assert m.settings.resources.num_gpus == 1


def test_a_cell_saved_before_a_defaulted_field_existed_still_matches():
    """check_existing compares a finished cell's saved config.yaml as today's schema reads it: a field added
    since with its default (here train.lr_clock) is no difference; a field the schema no longer has is."""
    from rolecast.config.load import load_config
    from rolecast.sweep.runner import _saved_settings

    full = load_config(None, {"train.steps": 3}).model_dump(mode="json")
    older = {**full, "train": {k: v for k, v in full["train"].items() if k != "lr_clock"}}
    assert _saved_settings(older) == full
    assert _saved_settings({**full, "train": {**full["train"], "retired_field": 1}}) is None


def test_a_pool_sweep_prints_no_library_bar_or_warning(tmp_path):
    """Cells run in forked workers, which do not inherit the command line's quiet setting: each LoRA cell printed
    PEFT's `is_gradient_checkpointing is deprecated` FutureWarning onto the sweep's terminal (Lab II's log)."""
    p = write(
        tmp_path,
        TINY.format(steps=1) + "  model.trainable: lora\n  model.lora.r: 4\naxes: {seed: [0]}\nbase_eval: false\n",
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(SRC)}
    out = subprocess.run(
        [sys.executable, "-m", "rolecast.cli", "sweep", str(p), "--out", str(tmp_path / "s"), "--executor", "pool"]
        + ["--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "s").is_dir() and any((tmp_path / "s").glob("*/DONE.json"))
    printed = out.stdout + out.stderr
    for noise in ("Warning", "warnings.warn", "Loading weights", "%|"):
        assert noise not in printed, printed[-2000:]
