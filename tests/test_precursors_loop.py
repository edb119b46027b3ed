"""Precursors in the training loop (training/precursors.py, config diagnostics.precursors), end to end on the embedded
testbed model: the logged values against values recomputed here independently from the checkpoints and the base
model (plain HF forwards over each probe sequence, whole-vocabulary logits); a resumed run logs what an
uninterrupted one does; turning them on changes no training metric; a precursor as the trigger of an lr cut and of
a rollback; the config's checks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from test_resume import tiny as resume_tiny

from rolecast.core.errors import ConfigError
from rolecast.core.metric_keys import precursor_key
from rolecast.diagnostics.precursors import kl_exact
from rolecast.policies.models import load_model
from rolecast.training.checkpoint import load_checkpoint
from rolecast.training.grpo import train

PROBES = {
    "diagnostics.precursors.probe_size": 4,
    "diagnostics.precursors.probe_problems": 4,
    "diagnostics.precursors.canary_size": 4,
}


def tiny(run_dir: Path, **overrides):
    """test_resume's tiny testbed settings (full fine-tune; it solves about half the problems, so there are correct
    base rollouts), with evaluations only at start and end and every checkpoint kept."""
    return resume_tiny(run_dir, **{"eval.every": "auto", "checkpoint.keep_last": 10, **overrides})


def rows(run_dir: Path, name: str = "metrics.jsonl") -> list[dict]:
    return [json.loads(line) for line in (run_dir / name).read_text().splitlines()]


def without(rs: list[dict], *prefixes: str) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(prefixes) and k != "run"} for r in rs]


@pytest.fixture(scope="module")
def on_run(tmp_path_factory) -> Path:
    """Two steps with every precursor measured at each, and a checkpoint after each."""
    run_dir = tmp_path_factory.mktemp("precursors") / "run"
    train(tiny(run_dir, **{"diagnostics.precursors.every": 1, **PROBES}))
    return run_dir


def probe_sequences(run_dir: Path) -> tuple[dict, list]:
    """The checkpoint's precursor state and its probe sets as (pid, role, prompt_ids, completion_ids, logprobs)."""
    _, state = load_checkpoint(run_dir, 1)
    pre = state["precursors"]
    seqs = [
        (pid, role, p["prompt_ids"], p["completion_ids"], p["logprobs"])
        for pid, roles in pre["probes"].items()
        for role, probes in roles.items()
        for p in probes
    ]
    return pre, seqs


