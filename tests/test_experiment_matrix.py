"""The committed role-dynamics matrix (docs/experiments/role_dynamics.md) expands to the cells the write-up
reports, with the settings it states, and the pilot's overrides still validate."""

from __future__ import annotations

from rolecast.config import CONFIG_DIR
from rolecast.sweep import load_matrix

MATRIX = CONFIG_DIR / "experiments" / "role_dynamics.yaml"


def test_role_dynamics_matrix_expands_to_the_reported_cells(tmp_path):
    m = load_matrix(MATRIX, out=tmp_path)
    names = sorted(c.name for c in m.train_cells)
    assert names == sorted(
        [f"testbed-voting-testbed-{s}-s{seed}" for s in ("isolated", "shared", "isolated-damped") for seed in (0, 1)]
        + [f"testbed-orch_workers-testbed-{s}-s0" for s in ("isolated", "shared")]
    )
    assert sorted(c.name for c in m.cells if c.kind == "base_eval") == [
        "base-testbed-orch_workers-testbed-s0",
        "base-testbed-voting-testbed-s0",
        "base-testbed-voting-testbed-s1",
    ]
    for c in m.train_cells:
        cfg = c.config
        assert (cfg.train.steps, cfg.train.problems_per_step, cfg.train.lr, cfg.threads) == (60, 8, 1e-4, 1)
        assert (cfg.eval.every, cfg.eval.size, cfg.diagnostics.gradients.every) == (10, 200, 1)
        damped = "damped" in c.name
        assert cfg.interventions.coherence_damping == (0.5 if damped else 0.0)
        assert cfg.routing.sharing == ("shared" if "-shared-" in c.name else "isolated")
    pilot = load_matrix(
        MATRIX,
        out=tmp_path / "pilot",
        extra_set={
            "train.steps": 20,
            "train.problems_per_step": 4,
            "train.lr": 3e-4,
            "eval.every": 5,
            "eval.size": 100,
            "checkpoint.every": 5,
        },
    )
    assert {(c.config.train.steps, c.config.train.lr) for c in pilot.train_cells} == {(20, 3e-4)}
