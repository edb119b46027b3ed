"""`rolecast export`: a run's policies load with PEFT / transformers and give rolecast's own logits."""

from __future__ import annotations

import json

import pytest
import torch
from test_trainer import tiny_config

from rolecast.cli import main
from rolecast.policies.models import PolicySet
from rolecast.training.checkpoint import load_checkpoint, restore_policies
from rolecast.training.grpo import train

INPUT = "solve: 3 + 4 - 2 \\boxed{"
# a random model is never correct: reward even token ids (tests/token_rewards.py) so every step has a gradient
LEARNS = {"train.attribution": "token_rewards:even_tokens"}


def rolecast_logits(cfg, run_dir, pid, step, input_ids):
    """The logits of policy `pid` as rolecast holds it: the run's policies with checkpoint `step` restored."""
    policies = PolicySet(
        cfg.model.path,
        sorted({"lora": ["aggregator", "generator"], "full": ["shared"]}[cfg.model.trainable]),
        mode=cfg.model.trainable,
        lora=cfg.model.lora.model_dump(),
        seed=cfg.seed,
    )
    restore_policies(load_checkpoint(run_dir, step)[1], policies)
    with torch.no_grad(), policies.training(pid) as model:
        return model(input_ids=input_ids).logits


@pytest.fixture(scope="module")
def lora_run(tiny_model_dir, tmp_path_factory):
    run = tmp_path_factory.mktemp("lora") / "run"
    cfg = tiny_config(tiny_model_dir, run, **{"workflow.name": "voting", "routing.sharing": "isolated", **LEARNS})
    train(cfg)
    return cfg, run


def test_lora_policies_export_as_peft_adapters_with_rolecasts_logits(lora_run, tiny_model_dir, tmp_path, capsys):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg, run = lora_run
    out = tmp_path / "export"
    assert main(["export", str(run), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "generator: PEFT LoRA adapter" in printed and "exported step 2" in printed
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["step"] == 2 and manifest["base_model"] == tiny_model_dir
    assert {pid: p["roles"] for pid, p in manifest["policies"].items()} == {
        "generator": ["generator"],
        "aggregator": ["aggregator"],
    }
    readme = (out / "README.md").read_text()
    assert "| `generator` | generator | `generator/` | PEFT LoRA adapter |" in readme
    assert "| `aggregator` | aggregator | `aggregator/` | PEFT LoRA adapter |" in readme
    base_logits = None
    for pid in ("generator", "aggregator"):
        assert (out / pid / "adapter_config.json").is_file() and (out / pid / "adapter_model.safetensors").is_file()
        tokenizer = AutoTokenizer.from_pretrained(out / pid)
        ids = torch.tensor([tokenizer(INPUT)["input_ids"]])
        base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        if base_logits is None:
            with torch.no_grad():
                base_logits = base(input_ids=ids).logits
        model = PeftModel.from_pretrained(base, out / pid).eval()
        with torch.no_grad():
            exported = model(input_ids=ids).logits
        ours = rolecast_logits(cfg, run, pid, 2, ids)
        torch.testing.assert_close(exported, ours, rtol=0, atol=1e-5)
        assert (exported - base_logits).abs().max() > 1e-4  # the adapter was trained: not the base's logits


def test_full_fine_tune_exports_a_model_directory_and_step_picks_the_checkpoint(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = tmp_path / "run"
    cfg = tiny_config(tiny_model_dir, run, **{"model.trainable": "full", "checkpoint.keep_last": 2, **LEARNS})
    train(cfg)
    exported = {}
    for step in (1, 2):
        out = tmp_path / f"export{step}"
        assert main(["export", str(run), "--step", str(step), "--out", str(out)]) == 0
        assert f"at step {step}" in (out / "README.md").read_text()
        assert "| `shared` | solver | `shared/` | Hugging Face model |" in (out / "README.md").read_text()
        tokenizer = AutoTokenizer.from_pretrained(out / "shared")
        ids = torch.tensor([tokenizer(INPUT)["input_ids"]])
        model = AutoModelForCausalLM.from_pretrained(out / "shared").eval()
        with torch.no_grad():
            exported[step] = model(input_ids=ids).logits
        torch.testing.assert_close(exported[step], rolecast_logits(cfg, run, "shared", step, ids), rtol=0, atol=1e-5)
    assert (exported[1] - exported[2]).abs().max() > 1e-4  # two different checkpoints


def test_export_refuses_an_occupied_out_dir_and_a_non_run(lora_run, tmp_path, capsys):
    _, run = lora_run
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["export", str(run), "--out", str(out)]) == 2
    assert "already holds files" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "mine"
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "x")]) == 2
    assert "not a rolecast run directory" in capsys.readouterr().err
    assert main(["export", str(run), "--step", "7", "--out", str(tmp_path / "y")]) == 2
    assert "no complete checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()
