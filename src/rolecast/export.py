"""`rolecast export RUN_DIR [--step N] --out DIR`: a run's policies as the ecosystem loads them.

    DIR/
      README.md             which roles each policy played, the base model, the step, how to load each
      export.json           the same, for programs
      <policy id>/          LoRA: a PEFT adapter (adapter_config.json + adapter_model.safetensors), for
                            `PeftModel.from_pretrained(base, DIR/<policy id>)` (tests/test_export.py);
                            full fine-tune: a Hugging Face model directory (`AutoModelForCausalLM.from_pretrained`)
                            each with the tokenizer (and its chat template) beside it

The weights come from the run's checkpoint (`training/checkpoint.py`: the latest intact one, or `--step`), restored
into the policies the run's own config builds, then written with PEFT's / transformers' `save_pretrained`.

Portable: an adapter's `base_model_name_or_path` (what `AutoPeftModelForCausalLM` loads) is the base as the run's
config names it, never this machine's resolved path: a hub id stays the hub id, a local directory stays the path
the config gave, and the embedded testbed is its shipped name (`testbed`, whose directory
`rolecast.policies.models.resolve_model_path("testbed")` gives). `--base-model` records another name or path (the
hub id you will publish against, or where the base will live).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rolecast.config.load import load_config
from rolecast.config.schema import RunConfig
from rolecast.core.errors import ConfigError
from rolecast.core.rundir import CONFIG
from rolecast.core.writable import check_writable_dir
from rolecast.policies.models import PolicySet, load_tokenizer
from rolecast.policies.router import build_routing
from rolecast.policies.shipped import MODEL_NAMES
from rolecast.training.checkpoint import load_checkpoint, restore_policies
from rolecast.workflows import get_workflow


@dataclass(frozen=True)
class ExportedPolicy:
    policy_id: str
    kind: str  # "peft_lora_adapter" | "hf_model"
    path: Path
    roles: list[str]  # the roles (or agent instances, "role/i") this policy answered in the run


@dataclass(frozen=True)
class ExportResult:
    out: Path
    step: int
    base_model: (
        str  # what an adapter applies to, as recorded in its adapter_config.json: a hub id, a path, a shipped name
    )
    policies: list[ExportedPolicy] = field(default_factory=list)


def roles_by_policy(cfg: RunConfig) -> dict[str, list[str]]:
    """policy id -> the roles (and "role/i" instances routed on their own) it answered, from the run's routing."""
    spec = get_workflow(cfg.workflow.name)
    routing = build_routing(spec.roles, cfg.routing.sharing, cfg.routing.map, cfg.routing.policies)
    played: dict[str, list[str]] = {pid: [] for pid in routing.policy_ids}
    for role in spec.roles:
        played[routing(role, role)].append(role)
    for key, pid in (cfg.routing.map or {}).items():
        if "/" in key and routing(key.split("/", 1)[0], key.split("/", 1)[0]) != pid:
            played[pid].append(key)  # an instance sent to another policy than its role's
    return played


