"""The study recipes: every cell of configs/study/matrix.yaml loads, and every value in the table of
docs/study_recipe.md is what the cell's config holds (the doc and the configs cannot drift apart)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rolecast.config import CONFIG_DIR, RunConfig
from rolecast.config.load import load_config

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "study_recipe.md"
MATRIX = CONFIG_DIR / "study" / "matrix.yaml"
FIX = Path(__file__).parent / "fixtures"


def doc_table() -> list[dict[str, Any]]:
    """Rows of the recipe table: {field, value, applies (list of token sets), line}."""
    rows = []
    header = None
    for n, line in enumerate(DOC.read_text().splitlines(), 1):
        if not line.startswith("|"):
            header = None if not line.strip() else header
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if "config field" in cells:
            header = cells
            continue
        if header is None or set(line) <= set("|- "):
            continue
        row = dict(zip(header, cells, strict=True))
        field, value = re.fullmatch(r"`(.*)`", row["config field"]), re.fullmatch(r"`(.*)`", row["value"])
        if field and value:
            rows.append(
                {
                    "field": field.group(1),
                    "value": yaml.safe_load(value.group(1)),
                    "applies": row["applies to"].split("+"),
                    "line": n,
                }
            )
    return rows


def matrix_cells() -> list[dict[str, Any]]:
    """The matrix's training cells as `rolecast sweep` expands them: axis labels, the recipe file the cell
    starts from, and its validated config."""
    from rolecast.sweep import load_matrix

    cells = []
    for c in load_matrix(MATRIX).train_cells:
        labels = {k: str(v) for k, v in c.axes.items()}
        cells.append(
            {**labels, "file": CONFIG_DIR / "study" / f"{labels['task']}_{labels['workflow']}.yaml", "config": c.config}
        )
    return cells


def _get(data: dict[str, Any], dotted: str) -> Any:
    node: Any = data
    for k in dotted.split("."):
        node = node[k]
    return node


def test_matrix_is_the_studys_grid():
    cells = matrix_cells()
    assert len(cells) == 4 * 2 * 3 * 2 - 2 * 3  # less single-agent Shared-Policy, a duplicate of Isolated
    assert {c["file"].name for c in cells} == {p.name for p in (CONFIG_DIR / "study").glob("*_*.yaml")}
    assert not [c for c in cells if c["workflow"] == "single" and c["sharing"] == "shared"]


def mismatches(config: Path, run: RunConfig, attrs: set[str], rows: list[dict[str, Any]]) -> list[str]:
    cfg = run.model_dump(mode="json")
    out = []
    for r in rows:
        if all(t in attrs for t in r["applies"]) and _get(cfg, r["field"]) != r["value"]:
            out.append(
                f"{config.name} {sorted(attrs)}: {r['field']} is {_get(cfg, r['field'])!r}, "
                f"docs/study_recipe.md line {r['line']} says {r['value']!r}"
            )
    return out


# the sweep measures the base model once per (workflow, task, model) in a base cell, so it turns the
# recipe's own base evaluation off in the training cells; the base cells are checked for it instead
SWEEP_OWNED = {"eval.at_start"}


def test_doc_table_matches_every_recipe_cell():
    rows = doc_table()
    assert len(rows) > 60
    tokens = {
        "all",
        "math",
        "code",
        "single",
        "voting",
        "eval_opt",
        "orch_workers",
        "0.6B",
        "1.7B",
        "4B",
        "shared",
        "isolated",
    }
    unknown = [(r["line"], t) for r in rows for t in r["applies"] if t not in tokens]
    assert not unknown, f"docs/study_recipe.md: unknown 'applies to' token(s) {unknown}"
    used: set[int] = set()
    bad: list[str] = []
    for cell in matrix_cells():
        attrs = {"all", cell["task"], cell["workflow"], cell["model"], cell["sharing"]}
        bad += mismatches(cell["file"], cell["config"], attrs, [r for r in rows if r["field"] not in SWEEP_OWNED])
        used |= {r["line"] for r in rows if all(t in attrs for t in r["applies"])}
    assert not bad, "\n".join(bad)
    assert used == {r["line"] for r in rows}  # every row applies to at least one cell
    from rolecast.sweep import load_matrix

    matrix = load_matrix(MATRIX)
    assert all(not c.config.eval.at_start for c in matrix.train_cells)
    base_cells = [c for c in matrix.cells if c.kind == "base_eval"]
    assert all(c.config.eval.at_start and c.config.train.steps == 0 for c in base_cells)
    assert {c.base_cell for c in matrix.train_cells} == {c.name for c in base_cells}
    for recipe in (CONFIG_DIR / "study").glob("*_*.yaml"):  # a recipe run on its own measures its base
        assert load_config(recipe).eval.at_start, recipe.name


def test_a_drifted_value_is_caught(tmp_path):
    """The check fails when a recipe changes without the doc (here: the learning rate)."""
    src = (CONFIG_DIR / "study" / "math_voting.yaml").read_text()
    drifted = tmp_path / "math_voting.yaml"
    drifted.write_text(src.replace("lr: 2.0e-5", "lr: 3.0e-5"))
    attrs = {"all", "math", "voting", "0.6B", "isolated"}
    original = CONFIG_DIR / "study" / "math_voting.yaml"
    assert mismatches(original, load_config(original), attrs, doc_table()) == []
    found = mismatches(drifted, load_config(drifted), attrs, doc_table())
    assert len(found) == 1 and "train.lr is 3e-05" in found[0]


STUDY_SHAPE = "qwen3-0.6b"


@pytest.fixture(scope="module")
def qwen3_0_6b(tmp_path_factory):
    from rolecast.policies.shapes import init_random_model

    return str(init_random_model(STUDY_SHAPE, tmp_path_factory.mktemp("qwen3_0_6b"), seed=0))


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(p.name for p in (CONFIG_DIR / "study").glob("*_*.yaml")))
def test_every_study_recipe_runs_one_step_on_a_random_qwen3_0_6b(recipe, qwen3_0_6b, tmp_path):
    """One step of each study recipe on a random-weight Qwen3 at the study's 0.6B shape with the real Qwen3
    tokenizer, the generation cap and the batch scaled down by overrides only (the fixture data stand in for
    the datasets, which are not available offline)."""
    from rolecast.training.grpo import train

    task = recipe.split("_")[0]
    data = {
        "math": {"task.options.path": str(FIX / "dapo_math_processed_en.jsonl")},
        "code": {"task.options.path": str(FIX / "deepcoder_primeintellect.jsonl"), "task.options.test_size": 2},
    }
    overrides = {
        "model.path": qwen3_0_6b,
        "model.dtype": "float32",
        "run_dir": str(tmp_path / "run"),
        "train.steps": 1,
        "train.warmup_steps": 0,
        "train.problems_per_step": 1,
        "train.group_size": 2,
        "train.mini_batch_size": 4,
        "rollout.max_new_tokens": 4,
        "eval.at_start": False,
        "eval.at_end": False,
        "checkpoint.every": 0,
        "logging.progress": False,
        "threads": 2,
        **data[task],
    }
    t0 = time.perf_counter()
    summary = train(load_config(CONFIG_DIR / "study" / recipe, overrides))
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 1 and summary["policies"]
    cfg_written = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert cfg_written["train"]["update_schedule"] == "per_minibatch" and cfg_written["eval"]["protocol"] == "study"
    print(f"{recipe}: one step in {time.perf_counter() - t0:.1f} s")
