"""GRPO step throughput: rolecast vs TRL's GRPOTrainer on the same model, batch and lengths, in one run.

    .venv/bin/python bench/grpo_vs_trl.py                     # tiny Qwen3, 2048-token vocabulary
    .venv/bin/python bench/grpo_vs_trl.py --vocab qwen --steps 2   # same shape, real Qwen3 vocabulary (151,669)
    .venv/bin/python bench/grpo_vs_trl.py --only decode --decode-lora   # decode alone on a LoRA policy

Equal work on both sides (checked and printed):
- one random tiny Qwen3 (testbed shape) saved to a temp dir; both frameworks load it from that path, fp32,
  full fine-tune, AdamW (weight decay 0), constant lr, grad-norm clip 1.0, no dropout, no gradient checkpointing;
- 2 prompts x group 8 = 16 completions per step, identical prompt token ids (the same chat-rendered text),
  exactly `--completion-len` sampled tokens per completion (rolecast: HFBackend(ignore_eos=True); TRL:
  generation_kwargs min_new_tokens = max_completion_length), temperature 1.0, top_p 1, no top-k;
- GRPO: group-normalised advantages, no KL (beta 0), clip 0.2 / 0.28, token-mean loss (TRL "dapo"), one
  update pass per batch (TRL num_iterations 1, one optimizer step per generation batch);
- the same non-degenerate reward on both sides: crc32(completion text) & 1 (pseudo-random 0/1);
- one warm-up step each, then `--steps` timed steps, interleaved: after each TRL step (inside its step-end
  callback) one rolecast step runs, so a change in machine load hits both alike. TRL's step time runs from
  the end of the previous step (after the interleaved rolecast step) to the end of this one: data,
  generation, rewards, update and its logging. rolecast's covers exactly what `rolecast.training.grpo.train`
  does per step (sample problems, rollout, score, attribute, advantages, update, step metrics), without
  file logging/checkpointing.
- OpenMP's default wait policy (what users get); --omp-passive sets OMP_WAIT_POLICY=PASSIVE (see below).

Then, in the same process, rolecast's decode alone: HFBackend with the fast decode path (rollout/fast_qwen3.py,
the default), the same path with its numba kernels off (rollout/cpu_kernels.py; torch ops only) and the stock
transformers forward per token (fast=False), alternating, same 16 requests and length, outputs checked
identical (`--decode-reps 0` skips it; `--stock-decode` runs the GRPO steps with the stock forward, i.e.
rolecast before the fast path; `--no-cpu-kernels` runs them without the kernels).
"""

from __future__ import annotations

import os

# Must precede the first `import torch`. On a shared CPU with more runnable threads than cores, OpenMP's
# default spin-waiting makes each decode step up to ~20x slower (measured here: a 16-row decode step of the
# tiny model took 233 ms with spinning vs 27 ms passive while other jobs ran), so --omp-passive exists for
# loaded machines. It is not the default: on a quiet machine passive waits slow TRL's two-thread steps
# (7.1 vs 3.9 s/step) far more than rolecast's, which would flatter the ratio.
if "--omp-passive" in os.sys.argv:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import random
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import build_tiny_model, machine  # noqa: E402

from rolecast.rollout import cpu_kernels  # noqa: E402

PROMPT = "solve: {a} + {b} - {c}. Work it out step by step, check the result, and put the final answer in a box."


def reward_of(text: str) -> float:
    return float(zlib.crc32(text.encode("utf-8")) & 1)


