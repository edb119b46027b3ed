"""Build the testbed: tokenizer, model, supervised warm start on every role, per-role evaluation.

Everything is a function of the seed and the step budget (never of wall-clock time), so a build is
reproducible on one machine with the same thread count.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import math
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

from rolecast.core.machine import machine_fingerprint
from rolecast.policies.shipped import KINDS, default_path
from rolecast.prompts import PromptBook
from rolecast.tasks.testbed import LEGACY_CODE_LAYOUT, ArithmeticTestbed, CodeTestbed
from rolecast.testbed import transcripts as T
from rolecast.testbed.model import SHAPES, model_config, new_model
from rolecast.testbed.rollouts import rollout_competence
from rolecast.testbed.stats import half_width, paired_margin, rate
from rolecast.testbed.tokenizer import IM_END, reuse_tokenizer, train_tokenizer

DEFAULT_SEED = 0
DEFAULT_STEPS = 2000
# Float reductions depend on the thread split, so a build is reproducible for one thread count. The shipped
# builds used 2, one build at a time on an idle 2-core machine (two builds side by side, or one beside other
# work, stall each other's OpenMP threads: pass threads=1 then).
DEFAULT_THREADS = 2
# Every build reuses this tokenizer (trained by the first rebuild, 2026-12-01; both shipped sizes carry it).
# A tokenizer trained on a build's own transcripts changes with every transcript, and one such retrained
# tokenizer learned arithmetic far slower on identical batches.
SHIPPED_TOKENIZER = Path(__file__).parent / "artifact"

# Examples per batch by role after phase 1. The judging roles get the most: their copies and comparisons are
# the hardest to learn, and they derive the answer step by step first ("4-1=3 vs 2 \boxed{Incorrect}"), so
# they keep training the workers' arithmetic too. The one-step solver gets little, which keeps it in the band
# where RL can improve it: the step-by-step arithmetic the other roles learn also makes it better.
ROLE_WEIGHTS = {
    "solve": 1.0,
    "evaluate": 2.5,
    "aggregate": 2.5,
    "refine": 0.5,
    "work": 1.5,
    "synthesize": 2.5,
    "orchestrate": 0.25,
}
# The code build's mix: workers and the solver get more than in the math build. A probe build on the math mix had
# its workers right 0.04 of the time after 300 steps, while the judges, who all derive the same way, were right
# 0.86-0.90: the workers' five strategies each got a fifth of their share; its solver was right 0.09.
CODE_ROLE_WEIGHTS = {**ROLE_WEIGHTS, "solve": 2.5, "work": 3.0, "evaluate": 2.0, "aggregate": 2.0, "synthesize": 2.0}
CODE_SHARE = 0.2  # fraction of examples from testbed_code (secondary task)
# Phase 1 teaches only arithmetic: the workers' step-by-step traces, and the solver's one-step answers. A mixed
# curriculum from step 0 was measured to learn arithmetic far slower (10% held-out after 1,100 steps of 32):
# the judging roles barely transfer while the model cannot compute yet, and their long prompts cost compute.
# Once it computes, the other roles learn their formats.
SOLVER_PHASE_STEPS = 500
SOLVER_PHASE_CODE_SHARE = 0.1
SOLVER_PHASE_ROLES = {"solve": 1.0, "work": 2.0}
# Loss weight of a judging role's decision tokens (verdict, each yes/no, the pick). At weight 1 the
# first build's evaluator said Correct 97% of the time and its aggregator always picked candidate 1: the
# decision is one or two tokens of a completion, and the cheapest fit was a constant.
DECISION_WEIGHT = 10.0
# What a build teaches: "math", the shipped `testbed` models (arithmetic, with a code share taught in one step),
# or "code", the `testbed-code` models: the math build's weights continued on code alone, its careful roles
# deriving the function step by step. A separate model keeps the math map's weights (and every result drawn on
# them) as they are; the code build's step count and time are its own.
CODE_DEFAULT_STEPS = 900
CODE_BATCH_SIZE = 32  # its examples are ~2x the math build's tokens: 900 steps of 32 take ~27 min on 2 cores

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
    """Draws teacher examples for training (train splits) or evaluation (held-out splits).

    `kind` "math": the math build's mix (arithmetic, a code share taught in one step); "code": the code
    build's, code only, its careful roles deriving the function (transcripts.code_trace).
    """

    def __init__(
        self,
        seed: int,
        kind: str = "math",
        code_synthesis: str = "checks",
        role_weights: dict[str, float] | None = None,
    ):
        if kind not in KINDS:
            raise ValueError(f"unknown testbed kind {kind!r}; kinds: {list(KINDS)}")
        if code_synthesis not in T.CODE_SYNTHESES:
            raise ValueError(f"unknown code_synthesis {code_synthesis!r}; choices: {list(T.CODE_SYNTHESES)}")
        if role_weights is not None and (
            not role_weights
            or set(role_weights) - set(T.ROLES)
            or min(role_weights.values()) < 0
            or max(role_weights.values()) <= 0
        ):
            raise ValueError(
                f"testbed build: role_weights must weigh roles of {list(T.ROLES)} with weights >= 0, some > 0; "
                f"got {role_weights}"
            )
        self.code_synthesis = code_synthesis
        self.kind = kind
        self.book = PromptBook("testbed")
        self.arith = ArithmeticTestbed(seed=seed)
        # the math build keeps the code layout it was built with, so it still reproduces the shipped weights
        legacy = LEGACY_CODE_LAYOUT
        self.code = (
            CodeTestbed(seed=seed)
            if kind == "code"
            else CodeTestbed(
                seed=seed,
                train_starts=legacy["train_starts"],
                test_starts=legacy["test_starts"],
                hidden_xs=legacy["hidden_xs"],
            )
        )
        self.derive_code = kind == "code"
        code = kind == "code"
        self.code_share = 1.0 if code else CODE_SHARE
        self.solver_phase_code_share = 1.0 if code else SOLVER_PHASE_CODE_SHARE
        self.role_weights = dict(role_weights) if role_weights else CODE_ROLE_WEIGHTS if code else ROLE_WEIGHTS

    def sample(self, rng: random.Random, n: int, solver_only: bool = False) -> list[T.Example]:
        out = []
        for _ in range(n):
            share = self.solver_phase_code_share if solver_only else self.code_share
            task = self.code if rng.random() < share else self.arith
            mix = SOLVER_PHASE_ROLES if solver_only else self.role_weights
            role = rng.choices(list(mix), list(mix.values()))[0]
            problem = rng.choice(task.problems("train"))
            out.append(T.make_example(role, problem, rng, self.book, self.derive_code, self.code_synthesis))
        return out

    def held_out(self, seed: int, per_role: int = 200) -> list[T.Example]:
        """Evaluation examples from the held-out splits of the build's tasks; the solver sees the whole test set."""
        rng = random.Random(f"testbed-eval/{seed}")
        out = []
        for task in (self.code,) if self.kind == "code" else (self.arith, self.code):
            probs = list(task.problems("test"))
            for role in T.ROLES:
                if role == "solve":
                    chosen = probs
                else:
                    chosen = [probs[i % len(probs)] for i in range(min(per_role, len(probs)))]
                out += [T.make_example(role, p, rng, self.book, self.derive_code, self.code_synthesis) for p in chosen]
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