def completion_logits(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """The logits [C, V] that predict each completion token: one unpadded HF forward of the sequence."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    return logits[len(prompt) - 1 : len(prompt) + len(completion) - 1].double()


def with_weights(state: dict[str, torch.Tensor]):
    model = load_model("testbed")
    model.load_state_dict(state)
    return model.eval()


def test_the_probe_log_likelihood_at_the_base_is_the_base_models_and_the_sampler_agrees(on_run):
    pre, seqs = probe_sequences(on_run)
    assert seqs, "the testbed solves about half the problems: the probe set has correct outputs"
    assert all(len(ps) <= 4 for roles in pre["probes"].values() for ps in roles.values())
    base_model = load_model("testbed").eval()
    for pid, role in {(pid, role) for pid, role, *_ in seqs}:
        total = tokens = sampled = 0.0
        for p_, r_, prompt, completion, logprobs in seqs:
            if (p_, r_) != (pid, role):
                continue
            logp = torch.log_softmax(completion_logits(base_model, prompt, completion), -1)  # rollout T = 1
            total += float(logp.gather(-1, torch.tensor(completion)[:, None]).sum())
            tokens += len(completion)
            sampled += sum(logprobs)
        assert pre["base"]["probe_ll"][pid][role] == pytest.approx(total / tokens, rel=1e-5)
        assert pre["base"]["probe_ll"][pid][role] == pytest.approx(sampled / tokens, abs=1e-3)  # the sampler's
        # each logged change is the logged value minus the base
        for r in rows(on_run):
            ll = r[precursor_key("probe_ll", pid, role)]
            assert r[precursor_key("probe_ll_change", pid, role)] == pytest.approx(
                ll - pre["base"]["probe_ll"][pid][role]
            )


def test_kl_to_base_is_zero_before_the_first_update_and_the_exact_kl_of_the_checkpoint_after(on_run):
    pre, seqs = probe_sequences(on_run)
    assert pre["base"]["kl_to_base"] == {pid: 0.0 for pid in pre["probes"]}
    base_model = load_model("testbed").eval()
    logged = rows(on_run)
    for step in (1, 2):
        _, state = load_checkpoint(on_run, step)
        for pid in pre["probes"]:
            trained = with_weights(state[f"policy/{pid}"])
            logits, base_logits = [], []
            for p_, _, prompt, completion, _ in seqs:
                if p_ == pid:
                    logits.append(completion_logits(trained, prompt, completion))
                    base_logits.append(completion_logits(base_model, prompt, completion))
            stacked, base_stacked = torch.cat(logits)[None], torch.cat(base_logits)[None]
            expected = kl_exact(stacked, base_stacked, torch.ones(stacked.shape[:2]))
            value = logged[step - 1][precursor_key("kl_to_base", pid)]
            assert value > 0 and value == pytest.approx(expected, rel=1e-4)


def test_the_update_ratios_are_those_of_two_consecutive_checkpoints(on_run):
    base = load_model("testbed")
    names = [n for n, _ in base.named_parameters()]  # each trained tensor once (the head is tied to the embedding)
    weights = [base.state_dict()] + [load_checkpoint(on_run, s)[1]["policy/shared"] for s in (1, 2)]
    for step, r in enumerate(rows(on_run), start=1):
        w0, w1 = (weights[step - 1], weights[step])
        head0, head1 = w0["lm_head.weight"].double(), w1["lm_head.weight"].double()
        expected_head = float(torch.linalg.vector_norm(head1 - head0) / torch.linalg.vector_norm(head0))
        assert r[precursor_key("head_update_ratio", "shared")] == pytest.approx(expected_head, rel=1e-9)
        delta = sum(float(((w1[n].double() - w0[n].double()) ** 2).sum()) for n in names)
        norm = sum(float((w0[n].double() ** 2).sum()) for n in names)
        assert r[precursor_key("update_ratio", "shared")] == pytest.approx(math.sqrt(delta / norm), rel=1e-9)
        assert expected_head > 0


def test_the_canary_is_a_greedy_evaluation_of_its_problems(on_run):
    pre, _ = probe_sequences(on_run)
    assert len(pre["canary"]) == 4 and len(set(pre["canary"])) == 4
    logged = rows(on_run)
    base = pre["base"]["canary_accuracy"]
    for r in logged:
        acc = r[precursor_key("canary_accuracy")]
        assert acc in (0.0, 0.25, 0.5, 0.75, 1.0)  # a share of 4 problems, one greedy sample each
        assert r[precursor_key("canary_change")] == pytest.approx(acc - base)


def test_turning_precursors_on_changes_no_training_metric_and_no_evaluation(tmp_path, on_run):
    off = tmp_path / "off"
    train(tiny(off))
    assert not any(
        k.startswith("precursor/") or k in ("time/precursors", "time/update_ratios") for r in rows(off) for k in r
    )
    assert without(rows(off), "time/") == without(rows(on_run), "time/", "precursor/")
    assert without(rows(off, "eval.jsonl")) == without(rows(on_run, "eval.jsonl"))
    assert "precursors" not in load_checkpoint(off, 2)[1]


def test_lora_precursors_log_no_head_ratio_and_change_no_training_metric(tmp_path):
    lora = {"model.trainable": "lora", "train.lr": 1e-3, "train.steps": 2}
    train(tiny(tmp_path / "off", **lora))
    train(tiny(tmp_path / "on", **lora, **{"diagnostics.precursors.every": 2, **PROBES}))
    on = rows(tmp_path / "on")
    assert without(rows(tmp_path / "off"), "time/") == without(on, "time/", "precursor/")
    assert not any("head_update_ratio" in k for r in on for k in r)
    assert on[0][precursor_key("update_ratio", "shared")] > 0
    assert precursor_key("kl_to_base", "shared") not in on[0]  # every 2 steps
    assert on[1][precursor_key("kl_to_base", "shared")] > 0
    _, state = load_checkpoint(tmp_path / "on", 1)
    assert state["precursors"]["base"]["kl_to_base"] == {"shared": 0.0}  # the adapter starts at B = 0


def test_a_resumed_run_logs_the_precursors_an_uninterrupted_one_does(tmp_path):
    # 6 steps: entropy_slope (a window of 5 steps of role entropy) first appears after the resume at step 3, so it
    # reads rows the resumed process got back from metrics.jsonl
    over = {"train.steps": 6, "diagnostics.precursors.every": 2, **PROBES}
    train(tiny(tmp_path / "whole", **over))
    train(tiny(tmp_path / "split", **over), stop_after=3)
    train(tiny(tmp_path / "split", **over), resume=tmp_path / "split")
    whole, split = rows(tmp_path / "whole"), rows(tmp_path / "split")
    assert without(whole, "time/") == without(split, "time/")
    assert precursor_key("entropy_slope", "solver") in whole[4]  # subject: the role, as the series names it
    assert precursor_key("probe_ll", "shared", "solver") in whole[3] and precursor_key("canary_accuracy") in whole[5]


def test_a_users_precursor_is_logged_and_triggers_an_lr_cut(tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text("def reward_level(rows):\n    return {'run': [(r['step'], r['reward']) for r in rows]}\n")
    ref = f"{plugin}:reward_level"
    cfg = tiny(
        tmp_path / "run",
        **{
            "train.steps": 3,
            "diagnostics.precursors.every": 5,
            "diagnostics.precursors.use": [{"name": ref, "direction": "below"}],
            "interventions.rollback.precursors": [{"name": ref, "threshold": 2.0}],  # a reward is never 2
            "interventions.rollback.action": "lr_cut",
            "interventions.rollback.cooldown": 0,
            "interventions.rollback.max_rollbacks": 2,
            **PROBES,
        },
    )
    train(cfg)
    r1, r2, r3 = rows(tmp_path / "run")
    for r in (r1, r2, r3):
        assert r[precursor_key("reward_level")] == r["reward"]
    assert r1["rollback/action"] == "lr_cut" and r1["rollback/count"] == 1 and r1[f"warn/{ref}"] == 1.0
    assert "rollback/to_step" not in r1
    assert r1["policy/shared/lr"] == pytest.approx(1e-4)
    assert r2["policy/shared/lr"] == pytest.approx(0.5e-4) and r2["rollback/count"] == 2
    assert r3["policy/shared/lr"] == pytest.approx(0.25e-4) and "rollback/count" not in r3  # at most 2


def test_a_measured_precursor_triggers_a_rollback_to_a_checkpoint(tmp_path):
    cfg = tiny(
        tmp_path / "run",
        **{
            "train.steps": 3,
            "diagnostics.precursors.every": 1,
            "interventions.rollback.precursors": [{"name": "kl_to_base", "threshold": 0.0}],
            "interventions.rollback.cooldown": 0,
            **PROBES,
        },
    )
    train(cfg)
    r1, r2, _ = rows(tmp_path / "run")
    assert "rollback/count" not in r1  # it fired, but no checkpoint precedes step 1
    assert r1["warn/kl_to_base"] == 1.0
    assert r2["rollback/to_step"] == 1 and r2["rollback/signals"] == "kl_to_base:shared"


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"interventions.rollback.precursors": [{"name": "kl_to_base", "threshold": 0.1}]}, "every > 0"),
        (
            {
                "diagnostics.precursors.every": 1,
                "interventions.rollback.precursors": [{"name": "entropy", "threshold": 0.1}],
            },
            "not a precursor this run computes",
        ),
        (
            {
                "diagnostics.precursors.every": 5,
                "interventions.rollback.patience": 2,
                "interventions.rollback.precursors": [{"name": "probe_ll_change", "threshold": -0.1}],
            },
            "measured every 5 steps",
        ),
        (
            {
                "model.trainable": "lora",
                "diagnostics.precursors.every": 1,
                "interventions.rollback.precursors": [{"name": "head_update_ratio", "threshold": 0.1}],
            },
            "not logged with LoRA",
        ),
        ({"diagnostics.precursors.use": ["kl_to_base"]}, "computed by the loop anyway"),
        ({"diagnostics.precursors.use": ["no_such_one"]}, "unknown precursor"),
        ({"diagnostics.precursors.use": ["os.path:join"]}, "needs its direction"),
        ({"diagnostics.precursors.use": [{"name": "entropy", "direction": "sideways"}]}, "direction"),
        ({"diagnostics.precursors.every": -1}, "every"),
    ],
)
def test_the_config_names_what_is_wrong(tmp_path, over, message):
    with pytest.raises(ConfigError, match=message):
        tiny(tmp_path, **over)


def test_two_processes_cut_the_lr_on_rank_0s_precursor_trigger_as_one_process_does(tiny_model_dir, tmp_path):
    """Rank 0 measures and decides; every process must act on the trigger, or their weights part (torchrun over
    gloo, the data-parallel test's setting: a random model, token rewards, voting isolated)."""
    from test_distributed import SETTINGS, _assert_rows_match, _config_file, _rows, _torchrun
    from test_trainer import tiny_config

    settings = {
        **SETTINGS,
        "diagnostics.precursors.every": 1,
        "diagnostics.precursors.probe_problems": 2,
        "diagnostics.precursors.canary_size": 2,
        "interventions.rollback.precursors": [{"name": "update_ratio", "threshold": 0.0}],
        "interventions.rollback.action": "lr_cut",
        "interventions.rollback.cooldown": 0,
        "interventions.rollback.max_rollbacks": 2,
    }
    one, two = tmp_path / "one", tmp_path / "two"
    train(tiny_config(tiny_model_dir, one, **settings))
    res = _torchrun(2, ["train", "--config", _config_file(tiny_model_dir, two, settings)], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    got, want = _rows(two), _rows(one)
    assert [r.get("rollback/count") for r in want] == [1, 2, None]
    assert want[2]["policy/generator/lr"] == pytest.approx(0.25e-3)
    assert all(r[precursor_key("update_ratio", "generator")] > 0 for r in want)
    _assert_rows_match(got, want)
