"""Build the testbed: tokenizer, model, supervised warm start on every role, per-role evaluation.

Everything is a function of the seed and the step budget (never of wall-clock time), so a build is
reproducible on one machine with the same thread count.
"""

from __future__ import annotations

import copy
import inspect
import json
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..prompts import PromptBook
from ..tasks.testbed import ArithmeticTestbed, CodeTestbed
from . import transcripts as T
from .model import MODEL_SHAPE, model_config, new_model
from .tokenizer import IM_END, train_tokenizer

DEFAULT_SEED = 0
DEFAULT_STEPS = 1200
DEFAULT_THREADS = 1

# Examples per batch by role. The solver gets the most, but every role that judges also solves first
# ("= 5 \boxed{Incorrect}"), so the arithmetic skill is trained by all of them.
ROLE_WEIGHTS = {
    "solve": 3.0,
    "evaluate": 2.0,
    "aggregate": 1.5,
    "refine": 1.0,
    "work": 1.0,
    "synthesize": 1.0,
    "orchestrate": 0.5,
}
CODE_SHARE = 0.2  # fraction of examples from testbed_code (secondary task)
# Phase 1 teaches only the solver. A mixed curriculum from step 0 was measured to learn arithmetic far
# slower (10% held-out after 1,100 steps of 32): the judging roles barely transfer while the model cannot
# compute yet, and their long prompts cost compute. Once it computes, the other roles learn their formats.
SOLVER_PHASE_STEPS = 500
SOLVER_PHASE_CODE_SHARE = 0.1

# Other reasoning-gym generators whose text fills the BPE vocabulary (the task text alone fills ~400
# tokens). All offline and fast; generators that need data downloads or are slow are left out.
FILLER_GENERATORS = (
    "letter_counting",
    "spell_backward",
    "word_sorting",
    "number_sorting",
    "gcd",
    "lcm",
    "leg_counting",
    "simple_equations",
    "propositional_logic",
    "family_relationships",
    "syllogism",
    "list_functions",
    "word_sequence_reversal",
    "basic_arithmetic",
)


def _log(msg: str) -> None:
    print(f"[testbed] {msg}", file=sys.stderr, flush=True)


# --- data ----------------------------------------------------------------------------------------------


class Curriculum:
    """Draws teacher examples for training (train splits) or evaluation (held-out splits)."""

    def __init__(self, seed: int):
        self.book = PromptBook("testbed")
        self.arith = ArithmeticTestbed(seed=seed)
        self.code = CodeTestbed(seed=seed)
        self.roles = list(ROLE_WEIGHTS)
        self.weights = [ROLE_WEIGHTS[r] for r in self.roles]

    def sample(self, rng: random.Random, n: int, solver_only: bool = False) -> list[T.Example]:
        out = []
        for _ in range(n):
            task = self.code if rng.random() < (SOLVER_PHASE_CODE_SHARE if solver_only else CODE_SHARE) else self.arith
            role = "solve" if solver_only else rng.choices(self.roles, self.weights)[0]
            problem = rng.choice(task.problems("train"))
            out.append(T.make_example(role, problem, rng, self.book))
        return out

    def held_out(self, seed: int, per_role: int = 200) -> list[T.Example]:
        """Evaluation examples from the held-out splits; the solver sees the whole arithmetic test set."""
        rng = random.Random(f"testbed-eval/{seed}")
        out = []
        for task in (self.arith, self.code):
            probs = list(task.problems("test"))
            for role in T.ROLES:
                if role == "solve":
                    chosen = probs
                else:
                    chosen = [probs[i % len(probs)] for i in range(min(per_role, len(probs)))]
                out += [T.make_example(role, p, rng, self.book) for p in chosen]
        return out


def corpus(cur: Curriculum, seed: int, transcripts: int = 4000, filler_per_generator: int = 200) -> list[str]:
    import reasoning_gym as rg

    rng = random.Random(f"testbed-corpus/{seed}")
    texts = [p.text for t in (cur.arith, cur.code) for split in ("train", "test") for p in t.problems(split)]
    for ex in cur.sample(rng, transcripts):
        texts.append("\n".join(m["content"] for m in ex.messages) + "\n" + ex.target)
    texts += ["user", "assistant"] * 50
    for name in FILLER_GENERATORS:
        for item in rg.create_dataset(name, size=filler_per_generator, seed=seed):
            texts += [item["question"], str(item["answer"])]
    return texts


