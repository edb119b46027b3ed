"""Data-parallel training (training/distributed.py): 2 processes over gloo equal 1 process on the same global batch.

The 2-process run is a real `torchrun` launch (python -m torch.distributed.run, rendezvous on 127.0.0.1) of
`rolecast.cli train`; the 1-process run is `train()` in this process with the same config. Rollouts use
`rollout.seed_per_prompt`, so each prompt samples the same tokens whichever process holds it, and rewards come
from `token_rewards.even_tokens` (a random-weight model is never correct), so every step has a gradient.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_trainer import tiny_config

from rolecast.config import dump_config
from rolecast.training.checkpoint import load_checkpoint
from rolecast.training.distributed import Dist
from rolecast.training.grpo import train

TESTS = Path(__file__).parent

# voting / isolated: two policies, three generator instances per episode (per-role diagnostics); 3 problems
# over 2 processes is an uneven split (2 + 1), so the normalisation by global counts matters
SETTINGS = {
    "workflow.name": "voting",
    "routing.sharing": "isolated",
    "train.steps": 3,
    "train.problems_per_step": 3,
    "train.group_size": 2,
    "train.attribution": "token_rewards:even_tokens",
    "rollout.seed_per_prompt": True,
    "rollout.max_new_tokens": 5,
    "eval.at_start": False,
    "eval.at_end": False,
    "diagnostics.gradients.every": 1,
    "threads": 1,
}

# per process, not about the update (each process counts its own backend calls and time)
LOCAL_KEYS = ("time/", "rollout/backend_calls", "rollout/requests")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _torchrun(nproc: int, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    env.pop("WORLD_SIZE", None)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(_free_port()),
        "-m",
        "rolecast.cli",
        *args,
    ]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


# the plain update: no per-instance gradients, one flat all-reduce per optimizer step
PLAIN = {**SETTINGS, "diagnostics.gradients.every": 0}


def _config_file(model_dir: str, run_dir: Path, settings: dict) -> str:
    """The resolved config the in-process run uses, as a file for the launched processes."""
    path = run_dir.parent / f"{run_dir.name}.yaml"
    path.write_text(dump_config(tiny_config(model_dir, run_dir, **settings)))
    return str(path)


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _assert_rows_match(got: list[dict], want: list[dict]) -> None:
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for g, w in zip(got, want, strict=True):
        keys = {k for k in w if not k.startswith(LOCAL_KEYS)}
        assert keys == {k for k in g if not k.startswith(LOCAL_KEYS)}
        for k in sorted(keys):
            a, b = g[k], w[k]
            if isinstance(b, float) and math.isfinite(b):
                assert a == pytest.approx(b, rel=1e-4, abs=1e-6), (g["step"], k)
            else:
                assert a == b, (g["step"], k)


def _assert_weights_match(got_dir: Path, want_dir: Path) -> None:
    step_g, got = load_checkpoint(got_dir)
    step_w, want = load_checkpoint(want_dir)
    assert step_g == step_w
    policies = sorted(k for k in want if k.startswith("policy/"))
    assert policies == ["policy/aggregator", "policy/generator"]
    for key in policies:
        assert set(got[key]) == set(want[key])
        for name, w in want[key].items():
            torch.testing.assert_close(got[key][name], w, rtol=1e-4, atol=1e-6, msg=f"{key} {name}")
        # the adapters trained: not all still at their initialisation (lora_B starts at zero)
        assert any(float(v.abs().sum()) > 0 for n, v in want[key].items() if "lora_B" in n)


@pytest.fixture(scope="module")
def one_process_run(tiny_model_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("one") / "run"
    train(tiny_config(tiny_model_dir, run_dir, **SETTINGS))
    return run_dir


@pytest.fixture(scope="module")
def one_process_plain(tiny_model_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("plain") / "run"
    train(tiny_config(tiny_model_dir, run_dir, **PLAIN))
    return run_dir


def test_two_processes_equal_one_on_the_same_global_batch(tiny_model_dir, one_process_run, tmp_path):
    run_dir = tmp_path / "two"
    res = _torchrun(2, ["train", "--config", _config_file(tiny_model_dir, run_dir, SETTINGS)], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    got, want = _rows(run_dir), _rows(one_process_run)
    assert len(got) == 3  # one writer: rank 1 logged nothing
    assert all(r["grad/generator/generator/norm"] > 0 for r in want)  # per-role norms of the global gradient
    _assert_rows_match(got, want)
    _assert_weights_match(run_dir, one_process_run)


def test_a_two_process_run_resumes_on_one_process(tiny_model_dir, one_process_plain, tmp_path):
    run_dir = tmp_path / "resumed"
    args = ["train", "--config", _config_file(tiny_model_dir, run_dir, PLAIN), "--stop-after", "2"]
    res = _torchrun(2, args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    assert len(_rows(run_dir)) == 2
    train(tiny_config(tiny_model_dir, run_dir, **PLAIN), resume=run_dir)
    want = _rows(one_process_plain)
    assert all(r["policy/generator/grad_norm"] > 0 for r in want)
    _assert_rows_match(_rows(run_dir), want)
    _assert_weights_match(run_dir, one_process_plain)


def test_shards_are_contiguous_and_cover_everything():
    items = list(range(7))
    shards = [Dist(rank=r, world=3).shard(items) for r in range(3)]
    assert shards == [[0, 1, 2], [3, 4], [5, 6]]
    assert Dist().shard(items) == items


class _Ranks(Dist):
    """Rank `rank` of a run whose processes hold `counts` items: `gather` answers as the process group would."""

    def __init__(self, rank: int, counts: list[int]):
        super().__init__(rank=rank, world=len(counts))
        self.counts = counts

    def gather(self, obj):
        assert obj == self.counts[self.rank]
        return list(self.counts)


def test_minibatches_split_one_global_shuffle_across_processes():
    import random

    items = [f"t{i}" for i in range(11)]
    want = items[:]
    random.Random(5).shuffle(want)  # what one process does (the per_minibatch update before this change)
    assert Dist().minibatches(items, random.Random(5), 4) == [want[0:4], want[4:8], want[8:11]]
    counts = [6, 0, 5]  # an uneven split, and a process with no turns at all
    shares, start = [], 0
    for rank, n in enumerate(counts):
        shares.append(_Ranks(rank, counts).minibatches(items[start : start + n], random.Random(5), 4))
        start += n
    assert all(len(s) == 3 for s in shares)  # every process runs every optimizer step
    for k, mb in enumerate([want[0:4], want[4:8], want[8:11]]):
        got = [x for s in shares for x in s[k]]
        assert sorted(got) == sorted(mb)  # each mini-batch is the one-process mini-batch, split by owner
        assert all(s[k] == [x for x in mb if x in s[k]] for s in shares)  # in the shuffled order


MINIBATCH = {**PLAIN, "train.update_schedule": "per_minibatch", "train.mini_batch_size": 4, "train.epochs": 2}


def test_two_processes_equal_one_with_per_minibatch_updates(tiny_model_dir, tmp_path):
    """The study's schedule: several optimizer steps per training step, each on a shuffled mini-batch of the
    global batch; 2 processes take the same mini-batches as 1, so metrics and weights match."""
    one = tmp_path / "one"
    train(tiny_config(tiny_model_dir, one, **MINIBATCH))
    want = _rows(one)
    assert all(r["policy/generator/optimizer_steps"] >= 4 for r in want)  # 2 epochs x >= 2 mini-batches
    run_dir = tmp_path / "two"
    res = _torchrun(2, ["train", "--config", _config_file(tiny_model_dir, run_dir, MINIBATCH)], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    _assert_rows_match(_rows(run_dir), want)
    _assert_weights_match(run_dir, one)


def test_seed_per_prompt_samples_do_not_depend_on_the_other_rows(tiny_model_dir):
    """What makes the comparison above exact: a prompt samples the same tokens alone or beside others."""
    from rolecast.policies.models import PolicySet, load_tokenizer
    from rolecast.rollout.engine import GenRequest
    from rolecast.rollout.hf import HFBackend

    tok = load_tokenizer(tiny_model_dir)
    ps = PolicySet(tiny_model_dir, ["p"], mode="full", seed=0)

    def sample(contents: list[str], per_prompt: bool) -> dict[str, list[list[int]]]:
        backend = HFBackend(ps, tok, max_new_tokens=6, temperature=1.0, seed=0, seed_per_prompt=per_prompt)
        backend.reseed(11)
        reqs = [GenRequest("p", [{"role": "user", "content": c}]) for c in contents for _ in range(2)]
        out: dict[str, list[list[int]]] = {}
        for r, g in zip(reqs, backend.generate(reqs), strict=True):
            out.setdefault(r.messages[0]["content"], []).append(g.completion_ids)
        return out

    together = sample(["solve: 1 + 2", "solve: 3 + 4"], per_prompt=True)
    alone = sample(["solve: 3 + 4"], per_prompt=True)
    assert together["solve: 3 + 4"] == alone["solve: 3 + 4"]
    assert together["solve: 3 + 4"][0] != together["solve: 3 + 4"][1]  # the rows of a group still differ
    # one seed for the whole batch (the default): the second prompt's rows draw other uniforms beside the first
    assert (
        sample(["solve: 1 + 2", "solve: 3 + 4"], False)["solve: 3 + 4"]
        != sample(["solve: 3 + 4"], False)["solve: 3 + 4"]
    )


def test_a_process_without_problems_still_takes_part(tiny_model_dir, tmp_path):
    """One problem over two processes: rank 1 has no episodes, yet joins every reduction (no deadlock)."""
    run_dir = tmp_path / "idle"
    settings = {**PLAIN, "train.problems_per_step": 1, "train.steps": 1}
    res = _torchrun(2, ["train", "--config", _config_file(tiny_model_dir, run_dir, settings)], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    (row,) = _rows(run_dir)
    assert row["episodes"] == 2 and row["policy/generator/grad_norm"] > 0
