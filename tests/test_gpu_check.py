"""bench/gpu_check.py imports and, on a machine without CUDA, stops at once with one clear line and a result file."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "gpu_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_without_cuda_it_says_so_and_writes_its_result_file(tmp_path, capsys):
    gpu_check = _load()
    out = tmp_path / "res" / "gpu_check.json"
    assert gpu_check.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no CUDA GPU" in err and str(out) in err
    result = json.loads(out.read_text())
    assert result["error"].startswith("no CUDA GPU") and result["cells"] == {}
    assert result["args"]["shapes"] == "qwen3-0.6b,qwen3-1.7b" and result["args"]["backends"] == "hf,vllm"


def test_the_result_file_defaults_to_out_dir(monkeypatch, tmp_path):
    gpu_check = _load()
    monkeypatch.setenv("OUT", str(tmp_path))
    assert gpu_check.out_path(None) == tmp_path / "gpu_check.json"
    assert gpu_check.out_path("x.json") == Path("x.json")