def encode(tok, ex: T.Example) -> tuple[list[int], list[int]]:
    """Prompt ids exactly as a rollout renders them, and the completion ids ending with <|im_end|>."""
    prompt = tok.apply_chat_template(ex.messages, add_generation_prompt=True, enable_thinking=False, tokenize=False)
    return (
        tok.encode(prompt, add_special_tokens=False),
        tok.encode(ex.target, add_special_tokens=False) + [tok.convert_tokens_to_ids(IM_END)],
    )


# --- greedy decoding -------------------------------------------------------------------------------------


def greedy(model, tok, prompts: Sequence[list[int]], max_new_tokens: int, batch_size: int = 200) -> list[str]:
    """Greedy completions for prompt id lists, decoded without special tokens, stopped at <|im_end|>."""
    import torch

    eos, pad = tok.convert_tokens_to_ids(IM_END), tok.pad_token_id
    texts: list[str] = []
    model.eval()
    with torch.no_grad():
        for b in range(0, len(prompts), batch_size):
            chunk = prompts[b : b + batch_size]
            width = max(map(len, chunk))
            ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in chunk])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
            # Left padding: positions must count real tokens only, or the padded rows see shifted RoPE.
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
            cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
            gen = []
            done = torch.zeros(len(chunk), dtype=torch.bool)
            for _ in range(max_new_tokens):
                nxt = out.logits[:, -1].argmax(-1)
                nxt = torch.where(done, torch.full_like(nxt, eos), nxt)
                gen.append(nxt)
                done |= nxt == eos
                if bool(done.all()):
                    break
                mask = torch.cat([mask, torch.ones(len(chunk), 1, dtype=mask.dtype)], dim=1)
                pos = pos[:, -1:] + 1
                # transformers 5 calls the KV cache `cache`, 4.x `past_key_values`.
                cache = out["cache"] if "cache" in out else out.past_key_values
                out = model(
                    input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, use_cache=True, **{cache_kw: cache}
                )
            rows = torch.stack(gen, 1).tolist()
            for row in rows:
                row = row[: row.index(eos)] if eos in row else row
                texts.append(tok.decode(row, skip_special_tokens=True))
    return texts


def evaluate_roles(model, tok, examples: Sequence[T.Example]) -> dict[str, dict[str, Any]]:
    """Per (task, role): exact-format rate, accuracy, and the label distribution for judging roles."""
    groups: dict[str, list[T.Example]] = defaultdict(list)
    for ex in examples:
        groups[f"{ex.task}/{ex.role}"].append(ex)
    report: dict[str, dict[str, Any]] = {}
    for key, exs in groups.items():
        enc = [encode(tok, ex) for ex in exs]
        max_new = max(len(c) for _, c in enc) + 8
        outs = greedy(model, tok, [p for p, _ in enc], max_new)
        judged = [T.judge(ex, o) for ex, o in zip(exs, outs, strict=True)]
        r: dict[str, Any] = {
            "n": len(exs),
            "format": round(sum(j[0] for j in judged) / len(exs), 4),
            "accuracy": round(sum(j[1] for j in judged) / len(exs), 4),
            "example": {"prompt": exs[0].messages[-1]["content"], "output": outs[0], "target": exs[0].target},
        }
        role = exs[0].role
        if role == "evaluate":
            truth = [ex.info["truth"] for ex in exs]
            said = [j[2] for j in judged]
            r["said_correct"] = round(sum(s is True for s in said) / len(exs), 4)
            r["truly_correct"] = round(sum(truth) / len(exs), 4)
            pos = [j[1] for j, t in zip(judged, truth, strict=True) if t]
            neg = [j[1] for j, t in zip(judged, truth, strict=True) if not t]
            r["balanced_accuracy"] = round((sum(pos) / max(1, len(pos)) + sum(neg) / max(1, len(neg))) / 2, 4)
        elif role == "aggregate":
            picks = [j[2] for j in judged]
            r["pick_distribution"] = {str(i + 1): round(picks.count(i) / len(exs), 4) for i in range(4)}
            # Trivial policies, for reading the accuracy: always candidate 1, and a random pick.
            r["baseline_first"] = round(sum(0 in ex.info["acceptable"] for ex in exs) / len(exs), 4)
            r["baseline_random"] = round(
                sum(len(ex.info["acceptable"]) / len(ex.info["candidates"]) for ex in exs) / len(exs), 4
            )
        elif role == "synthesize":
            # Trivial policy: copy the first candidate.
            r["baseline_first"] = round(
                sum(T.is_correct(ex.problem, ex.info["candidates"][0]) for ex in exs) / len(exs), 4
            )
        report[key] = r
    return report


