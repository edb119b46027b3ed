"""`rolecast analyze`: numbers against hand values on a synthetic run with gradient keys, a run killed mid-write,
an empty directory, and a real tiny testbed run trained here."""

from __future__ import annotations

import json
import struct

import pytest
import yaml

from rolecast.cli import main
from rolecast.config.load import load_config
from rolecast.report.analyze import analyze

pytest.importorskip("matplotlib", reason="the analyze plots need the `plots` extra (make setup installs it)")


def png_size(path):
    """(width, height) of a PNG, after checking its signature and that the IHDR chunk comes first."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", path
    assert data[-8:-4] == b"IEND", f"{path}: no IEND chunk (truncated?)"
    return struct.unpack(">II", data[16:24])


def eval_row(step, p, se, tag):
    return {
        "run": "r",
        "step": step,
        "tag": tag,
        "workflow": "orch_workers",
        "task": "testbed",
        "split": "test",
        "sharing": "shared",
        "model": "testbed",
        "pass@1": p,
        "stderr": se,
        "pass@1_k": p,
        "n_problems": 400,
        "n_samples": 1,
    }


def turn(role, text, instance=None):
    return {
        "role": role,
        "instance": instance or role,
        "policy_id": "pol",
        "prompt_ids": [1],
        "completion_ids": [2],
        "logprobs": [0.0],
        "text": text,
        "finish_reason": "stop",
        "index": 0,
        "claim": None,
        "reward": 0.0,
        "advantage": 0.0,
    }


def write_synthetic_run(d):
    d.mkdir()
    (d / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "task": {"name": "testbed"},
                "workflow": {"name": "orch_workers"},
                "routing": {"sharing": "shared"},
                "model": {"path": "testbed"},
                "train": {"steps": 40},
            }
        )
    )
    lines = []
    for s in range(1, 31):
        lines.append(
            json.dumps(
                {
                    "step": s,
                    "accuracy": 0.5,
                    "episodes": 16,
                    "role/worker/length": 20.0 if s <= 20 else 5.0,
                    "grad/pol/worker/norm": 1.0,
                    "grad/pol/orchestrator/norm": 0.5,
                    "grad/pol/worker/share": 0.7,
                    "grad/pol/orchestrator/share": 0.3,
                    "grad/pol/worker/alignment": 2.6 if s >= 25 else 1.3,
                    "grad/pol/worker/instances": 3,
                    "grad/pol/capture_index": 0.7,
                    "grad/pol/capture_role": "worker",
                    "grad/pol/norm": 1.2,
                    "update/pol/size": 0.01,
                    "update/pol/drift": 0.01 * s,
                }
            )
        )
    # killed while writing step 31: a torn last line
    (d / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 31, "accuracy": 0.')
    evals = [
        eval_row(0, 0.5, 0.025, "base"),
        eval_row(10, 0.7, 0.023, "periodic"),
        eval_row(20, 0.75, 0.0217, "periodic"),
        eval_row(30, 0.5, 0.025, "periodic"),
        eval_row(40, 0.45, 0.025, "final"),
    ]
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    (d / "episodes").mkdir()
    plans = [turn("orchestrator", "STRATEGY 1: left to right\nSTRATEGY 2: right to left")]
    solves = [turn("orchestrator", "7 + 8 = 15 \\boxed{15}")]
    for step, orch in ((10, plans), (20, solves)):
        eps = [
            {
                "problem_id": f"q{i}",
                "sample": i % 2,
                "turns": orch,
                "final_answer": None,
                "reward": 0.0,
                "metrics": {},
                "metadata": {},
            }
            for i in range(4)
        ]
        (d / "episodes" / f"step_{step}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in eps))
    return d


def test_analyze_synthetic_run_prints_hand_values_and_writes_plots(tmp_path, capsys):
    d = write_synthetic_run(tmp_path / "run")
    assert main(["analyze", str(d)]) == 0
    out = capsys.readouterr().out
    # base 0.5 ± 1.96*0.025; peak 0.75 at step 20 ± 1.96*0.0217; final 0.45 at 40; each ± says what it is
    assert "± is a 95% CI, 1.96 SE, and [] a 95% CI; `rolecast train` prints ± 1 SE" in out
    assert "base   step      0  0.500 ± 0.049 (95% CI)" in out
    assert "peak   step     20  0.750 ± 0.043 (95% CI)" in out
    assert "final  step     40  0.450 ± 0.049 (95% CI)" in out
    # gain -0.05 with SE sqrt(2)*0.025 = 0.03536 -> ±0.0693
    assert "gain   final - base  -0.050 [-0.119, +0.019]" in out
    # 5 points: cliff z = 2.576; 0.5 and 0.45 are > 2.576 SE below 0.75 -> cliff from step 30
    assert "cliff  YES from step 30 (peak at 20; 2 points below the peak by > 2.58 SE)" in out
    # m = 4 trained points: gain z 2.498; step 10 is +0.20 over the base at SE sqrt(0.025^2 + 0.023^2) = 0.034
    assert "type   fall after a gain (the study's cliff); first significant gain at step 10; final - base -0.050" in out
    assert "planner_solves [orchestrator] at 1 step(s): 20;" in out
    assert 'e.g. step 20 problem q0 sample 0 orchestrator: "7 + 8 = 15 \\boxed{15}"' in out
    # window of 3 from step 21: (20+5+5)/3 = 10 <= 0.5 * 20 at step 22 and after
    assert "length_collapse [worker] at 9 step(s): 22-30;" in out
    assert "amplification [pol/worker] at 6 step(s): 25-30;" in out
    assert "capture" not in out  # 0.7 < 0.8
    assert "30/40 steps logged, incomplete" in out
    assert "metrics.jsonl: line(s) 31 not valid JSON" in out
    summary = json.loads((d / "analysis" / "summary.json").read_text())
    assert summary["curve"]["cliff"]["step"] == 30 and summary["curve"]["peak"]["step"] == 20
    assert summary["status"] == {"steps_logged": 30, "last_step": 30, "steps_planned": 40, "complete": False}
    assert sorted(summary["plots"]) == ["analysis/accuracy.png", "analysis/gradients.png", "analysis/updates.png"]
    for name in summary["plots"]:
        w, h = png_size(d / name)
        assert w == 1300 and h >= 300  # the style's width (report/style.py)


def test_analyze_a_sweep_cell_takes_its_base_from_the_sweeps_base_cell(tmp_path, capsys):
    """A sweep's training cell has no step-0 evaluation (its base cell measured it once for the group);
    analyze reads it from there, so gain and cliff are relative to the base, as in the report."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    d = write_synthetic_run(sweep / "cell")
    rows = [json.loads(line) for line in (d / "eval.jsonl").read_text().splitlines()]
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r["tag"] != "base"))
    base = sweep / "base-cell"
    base.mkdir()
    (base / "eval.jsonl").write_text(json.dumps(eval_row(0, 0.6, 0.025, "base")) + "\n")
    cells = [{"name": "cell", "kind": "train", "base_cell": "base-cell"}, {"name": "base-cell", "kind": "base_eval"}]
    (sweep / "sweep.json").write_text(json.dumps({"cells": cells}))
    assert main(["analyze", str(d)]) == 0
    out = capsys.readouterr().out
    assert "base   step      0  0.600 ± 0.049" in out
    assert "gain   final - base  -0.150" in out
    assert "base evaluation read from the sweep's base cell base-cell" in out
    # outside a sweep the same cell has no base point
    (sweep / "sweep.json").unlink()
    assert main(["analyze", str(d)]) == 0
    assert "base   step" not in capsys.readouterr().out