def evaluate_roles(
    model, tok, examples: Sequence[T.Example], *, strategy_problems: int = 100, derive_code: bool = False
) -> dict[str, dict[str, Any]]:
    """Per (task, role), greedy on held-out examples: format rate, accuracy with its 95% interval, and what
    each judging role is for, next to the trivial policy it must beat:

    - evaluate: accept rate, balanced accuracy (correct accepted, wrong rejected);
    - aggregate: on examples with a correct candidate, how often it picks one vs always candidate 1 and vs
      a random pick;
    - synthesize: accuracy vs copying candidate 1;
    - work (arithmetic; code when `derive_code`, the code build's workers): whether the strategy changes the
      worker's output, and accuracy per strategy.
    """
    groups: dict[str, list[T.Example]] = defaultdict(list)
    for ex in examples:
        groups[f"{ex.task}/{ex.role}"].append(ex)
    report: dict[str, dict[str, Any]] = {}
    for key, exs in groups.items():
        outs = _greedy_examples(model, tok, exs)
        judged = [T.judge(ex, o) for ex, o in zip(exs, outs, strict=True)]
        acc, acc_ci = rate([j[1] for j in judged])
        r: dict[str, Any] = {
            "n": len(exs),
            "format": rate([j[0] for j in judged])[0],
            "accuracy": acc,
            "accuracy_ci": acc_ci,
            "example": {"prompt": exs[0].messages[-1]["content"], "output": outs[0], "target": exs[0].target},
        }
        role = exs[0].role
        if role == "evaluate":
            truth = [ex.info["truth"] for ex in exs]
            said = [j[2] for j in judged]
            accepted_right = [s is True for s, t in zip(said, truth, strict=True) if t]
            rejected_wrong = [s is not True for s, t in zip(said, truth, strict=True) if not t]
            tpr, tnr = rate(accepted_right)[0], rate(rejected_wrong)[0]
            r["said_correct"] = rate([s is True for s in said])[0]
            r["truly_correct"] = rate(truth)[0]
            r["accepts_correct"], r["rejects_wrong"] = tpr, tnr
            r["balanced_accuracy"] = round((tpr + tnr) / 2, 4)
            r["balanced_accuracy_ci"] = round(
                math.sqrt(half_width(tpr, len(accepted_right)) ** 2 + half_width(tnr, len(rejected_wrong)) ** 2) / 2,
                4,
            )
        elif role == "aggregate":
            picks = [j[2] for j in judged]
            r["pick_distribution"] = {str(i + 1): round(picks.count(i) / len(exs), 4) for i in range(4)}
            # The role's job is measured where it has one: some candidate is correct.
            has = [i for i, ex in enumerate(exs) if any(T.is_correct(ex.problem, c) for c in ex.info["candidates"])]
            model_right = [judged[i][1] for i in has]
            first = [float(0 in exs[i].info["acceptable"]) for i in has]
            rand = [len(exs[i].info["acceptable"]) / len(exs[i].info["candidates"]) for i in has]
            r["n_with_correct"] = len(has)
            r["accuracy_with_correct"], r["accuracy_with_correct_ci"] = rate(model_right)
            r["baseline_first"] = rate(first)[0]
            r["baseline_random"] = rate(rand)[0]
            r["vs_first"] = paired_margin(model_right, first)
            r["vs_random"] = paired_margin(model_right, rand)
        elif role == "synthesize":
            first = [float(T.is_correct(ex.problem, ex.info["candidates"][0])) for ex in exs]
            r["baseline_first"] = rate(first)[0]
            r["vs_first"] = paired_margin([j[1] for j in judged], first)
        elif role == "work" and (exs[0].task == "testbed" or derive_code):
            r["strategies"] = _strategy_effect(model, tok, exs, strategy_problems, derive_code)
        report[key] = r
    return report