# --- the build -------------------------------------------------------------------------------------------


def _lr(step: int, lr: float, warmup: int = 30) -> float:
    # Warmup, then constant: the weights after N steps do not depend on the total budget, so a snapshot
    # taken at step N of a long build is exactly `build(steps=N)` (how the shipped step count was chosen).
    return lr * min(1.0, (step + 1) / warmup)


def _save(model, tok_dir: Path, out_dir: Path, info: dict[str, Any]) -> None:
    """Tokenizer files + fp16 safetensors whose config says float32 + build_info.json, into out_dir."""
    import torch

    out_dir.mkdir(parents=True, exist_ok=True)
    for f in tok_dir.iterdir():
        shutil.copy2(f, out_dir / f.name)
    # fp16 halves the size (fp32 would be just over 10 MB); the config declares float32 so a plain
    # from_pretrained upcasts to the fp32 model CPU training wants.
    half = copy.deepcopy(model).to(torch.float16)
    half.save_pretrained(out_dir, safe_serialization=True)
    cfg_path = out_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["dtype"] = "float32"
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    (out_dir / "build_info.json").write_text(json.dumps(info, indent=1) + "\n")


def evaluate_dir(path: str | Path, *, per_role: int = 200, log: Callable[[str], None] = _log) -> dict[str, Any]:
    """Evaluate a saved testbed on held-out examples of every role; writes the numbers into build_info.json."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    info = json.loads((path / "build_info.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)  # what was shipped: fp16-rounded
    tok = AutoTokenizer.from_pretrained(str(path))
    t = time.time()
    info["roles"] = evaluate_roles(model, tok, Curriculum(info["seed"]).held_out(info["seed"], per_role))
    info["eval_seconds"] = round(time.time() - t, 1)
    for k, v in info["roles"].items():
        log(f"{k:28s} format {v['format']:.2f} accuracy {v['accuracy']:.2f}")
    (path / "build_info.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def build(
    out_dir: str | Path,
    *,
    seed: int = DEFAULT_SEED,
    steps: int = DEFAULT_STEPS,
    batch_size: int = 64,
    lr: float = 1e-3,
    micro_batch: int = 32,
    threads: int = DEFAULT_THREADS,
    evaluate: bool = True,
    eval_every: int = 0,
    eval_per_role: int = 200,
    corpus_transcripts: int = 4000,
    filler_per_generator: int = 200,
    solver_steps: int = SOLVER_PHASE_STEPS,
    snapshot_every: int = 0,
    log: Callable[[str], None] = _log,
) -> Path:
    """Build a testbed model into `out_dir` (tokenizer + fp16 safetensors + build_info.json) and return it.

    Deterministic for (seed, steps, batch_size, lr, threads, corpus sizes) on one machine: batches come
    from a seeded RNG and the schedule counts steps, not seconds.
    """
    import torch
    import torch.nn.functional as F

    t0 = time.time()
    out_dir = Path(out_dir)
    # Float reductions depend on the thread split, so the count is fixed for reproducibility. One thread
    # by default: on a busy 2-core machine two OpenMP threads stalled each other (a 10x slower forward),
    # while one thread loses little on a model this small.
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    random.seed(seed)
    cur = Curriculum(seed)

    tmp = Path(tempfile.mkdtemp(prefix="testbed-build-"))
    try:
        tok = train_tokenizer(corpus(cur, seed, corpus_transcripts, filler_per_generator), tmp)
        log(f"tokenizer: {len(tok)} tokens ({time.time() - t0:.1f}s)")
        config = model_config(len(tok), tok.convert_tokens_to_ids(IM_END), tok.pad_token_id)
        model = new_model(config, seed)
        params = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
        rng = random.Random(f"testbed-train/{seed}")
        pad = tok.pad_token_id
        solver_eval = [ex for ex in cur.held_out(seed, 1) if ex.task == "testbed" and ex.role == "solve"]
        out_dir.mkdir(parents=True, exist_ok=True)

        def info_now(done: int) -> dict[str, Any]:
            return {
                "seed": seed,
                "steps": done,
                "batch_size": batch_size,
                "lr": lr,
                "threads": threads,
                "params": params,
                "vocab_size": len(tok),
                "model": MODEL_SHAPE,
                "role_weights": ROLE_WEIGHTS,
                "code_share": CODE_SHARE,
                "solver_phase_steps": solver_steps,
                "solver_phase_code_share": SOLVER_PHASE_CODE_SHARE,
                "corpus": {"transcripts": corpus_transcripts, "filler_per_generator": filler_per_generator},
                "train_tokens": tokens,
                "train_seconds": round(time.time() - t_train, 1),
                "wall_seconds": round(time.time() - t0, 1),
                "solver_curve": list(curve),
            }

        curve: list[dict[str, float]] = []
        t_train = time.time()
        tokens = 0
        model.train()
        for step in range(steps):
            examples = cur.sample(rng, batch_size, solver_only=step < solver_steps)
            batch = sorted((encode(tok, ex) for ex in examples), key=lambda pc: len(pc[0]) + len(pc[1]))
            n_target = sum(len(c) for _, c in batch)
            tokens += sum(len(p) + len(c) for p, c in batch)
            for g in opt.param_groups:
                g["lr"] = _lr(step, lr)
            opt.zero_grad(set_to_none=True)
            step_loss = 0.0
            # Length-sorted micro-batches: prompts range from ~15 to ~110 tokens, and padding every row to
            # the longest wasted over half the compute. The loss is still one token-mean over the batch.
            for m in range(0, len(batch), micro_batch):
                mb = batch[m : m + micro_batch]
                width = max(len(p) + len(c) for p, c in mb)
                # Right padding: positions 0..n-1 are already right for every row, and causal attention
                # never lets a real token see the padding after it, so no mask or position ids are needed.
                ids = torch.full((len(mb), width), pad)
                labels = torch.full((len(mb), width), -100)
                for i, (p, c) in enumerate(mb):
                    ids[i, : len(p) + len(c)] = torch.tensor(p + c)
                    labels[i, len(p) : len(p) + len(c)] = torch.tensor(c)
                logits = model(input_ids=ids).logits[:, :-1]
                loss = (
                    F.cross_entropy(
                        logits.reshape(-1, logits.size(-1)),
                        labels[:, 1:].reshape(-1),
                        ignore_index=-100,
                        reduction="sum",
                    )
                    / n_target
                )
                loss.backward()
                step_loss += loss.item()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if (step + 1) % 50 == 0:
                log(f"step {step + 1}/{steps} loss {step_loss:.3f} ({tokens / (time.time() - t_train):.0f} tok/s)")
            if eval_every and (step + 1) % eval_every == 0:
                acc = evaluate_roles(model, tok, solver_eval)["testbed/solve"]["accuracy"]
                curve.append({"step": step + 1, "solver_accuracy": acc, "seconds": round(time.time() - t_train, 1)})
                log(f"step {step + 1}: held-out solver accuracy {acc:.3f}")
                model.train()
            if snapshot_every and (step + 1) % snapshot_every == 0 and step + 1 < steps:
                _save(model, tmp, out_dir / "snapshots" / f"step-{step + 1}", info_now(step + 1))
        _save(model, tmp, out_dir, info_now(steps))
        if evaluate:
            evaluate_dir(out_dir, per_role=eval_per_role, log=log)
    finally:
        torch.set_num_threads(prev_threads)
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"built {out_dir} in {time.time() - t0:.0f}s")
    return out_dir
