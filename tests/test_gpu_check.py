"""bench/gpu_check.py imports and, on a machine without CUDA, stops at once with one clear line and a result file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from script_module import load_script

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_without_cuda_it_says_so_and_writes_its_result_file(tmp_path, capsys):
    gpu_check = load_script("bench/gpu_check.py")
    out = tmp_path / "res" / "gpu_check.json"
    assert gpu_check.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no CUDA GPU" in err and str(out) in err
    result = json.loads(out.read_text())
    assert result["error"].startswith("no CUDA GPU") and result["cells"] == {}
    assert result["args"]["shapes"] == "qwen3-0.6b,qwen3-1.7b" and result["args"]["backends"] == "hf,vllm"


def test_the_result_file_defaults_to_out_dir(monkeypatch, tmp_path):
    gpu_check = load_script("bench/gpu_check.py")
    monkeypatch.setenv("OUT", str(tmp_path))
    assert gpu_check.out_path(None) == tmp_path / "gpu_check.json"
    assert gpu_check.out_path("x.json") == Path("x.json")


def test_the_measuring_runs_end_to_end_on_the_cpu(tiny_model_dir, tmp_path):
    """The cell the script runs per (shape, backend), on the tiny model, the hf backend and the CPU: two Voting
    steps with 3 adapters, throughput, and the adapter-sync check after the updates."""
    gpu_check = load_script("bench/gpu_check.py")
    args = gpu_check.parse_args(["--problems", "2", "--group", "2", "--max-new-tokens", "6"])
    cell = gpu_check.run_cell(Path(tiny_model_dir), "hf", args, tmp_path, device="cpu", dtype="float32")
    assert cell["rollout_tokens"] > 0 and cell["rollout_tokens_per_s"] > 0 and cell["train_tokens_per_s"] > 0
    assert set(cell["loss"]) == {"policy/gen0/loss", "policy/gen1/loss", "policy/agg/loss"}
    assert cell["adapters_synced"] is True and cell["logprob_gap_mean"] < 1e-3
    assert cell["peak_gpu_gib_this_process"] is None