def _greedy_examples(model, tok, exs: Sequence[T.Example]) -> list[str]:
    enc = [encode(tok, ex) for ex in exs]
    return greedy(model, tok, [p for p, _ in enc], max(len(c) for _, c in enc) + 8)


def _strategy_effect(
    model, tok, exs: Sequence[T.Example], n_problems: int, derive_code: bool = False
) -> dict[str, Any]:
    """The same problems under every strategy of their task: do workers' outputs and answers change with it?"""
    book = PromptBook("testbed")
    problems = list({ex.problem.text: ex.problem for ex in exs}.values())[:n_problems]
    strategies = T.CODE_STRATEGIES if T.is_code(problems[0]) else T.ARITH_STRATEGIES
    outputs: dict[str, list[str]] = {}
    accuracy: dict[str, float] = {}
    for strategy in strategies:
        sexs = [T.work_example(p, strategy, book, derive_code) for p in problems]
        outputs[strategy] = _greedy_examples(model, tok, sexs)
        accuracy[strategy] = rate([T.is_correct(p, o) for p, o in zip(problems, outputs[strategy], strict=True)])[0]
    per_problem = [[outputs[s][i] for s in strategies] for i in range(len(problems))]
    # code: a function's values on the tests (so x*2 and x+x are one answer); arithmetic: the boxed text
    answer = T.canonical_answer if T.is_code(problems[0]) else T.extract
    answers = [[answer(p, o) for o in outs] for p, outs in zip(problems, per_problem, strict=True)]
    return {
        "n_problems": len(problems),
        "outputs_differ": rate([len(set(outs)) > 1 for outs in per_problem])[0],
        "answers_differ": rate([len(set(a)) > 1 for a in answers])[0],
        "accuracy_by_strategy": accuracy,
    }


