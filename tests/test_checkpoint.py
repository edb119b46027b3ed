"""Checkpoints survive a SIGKILL mid-write, prune to keep-last-N and resume training bit-for-bit;
LR schedules (whose state they carry) give the documented factors."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rolecast.training.checkpoint import (
    CheckpointError,
    capture_rng_state,
    latest_step,
    list_checkpoints,
    load_checkpoint,
    required_entry,
    restore_rng_state,
    save_checkpoint,
)
from rolecast.training.optimizer import constant, warmup_cosine

# ---------------------------------------------------------------------------------------------------------
# Crash safety: a real writer process, killed at chosen points

WRITER = r"""
import sys, time, torch
from rolecast.training import checkpoint
run_dir, stop_at = sys.argv[1], sys.argv[2]
g = torch.Generator().manual_seed(0)
step1 = {"policies/gen": {"w": torch.randn(64, 64, generator=g)}, "trainer": {"step": 1}}
checkpoint.save_checkpoint(run_dir, 1, step1)
print("saved 1", flush=True)
big = torch.randn(4096, 4096, generator=g)  # 64 MiB: writing it takes far longer than the parent's poll
def hook(label):  # after each durable stage of a write: print it, and hang at the chosen one to be killed there
    print(label, flush=True)
    if label == stop_at:
        time.sleep(600)
write_entry, replace_dir = checkpoint._write_entry, checkpoint._replace_dir
def write_entry_then_hook(directory, name, value):
    entry = write_entry(directory, name, value)
    hook(f"wrote {entry['file']}")
    return entry
def replace_dir_then_hook(src, dst):
    replace_dir(src, dst)
    hook("renamed")
