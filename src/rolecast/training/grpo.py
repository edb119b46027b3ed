"""The GRPO training loop, top to bottom: a session opens, runs its steps, evaluates and checkpoints.

One training step:
  1. sample problems (deterministic in (seed, step), so a resumed run sees the same data);
  2. run the workflow G times per problem -> episodes (the rollout engine batches every role call);
  3. score final answers and claims; attribute rewards to turns (team | role | custom);
  4. group turns by (problem, role) and compute group-relative advantages;
  5. for each policy: recompute log-probs under the current weights, clipped surrogate (+ optional KL),
     micro-batched backward, gradient clipping, optimizer step (skipped and logged if not finite);
  6. log metrics / episodes (and the precursors of a cliff, when on), evaluate, checkpoint atomically.
The loop never branches on which workflow ran: it only sees episodes, turns, roles and policy ids.

What it calls: training/update.py (one policy's update, in parts: docs/architecture.md), optimizer.py (every policy's
optimizer, lr schedule and lr clock), guard.py (divergence), resume.py (what a checkpoint holds, resume and
rollback), precursors.py (diagnostics.precursors: probe sets, update ratios, KL to the base, the canary), sinks.py
(console, metrics.jsonl, TensorBoard / W&B) and step_metrics.py (the names of the loop's metrics).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rolecast.config.schema import RunConfig, dump_config, resume_changes
from rolecast.core.devices import resolve_device
from rolecast.core.episode import Episode, Turn, group_turns, turns_by_policy
from rolecast.core.errors import ConfigError, TrainingDiverged
from rolecast.core.rundir import CONFIG, EPISODES, EVAL, METRICS, RunPaths, read_jsonl
from rolecast.diagnostics.metrics import episode_metrics
from rolecast.diagnostics.warnings import Alert, metric_entries
from rolecast.evaluation import append_eval_row, eval_key, eval_plan
from rolecast.rollout.engine import RolloutStats, step_seed
from rolecast.runtime import Runtime, build_runtime
from rolecast.scoring import assign_advantages, attribute, score_episodes
from rolecast.tasks import make_task
from rolecast.tasks.base import Problem, Task
from rolecast.training import distributed
from rolecast.training.checkpoint import latest_step, save_checkpoint
from rolecast.training.distributed import Dist
from rolecast.training.guard import NonFiniteUpdate, weight_norm
from rolecast.training.interrupt import StopRequest, TrainingInterrupted
from rolecast.training.loss_step import Tally, merge_tallies
from rolecast.training.precursors import Precursors
from rolecast.training.resume import SessionState, record_resume, rewind_logs
from rolecast.training.run_dir import check_resume_dir, discard_new_run, prepare_new_run_dir
from rolecast.training.sampling import step_problems
from rolecast.training.sinks import Console, MetricLoggers, ProgressBar, accuracy_text, append_metrics, write_episodes
from rolecast.training.step_metrics import eval_metrics, policy_metrics, role_metrics, rollout_metrics, time_metrics
from rolecast.training.update import PolicyUpdate, update_policy

log = logging.getLogger("rolecast.training")


def default_run_dir(cfg: RunConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return (
        Path("runs") / f"{cfg.task.name}-{Path(cfg.workflow.name).name.replace(':', '.')}-{cfg.routing.sharing}-{stamp}"
    )


# ---------------------------------------------------------------------------------------------------------
# The run


def train(
    cfg: RunConfig,
    *,
    resume: str | Path | None = None,
    stop_after: int | None = None,
    overwrite: bool = False,
    console: Console | None = None,
    stop: StopRequest | None = None,
) -> dict[str, Any]:
    """Train per `cfg`; `stop_after` ends this session after that many steps (as a pre-empted job would),
    leaving a checkpoint to `resume` from. `resume`: the run directory to continue; `cfg` may differ from its
    config.yaml only in the fields of `config.RESUME_CHANGEABLE`. A new run refuses a directory that already
    holds one unless `overwrite`. Raises TrainingDiverged when training diverges (docs/training.md).

    `stop` (the command line's Ctrl-C handling, training/interrupt.py): a requested stop checkpoints the step just
    finished and raises TrainingInterrupted; so does any KeyboardInterrupt, naming the newest checkpoint."""
    # one process, or this process's place in a torchrun launch (training/distributed.py)
    dist = distributed.from_env(resolve_device(cfg.model.device))
    console = console if dist.is_main and console else Console(enabled=cfg.logging.progress and dist.is_main)
    # --- the run directory, checked before anything is loaded or written ---
    changes: dict[str, tuple[Any, Any]] = {}
    created: list[Path] = []
    if resume:
        run_dir = Path(resume)
        changes = resume_changes(check_resume_dir(run_dir), cfg, run_dir / CONFIG)
        newest = latest_step(run_dir)
        if newest is not None and cfg.train.steps < newest:
            raise ConfigError(f"train.steps: {cfg.train.steps} is below the step {newest} {run_dir} has reached")
    else:
        # rank 0 names (a default name holds the time) and prepares the directory; the others wait for it
        run_dir = dist.gather(Path(cfg.run_dir) if cfg.run_dir else default_run_dir(cfg))[0]
        created = prepare_new_run_dir(run_dir, overwrite) if dist.is_main else []
        dist.barrier()
    session: _Session | None = None
    try:
        try:
            session = _Session.open(cfg, run_dir, resume=bool(resume), changes=changes, console=console, dist=dist)
        except BaseException:
            if not resume and dist.is_main:
                discard_new_run(run_dir, created)
            raise
        return session.run(stop_after, discard_on_early_failure=None if resume else created, stop=stop)
    except KeyboardInterrupt as e:
        if stop is None or isinstance(e, TrainingInterrupted):
            raise
        kept = run_dir.is_dir()
        newest = latest_step(run_dir) if kept else None
        # a stop while a checkpoint was being finished (pruning the old ones) has that step's checkpoint complete
        reached = max(session.reached if session is not None else 0, newest or 0)
        raise TrainingInterrupted(run_dir, reached, cfg.train.steps, newest, at_once=True, kept=kept) from None
    finally:
        dist.close()


def _extra_eval_sets(cfg: RunConfig) -> tuple[tuple[str, Task, list[Problem]], ...]:
    """eval.extra_sets as (name, task, its first `size` problems of the split)."""
    out = []
    for s in cfg.eval.extra_sets:
        task = make_task(s.task, **s.options)
        out.append((s.name, task, list(task.problems(s.split))[: s.size]))
    return tuple(out)


@dataclass
class _Session:
    """One process's share of a run: built by `open` (model, optimizers, restored state, run files), then
    `run` trains from the restored step."""

    cfg: RunConfig
    run_dir: Path
    runtime: Runtime
    train_pool: list[Problem]
    eval_set: list[Problem]
    state: SessionState  # what a checkpoint holds (training/resume.py)
    start: int
    console: Console
    loggers: MetricLoggers
    dist: Dist  # one process, or this one's place in a data-parallel run; only rank 0 writes run files
    # eval.extra_sets: (name, task, problems) of each further held-out set, and the pass@1 each last measured
    extra_evals: tuple[tuple[str, Task, list[Problem]], ...] = ()
    extra_pass: dict[str, float] = field(default_factory=dict)
    reached: int = 0  # the last step completed (in this session or before it)

    @classmethod
    def open(
        cls,
        cfg: RunConfig,
        run_dir: Path,
        *,
        resume: bool,
        changes: dict[str, tuple[Any, Any]],
        console: Console,
        dist: Dist | None = None,
    ) -> _Session:
        # --- what to run and what to train (all checked at config load) ---
        runtime = build_runtime(cfg)
        train_pool = list(runtime.task.problems(cfg.task.train_split))
        eval_set = list(runtime.task.problems(cfg.task.eval_split))[: cfg.eval.size]
        extra_evals = _extra_eval_sets(cfg)
        if not train_pool:
            raise ConfigError(f"task {cfg.task.name!r} has no problems in split {cfg.task.train_split!r}")
        state = SessionState.fresh(cfg, runtime.policies, runtime.task.extract_answer)
        start, damaged = state.resume(run_dir, cfg, changes) if resume else (0, [])

        # --- from here on the run directory is written (by rank 0 alone) ---
        dist = dist or Dist()
        if dist.is_main:
            (run_dir / EPISODES).mkdir(exist_ok=True)
            (run_dir / CONFIG).write_text(dump_config(cfg))
            rewind_logs(run_dir, start, [name for name, _, _ in extra_evals])
            if resume:
                console.print(record_resume(run_dir, start, changes, damaged))
        extras = {} if dist.is_main else {"tensorboard": False, "wandb": False}
        loggers = MetricLoggers(cfg.logging.model_copy(update=extras), run_dir)
        return cls(
            cfg=cfg,
            run_dir=run_dir,
            runtime=runtime,
            train_pool=train_pool,
            eval_set=eval_set,
            state=state,
            start=start,
            console=console,
            loggers=loggers,
            dist=dist,
            extra_evals=extra_evals,
        )

    def run(
        self, stop_after: int | None, discard_on_early_failure: list[Path] | None, stop: StopRequest | None = None
    ) -> dict[str, Any]:
        cfg, run_dir, start = self.cfg, self.run_dir, self.start
        summary: dict[str, Any] = {"run_dir": str(run_dir)}
        total_steps = cfg.train.steps
        end = total_steps if stop_after is None else min(total_steps, start + stop_after)
        self.reached = start
        if discard_on_early_failure is not None and self.dist.is_main:  # a new run (a resume says where it is)
            self.console.print(f"run directory: {run_dir}")
        training = stop.training if stop is not None else contextlib.nullcontext
        progress = self.console.progress(total_steps, start)
        try:
            try:
                try:
                    if cfg.eval.at_start and start == 0 and self.eval_set and self.dist.is_main:
                        summary["base_accuracy"] = self.announce_eval(0, "base", "base accuracy")
                    self.set_up_precursors()
                    if start < end:
                        with training():
                            self.train_step(start, end, progress)
                            self.stop_if_requested(stop, start)
                except BaseException:
                    # a new run that failed before logging its first step leaves nothing; one that stopped after
                    # (diverged on step 1) keeps its logs, which show why
                    first = not (run_dir / METRICS).exists()
                    if discard_on_early_failure is not None and self.dist.is_main and first:
                        self.loggers.close()
                        discard_new_run(run_dir, discard_on_early_failure)
                    raise
                with training():
                    for step in range(start + 1, end):
                        self.train_step(step, end, progress)
                        self.stop_if_requested(stop, step)
            finally:
                progress.close()

            # the final evaluation also runs when a resumed run finds its last step done but no final row (killed
            # during that evaluation)
            rows = read_jsonl(run_dir / EVAL)
            done = any(r.get("tag") == "final" and r.get("step") == total_steps for r in rows)
            if cfg.eval.at_end and self.eval_set and end == total_steps and not done and self.dist.is_main:
                summary["final_accuracy"] = self.announce_eval(total_steps, "final", "final accuracy")
        finally:
            self.loggers.close()
        summary["policies"] = self.runtime.routing.policy_ids
        summary["eval_protocol"] = cfg.eval.describe()
        return summary

    def stop_if_requested(self, stop: StopRequest | None, step: int) -> None:
        """After step `step` (0-based) completed: on a requested stop, checkpoint it (unless that is done) and
        raise TrainingInterrupted."""
        self.reached = step + 1
        if stop is None or not stop.requested:
            return
        if self.dist.is_main and latest_step(self.run_dir) != step + 1:
            self.save(step)
        raise TrainingInterrupted(
            self.run_dir, step + 1, self.cfg.train.steps, latest_step(self.run_dir), at_once=False
        )

    # --- one step ---

    def train_step(self, step: int, end: int, progress: ProgressBar) -> None:
        """Training step `step` (0-based; its metrics, checkpoint and logs say step + 1) of a session ending at
        `end`."""
        cfg, dist = self.cfg, self.dist
        t0 = time.perf_counter()
        # 1. problems for this step: a pure function of (seed, step), so resuming needs no data cursor
        problems = step_problems(
            self.train_pool, seed=cfg.seed, step=step, per_step=cfg.train.problems_per_step, mode=cfg.train.sampling
        )
        # 2. rollouts (in a data-parallel run, of this process's share of the problems: whole groups)
        episodes, rstats = self.rollouts(step, problems)
        t_rollout = time.perf_counter()
        # 3. rewards
        self.rewards(episodes, problems)
        t_reward = time.perf_counter()
        # 4. advantages within groups of turns
        assign_advantages(
            group_turns(episodes, cfg.train.group_by), cfg.train.advantage, singleton=cfg.train.singleton_advantage
        )
        # 5. one update per policy, each touching only its own parameters
        by_policy = turns_by_policy(episodes, self.runtime.routing.policy_ids)
        norms_before = {pid: weight_norm(self.runtime.policies.parameters(pid)) for pid in by_policy}
        updates, role_tally = self.update_policies(step, by_policy)
        t_update = time.perf_counter()

        # 6. metrics, samples, evaluation, checkpoint (over every process's episodes; rank 0 writes)
        if dist.active:
            episodes = dist.concat(episodes)
            by_policy = turns_by_policy(episodes, self.runtime.routing.policy_ids)
        self.count_divergence(updates, by_policy, norms_before)
        metrics: dict[str, Any] = {"step": step + 1, **episode_metrics(episodes)}
        for pid, u in updates.items():
            metrics.update(policy_metrics(pid, u.stats))
        metrics.update(role_metrics(role_tally))
        metrics.update(self.component_metrics())
        metrics.update(time_metrics(t0, t_rollout, t_reward, t_update))
        metrics.update(rollout_metrics(rstats, episodes, cfg.rollout.max_prompt_tokens))
        self.warn_no_eos(step, episodes)
        alerts = self.early_warning(step, metrics, episodes)
        stop = self.state.guard.reason(step + 1)  # why the run must stop, or None
        if not stop:
            alerts += self.measure_precursors(step, metrics)
            self.roll_back_if_due(step, alerts, metrics)
            self.periodic_eval(step, metrics)
        self.log_step(step, metrics, episodes, progress)
        if stop:
            raise self.diverged(step + 1, stop)
        # A policy on a streak towards a stop is suspect: its weights are not checkpointed, except at the end of
        # this session (a run not declared diverged must stay resumable).
        suspect = self.state.guard.suspect()
        due = (cfg.checkpoint.every and (step + 1) % cfg.checkpoint.every == 0 and not suspect) or step + 1 == end
        if due and dist.is_main:
            self.save(step)
        self.reached = step + 1

    def rollouts(self, step: int, problems: list[Problem]) -> tuple[list[Episode], RolloutStats]:
        cfg, runtime, dist = self.cfg, self.runtime, self.dist
        # each process samples its share from its own stream, unless every prompt seeds its own samples
        seed = step_seed(cfg.seed + (0 if cfg.rollout.seed_per_prompt else 7919 * dist.rank), step, 1)
        rstats = RolloutStats()
        episodes = runtime.rollouts(
            dist.shard(problems),
            cfg.train.group_size,
            seed=seed,
            options=cfg.workflow.options,
            max_prompt_tokens=cfg.rollout.max_prompt_tokens,
            stats=rstats,
        )
        return episodes, rstats

    def rewards(self, episodes: list[Episode], problems: list[Problem]) -> None:
        cfg, task = self.cfg, self.runtime.task
        score_episodes(episodes, {p.id: p for p in problems}, task)
        attribute(episodes, cfg.train.attribution, ended_reward=cfg.rollout.ended_reward, family=task.family)

    def update_policies(self, step: int, by_policy: dict[str, list[Turn]]) -> tuple[dict[str, PolicyUpdate], Tally]:
        """Each policy's update (with the lr it trained with in its stats), and the per-role token tallies merged
        over policies."""
        cfg, optim, monitor = self.cfg, self.state.optim, self.state.monitor
        update_rng = random.Random(step_seed(cfg.seed, step, 3))
        updates: dict[str, PolicyUpdate] = {}
        role_tally: Tally = {}
        for pid, turns in by_policy.items():
            lr = optim.lr(pid, trains=bool(turns))  # the lr this step trains with
            try:
                with self.watch_update(pid):
                    updates[pid] = update_policy(
                        pid,
                        turns,
                        cfg=cfg,
                        policies=self.runtime.policies,
                        optimizer=optim.optimizer(pid),
                        pad_id=self.runtime.tokenizer.pad_token_id,
                        rng=update_rng,
                        check_logprobs=(step == self.start),
                        monitor=monitor if monitor and monitor.due(step) else None,
                        interventions=self.state.interventions,
                        dist=self.dist,
                    )
            except NonFiniteUpdate as e:
                raise self.diverged(step + 1, str(e)) from None
            updates[pid].stats["lr"] = lr
            merge_tallies(role_tally, updates[pid].tally)
            optim.advance(pid, trains=bool(turns))
        return updates, role_tally

    def count_divergence(
        self, updates: dict[str, PolicyUpdate], by_policy: dict[str, list[Turn]], norms_before: dict[str, float]
    ) -> None:
        """Count the step's signs of divergence per policy (the divergence guard)."""
        policies = self.runtime.policies
        for pid, u in updates.items():
            # a cheap forward on one of the step's prompts catches weights blown up to huge finite values
            probe = next((t.prompt_ids[:32] for t in by_policy[pid] if t.prompt_ids), None)
            finite = not u.stats["optimizer_steps"] or probe is None or policies.outputs_finite(pid, probe)
            self.state.guard.update(
                pid,
                u.stats,
                u.skipped_in_a_row,
                outputs_finite=finite,
                norms=(norms_before[pid], weight_norm(policies.parameters(pid))),
            )

    def component_metrics(self) -> dict[str, Any]:
        """The gradient diagnostics' `grad/...` and `update/...` (docs/training.md) and the interventions'."""
        out: dict[str, Any] = {}
        if self.state.monitor is not None:
            out.update(self.state.monitor.pop_metrics())
        if self.state.interventions is not None:
            out.update(self.state.interventions.pop_metrics())
        return out

    def warn_no_eos(self, step: int, episodes: list[Episode]) -> None:
        if all(t.finish_reason == "length" for ep in episodes for t in ep.turns):
            log.warning(
                "step %d: no completion ended with an end-of-sequence token within %d tokens; check the "
                "tokenizer's eos token / chat template or raise rollout.max_new_tokens",
                step + 1,
                self.cfg.rollout.max_new_tokens,
            )

    def early_warning(self, step: int, metrics: dict[str, Any], episodes: list[Episode]) -> list[Alert]:
        """The failure signatures and gradient signals that crossed their thresholds this step (each also a
        `warn/<name>` metric)."""
        alerts = self.state.warn.check(step + 1, metrics, episodes)
        metrics.update(metric_entries(alerts))
        for a in alerts:
            log.info("step %d: early warning %s (%s)", step + 1, a.name, a.subject)
        return alerts

    # --- precursors (diagnostics.precursors; training/precursors.py): measured by rank 0, which logs ---

    @property
    def precursors(self) -> Precursors | None:
        return self.state.precursors if self.dist.is_main else None

    def set_up_precursors(self) -> None:
        """Before step 1: the probe sets, the canary and the base values (a resumed run has them from its
        checkpoint)."""
        if self.precursors is not None and not self.precursors.ready:
            self.console.print(self.precursors.set_up(self.runtime, self.train_pool))

    def watch_update(self, pid: str) -> contextlib.AbstractContextManager[None]:
        """The update ratios of policy `pid`'s update run in this block."""
        return self.precursors.watch_update(pid) if self.precursors is not None else contextlib.nullcontext()

    def measure_precursors(self, step: int, metrics: dict[str, Any]) -> list[Alert]:
        """The step's precursors (into `metrics`), and the alerts of the rollback's precursor triggers, which every
        process of a data-parallel run gets from rank 0 (each `warn/<name>` too)."""
        alerts = self.precursors.measure(step + 1, self.runtime, metrics) if self.precursors is not None else []
        if self.dist.active and self.state.precursors is not None and self.state.precursors.triggers:
            alerts = self.dist.gather(alerts)[0]
        metrics.update(metric_entries(alerts))
        return alerts

    def roll_back_if_due(self, step: int, alerts: list[Alert], metrics: dict[str, Any]) -> None:
        """interventions.rollback: go back to the best checkpoint when its signals fired (its metrics go into
        `metrics`)."""
        rollback = self.state.rollback
        if rollback is None:
            return
        event = rollback.decide(step + 1, alerts, self.run_dir)
        if event is not None:
            self.state.roll_back(self.run_dir, event, self.cfg.train.lr)
            metrics.update(event.metrics())
            log.warning("%s", event.message(rollback.max_rollbacks))
            self.console.print(event.message(rollback.max_rollbacks))

    def periodic_eval(self, step: int, metrics: dict[str, Any]) -> None:
        """The held-out evaluation every eval.every steps (its pass@1 go into `metrics`)."""
        cfg = self.cfg
        due_eval = cfg.eval.every and (step + 1) % cfg.eval.every == 0 and step + 1 < cfg.train.steps
        if due_eval and self.dist.is_main:
            with self.console.evaluating(f"at step {step + 1}"):
                row = self.run_eval(step + 1, "periodic")
            metrics.update(eval_metrics(row["pass@1"]))
            for name, v in self.extra_pass.items():
                metrics.update(eval_metrics(v, name))
            self.console.print(
                f"eval at step {step + 1} ({len(self.eval_set)} problems; {cfg.eval.describe()}): "
                f"{accuracy_text(row['pass@1'], row['stderr'])}"
            )

    def log_step(self, step: int, metrics: dict[str, Any], episodes: list[Episode], progress: ProgressBar) -> None:
        """The step's metrics (metrics.jsonl, TensorBoard / W&B, the console) and sampled episodes."""
        cfg, run_dir = self.cfg, self.run_dir
        if self.dist.is_main:
            append_metrics(run_dir / METRICS, metrics)
        if self.precursors is not None:
            self.precursors.record(metrics)  # as logged: what the derived precursors of later steps read
        if cfg.logging.episodes_every and (step + 1) % cfg.logging.episodes_every == 0 and self.dist.is_main:
            write_episodes(RunPaths(run_dir).episodes(step + 1), episodes[: cfg.logging.max_episodes])
        self.loggers.log(metrics, step + 1)
        progress.advance(step + 1, metrics["reward"], metrics)

    # --- evaluation, checkpoints, divergence ---

    def announce_eval(self, step: int, tag: str, what: str) -> float:
        """The base or final evaluation, said on the console; returns its pass@1."""
        cfg = self.cfg
        with self.console.evaluating(f"the {tag} model" if tag == "base" else f"at step {step}"):
            row = self.run_eval(step, tag)
        self.console.print(
            f"{what} ({cfg.task.eval_split}, {len(self.eval_set)} problems; "
            f"{cfg.eval.describe()}): {accuracy_text(row['pass@1'], row['stderr'])}"
        )
        return row["pass@1"]

    def run_eval(self, step: int, tag: str) -> dict[str, Any]:
        cfg, runtime = self.cfg, self.runtime
        plan = eval_plan(cfg, step)  # eval.n_samples, eval.temperature, eval.top_p; seed step_seed(cfg.seed, step, 2)
        res = runtime.evaluate(self.eval_set, plan, options=cfg.workflow.options)
        extra = [  # each further set from the same seed as the first
            (name, task, runtime.evaluate(problems, plan, options=cfg.workflow.options, task=task))
            for name, task, problems in self.extra_evals
        ]
        key = eval_key(cfg, run=str(self.run_dir), step=step, tag=tag, workflow=runtime.spec.name)
        self.extra_pass = {}
        for name, task, extra_res in extra:
            extra_key = {
                **key,
                "task": task.name,
                "split": next(s.split for s in cfg.eval.extra_sets if s.name == name),
            }
            row = append_eval_row(RunPaths(self.run_dir).eval(name), {**extra_key, "eval_set": name}, extra_res)
            self.extra_pass[name] = row["pass@1"]
            if tag != "periodic":  # periodic ones go with the step's metrics
                self.loggers.log(eval_metrics(row["pass@1"], name, tag), step)
            self.console.print(
                f"{name} accuracy ({row['n_problems']} problems, step {step}): {accuracy_text(row['pass@1'], row['stderr'])}"
            )
        row = append_eval_row(self.run_dir / EVAL, key, res)
        if tag != "periodic":  # TensorBoard / W&B: the base (step 0) and final points of the eval/pass@1 curve
            self.loggers.log(eval_metrics(row["pass@1"], tag=tag), step)
        return row

    def save(self, step: int) -> None:
        """Checkpoint the run as it stands after step `step` (0-based): weights, optimizer, scheduler and RNG
        state, and every counter a resume needs (training/resume.py)."""
        ck = self.cfg.checkpoint
        state = self.state.checkpoint(step + 1)
        save_checkpoint(self.run_dir, step + 1, state, keep_last=ck.keep_last, keep_every=ck.keep_every)

    def diverged(self, step: int, why: str) -> TrainingDiverged:
        ckpt = latest_step(self.run_dir)
        kept = (
            f"the last good checkpoint, {self.run_dir / 'checkpoints' / f'step_{ckpt}'}, is kept"
            if ckpt is not None
            else "no checkpoint was written"
        )
        return TrainingDiverged(f"training diverged and stopped at step {step}: {why}; {kept}")
