"""Interruptions of `rolecast train`, for real: SIGINT to a training process (once: it finishes the step, checkpoints
it and prints one line with the resume command; twice: it stops at once), and a disk too small for the next
checkpoint (a tmpfs mounted here; skipped where mounting is not allowed): one line naming the step, the path and
the space, the checkpoints before intact, and the printed command resumes."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rolecast.config import dump_config
from rolecast.config.load import load_config
from rolecast.training.checkpoint import DiskFullError, latest_step, list_checkpoints, load_checkpoint, save_checkpoint

ROLECAST = str(Path(sys.executable).parent / "rolecast")


def tiny_run_config(model_dir: str, run_dir: Path, **overrides) -> dict:
    settings = {
        "model.path": model_dir,
        "model.trainable": "lora",
        "model.lora.r": 4,
        "run_dir": str(run_dir),
        "train.steps": 40,
        "train.problems_per_step": 4,
        "train.group_size": 8,
        "train.epochs": 1,
        "rollout.max_new_tokens": 16,
        "rollout.temperature": 1.0,
        "eval.at_start": False,
        "eval.at_end": False,
        "eval.every": 0,
        "checkpoint.every": 0,
        "logging.episodes_every": 0,
        "threads": 1,
        **overrides,
    }
    return settings


def write_config(path: Path, settings: dict) -> Path:
    path.write_text(dump_config(load_config(None, settings)))
    return path


def metrics_lines(run_dir: Path) -> int:
    p = run_dir / "metrics.jsonl"
    return len(p.read_text().splitlines()) if p.is_file() else 0


def start_training(config: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [ROLECAST, "train", "--config", str(config)],
        stdout=open(out / "stdout.txt", "w"),
        stderr=open(out / "stderr.txt", "w"),
    )


def wait_for_steps(proc: subprocess.Popen, run_dir: Path, n: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while metrics_lines(run_dir) < n:
        assert proc.poll() is None, "training ended before it was interrupted"
        assert time.monotonic() < deadline, f"no {n} steps within {timeout} s"
        time.sleep(0.05)


def stderr_lines(out: Path) -> list[str]:
    return [line for line in (out / "stderr.txt").read_text().splitlines() if line.strip()]


def test_ctrl_c_checkpoints_the_step_it_finishes_and_prints_the_resume_command(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    config = write_config(tmp_path / "run.yaml", tiny_run_config(tiny_model_dir, run_dir))
    proc = start_training(config, tmp_path)
    wait_for_steps(proc, run_dir, 2)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=300) == 130
    err = stderr_lines(tmp_path)
    assert not any("Traceback" in line for line in err), err
    assert err[0].startswith("Ctrl-C: finishing this step, then checkpointing it (Ctrl-C again stops at once)")
    m = re.fullmatch(r"rolecast: interrupted at step (\d+) of 40 \(checkpoint (.+)\); resume with: (.+)", err[-1])
    assert m and len(err) == 2, err
    step = int(m.group(1))
    # the step reached is the last one logged, and it is the checkpoint (checkpoint.every 0: written for the stop)
    assert step == metrics_lines(run_dir) >= 2
    assert Path(m.group(2)) == run_dir / "checkpoints" / f"step_{step}" and list_checkpoints(run_dir) == [step]
    assert m.group(3) == f"{ROLECAST} train --resume {run_dir}"
    # the printed command resumes (one more step here, to keep the test short)
    resumed = subprocess.run([*shlex.split(m.group(3)), "--stop-after", "1"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {run_dir} at step {step}" in resumed.stdout
    assert metrics_lines(run_dir) == step + 1 and list_checkpoints(run_dir)[-1] == step + 1


def test_a_second_ctrl_c_stops_at_once(tiny_model_dir, tmp_path):
    """The second SIGINT is sent once the first one's notice is out (two signals sent together may be delivered as
    one). A step can still end between the two; then the run stops as after one Ctrl-C, which is fine, and the
    scenario is tried again: at most 3 times, every outcome one line and no traceback."""
    notice = "Ctrl-C: finishing this step, then checkpointing it (Ctrl-C again stops at once)"
    outcomes = []
    for attempt in range(3):
        out = tmp_path / f"attempt{attempt}"
        out.mkdir()
        run_dir = out / "run"
        settings = tiny_run_config(
            tiny_model_dir, run_dir, **{"checkpoint.every": 1, "train.group_size": 16, "rollout.max_new_tokens": 32}
        )
        proc = start_training(write_config(out / "run.yaml", settings), out)
        wait_for_steps(proc, run_dir, 2)  # step 2 logged: checkpoint step_1 is written
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 60
        while notice not in (out / "stderr.txt").read_text():
            assert time.monotonic() < deadline and proc.poll() is None, stderr_lines(out)
            time.sleep(0.005)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
        err = stderr_lines(out)
        assert not any("Traceback" in line for line in err) and len(err) == 2, err
        outcomes.append(err[-1])
        m = re.fullmatch(
            r"rolecast: stopped at once at step (\d+) of 40 \((?:checkpoint|the newest checkpoint is) (.+/step_(\d+))\); "
            r"resume with: (.+)",
            err[-1],
        )
        if m is None:
            assert err[-1].startswith("rolecast: interrupted at step "), err  # the step ended first
            continue
        step, checkpoint = int(m.group(1)), int(m.group(3))
        # the step reached is checkpointed (checkpoint.every 1), unless the stop came while that checkpoint was
        # written; the one named is the one a resume loads
        assert checkpoint in (step, step - 1) and latest_step(run_dir) == checkpoint
        assert Path(m.group(2)) == run_dir / "checkpoints" / f"step_{checkpoint}"
        assert m.group(4) == f"{ROLECAST} train --resume {run_dir}"
        assert metrics_lines(run_dir) in (step, step + 1)  # the step in progress may have logged before it stopped
        return
    pytest.fail(f"the second Ctrl-C never landed within a step: {outcomes}")


# ---------------------------------------------------------------------------------------------------------
# A full disk


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs mounted at tmp_path/disk; `small_disk(size)` (re)mounts it with that size in bytes."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    mounted = []

    def mount(size: int) -> Path:
        size = -(-size // 4096) * 4096
        cmd = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)]
        if mounted:
            cmd = ["mount", "-o", f"remount,size={size}", str(mnt)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}): needs root")
        mounted.append(size)
        return mnt

    yield mount
    if mounted:
        subprocess.run(["umount", str(mnt)], check=False)


def test_a_checkpoint_larger_than_the_free_space_is_refused_before_writing(small_disk):
    disk = small_disk(1 << 20)
    with pytest.raises(DiskFullError) as e:
        save_checkpoint(disk, 3, {"w": torch.zeros(1 << 19)})  # 2 MiB of weights on a 1 MiB disk
    msg = str(e.value)
    assert msg.startswith(f"no space for checkpoint step_3 in {disk / 'checkpoints'}: it needs about 3 MB, the disk")
    assert msg.endswith("MB free; no checkpoint is kept") and "\n" not in msg
    assert list((disk / "checkpoints").iterdir()) == []


@pytest.mark.parametrize("entry", ["json", "torch"])
def test_a_disk_that_fills_during_a_write_keeps_the_previous_checkpoint(small_disk, entry):
    """The estimate counts tensors only, so a big plain entry passes the check and fills the disk mid-write: JSON
    (an OSError ENOSPC) or torch.save (a RuntimeError that never says so). Either way: one DiskFullError, the
    half-written directory gone, the checkpoint before it intact."""
    disk = small_disk(4 << 20)
    save_checkpoint(disk, 1, {"w": torch.ones(16)})
    big = list(range(1_000_000)) if entry == "json" else tuple(range(1_000_000))  # a tuple goes to .pt
    with pytest.raises(
        DiskFullError, match=r"no space for checkpoint step_2 .*the newest complete checkpoint is step_1$"
    ):
        save_checkpoint(disk, 2, {"w": torch.ones(16), "big": big})
    assert sorted(p.name for p in (disk / "checkpoints").iterdir()) == ["latest", "step_1"]
    step, state = load_checkpoint(disk)
    assert step == 1 and torch.equal(state["w"], torch.ones(16))


def test_rolecast_train_on_a_full_disk_says_one_line_and_the_printed_command_resumes(
    tiny_model_dir, tmp_path, small_disk
):
    from rolecast.training.grpo import train

    settings = {"model.trainable": "full", "train.steps": 2, "checkpoint.every": 1, "checkpoint.keep_last": 2}
    # one checkpoint's size, from the same run on an ordinary disk
    probe = tmp_path / "probe"
    train(load_config(None, {**tiny_run_config(tiny_model_dir, probe), **settings, "train.steps": 1}))
    ckpt = sum(f.stat().st_size for f in (probe / "checkpoints" / "step_1").iterdir())
    others = sum(f.stat().st_size for f in probe.rglob("*") if f.is_file() and "checkpoints" not in f.parts)
    assert ckpt > 1 << 20  # big enough that half of one is a clear margin
    # room for one checkpoint and the check's 1 MiB margin, not for a second one
    disk = small_disk(int(1.5 * ckpt) + (1 << 20) + 2 * others + (64 << 10))
    run_dir = disk / "run"
    config = write_config(tmp_path / "run.yaml", {**tiny_run_config(tiny_model_dir, run_dir), **settings})
    r = subprocess.run([ROLECAST, "train", "--config", str(config)], capture_output=True, text=True)
    assert r.returncode == 2
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and "Traceback" not in r.stderr, r.stderr
    m = re.fullmatch(
        rf"rolecast: error: no space for checkpoint step_2 in {re.escape(str(run_dir / 'checkpoints'))}: it needs "
        r"about \d+ MB, the disk has \d+ [kM]B free; the newest complete checkpoint is step_1; free space, then "
        r"resume with: (.+)",
        err[0],
    )
    assert m, err[0]
    assert list_checkpoints(run_dir) == [1] and not [
        p for p in (run_dir / "checkpoints").iterdir() if ".tmp-" in p.name
    ]
    small_disk(64 << 20)  # space freed
    resumed = subprocess.run(shlex.split(m.group(1)), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert list_checkpoints(run_dir) == [1, 2]
    assert [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()] == [1, 2]