checkpoint._write_entry, checkpoint._replace_dir = write_entry_then_hook, replace_dir_then_hook
step2 = {"policies/gen": {"w": big}, "optim/gen": {"m": big.clone()}, "trainer": {"step": 2}}
checkpoint.save_checkpoint(run_dir, 2, step2)
print("saved 2", flush=True)
"""


def _step1_state() -> dict:
    g = torch.Generator().manual_seed(0)
    return {"policies/gen": {"w": torch.randn(64, 64, generator=g)}, "trainer": {"step": 1}}


def _run_writer_and_kill(run_dir: Path, stop_at: str) -> None:
    cmd = [sys.executable, "-c", WRITER, str(run_dir), stop_at]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "saved 1"
        if stop_at == "mid-file":  # no hook: kill as soon as the temp dir of step 2 appears
            ckpts = run_dir / "checkpoints"
            deadline = time.monotonic() + 60
            while not any(p.name.startswith("step_2.tmp-") for p in ckpts.iterdir()):
                assert time.monotonic() < deadline, "writer never started step 2"
                time.sleep(0.001)
        else:
            for line in proc.stdout:
                if line.strip() == stop_at:
                    break
            else:
                pytest.fail(f"writer exited without reaching {stop_at!r}")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("stop_at", ["mid-file", "wrote policies%2Fgen.safetensors", "renamed"])
def test_sigkill_during_save_leaves_previous_checkpoint_loadable(tmp_path: Path, stop_at: str) -> None:
    _run_writer_and_kill(tmp_path, stop_at)
    ckpts = tmp_path / "checkpoints"
    if stop_at == "renamed":
        # killed after step_2 was complete but before `latest` moved: the pointer still says 1
        assert (ckpts / "step_2" / "manifest.json").is_file() and (ckpts / "latest").read_text().strip() == "1"
    else:
        assert not (ckpts / "step_2").exists()
        assert any(p.name.startswith("step_2.tmp-") for p in ckpts.iterdir())  # really died mid-write
    step, state = load_checkpoint(tmp_path)
    want = _step1_state()
    assert step == 1 and state["trainer"] == want["trainer"]
    assert torch.equal(state["policies/gen"]["w"], want["policies/gen"]["w"])
    # the next save works and sweeps the dead writer's leftovers
    save_checkpoint(tmp_path, 2, {"trainer": {"step": 2}})
    assert load_checkpoint(tmp_path)[0] == 2
    assert sorted(p.name for p in ckpts.iterdir()) == ["latest", "step_1", "step_2"]


# ---------------------------------------------------------------------------------------------------------
# Layout, pruning, pointer fallback


def _names(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir())


def test_keep_last_n_pruning(tmp_path: Path) -> None:
    for s in range(1, 6):
        save_checkpoint(tmp_path, s, {"trainer": {"step": s}}, keep_last=2)
    assert _names(tmp_path) == ["latest", "step_4", "step_5"] and list_checkpoints(tmp_path) == [4, 5]
    save_checkpoint(tmp_path, 6, {"trainer": {"step": 6}}, keep_last=3)
    assert _names(tmp_path) == ["latest", "step_4", "step_5", "step_6"]
    # rolling back and re-saving an older step never prunes the one just written
    save_checkpoint(tmp_path, 2, {"trainer": {"step": 2}}, keep_last=2)
    assert _names(tmp_path) == ["latest", "step_2", "step_6"]
    assert load_checkpoint(tmp_path) == (2, {"trainer": {"step": 2}})  # the pointer, not the highest number
    # re-saving an existing step replaces it
    save_checkpoint(tmp_path, 2, {"trainer": {"step": 2, "again": True}}, keep_last=2)
    assert load_checkpoint(tmp_path)[1] == {"trainer": {"step": 2, "again": True}}
    assert load_checkpoint(tmp_path, step=6)[1] == {"trainer": {"step": 6}}
    with pytest.raises(ValueError):
        save_checkpoint(tmp_path, 7, {}, keep_last=0)


def test_stale_or_corrupt_pointer_falls_back_to_newest_complete(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path)
    assert latest_step(tmp_path) is None
    for s in (3, 4):
        save_checkpoint(tmp_path, s, {"trainer": {"step": s}}, keep_last=5)
    ckpts = tmp_path / "checkpoints"
    (ckpts / "step_9.tmp-1").mkdir()  # a leftover with a higher step, and an incomplete dir: both ignored
    (ckpts / "step_8").mkdir()
    assert list_checkpoints(tmp_path) == [3, 4]
    for pointer in ("garbage", "", "7"):
        (ckpts / "latest").write_text(pointer)
        assert load_checkpoint(tmp_path)[0] == 4
    (ckpts / "latest").unlink()
    assert latest_step(tmp_path) == 4
    (ckpts / "latest").write_text("3\n")
    assert load_checkpoint(tmp_path)[0] == 3
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path, step=8)


def test_entry_formats_and_round_trip(tmp_path: Path) -> None:
    emb = torch.randn(5, 3)
    weights = {"embed.weight": emb, "lm_head.weight": emb, "norm": torch.ones(3, dtype=torch.bfloat16)}  # tied
    state = {
        "policies/gen": weights,
        "trainer": {"step": 3, "best": 0.5, "tags": ["a"]},
        "odd": {"t": (1, 2), 0: "int key", "x": torch.arange(3)},
        "rng": capture_rng_state(),
    }
    path = save_checkpoint(tmp_path, 3, state)
    manifest = json.loads((path / "manifest.json").read_text())
    assert {k: v["format"] for k, v in manifest["entries"].items()} == {
        "policies/gen": "safetensors",
        "trainer": "json",
        "odd": "torch",
        "rng": "torch",
    }
    step, got = load_checkpoint(tmp_path)
    assert step == 3 and got["trainer"] == state["trainer"]
    assert all(torch.equal(got["policies/gen"][k], v) for k, v in weights.items())
    assert got["policies/gen"]["norm"].dtype == torch.bfloat16
    assert got["odd"]["t"] == (1, 2) and got["odd"][0] == "int key" and torch.equal(got["odd"]["x"], torch.arange(3))
    with pytest.raises(TypeError, match="weights_only"):
        save_checkpoint(tmp_path, 4, {"bad": {"x": object()}})
    assert latest_step(tmp_path) == 3 and not any(".tmp-" in n for n in _names(tmp_path))


def test_rng_capture_restore_round_trips_through_checkpoint(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    save_checkpoint(tmp_path, 1, {"rng": capture_rng_state()})
    first = (random.random(), np.random.rand(), torch.rand(3))
    restore_rng_state(load_checkpoint(tmp_path)[1]["rng"])
    again = (random.random(), np.random.rand(), torch.rand(3))
    assert first[:2] == again[:2] and torch.equal(first[2], again[2])


# ---------------------------------------------------------------------------------------------------------
# Resume equals the uninterrupted run, bit for bit


def _setup() -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    return model, opt, warmup_cosine(opt, warmup_steps=2, total_steps=10, min_lr_ratio=0.1)


def _train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, sched: torch.optim.lr_scheduler.LambdaLR) -> None:
    x = torch.randn(16, 4)  # drawn from the global RNG, so resuming must restore it too
    loss = (model(x) - x[:, :2]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()


def test_optimizer_resume_is_bit_exact(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, opt, sched = _setup()
    for _ in range(3):
        _train_step(model, opt, sched)
    save_checkpoint(
        tmp_path,
        3,
        {
            "policies/p": model.state_dict(),
            "optim/p": opt.state_dict(),
            "scheduler/p": sched.state_dict(),
            "rng": capture_rng_state(),
        },
    )
    for _ in range(2):
        _train_step(model, opt, sched)
    reference = {k: v.clone() for k, v in model.state_dict().items()}

    torch.manual_seed(123)  # a fresh process would start from other RNG and other weights
    model2, opt2, sched2 = _setup()
    _, state = load_checkpoint(tmp_path)
    model2.load_state_dict(state["policies/p"])
    opt2.load_state_dict(state["optim/p"])
    sched2.load_state_dict(state["scheduler/p"])
    restore_rng_state(state["rng"])
    for _ in range(2):
        _train_step(model2, opt2, sched2)
    assert all(torch.equal(reference[k], v) for k, v in model2.state_dict().items())
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]


# ---------------------------------------------------------------------------------------------------------
# LR schedules


def _factors(make, steps: int) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = make(opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"] / 2.0)
        opt.step()
        sched.step()
    return out


def test_warmup_cosine_values() -> None:
    f = _factors(lambda o: warmup_cosine(o, warmup_steps=4, total_steps=12, min_lr_ratio=0.1), 15)
    # warmup (k+1)/5: .2 .4 .6 .8; then .1 + .9 * (1 + cos(pi * (k-4)/8)) / 2; flat at .1 after step 12
    cosine = [0.1 + 0.45 * (1 + math.cos(math.pi * (k - 4) / 8)) for k in range(4, 13)]
    want = [0.2, 0.4, 0.6, 0.8] + cosine + [0.1, 0.1]
    assert f == pytest.approx(want)
    assert f[4] == pytest.approx(1.0) and f[8] == pytest.approx(0.55) and f[12] == pytest.approx(0.1)
    c = 0.5 * math.cos(math.pi / 4)
    assert _factors(lambda o: warmup_cosine(o, 0, 4), 5) == pytest.approx([1.0, 0.5 + c, 0.5, 0.5 - c, 0.0])


def test_constant_values() -> None:
    assert _factors(constant, 3) == [1.0, 1.0, 1.0]
    assert _factors(lambda o: constant(o, warmup_steps=3), 5) == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0])


# ---------------------------------------------------------------------------------------------------------
# Damaged checkpoints: detected by size and sha256, skipped for the newest intact one, never a deserializer error


def test_damaged_checkpoints_fall_back_to_the_newest_intact_one(tmp_path: Path, caplog) -> None:
    g = torch.Generator().manual_seed(0)
    for s in (1, 2, 3):
        save_checkpoint(
            tmp_path, s, {"policy/p": {"w": torch.randn(32, 32, generator=g)}, "trainer": {"step": s}}, keep_last=3
        )
    ckpts = tmp_path / "checkpoints"
    entry = json.loads((ckpts / "step_3" / "manifest.json").read_text())["entries"]["policy/p"]
    weights = ckpts / "step_3" / entry["file"]
    assert entry["bytes"] == weights.stat().st_size and len(entry["sha256"]) == 64
    # same size, one flipped byte: only the checksum sees it (safetensors would load it silently)
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with caplog.at_level("WARNING"):
        step, state = load_checkpoint(tmp_path)
    assert step == 2 and state["trainer"] == {"step": 2}
    assert f"checkpoint step_3 is damaged: {weights} does not match its sha256" in caplog.text
    assert "using checkpoint step_2" in caplog.text
    (ckpts / "step_2" / "trainer.json").unlink()  # a missing file
    weights_1 = ckpts / "step_1" / entry["file"]
    weights_1.write_bytes(weights_1.read_bytes()[:50])  # a truncated one
    with pytest.raises(CheckpointError, match=r"no intact checkpoint .*trainer.json is missing.*has 50 bytes"):
        load_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="step_3 is damaged"):
        load_checkpoint(tmp_path, step=3)


# ---------------------------------------------------------------------------------------------------------
# Each distinct tensor of a weights entry is written once


def test_tied_and_repeated_tensors_are_written_once_and_read_back_bit_for_bit(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    embed = torch.randn(256, 64, generator=g)
    zeros, negative_zeros = torch.zeros(64, 8), torch.zeros(64, 8).neg()  # equal as numbers, not as bytes
    weights = {
        "model.embed_tokens.weight": embed,
        "lm_head.weight": embed,  # tied: the same storage
        "layer.0.lora_B": zeros,
        "layer.1.lora_B": zeros.clone(),  # equal bytes, another storage
        "layer.2.lora_B": negative_zeros,
        "layer.0.lora_A": torch.randn(8, 64, generator=g),
        "steps": torch.arange(5),
        "steps_again": torch.arange(5),
        "half": embed.bfloat16(),  # the embedding's numbers in another dtype: its own tensor
    }
    save_checkpoint(tmp_path, 1, {"policy/p": weights, "trainer": {"step": 1}})
    _, state = load_checkpoint(tmp_path)
    got = state["policy/p"]
    assert got.keys() == weights.keys()
    for k, v in weights.items():
        assert got[k].dtype == v.dtype and torch.equal(
            got[k].view(-1).view(torch.uint8), v.view(-1).view(torch.uint8)
        ), k
    assert str(got["layer.2.lora_B"][0, 0].item()) == "-0.0"
    got["lm_head.weight"].add_(1.0)  # each read-back tensor is its own
    assert torch.equal(got["model.embed_tokens.weight"], embed)
    # on disk: the embedding, one zero matrix, the negative zeros, lora_A, one arange and the bf16 copy
    path = tmp_path / "checkpoints" / "step_1" / "policy%2Fp.safetensors"
    unique_bytes = (256 * 64 + 64 * 8 + 64 * 8 + 8 * 64) * 4 + 5 * 8 + 256 * 64 * 2
    assert unique_bytes < path.stat().st_size < unique_bytes + 4096


def test_a_missing_entry_is_named_with_the_entries_of_its_kind_the_checkpoint_holds():
    state = {"policy/a": {}, "optim/a": {}, "sched/a": {}, "rng": {}}
    assert required_entry(state, "optim/a", "optim/") == {}
    with pytest.raises(CheckpointError, match=r"no 'policy/b' entry \(it holds \['policy/a'\]\)"):
        required_entry(state, "policy/b")
    with pytest.raises(CheckpointError, match=r"no 'sched/b' entry \(it holds \['optim/a'\]\); was it written by"):
        required_entry(state, "sched/b", "optim/")