def completion_weights(tok, ex: T.Example, n_ids: int, decision_weight: float) -> list[float]:
    """Loss weight per completion token: `decision_weight` on tokens inside the example's decision spans."""
    w = [1.0] * n_ids
    if ex.decisions and decision_weight != 1.0:
        offsets = tok(ex.target, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        for i, (a, b) in enumerate(offsets):
            if any(a < hi and lo < b for lo, hi in ex.decisions):
                w[i] = decision_weight
    return w


def accumulate_loss(
    model, tok, examples: Sequence[T.Example], micro_batch: int, decision_weight: float = 1.0
) -> tuple[float, int]:
    """Backpropagate the token-mean loss on the examples' completions; returns (loss, tokens seen).

    A judging role's decision tokens weigh `decision_weight` each: a verdict or a pick is one or two tokens
    of a completion that is mostly the role's own answer, and at weight 1 the first build never learned it.
    """
    rows = []
    for ex in examples:
        p, c = encode(tok, ex)
        rows.append((p, c, completion_weights(tok, ex, len(c), decision_weight)))
    rows.sort(key=lambda r: len(r[0]) + len(r[1]))
    n_target = sum(sum(w) for _, _, w in rows)
    pad = tok.pad_token_id
    total = 0.0
    # Length-sorted micro-batches: prompts range from ~15 to ~110 tokens, and padding every row to
    # the longest wasted over half the compute. The loss is still one token-mean over the batch.
    for m in range(0, len(rows), micro_batch):
        mb = rows[m : m + micro_batch]
        width = max(len(p) + len(c) for p, c, _ in mb)
        # Right padding: positions 0..n-1 are already right for every row, and causal attention
        # never lets a real token see the padding after it, so no mask or position ids are needed.
        ids = torch.full((len(mb), width), pad)
        labels = torch.full((len(mb), width), -100)
        weights = torch.zeros(len(mb), width)
        for i, (p, c, w) in enumerate(mb):
            ids[i, : len(p) + len(c)] = torch.tensor(p + c)
            labels[i, len(p) : len(p) + len(c)] = torch.tensor(c)
            weights[i, len(p) : len(p) + len(c)] = torch.tensor(w)
        logits = model(input_ids=ids).logits[:, :-1]
        per_token = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100, reduction="none"
        )
        loss = (per_token * weights[:, 1:].reshape(-1)).sum() / n_target
        loss.backward()
        total += loss.item()
    return total, sum(len(p) + len(c) for p, c, _ in rows)


# --- the build -------------------------------------------------------------------------------------------


def _lr(step: int, lr: float, warmup: int = 30, decay_over: int = 0) -> float:
    # Warmup, then constant: the weights after N steps do not depend on the total budget, so a snapshot
    # taken at step N of a long build is exactly `build(steps=N)` (how the shipped step count was chosen).
    # `decay_over` > 0: after the warmup, a cosine from lr down to 0 at step `decay_over` (a continuation that
    # sharpens what a constant-rate build learnt; its weights do depend on the budget).
    rate = lr * min(1.0, (step + 1) / warmup)
    if decay_over and step >= warmup:
        rate *= 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, decay_over - warmup))))
    return rate