def test_analyze_killed_run_without_evaluations_or_episodes(tmp_path, capsys):
    d = tmp_path / "killed"
    d.mkdir()
    (d / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "accuracy": 0.1 * s, "episodes": 10}) + "\n" for s in range(1, 5))
        + '{"step": 5, "acc'
    )
    assert main(["analyze", str(d)]) == 0
    out = capsys.readouterr().out
    assert "missing: eval.jsonl" in out and "missing: config.yaml" in out and "missing: episodes" in out
    # no grad/ metrics: the gradient signals were not measured, which is not the same as none firing
    assert "early warnings (gradient signals): not measured" in out and "signals): none fired" not in out
    # training accuracy in 5-step windows: one window of steps 1-4, mean 0.25
    assert "accuracy (metrics.jsonl:accuracy (5-step means), 1 points" in out
    assert "final  step      4  0.250" in out
    assert png_size(d / "analysis" / "accuracy.png")[0] == 1300


def _short_run(d, every, steps=3, grads=False):
    d.mkdir()
    (d / "config.yaml").write_text(
        yaml.safe_dump({"train": {"steps": steps}, "diagnostics": {"gradients": {"every": every}}})
    )
    rows = [{"step": s, "accuracy": 0.5, "policy/pol/grad_norm": 1.0} for s in range(1, steps + 1)]
    if grads:
        rows = [{**r, "grad/pol/norm": 1.0} for r in rows]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


