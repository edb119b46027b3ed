"""model.device / model.dtype: validation at load, placement, bf16 training on the CPU, checkpoints across dtypes."""

from __future__ import annotations

import json
import math

import pytest
import torch
from test_trainer import tiny_config

from rolecast.config.load import load_config
from rolecast.config.schema import TrainSettings
from rolecast.core.devices import resolve_device, resolve_dtype, resolve_mixed_adapters
from rolecast.core.errors import ConfigError
from rolecast.policies.models import PolicySet
from rolecast.runtime import build_runtime
from rolecast.training.checkpoint import load_checkpoint, restore_trainer_state, save_checkpoint, trainer_state
from rolecast.training.grpo import train
from rolecast.training.optimizer import PolicyOptimizers

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")


@no_cuda
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_a_gpu_is_a_one_line_error_naming_the_field(device):
    with pytest.raises(ConfigError) as e:
        load_config(None, {"model.device": device})
    msg = str(e.value)
    assert "\n" not in msg and "model.device" in msg and "no CUDA GPU" in msg and repr(device) in msg


def test_a_device_that_is_not_one_is_refused():
    with pytest.raises(ConfigError, match=r"model\.device.*'gpu' is not a device; use cpu, cuda, cuda:N or auto"):
        load_config(None, {"model.device": "gpu"})


def test_auto_settings_resolve_per_device():
    assert resolve_dtype("auto", "cpu") == torch.float32
    assert resolve_dtype("auto", "cuda:0") == torch.bfloat16
    assert resolve_dtype("float16", "cpu") == torch.float16
    assert resolve_mixed_adapters("auto", "cpu") is False  # one fast-path pass per adapter on a CPU
    assert resolve_mixed_adapters("auto", "cuda:0") is True
    assert resolve_mixed_adapters(True, "cpu") is True
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def test_explicit_cpu_places_everything_on_the_cpu_and_trains(tiny_model_dir, tmp_path):
    overrides = {"model.device": "cpu", "workflow.name": "voting", "routing.sharing": "isolated"}
    cfg = tiny_config(tiny_model_dir, tmp_path / "run", **overrides)
    rt = build_runtime(cfg)
    assert rt.policies.device == torch.device("cpu") and rt.policies.dtype == torch.float32
    for m in rt.policies.unique_models():
        assert {p.device.type for p in m.parameters()} == {"cpu"}
        assert {b.device.type for b in m.buffers()} <= {"cpu"}
    backend = rt.backend
    assert backend.generator.device.type == "cpu"
    assert rt.policies.mixed_adapters is False  # auto on a CPU: one fast-path pass per adapter
    train(cfg)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(
        math.isfinite(r[f"policy/{p}/loss"]) for r in rows for p in ("generator", "aggregator")
    )


def test_bf16_base_trains_on_the_cpu_with_float32_adapters_and_optimizer_state(tiny_model_dir, tmp_path):
    cfg = tiny_config(
        tiny_model_dir,
        tmp_path / "run",
        **{"model.dtype": "bfloat16", "train.steps": 3, "train.attribution": "token_rewards:even_tokens"},
    )
    rt = build_runtime(cfg)
    model = rt.policies.unique_models()[0]
    assert model.get_base_model().model.embed_tokens.weight.dtype == torch.bfloat16
    assert {p.dtype for p in rt.policies.parameters("shared")} == {torch.float32}  # PEFT upcasts the adapters
    del rt
    train(cfg)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    assert all(math.isfinite(r["policy/shared/loss"]) and r["policy/shared/optimizer_steps"] >= 1 for r in rows)
    assert all(math.isfinite(r["policy/shared/grad_norm"]) and r["policy/shared/grad_norm"] > 0 for r in rows)
    _, state = load_checkpoint(tmp_path / "run")
    exp_avg = [v["exp_avg"] for v in state["optim/shared"]["state"].values()]
    assert exp_avg and {t.dtype for t in exp_avg} == {torch.float32}
    # the adapters moved: the weights at step 3 differ from a fresh initialisation
    fresh = PolicySet(tiny_model_dir, ["shared"], mode="lora", lora={"r": 4, "alpha": 8}, dtype="bfloat16")
    moved = [not torch.equal(v, fresh.state_dict("shared")[k]) for k, v in state["policy/shared"].items()]
    assert any(moved)


def _trained_full_policy(model_dir, dtype):
    """A full-fine-tuning policy in `dtype` after one AdamW step (so the optimizer has state to save); AdamW on the
    weights themselves (no float32 masters), so its moments are in `dtype` too."""
    policies = PolicySet(model_dir, ["p"], mode="full", dtype=dtype, seed=0)
    optim = PolicyOptimizers(policies, TrainSettings(lr=1e-3, lr_schedule="constant", fp32_master_weights=False))
    with policies.training("p") as model:
        ids = torch.tensor([[1, 2, 3, 4, 5]])
        model(input_ids=ids, labels=ids).loss.backward()
    optim.optimizer("p").step()
    return policies, optim


@pytest.mark.parametrize(("saved", "loaded"), [(torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16)])
def test_a_checkpoint_loads_into_a_run_of_another_dtype(tiny_model_dir, tmp_path, saved, loaded):
    src, src_optim = _trained_full_policy(tiny_model_dir, saved)
    save_checkpoint(tmp_path, 1, {**trainer_state(1, src), **src_optim.state_dict()})
    dst, dst_optim = _trained_full_policy(tiny_model_dir, loaded)
    _, state = load_checkpoint(tmp_path)
    restore_trainer_state(state, dst)
    dst_optim.load_state_dict(state)
    want = src.state_dict("p")
    got = dst.state_dict("p")
    assert {v.dtype for v in got.values() if v.is_floating_point()} == {loaded}
    for k, v in want.items():
        assert torch.equal(got[k], v.to(loaded)), k  # equal after the cast
    src_state, dst_state = (
        src_optim.optimizer("p").state_dict()["state"],
        dst_optim.optimizer("p").state_dict()["state"],
    )
    for i, s in src_state.items():
        for key in ("exp_avg", "exp_avg_sq"):
            assert dst_state[i][key].dtype == loaded
            assert torch.equal(dst_state[i][key], s[key].to(loaded))


def test_a_resume_may_change_the_device_but_not_the_dtype(tmp_path):
    from rolecast.config import resume_changes

    old = load_config(None, {"model.device": "auto"})
    assert resume_changes(old, load_config(None, {"model.device": "cpu"})) == {"model.device": ("auto", "cpu")}
    with pytest.raises(ConfigError, match=r"cannot resume with a changed model.dtype"):
        resume_changes(old, load_config(None, {"model.dtype": "bfloat16"}))