def _save(model, tok_dir: Path, out_dir: Path, info: dict[str, Any]) -> None:
    """Tokenizer files + fp16 safetensors whose config says float32 + build_info.json, into out_dir."""
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
    """Evaluate a saved testbed on held-out examples of every role (noise-model candidates, greedy) and on
    its own workflow rollouts; writes the numbers into build_info.json."""
    path = Path(path)
    info = json.loads((path / "build_info.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)  # what was shipped: fp16-rounded
    tok = AutoTokenizer.from_pretrained(str(path))
    t = time.time()
    kind = info.get("kind", "math")
    examples = Curriculum(info["seed"], kind, info.get("code_synthesis", "checks")).held_out(info["seed"], per_role)
    info["roles"] = evaluate_roles(model, tok, examples, derive_code=kind == "code")
    for k, v in info["roles"].items():
        log(f"{k:28s} format {v['format']:.2f} accuracy {v['accuracy']:.2f}")
    task = "testbed_code" if kind == "code" else "testbed"
    # measured on the build's own split (rollouts.build_split)
    info["rollouts"] = rollout_competence(path, task=task, seed=info["seed"], threads=torch.get_num_threads())
    info["eval_seconds"] = round(time.time() - t, 1)
    (path / "build_info.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def build(
    out_dir: str | Path,
    *,
    seed: int = DEFAULT_SEED,
    size: str = "small",
    steps: int | None = None,
    kind: str = "math",
    init_from: str | Path | None = None,
    batch_size: int | None = None,
    lr: float = 1e-3,
    micro_batch: int = 32,
    threads: int = DEFAULT_THREADS,
    evaluate: bool = True,
    eval_every: int = 100,
    eval_per_role: int = 200,
    corpus_transcripts: int = 4000,
    filler_per_generator: int = 200,
    solver_steps: int | None = None,
    decision_weight: float = DECISION_WEIGHT,
    role_weights: dict[str, float] | None = None,
    decay: bool = False,
    code_synthesis: str = "checks",
    snapshot_every: int = 0,
    tokenizer_dir: str | Path | None = SHIPPED_TOKENIZER,
    log: Callable[[str], None] = _log,
) -> Path:
    """Build a testbed model into `out_dir` (tokenizer + fp16 safetensors + build_info.json) and return it.

    Deterministic for (seed, steps, batch_size, lr, threads, corpus sizes) on one machine: batches come
    from a seeded RNG and the schedule counts steps, not seconds.

    `tokenizer_dir`: whose tokenizer to reuse; by default the shipped one, so a build reproduces the shipped
    weights. `None` trains a new one on this build's transcripts: its merges depend on every transcript in
    the corpus, and the one such build measured learned arithmetic far slower (held-out solver 0.45 instead
    of 0.72 at step 500, on identical batches).

    `kind` "code" builds a `testbed-code` model: it starts from `init_from` (default: the shipped math build of
    the same size, whose tokenizer it keeps) and trains on code only (Curriculum); defaults 1,000 steps, the
    first 100 the solver and workers only, batches of 32. `steps`, `solver_steps` and `batch_size` default per kind.

    `role_weights` replaces the kind's role mix (ROLE_WEIGHTS, CODE_ROLE_WEIGHTS); `decay` turns the constant rate
    after the warmup into a cosine that reaches 0 at the end of the budget; `code_synthesis` picks the code
    synthesizer's teacher (transcripts.CODE_SYNTHESES; "checks" is the shipped builds'). With `init_from` a shipped
    code build these continue it (scripts/code_build_probes.py, docs/testbed.md "Continuing the code builds").

    `eval_every`: every that many steps, the solver's greedy accuracy on held-out problems, recorded as
    build_info.json's `solver_curve` (0: none). Greedy decoding draws no random numbers and the model goes back to
    train mode after it, so the curve does not change the weights.
    """
    if eval_every < 0:
        raise ValueError(f"testbed build: eval_every must be >= 0 (0: no solver curve), got {eval_every}")
    t0 = time.time()
    out_dir = Path(out_dir)
    random.seed(seed)
    cur = Curriculum(seed, kind, code_synthesis, role_weights)
    # The thread count is fixed for reproducibility (DEFAULT_THREADS).
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    if kind == "code" and init_from is None:
        init_from = default_path(size)
    steps = steps if steps is not None else CODE_DEFAULT_STEPS if kind == "code" else DEFAULT_STEPS
    batch_size = batch_size if batch_size is not None else CODE_BATCH_SIZE if kind == "code" else 64
    solver_steps = solver_steps if solver_steps is not None else 100 if kind == "code" else SOLVER_PHASE_STEPS

    tmp = Path(tempfile.mkdtemp(prefix="testbed-build-"))
    try:
        if init_from is not None:
            tok = reuse_tokenizer(init_from, tmp)
        elif tokenizer_dir is None:
            tok = train_tokenizer(corpus(cur, seed, corpus_transcripts, filler_per_generator), tmp)
        else:
            tok = reuse_tokenizer(tokenizer_dir, tmp)
        log(f"tokenizer: {len(tok)} tokens ({time.time() - t0:.1f}s)")
        tokenizer_digest = hashlib.sha256((tmp / "tokenizer.json").read_bytes()).hexdigest()
        config = model_config(len(tok), tok.convert_tokens_to_ids(IM_END), tok.pad_token_id, size)
        if init_from is not None:
            # the starting weights as shipped (fp16-rounded, loaded as fp32); the config must be the one built here
            model = AutoModelForCausalLM.from_pretrained(str(init_from), dtype=torch.float32)
            if model.config.hidden_size != config.hidden_size:
                raise ValueError(
                    f"init_from {init_from} is not a {size} testbed (hidden size {model.config.hidden_size})"
                )
            init_digest = hashlib.sha256((Path(init_from) / "model.safetensors").read_bytes()).hexdigest()
        else:
            model = new_model(config, seed)
            init_digest = None
        params = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
        rng = random.Random(f"testbed-train/{seed}")
        eval_task = "testbed_code" if kind == "code" else "testbed"
        solver_eval = [ex for ex in cur.held_out(seed, 1) if ex.task == eval_task and ex.role == "solve"]
        out_dir.mkdir(parents=True, exist_ok=True)

        machine = machine_fingerprint()  # another CPU can round differently: docs/testbed.md

        def info_now(done: int) -> dict[str, Any]:
            return {
                "seed": seed,
                "kind": kind,
                "init_sha256": init_digest,
                "steps": done,
                "batch_size": batch_size,
                "lr": lr,
                "threads": threads,
                "params": params,
                "vocab_size": len(tok),
                "size": size,
                "model": SHAPES[size],
                "role_weights": cur.role_weights,
                "code_share": cur.code_share,
                "solver_phase_steps": solver_steps,
                "solver_phase_code_share": cur.solver_phase_code_share,
                "solver_phase_roles": SOLVER_PHASE_ROLES,
                "decision_weight": decision_weight,
                "lr_schedule": "cosine to 0" if decay else "constant",
                "code_synthesis": code_synthesis,
                "corpus": {"transcripts": corpus_transcripts, "filler_per_generator": filler_per_generator},
                "tokenizer_sha256": tokenizer_digest,
                "train_tokens": tokens,
                "train_seconds": round(time.time() - t_train, 1),
                "wall_seconds": round(time.time() - t0, 1),
                "solver_curve": list(curve),
                "machine": machine,
            }

        curve: list[dict[str, float]] = []
        t_train = time.time()
        tokens = 0
        model.train()
        for step in range(steps):
            examples = cur.sample(rng, batch_size, solver_only=step < solver_steps)
            for g in opt.param_groups:
                g["lr"] = _lr(step, lr, decay_over=steps if decay else 0)
            opt.zero_grad(set_to_none=True)
            step_loss, step_tokens = accumulate_loss(model, tok, examples, micro_batch, decision_weight)
            tokens += step_tokens
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if (step + 1) % 50 == 0:
                log(f"step {step + 1}/{steps} loss {step_loss:.3f} ({tokens / (time.time() - t_train):.0f} tok/s)")
            if eval_every and (step + 1) % eval_every == 0:
                acc = evaluate_roles(model, tok, solver_eval)[f"{eval_task}/solve"]["accuracy"]
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
