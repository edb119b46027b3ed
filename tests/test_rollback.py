"""Rollback on early warning: choosing the checkpoint, when it fires, config errors, and the real loop on the
embedded testbed model with a forced warning (weights restored bit for bit, lr lowered, event logged, the cap
respected across a resume, and training before the rollback bit-identical to a run without it)."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from rolecast.config.load import load_config
from rolecast.core.errors import ConfigError
from rolecast.diagnostics.warnings import Alert, EarlyWarning
from rolecast.training.rollback import Rollback, best_checkpoint


def _row(step, acc, tag="periodic"):
    return {"step": step, "tag": tag, "pass@1": acc}


def test_best_checkpoint_by_eval_later_on_ties_else_latest():
    rows = [_row(0, 0.9, "base"), _row(2, 0.5), _row(4, 0.7), _row(6, 0.7), _row(8, 0.95)]
    assert best_checkpoint(rows, [2, 4, 6, 8], before=9) == (8, 0.95)
    assert best_checkpoint(rows, [2, 4, 6, 8], before=8) == (6, 0.7)  # 4 and 6 tie: the later one
    assert best_checkpoint(rows, [2, 4], before=9) == (4, 0.7)  # 6 and 8 were pruned
    assert best_checkpoint(rows + [_row(4, 0.2)], [2, 4], before=9) == (2, 0.5)  # a re-evaluation counts
    assert best_checkpoint([_row(0, 0.9, "base")], [3, 5], before=9) == (5, None)  # none evaluated: latest
    assert best_checkpoint(rows, [], before=9) is None
    assert best_checkpoint(rows, [4], before=4) is None  # only a checkpoint of this very step


def _settings(**over):
    cfg = load_config(None, {"interventions.rollback.signals": ["grad_spike"], **over})
    return cfg.interventions.rollback


def _alert(name, step, subject="shared"):
    return Alert(name, "gradient", step, subject, 9.0, 5.0, "forced")


def test_due_counts_patience_cooldown_and_the_cap():
    rb = Rollback(
        _settings(
            **{
                "interventions.rollback.patience": 2,
                "interventions.rollback.cooldown": 2,
                "interventions.rollback.max_rollbacks": 2,
            }
        )
    )
    assert rb.due(1, [_alert("grad_spike", 1), _alert("capture", 1)]) == []  # streak 1 < patience 2
    assert rb.due(2, []) == []  # the streak breaks
    assert rb.due(3, [_alert("capture", 3)]) == []  # not a configured signal
    assert rb.due(4, [_alert("grad_spike", 4)]) == []
    assert rb.due(5, [_alert("grad_spike", 5, "a"), _alert("grad_spike", 5, "b")]) == ["grad_spike:a", "grad_spike:b"]
    rb.count, rb.last_step, rb.streaks = 1, 5, {}  # what decide() records
    for step in (6, 7):  # cooldown 2: steps 6 and 7 cannot fire, though the streak counts on
        assert rb.due(step, [_alert("grad_spike", step)]) == []
    assert rb.due(8, [_alert("grad_spike", 8)]) == ["grad_spike:shared"]
    rb.count = 2
    assert rb.due(9, [_alert("grad_spike", 9)]) == []  # max_rollbacks reached
    state = json.loads(json.dumps(rb.state_dict()))
    again = Rollback(_settings())
    again.load_state_dict(state)
    assert again.state_dict() == rb.state_dict()


def test_off_by_default_and_config_errors_name_the_field():
    assert Rollback.from_config(load_config(None).interventions.rollback) is None
    with pytest.raises(ConfigError, match=r"interventions.rollback.signals: unknown signal\(s\) \['grad_spikes'\]"):
        load_config(None, {"interventions.rollback.signals": ["grad_spikes"]})
    with pytest.raises(ConfigError, match=r"interventions.rollback.signals: .*checkpoint.every > 0"):
        load_config(None, {"interventions.rollback.signals": ["length_collapse"], "checkpoint.every": 0})
    with pytest.raises(ConfigError, match=r"\['amplification'\] come from gradient diagnostics"):
        load_config(None, {"interventions.rollback.signals": ["amplification"], "diagnostics.gradients.every": 0})
    assert load_config(None, {"interventions.rollback.signals": ["amplification"]}).diagnostics.gradients.every == 4
    with pytest.raises(ConfigError, match="lr_factor"):
        load_config(None, {"interventions.rollback.signals": ["grad_spike"], "interventions.rollback.lr_factor": 0})
    with pytest.raises(ConfigError, match="max_rollbacks"):
        load_config(None, {"interventions.rollback.max_rollbacks": 0})


# ---------------------------------------------------------------------------------------------------------
# In the training loop


FORCED = (5, 6)  # steps at whose end a grad_spike alert is forced


@pytest.fixture
def forced_warning(monkeypatch):
    check = EarlyWarning.check

    def forced(self, step, metrics, episodes=()):
        return check(self, step, metrics, episodes) + ([_alert("grad_spike", step)] if step in FORCED else [])

    monkeypatch.setattr(EarlyWarning, "check", forced)


def _run(run_dir, stop_after=None, resume=False, **over):
    from rolecast.training.grpo import train

    base = {
        "model.path": "testbed",  # trained: it scores, so advantages and updates are not 0
        "run_dir": str(run_dir),
        "workflow.name": "single",
        "train.steps": 6,
        "train.problems_per_step": 2,
        "train.group_size": 4,
        "train.lr": 1.0e-3,
        "rollout.max_new_tokens": 6,
        "eval.every": 2,
        "eval.size": 16,
        "eval.at_start": False,
        "eval.at_end": False,
        "checkpoint.every": 2,
        "checkpoint.keep_last": 10,
        "logging.progress": False,
        "logging.episodes_every": 0,
        "threads": 1,  # bit-reproducible updates on a loaded machine (see tests/test_gradients.py)
    }
    train(load_config(None, {**base, **over}), stop_after=stop_after, resume=run_dir if resume else None)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _ckpt(run_dir, step):
    from rolecast.training.checkpoint import load_checkpoint

    return load_checkpoint(run_dir, step)[1]


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


ROLLBACK = {
    "interventions.rollback.signals": ["grad_spike"],
    "interventions.rollback.lr_factor": 0.25,
    "interventions.rollback.max_rollbacks": 1,
    "interventions.rollback.cooldown": 0,
}


def test_forced_warning_rolls_back_to_the_best_checkpoint(tmp_path, forced_warning, caplog):
    caplog.set_level(logging.WARNING, logger="rolecast.training")
    rb_dir, plain_dir = tmp_path / "rollback", tmp_path / "plain"
    rows = _run(rb_dir, stop_after=5, **ROLLBACK)  # the session ends at step 5 and checkpoints it

    evals = [json.loads(x) for x in (rb_dir / "eval.jsonl").read_text().splitlines()]
    periodic = {r["step"]: r["pass@1"] for r in evals if r["tag"] == "periodic"}
    assert sorted(periodic) == [2, 4]
    best = max(periodic, key=lambda s: (periodic[s], s))
    event = rows[4]
    assert event["warn/grad_spike"] == 1.0
    assert event["rollback/to_step"] == best and event["rollback/count"] == 1
    assert event["rollback/lr_scale"] == 0.25 and event["rollback/signals"] == "grad_spike:shared"
    assert event["rollback/accuracy"] == periodic[best]
    assert not any(k.startswith("rollback/") for r in rows[:4] for k in r)
    assert any(f"rollback 1/1 to checkpoint step_{best}" in m for m in caplog.messages)

    after, target = _ckpt(rb_dir, 5), _ckpt(rb_dir, best)
    assert _same(after["policy/shared"], target["policy/shared"])  # the weights, bit for bit
    assert not _same(after["policy/shared"], _ckpt(rb_dir, 4 if best == 2 else 2)["policy/shared"])
    opt_after, opt_target = after["optim/shared"], target["optim/shared"]
    for i, st in opt_target["state"].items():  # Adam's moments and step count of the same checkpoint
        assert all(torch.equal(st[k], opt_after["state"][i][k]) for k in st)
    assert opt_after["param_groups"][0]["lr"] == pytest.approx(0.25e-3)
    assert after["sched/shared"]["last_epoch"] == 5  # the schedule keeps its position
    assert after["rollback"]["count"] == 1 and after["rollback"]["events"][0]["to_step"] == best

    from rolecast.report.analyze import analyze, format_summary

    summary = analyze(rb_dir, plots=False)
    assert summary["rollbacks"] == [
        {
            "step": 5,
            "to_step": best,
            "count": 1,
            "lr_scale": 0.25,
            "signals": "grad_spike:shared",
            "accuracy": periodic[best],
        }
    ]
    assert f"rollback 1: at step 5 to checkpoint step_{best} (eval pass@1" in format_summary(summary)

    # resumed: step 6 warns again, but max_rollbacks 1 was reached (the count came back from the checkpoint)
    rows = _run(rb_dir, resume=True, **ROLLBACK)
    assert len(rows) == 6 and rows[5]["warn/grad_spike"] == 1.0
    assert not any(k.startswith("rollback/") for k in rows[5])
    assert rows[5]["policy/shared/lr"] == pytest.approx(0.25e-3)  # the lowered lr goes on
    assert _ckpt(rb_dir, 6)["rollback"]["count"] == 1

    # an uninterrupted run rolls back at the same step to the same checkpoint and ends where the resumed one does
    # (to float tolerance: a resumed run's sampler log-probs differ in the last bits, see tests/test_gradients.py)
    full = _run(tmp_path / "full", **ROLLBACK)
    assert [sorted(r) for r in full] == [sorted(r) for r in rows]
    for f, r in zip(full, rows, strict=True):
        for k, v in f.items():
            assert (r[k] == pytest.approx(v, rel=1e-5, abs=1e-8)) if isinstance(v, float) else r[k] == v, k
    w_full, w_resumed = _ckpt(tmp_path / "full", 6)["policy/shared"], _ckpt(rb_dir, 6)["policy/shared"]
    for k in w_full:
        torch.testing.assert_close(w_resumed[k], w_full[k], atol=1e-6, rtol=1e-5)

    # until it fires, a run with rollback configured trains bit for bit like one without
    plain = _run(plain_dir, stop_after=4)
    assert plain == rows[:4]
    assert _same(_ckpt(plain_dir, 4)["policy/shared"], _ckpt(rb_dir, 4)["policy/shared"])


def test_analyze_lists_lr_cuts_beside_rollbacks():
    """An lr cut logs `rollback/action: lr_cut` and no `to_step`; analyze used to find rollbacks by `to_step` alone
    and left every lr cut out of the summary."""
    from rolecast.report.analyze import _rollback_line, rollbacks

    rows = [
        {"step": 1, "loss": 0.1},
        {"step": 2, "rollback/action": "lr_cut", "rollback/count": 1, "rollback/lr_scale": 0.5,
         "rollback/signals": "probe_ll_change:shared"},
        {"step": 4, "rollback/to_step": 2, "rollback/count": 2, "rollback/lr_scale": 0.25,
         "rollback/signals": "grad_spike:shared"},
    ]  # fmt: skip
    found = rollbacks(rows)
    assert [(r["step"], r.get("action"), r.get("to_step"), r["lr_scale"]) for r in found] == [
        (2, "lr_cut", None, 0.5),
        (4, None, 2, 0.25),
    ]
    assert _rollback_line(found[0]) == "lr cut 1: at step 2 (lr x0.5) on probe_ll_change:shared"
    assert _rollback_line(found[1]).startswith("rollback 2: at step 4 to checkpoint step_2 (latest checkpoint")