def problems(n: int = 200, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [PROMPT.format(a=rng.randrange(10), b=rng.randrange(10), c=rng.randrange(10)) for _ in range(n)]


def chat_messages(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


# -------------------------------------------------------------------------------------------------------
# rolecast


class RolecastRunner:
    """Everything `rolecast.training.grpo.train` does per step, minus file logging and checkpoints."""

    def __init__(self, model_dir: str, args):
        from rolecast.config import RolloutSettings, RunConfig, TrainSettings
        from rolecast.policies.models import PolicySet, load_tokenizer
        from rolecast.policies.router import build_routing
        from rolecast.rollout.hf import HFBackend
        from rolecast.tasks.base import Problem, Score, Task
        from rolecast.workflows import get_workflow

        class BenchTask(Task):
            name, family = "bench", "bench"

            def __init__(self, texts):
                self._p = [Problem(id=str(i), text=t, reference=None) for i, t in enumerate(texts)]

            def problems(self, split):
                return self._p

            def extract_answer(self, text):
                return text

            def score(self, problem, text):
                return Score(reward=reward_of(text or ""), answer=None)

        class UserOnly:
            """The prompt book: the problem text as the only user message (what TRL gets, rendered)."""

            def render(self, name, problem, **_):
                return chat_messages(problem)

        self.args = args
        self.cfg = RunConfig.model_construct(
            seed=0,
            train=TrainSettings(
                lr=args.lr,
                lr_schedule="constant",
                clip_low=0.2,
                clip_high=0.28,
                kl_coef=0.0,
                advantage="grpo",
                loss_agg="token-mean",
                max_grad_norm=1.0,
                weight_decay=0.0,
                problems_per_step=args.prompts,
                group_size=args.group,
                update_schedule="per_step",
                micro_batch_tokens=args.micro_batch_tokens,
            ),
            rollout=RolloutSettings(temperature=1.0, top_p=1.0, max_new_tokens=args.completion_len),
        )
        self.spec = get_workflow("single")
        self.routing = build_routing(self.spec.roles, "shared")
        self.task = BenchTask(problems())
        self.prompts = UserOnly()
        self.pool = list(self.task.problems("train"))
        self.tok = load_tokenizer(model_dir)
        self.policies = PolicySet(model_dir, self.routing.policy_ids, mode="full", seed=0)
        self.backend = HFBackend(
            self.policies,
            self.tok,
            max_new_tokens=args.completion_len,
            temperature=1.0,
            top_p=1.0,
            seed=0,
            ignore_eos=True,
            fast=not args.stock_decode,
            decode_threads=args.decode_threads,
            cpu_kernels=not args.no_cpu_kernels,
        )
        self.pid = self.routing.policy_ids[0]
        self.opt = torch.optim.AdamW(
            self.policies.parameters(self.pid), lr=args.lr, betas=(0.9, 0.999), weight_decay=0.0
        )
        self.step_no = 0
        self.times, self.lengths, self.prompt_lens, self.rewards = [], [], set(), []

    def step(self, timed: bool) -> float:
        from rolecast.core.episode import group_turns
        from rolecast.diagnostics.metrics import episode_metrics
        from rolecast.rollout.engine import run_episodes, step_seed
        from rolecast.scoring import assign_advantages, attribute, score_episodes
        from rolecast.training.update import update_policy

        a, step = self.args, self.step_no
        t0 = time.perf_counter()
        probs = random.Random(step_seed(0, step, 0)).sample(self.pool, a.prompts)
        self.backend.reseed(step_seed(0, step, 1))
        episodes = run_episodes(
            self.spec, probs, a.group, task=self.task, prompts=self.prompts, router=self.routing, backend=self.backend
        )
        t_roll = time.perf_counter()
        score_episodes(episodes, {p.id: p for p in probs}, self.task)
        attribute(episodes, "team")
        assign_advantages(group_turns(episodes, "role"), "grpo")
        turns = [t for ep in episodes for t in ep.turns]
        update_policy(
            self.pid,
            turns,
            cfg=self.cfg,
            policies=self.policies,
            optimizer=self.opt,
            pad_id=self.tok.pad_token_id,
            rng=random.Random(step_seed(0, step, 3)),
            check_logprobs=(step == 0),
        )  # step 1 also checks sampler vs trainer log-probs
        episode_metrics(episodes)
        t1 = time.perf_counter()
        self.step_no += 1
        self.lengths += [len(t.completion_ids) for t in turns]
        self.prompt_lens |= {len(t.prompt_ids) for t in turns}
        self.rewards += [t.reward for t in turns]
        if timed:
            self.times.append((t1 - t0, t_roll - t0, t1 - t_roll))
        print(
            f"  rolecast step {self.step_no}: {t1 - t0:.2f} s (rollout {t_roll - t0:.2f}, score+update "
            f"{t1 - t_roll:.2f}){'' if timed else '  [warm-up]'}",
            flush=True,
        )
        return t1 - t0

    def result(self) -> dict:
        return {
            "framework": "rolecast",
            "step_s": [t[0] for t in self.times],
            "rollout_s": [t[1] for t in self.times],
            "update_s": [t[2] for t in self.times],
            "lengths_min": min(self.lengths),
            "lengths_max": max(self.lengths),
            "prompt_lens": sorted(self.prompt_lens),
            "reward_mean": sum(self.rewards) / max(len(self.rewards), 1),
        }


def run_rolecast_alone(model_dir: str, args) -> dict:
    runner = RolecastRunner(model_dir, args)
    profiler = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup and args.profile:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        runner.step(timed=step >= args.warmup)
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    return runner.result()


# -------------------------------------------------------------------------------------------------------
# TRL


def run_trl(model_dir: str, args, out_dir: str, rolecast: RolecastRunner | None = None) -> dict:
    """TRL's GRPOTrainer. With `rolecast`, one rolecast step runs right after each TRL step (inside the
    step-end callback, excluded from TRL's time), so both see the same machine load (A/B interleaving)."""
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    rendered = [
        tok.apply_chat_template(chat_messages(t), add_generation_prompt=True, enable_thinking=False, tokenize=False)
        for t in problems()
    ]
    ds = Dataset.from_dict({"prompt": rendered})  # standard (non-conversational) prompts: the exact same text

    seen_rewards: list[float] = []

    def reward_fn(completions, **kwargs):
        r = [reward_of(c) for c in completions]
        seen_rewards.extend(r)
        return r

    class Clock(TrainerCallback):
        """TRL step k = from the end of step k-1 (after any interleaved rolecast step) to the end of step k:
        data, generation, rewards, update, and TRL's logging of step k-1."""

        def __init__(self):
            self.resume_at, self.step_s, self.logs = None, [], []

        def on_step_end(self, a, state, control, **kw):
            now = time.perf_counter()
            k = state.global_step
            if self.resume_at is not None:
                timed = k > args.warmup
                if timed:
                    self.step_s.append(now - self.resume_at)
                print(f"  trl step {k}: {now - self.resume_at:.2f} s{'' if timed else '  [warm-up]'}", flush=True)
            if rolecast is not None:
                rolecast.step(timed=k > args.warmup)
            self.resume_at = time.perf_counter()

        def on_log(self, a, state, control, logs=None, **kw):
            if logs:
                self.logs.append(dict(logs))

    n = args.prompts * args.group
    # the first `warmup` steps of each framework are untimed
    config = GRPOConfig(
        output_dir=out_dir,
        max_steps=args.warmup + args.steps,
        per_device_train_batch_size=n,
        gradient_accumulation_steps=1,
        num_generations=args.group,
        max_completion_length=args.completion_len,
        generation_kwargs={"min_new_tokens": args.completion_len},
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        optim="adamw_torch",
        adam_beta1=0.9,
        adam_beta2=0.999,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        num_iterations=1,
        loss_type="dapo",
        scale_rewards="group",
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        use_vllm=False,
        report_to="none",
        save_strategy="no",
        eval_strategy="no",
        logging_steps=1,
        use_cpu=True,
        seed=0,
        disable_dropout=True,
        model_init_kwargs={"dtype": "float32"},
        dataloader_num_workers=0,
        log_completions=False,
        disable_tqdm=True,
    )
    clock = Clock()
    trainer = GRPOTrainer(
        model=model_dir, reward_funcs=reward_fn, args=config, train_dataset=ds, processing_class=tok, callbacks=[clock]
    )
    trainer.train()
    step_logs = [lg for lg in clock.logs if "completions/mean_length" in lg]
    prompt_len = len(tok(rendered[0], add_special_tokens=False)["input_ids"])
    return {
        "framework": "TRL " + __import__("trl").__version__,
        "step_s": clock.step_s,
        "lengths_min": min(float(lg["completions/min_length"]) for lg in step_logs),
        "lengths_max": max(float(lg["completions/max_length"]) for lg in step_logs),
        "prompt_lens": [prompt_len],
        "reward_mean": sum(seen_rewards) / max(len(seen_rewards), 1),
    }


# -------------------------------------------------------------------------------------------------------


def decode_fast_vs_stock(model_dir: str, args) -> dict:
    """HFBackend generation of one step's requests (prompts x group, exactly completion_len tokens each), fast
    decode path vs stock forward, alternating; returns median seconds per variant (outputs must be identical)."""
    from rolecast.policies.models import PolicySet, load_tokenizer
    from rolecast.rollout.engine import GenRequest
    from rolecast.rollout.hf import HFBackend

    tok = load_tokenizer(model_dir)
    policies = PolicySet(model_dir, ["p"], mode="lora" if args.decode_lora else "full", seed=0)
    if args.decode_lora:  # PEFT starts lora_B at zero (adapter = base); give the adapter a function of its own
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, p in policies.models["p"].named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    reqs = [GenRequest("p", chat_messages(t)) for t in problems()[: args.prompts] for _ in range(args.group)]
    # (name, fast path, numba kernels): the kernels variant only where numba is installed
    variants = [("fast", True, True), ("fast, torch ops", True, False), ("stock", False, False)]
    if cpu_kernels.load() is None:
        variants = variants[1:]
    times: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    outs: dict[str, list] = {}
    for rep in range(args.decode_reps + 1):  # the first round warms up
        for name, fast, kernels in variants:
            backend = HFBackend(
                policies,
                tok,
                max_new_tokens=args.completion_len,
                temperature=1.0,
                top_p=1.0,
                seed=rep,
                ignore_eos=True,
                fast=fast,
                decode_threads=args.decode_threads,
                cpu_kernels=kernels,
            )
            t0 = time.perf_counter()
            gens = backend.generate(reqs)
            if rep:
                times[name].append(time.perf_counter() - t0)
            outs[name] = [(g.completion_ids, g.logprobs) for g in gens]
        for name, _, _ in variants[:-1]:
            same = [a[0] for a in outs[name]] == [b[0] for b in outs["stock"]]
            # relative: fp32 summation order differs (packed projections, kernels; merged LoRA rounds differently)
            lp = max(
                abs(x - y) / max(1.0, abs(y))
                for a, b in zip(outs[name], outs["stock"], strict=True)
                for x, y in zip(a[1], b[1], strict=True)
            )
            if not same or lp > (1e-4 if args.decode_lora else 1e-5):
                raise SystemExit(
                    f"{name} and stock decode differ (tokens identical: {same}, max relative log-prob diff {lp:.2e})"
                )
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", choices=["tiny", "qwen"], default="tiny")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per framework (default 4 tiny, 2 qwen)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--completion-len", type=int, default=192)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--micro-batch-tokens", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--only",
        choices=["both", "rolecast", "trl", "decode"],
        default="both",
        help="decode: only the fast vs stock decode comparison",
    )
    ap.add_argument(
        "--decode-lora",
        action="store_true",
        help="the decode comparison on a LoRA policy (r 64, all linear layers): merged fast path vs PEFT",
    )
    ap.add_argument("--profile", action="store_true", help="cProfile rolecast's timed steps (with --only rolecast)")
    ap.add_argument("--omp-passive", action="store_true", help="OMP_WAIT_POLICY=PASSIVE (for a loaded machine)")
    ap.add_argument("--stock-decode", action="store_true", help="rolecast decodes with the stock forward (fast=False)")
    ap.add_argument(
        "--decode-threads",
        type=lambda v: None if v == "all" else v if v == "auto" else int(v),
        default=None,
        help="rolecast's threads while generating: all (= --threads, like TRL; rolecast's default), N, "
        "or auto (one thread for small decode steps)",
    )
    ap.add_argument(
        "--no-cpu-kernels",
        action="store_true",
        help="rolecast without the numba decode kernels (rollout/cpu_kernels.py): torch ops only",
    )
    ap.add_argument("--decode-reps", type=int, default=3, help="timed rounds of the fast vs stock decode comparison")
    args = ap.parse_args(argv)
    if args.warmup < 1:
        ap.error("--warmup must be >= 1 (TRL's first step time is measured from the end of the warm-up step)")
    args.steps = args.steps or (4 if args.vocab == "tiny" else 2)
    torch.set_num_threads(args.threads)
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "model", vocab=args.vocab)
        from transformers import AutoConfig

        c = AutoConfig.from_pretrained(model_dir)
        print(f"machine: {machine()}")
        print(
            f"model: Qwen3 hidden {c.hidden_size}, {c.num_hidden_layers} layers, {c.num_attention_heads} heads / "
            f"{c.num_key_value_heads} KV, MLP {c.intermediate_size}, vocab {c.vocab_size}; full fine-tune fp32"
        )
        print(
            f"work per step: {args.prompts} prompts x {args.group} = {args.prompts * args.group} completions x "
            f"{args.completion_len} tokens; {args.warmup} warm-up + {args.steps} timed steps each",
            flush=True,
        )
        results = []
        if args.only == "both":
            print("TRL and rolecast, one step each in turn ...", flush=True)
            runner = RolecastRunner(model_dir, args)
            trl = run_trl(model_dir, args, str(Path(tmp) / "trl"), rolecast=runner)
            results = [runner.result(), trl]
        elif args.only == "decode":
            pass
        elif args.only == "rolecast":
            results.append(run_rolecast_alone(model_dir, args))
        else:
            results.append(run_trl(model_dir, args, str(Path(tmp) / "trl")))
        decode = None
        if args.decode_reps > 0:
            print(f"rolecast decode alone, fast vs stock forward, {args.decode_reps} rounds ...", flush=True)
            decode = decode_fast_vs_stock(model_dir, args)

    n_tok = args.prompts * args.group * args.completion_len
    print()
    for r in results:
        lo, hi = r["lengths_min"], r["lengths_max"]
        print(
            f"{r['framework']}: completion lengths min {lo:.0f} max {hi:.0f} (want {args.completion_len}); "
            f"prompt length(s) {r['prompt_lens']}; mean reward {r['reward_mean']:.2f}"
        )
        if lo != args.completion_len or hi != args.completion_len:
            print(f"  WARNING: {r['framework']} did not generate exactly {args.completion_len} tokens per completion")
    base = next((statistics.median(r["step_s"]) for r in results if r["framework"].startswith("TRL")), None)
    if results:
        print()
        print(f"| framework | s/step (median of {args.steps}) | min s/step | completion tokens/s | steps/s vs TRL |")
        print("|---|---|---|---|---|")
    for r in results:
        med = statistics.median(r["step_s"])
        ratio = f"{base / med:.2f}x" if base else "-"
        print(f"| {r['framework']} | {med:.2f} | {min(r['step_s']):.2f} | {n_tok / med:,.0f} | {ratio} |")
    for r in results:
        if "rollout_s" in r:
            print(
                f"rolecast split (median): rollout {statistics.median(r['rollout_s']):.2f} s, "
                f"score+advantages+update {statistics.median(r['update_s']):.2f} s"
                f"{' (stock decode)' if args.stock_decode else ''}"
                f"{' (no numba kernels)' if args.no_cpu_kernels else ''}"
                f"{f' (decode on {args.decode_threads} thread(s))' if args.decode_threads else ''}"
            )
    if decode:
        print(
            f"rolecast HFBackend decode{' (LoRA policy)' if args.decode_lora else ''} on "
            f"{args.decode_threads or args.threads} thread(s), {args.prompts * args.group} x {args.completion_len} "
            f"tokens (median of {args.decode_reps}, same tokens as the stock forward):"
        )
        for name, sec in decode.items():
            print(f"  {name}: {sec:.2f} s ({n_tok / sec:,.0f} tok/s), {decode['stock'] / sec:.2f}x the stock forward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