def export_run(
    run_dir: str | Path,
    out: str | Path,
    step: int | None = None,
    overwrite: bool = False,
    base_model: str | None = None,
) -> ExportResult:
    """Write every policy of the run in `run_dir` (its checkpoint `step`, default the latest intact one) under
    `out`. `out` must not hold anything unless `overwrite`. `base_model`: the base to record in each adapter's
    config (default: the run's `model.path` as its config wrote it). Errors a user can fix are `UserError`s."""
    run_dir, out = Path(run_dir), Path(out)
    config_path = run_dir / CONFIG
    if not config_path.is_file():
        raise ConfigError(f"cannot export {run_dir}: no {config_path}, so it is not a rolecast run directory")
    occupied = (out.is_dir() and any(out.iterdir())) or (out.exists() and not out.is_dir())
    if occupied and not overwrite:
        raise ConfigError(f"--out {out} already holds files; choose an empty or new directory (or --overwrite)")
    check_writable_dir(out.parent, f"--out {out}")  # before the weights load, not a traceback after
    cfg = load_config(config_path)
    step, state = load_checkpoint(run_dir, step)  # CheckpointError (one line) when there is none / it is damaged
    played = roles_by_policy(cfg)
    policy_ids = sorted(played)
    # LoRA adapters are float32 whatever the base's dtype (PEFT keeps them so); a full model keeps its trained dtype
    dtype = torch.float32
    if cfg.model.trainable == "full":
        weights = state.get(f"policy/{policy_ids[0]}", {})
        dtype = next((t.dtype for t in weights.values() if torch.is_floating_point(t)), torch.float32)
    policies = PolicySet(
        cfg.model.path,
        policy_ids,
        mode=cfg.model.trainable,
        lora=cfg.model.lora.model_dump(),
        dtype=dtype,
        seed=cfg.seed,
        mixed_adapters=False,
        device="cpu",
    )
    restore_policies(state, policies)
    tokenizer = load_tokenizer(cfg.model.path)
    base = base_model or cfg.model.path

    tmp = out.with_name(f"{out.name}.tmp-export")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    exported = []
    for pid in policy_ids:
        if cfg.model.trainable == "lora":
            # the base as the config names it, not the path it resolved to here (PEFT would record that)
            policies.models[pid].peft_config[pid].base_model_name_or_path = base
            # PEFT writes an adapter other than "default" into <dir>/<adapter name>/. The vocabulary is never
            # resized, so no embedding layer is saved; PEFT's "auto" would look the base up on the hub to find out
            policies.models[pid].save_pretrained(str(tmp), selected_adapters=[pid], save_embedding_layers=False)
            kind = "peft_lora_adapter"
        else:
            policies.models[pid].save_pretrained(str(tmp / pid))
            kind = "hf_model"
        tokenizer.save_pretrained(str(tmp / pid))
        exported.append(ExportedPolicy(pid, kind, out / pid, played[pid]))
    result = ExportResult(out, step, base, exported)
    (tmp / "export.json").write_text(json.dumps(_manifest(result, run_dir, cfg), indent=1) + "\n")
    (tmp / "README.md").write_text(_readme(result, run_dir, cfg))
    if out.exists():
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    tmp.rename(out)
    return result


def _manifest(result: ExportResult, run_dir: Path, cfg: RunConfig) -> dict[str, Any]:
    return {
        "run_dir": str(run_dir),
        "step": result.step,
        "base_model": result.base_model,
        "model_path": cfg.model.path,
        "trainable": cfg.model.trainable,
        "workflow": cfg.workflow.name,
        "sharing": cfg.routing.sharing,
        "task": cfg.task.name,
        "policies": {p.policy_id: {"kind": p.kind, "dir": p.policy_id, "roles": p.roles} for p in result.policies},
    }


def _readme(result: ExportResult, run_dir: Path, cfg: RunConfig) -> str:
    rows = "\n".join(
        f"| `{p.policy_id}` | {', '.join(p.roles)} | `{p.policy_id}/` | "
        f"{'PEFT LoRA adapter' if p.kind == 'peft_lora_adapter' else 'Hugging Face model'} |"
        for p in result.policies
    )
    first = result.policies[0].policy_id
    if cfg.model.trainable == "lora":
        shipped = result.base_model in MODEL_NAMES  # the embedded testbed: its directory comes from rolecast
        where = (
            f'from rolecast.policies.models import resolve_model_path\n\nbase_dir = resolve_model_path("{result.base_model}")'
            if shipped
            else f'base_dir = "{result.base_model}"'
        )
        how = f"""Each directory is a PEFT LoRA adapter on the base model `{result.base_model}`{" (rolecast's embedded testbed model)" if shipped else ""}, with the tokenizer beside it:

```python
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

{where}
base = AutoModelForCausalLM.from_pretrained(base_dir)
model = PeftModel.from_pretrained(base, "{first}")  # this directory's {first}/
tokenizer = AutoTokenizer.from_pretrained("{first}")
```

Each adapter's `adapter_config.json` records the base as `{result.base_model}` (`rolecast export --base-model`
records another name or path). For vLLM (not exercised by rolecast's tests): `LLM(model=base_dir, enable_lora=True)`
and a `LoRARequest("{first}", 1, "{first}")` per request."""
    else:
        how = f"""Each directory is a full Hugging Face model (every weight trained), with its tokenizer:

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("{first}")  # this directory's {first}/
tokenizer = AutoTokenizer.from_pretrained("{first}")
```"""
    return f"""# rolecast export

The policies of the run `{run_dir}` at step {result.step}: workflow `{cfg.workflow.name}`, routing `{cfg.routing.sharing}`,
task `{cfg.task.name}`, base model `{cfg.model.path}` (`model.trainable: {cfg.model.trainable}`).

| policy | roles it played | directory | format |
|---|---|---|---|
{rows}

{how}

Prompts: each role was called with the chat messages of its task family's prompt file (rolecast's
`src/rolecast/prompts/`{f", overridden by `{cfg.task.prompts}`" if cfg.task.prompts else ""}) through the tokenizer's chat
template. `export.json` holds the same information for programs.
"""