@pytest.mark.parametrize(
    ("every", "steps", "said"),
    [
        (0, 3, "not measured (gradient diagnostics were off, diagnostics.gradients.every 0; only grad_spike"),
        (
            4,
            3,
            "not measured (gradient diagnostics were on, diagnostics.gradients.every 4, but the run ended at step 3, "
            "before its first diagnosed step (4); only grad_spike",
        ),
        (2, 3, "not measured (metrics.jsonl holds no per-role gradient keys (diagnostics.gradients.every 2);"),
    ],
)
def test_analyze_says_why_gradients_were_not_measured(tmp_path, capsys, every, steps, said):
    """Off, on but the run ended before its first diagnosed step (steps every, 2 * every, ...), or on and
    missing: three different things, said differently."""
    d = _short_run(tmp_path / "run", every, steps)
    assert main(["analyze", str(d), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert f"early warnings (gradient signals): {said}" in out


def test_analyze_empty_dir_and_missing_dir(tmp_path, capsys):
    assert main(["analyze", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no evaluations and no training accuracy yet" in out and "missing: metrics.jsonl" in out
    assert json.loads((tmp_path / "analysis" / "summary.json").read_text())["curve"] is None
    assert main(["analyze", str(tmp_path / "nope")]) == 2


def test_analyze_a_real_testbed_run(tmp_path, capsys):
    from rolecast.training.grpo import train

    run = tmp_path / "tb"
    # the embedded testbed with the cheapest settings that still train: LoRA r=4, 2 steps of 2x2 episodes
    cfg = load_config(
        None,
        {
            "run_dir": str(run),
            "train.steps": 2,
            "train.problems_per_step": 2,
            "train.group_size": 2,
            "train.epochs": 1,
            "model.trainable": "lora",
            "model.lora.r": 4,
            "rollout.max_new_tokens": 16,
            "eval.size": 4,
            "logging.progress": False,
            "checkpoint.every": 0,
        },
    )
    train(cfg)
    summary = analyze(run)
    evals = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 2]
    c = summary["curve"]
    assert (c["base"]["value"], c["final"]["value"]) == (evals[0]["pass@1"], evals[1]["pass@1"])
    assert c["gain"]["value"] == pytest.approx(evals[1]["pass@1"] - evals[0]["pass@1"])
    assert summary["status"]["complete"] and summary["episode_steps"] == [1, 2]
    assert summary["answer_extractor"] == "task 'testbed'"
    assert "analysis/accuracy.png" in summary["plots"]
    for name in summary["plots"]:
        png_size(run / name)
    assert main(["analyze", str(run), "--no-plots"]) == 0
    assert f"base   step      0  {evals[0]['pass@1']:.3f}" in capsys.readouterr().out


def test_analyze_without_matplotlib_still_reports_numbers(tmp_path, capsys, monkeypatch):
    import sys

    d = write_synthetic_run(tmp_path / "run")
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # what a missing package looks like to import
    assert main(["analyze", str(d)]) == 0
    out = capsys.readouterr().out
    assert "plots skipped: plots need matplotlib: pip install 'rolecast[plots]'" in out
    assert "cliff  YES from step 30" in out and not (d / "analysis" / "accuracy.png").exists()
    assert json.loads((d / "analysis" / "summary.json").read_text())["plots"] == []
