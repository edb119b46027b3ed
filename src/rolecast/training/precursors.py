"""Precursors of a cliff, measured in the loop (config `diagnostics.precursors`, off while `every` is 0).

The measurements are diagnostics/precursors.py's pure functions; this module gives them their inputs, one call
per phase of the loop (docs/analysis.md, "What the trainer calls"):

1. before step 1, `set_up`: per (policy, role) a fixed probe set of up to `probe_size` known-correct outputs,
   drawn from one batch of the base policy's own rollouts (`probe_problems` training problems x
   train.group_size samples, at the rollout's sampling, from their own seed stream) whose final answer scored 1;
   a fixed canary of `canary_size` held-out problems (task.eval_split, drawn from their own seed stream); and the
   base values: each probe set's log-likelihood, the KL to the base (0: a check), the canary's accuracy;
2. around each policy's update, `watch_update`: |dW| / |W| of the output head and of all its trainable tensors;
3. after the step's metrics, `measure`: every `every` steps one teacher-forced forward of the probe sets under
   the policy and under the base (the LoRA adapter disabled, or the starting weights of a full fine-tune), giving
   each role's probe log-likelihood and each policy's exact KL to the base over its probe positions, and the
   canary through the one evaluation path; at every step the derived precursors (the built-in `entropy_slope`,
   the user's `use`), read from the metric rows as the registry's series functions read them when scoring; and
   the alerts of the rollback's precursor triggers (`interventions.rollback.precursors`);
4. at log time, `record`: the step's final row, as metrics.jsonl holds it, for the derived precursors.

Log-probabilities are of the sampler's distribution, softmax(logits / rollout.temperature), as the loss uses them,
so the base probe log-likelihood is the mean of the probe tokens' sampling log-probs (up to the sampler's numerics).

The probe set, the canary's problem ids and the base values are saved in every checkpoint (entry `precursors`);
the rows come back from metrics.jsonl on a resume, so a resumed run logs exactly what an uninterrupted one does.
Nothing here changes training: the probe rollouts and the canary reseed the backend from their own streams (every
step reseeds its own), the forwards run without gradient, and with `every` 0 none of it runs.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from peft.tuners.lora import LoraLayer

from rolecast.config.schema import PrecursorTrigger, RunConfig
from rolecast.core.episode import Turn
from rolecast.core.errors import CheckpointError, ConfigError
from rolecast.core.metric_keys import precursor_key, time_key
from rolecast.core.rundir import METRICS, read_jsonl
from rolecast.diagnostics.precursors import (
    DERIVED_EACH_STEP,
    Precursor,
    ProbeSums,
    canary_accuracy,
    change_from_base,
    fired_at,
    get_precursor,
    probe_sums,
    resolve_precursor,
    select_probes,
    update_ratio,
    update_to_weight_ratio,
    values_at,
)
from rolecast.diagnostics.signatures import Alert
from rolecast.evaluation import CANARY_SEED_STREAM, canary_plan
from rolecast.policies.models import PolicySet, base_model
from rolecast.rollout.engine import step_seed
from rolecast.runtime import Runtime
from rolecast.scoring import score_episodes
from rolecast.tasks.base import Problem
from rolecast.training.batching import collate, plan_micro_batches, to_device
from rolecast.training.logprobs import completion_hidden_states

log = logging.getLogger("rolecast.training")

PROBE_SEED_STREAM = 5  # `step_seed`'s stream of the probe set's base rollouts (evaluation's canary: 6)
PRECURSOR = "precursor"  # alerts' kind, beside "signature" and "gradient"
RUN = "run"  # the subject of a precursor of the whole run (precursor/<name>)
STATE_VERSION = 1
_CHUNK_BYTES = 1 << 26  # float64 log-softmax of one chunk of probe positions, per model
_BASE_CACHE_BYTES = 1 << 28  # the base's hidden states at the probe positions, kept between measurements


@dataclass
class Probe:
    """One known-correct output of a role: the problem, the prompt and completion tokens, and the log-probs the
    base sampled them with."""

    problem_id: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]

    def turn(self, pid: str, role: str) -> Turn:
        return Turn(role, role, pid, self.prompt_ids, self.completion_ids, self.logprobs, "", "stop")


@dataclass
class BaseValues:
    """The precursors of the untrained policy, measured before step 1."""

    probe_ll: dict[str, dict[str, float]]  # pid -> role -> mean log-likelihood per token
    kl_to_base: dict[str, float]  # pid -> KL of the untrained policy to the base (0: a check)
    canary_accuracy: float | None  # None without a canary


def as_logged(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A metric row as metrics.jsonl holds it (a non-finite float is null; JSON's types), so a resumed run, which
    reads its rows back, derives precursors from exactly what an uninterrupted one kept in memory."""
    finite = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
    out: dict[str, Any] = json.loads(json.dumps(finite))
    return out


def subject_key(name: str, subject: str) -> str:
    """The metric name of a derived precursor's value for `subject` ("run", "<pid>" or "<a>/<b>", as its series
    names them), which `logged_series` reads back under the same subject."""
    if subject == RUN:
        return precursor_key(name)
    pid, _, role = subject.partition("/")
    return precursor_key(name, pid, role or None)


class Precursors:
    """The loop's precursors (module docstring): `set_up` once, `watch_update` per policy update, `measure` and
    `record` per step; `state_dict` / `load_state_dict` for checkpoints, `read_history` on a resume."""

    def __init__(self, cfg: RunConfig, policies: PolicySet):
        self.cfg, self.policies = cfg, policies
        self.settings = cfg.diagnostics.precursors
        temperature = cfg.rollout.temperature
        self.scale = 1.0 / temperature if temperature > 0 else 1.0  # the sampler's distribution, as the loss has it
        self.derived: list[Precursor] = [get_precursor(n) for n in DERIVED_EACH_STEP]
        self.derived += [resolve_precursor(u.name, u.direction) for u in self.settings.use]
        by_name = {u.name: p for u, p in zip(self.settings.use, self.derived[len(DERIVED_EACH_STEP) :], strict=True)}
        self.triggers: list[tuple[PrecursorTrigger, Precursor]] = [
            (t, by_name.get(t.name) or resolve_precursor(t.name, t.direction))
            for t in cfg.interventions.rollback.precursors
        ]
        self.probes: dict[str, dict[str, list[Probe]]] = {}
        self.canary_ids: list[str] = []
        self.base: BaseValues | None = None
        self.rows: list[dict[str, Any]] = []  # the run's metric rows so far, as logged
        self._canary: list[Problem] | None = None
        self._pending: dict[str, float] = {}  # this step's update ratios, until `measure`
        self._ratio_seconds = 0.0  # what taking them cost this step (inside time/update)
        # (pid, role) -> per micro-batch the base's hidden states at the probe positions, and its head
        self._base_hidden: dict[tuple[str, str], list[tuple[torch.Tensor, Any]]] = {}
        self._cached_bytes = 0

    @classmethod
    def from_config(cls, cfg: RunConfig, policies: PolicySet) -> Precursors | None:
        """The precursors `diagnostics.precursors` asks for; None while its `every` is 0."""
        return cls(cfg, policies) if cfg.diagnostics.precursors.every else None

    @property
    def ready(self) -> bool:
        """Set up (or restored): the probe sets and the base values exist."""
        return self.base is not None

    # --- 1. before step 1 ---

    def set_up(self, runtime: Runtime, train_pool: Sequence[Problem]) -> str:
        """Draw the probe sets and the canary and measure the base values (the policies must be untrained); returns
        a line for the console."""
        cfg, s = self.cfg, self.settings
        t0 = time.perf_counter()
        self._check_head()
        seed = step_seed(cfg.seed, 0, PROBE_SEED_STREAM)
        problems = random.Random(seed).sample(list(train_pool), min(s.probe_problems, len(train_pool)))
        episodes = runtime.rollouts(
            problems,
            cfg.train.group_size,
            seed=seed,
            options=cfg.workflow.options,
            max_prompt_tokens=cfg.rollout.max_prompt_tokens,
        )
        score_episodes(episodes, {p.id: p for p in problems}, runtime.task)
        problem_of = {id(t): ep.problem_id for ep in episodes for t in ep.turns}
        self.probes = {
            pid: {
                role: [Probe(problem_of[id(t)], t.prompt_ids, t.completion_ids, t.logprobs) for t in turns]
                for role, turns in roles.items()
            }
            for pid, roles in select_probes(episodes, s.probe_size).items()
        }
        split = list(runtime.task.problems(cfg.task.eval_split))
        canary = random.Random(step_seed(cfg.seed, 0, CANARY_SEED_STREAM)).sample(split, min(s.canary_size, len(split)))
        self.canary_ids = [p.id for p in canary]
        self._canary = canary
        lls, kls = self._measure_probes(runtime)
        self.base = BaseValues(lls, kls, self._canary_accuracy(0, runtime))
        played = sorted({(t.policy_id, t.role) for ep in episodes for t in ep.turns})
        correct = sum(ep.reward >= 1.0 for ep in episodes)
        return self._summary(len(episodes), correct, played, time.perf_counter() - t0)

    def _summary(self, episodes: int, correct: int, played: list[tuple[str, str]], seconds: float) -> str:
        """The console line: what the probe sets hold, which (policy, role) has none, the canary's base."""
        assert self.base is not None
        sets = ", ".join(f"{pid}/{role} {len(ps)}" for pid, roles in self.probes.items() for role, ps in roles.items())
        line = f"precursors: probe sets from {correct}/{episodes} correct base rollouts: {sets or 'none'}"
        if self.base.canary_accuracy is not None:
            line += f"; canary {len(self.canary_ids)} problems, base {self.base.canary_accuracy:.3f}"
        line += f" ({seconds:.1f} s)"
        missing = [f"{pid}/{role}" for pid, role in played if role not in self.probes.get(pid, {})]
        if missing:
            line += f"; no probe set for {', '.join(missing)} (no correct base rollout: no probe precursor)"
        return line

    def _check_head(self) -> None:
        if self.policies.mode != "lora":
            return
        head = base_model(self.policies.models[self.policies.policy_ids[0]]).get_output_embeddings()
        if isinstance(head, LoraLayer):
            raise ConfigError(
                "diagnostics.precursors: model.lora.target_modules puts an adapter on the output head; the KL to "
                "the base on the probe sets needs the head shared by the policy and the base (leave it out)"
            )

    # --- 2. around each policy's update ---

    @contextmanager
    def watch_update(self, pid: str) -> Iterator[None]:
        """|dW| / |W| of policy `pid`'s output head (when it trains it) and of all its trainable tensors over the
        update run inside the block (nothing when it raises)."""
        t0 = time.perf_counter()
        params = self.policies.parameters(pid)
        before = {str(i): p.detach().clone() for i, p in enumerate(params)}
        self._ratio_seconds += time.perf_counter() - t0
        yield
        t1 = time.perf_counter()
        after = {str(i): p.detach() for i, p in enumerate(params)}
        self._pending[precursor_key("update_ratio", pid)] = update_to_weight_ratio(before, after)
        head = base_model(self.policies.models[pid]).get_output_embeddings().weight
        i = next((str(i) for i, p in enumerate(params) if p is head), None)
        if i is not None:  # a head the policy does not train (LoRA) logs nothing
            self._pending[precursor_key("head_update_ratio", pid)] = update_ratio(before[i], after[i])
        self._ratio_seconds += time.perf_counter() - t1

    # --- 3. after the step's metrics ---

    def measure(self, step: int, runtime: Runtime, metrics: dict[str, Any]) -> list[Alert]:
        """Step `step`'s (1-based) precursors into `metrics`; the alerts of the rollback's precursor triggers."""
        t0 = time.perf_counter()
        out: dict[str, Any] = dict(self._pending)
        self._pending = {}
        if step % self.settings.every == 0:
            out.update(self._periodic(step, runtime))
        metrics.update(out)
        rows = [*self.rows, as_logged(metrics)]
        series: dict[str, dict[str, list[tuple[int, float]]]] = {}
        for p in self.derived:
            series[p.name] = p.series(rows)
            for subject, v in values_at(series[p.name], step).items():
                metrics[subject_key(p.name, subject)] = v
        alerts = [a for t, p in self.triggers if (a := self._alert(step, t, p, series, rows)) is not None]
        metrics[time_key("precursors")] = time.perf_counter() - t0
        metrics[time_key("update_ratios")], self._ratio_seconds = self._ratio_seconds, 0.0
        return alerts

    def _periodic(self, step: int, runtime: Runtime) -> dict[str, float]:
        assert self.base is not None
        out: dict[str, float] = {}
        lls, kls = self._measure_probes(runtime)
        for pid, roles in lls.items():
            for role, ll in roles.items():
                out[precursor_key("probe_ll", pid, role)] = ll
                out[precursor_key("probe_ll_change", pid, role)] = change_from_base(ll, self.base.probe_ll[pid][role])
            out[precursor_key("kl_to_base", pid)] = kls[pid]
        acc = self._canary_accuracy(step, runtime)
        if acc is not None and self.base.canary_accuracy is not None:
            out[precursor_key("canary_accuracy")] = acc
            out[precursor_key("canary_change")] = change_from_base(acc, self.base.canary_accuracy)
        return out

    def _alert(
        self,
        step: int,
        trigger: PrecursorTrigger,
        precursor: Precursor,
        series: dict[str, dict[str, list[tuple[int, float]]]],
        rows: list[dict[str, Any]],
    ) -> Alert | None:
        if precursor.name not in series:
            series[precursor.name] = precursor.series(rows)
        direction = trigger.direction or precursor.direction
        hit = fired_at(series[precursor.name], direction, trigger.threshold, step, trigger.subject)
        if hit is None:
            return None
        subject, value = hit
        side = ">" if direction == "above" else "<"
        message = f"precursor {trigger.name} of {subject}: {value:.4g} {side} {trigger.threshold:g}"
        return Alert(trigger.name, PRECURSOR, step, subject, value, trigger.threshold, message)

    def _measure_probes(self, runtime: Runtime) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        """Each (policy, role)'s probe log-likelihood and each policy's KL to the base over its probe positions."""
        lls: dict[str, dict[str, float]] = {}
        kls: dict[str, float] = {}
        for pid, roles in self.probes.items():
            total = ProbeSums()
            for role, probes in roles.items():
                sums = self._probe_sums(pid, role, [p.turn(pid, role) for p in probes], runtime.tokenizer.pad_token_id)
                lls.setdefault(pid, {})[role] = sums.mean_ll
                total = total + sums
            kls[pid] = total.mean_kl
        return lls, kls

    def _probe_sums(self, pid: str, role: str, turns: list[Turn], pad_id: int) -> ProbeSums:
        """One teacher-forced forward of `turns` under policy `pid` and under the base, without gradient; the head
        runs on the output positions only, a chunk at a time (the [positions, V] logits of a large vocabulary).
        The base's hidden states never change: the first measurement keeps them (up to _BASE_CACHE_BYTES in all;
        past that the base forward runs every time), the same values a fresh forward gives."""
        policies, total = self.policies, ProbeSums()
        cached = self._base_hidden.get((pid, role))
        fresh: list[tuple[torch.Tensor, Any]] = []
        for i, micro in enumerate(plan_micro_batches(turns, self.cfg.train.micro_batch_tokens)):
            batch = to_device(collate(micro, pad_id), policies.device)
            out = batch["mask"].reshape(-1) > 0
            targets = batch["targets"].reshape(-1)[out]
            with torch.no_grad():
                with policies.training(pid) as model:
                    hidden, head = _hidden_and_head(model, batch, out)
                if cached is not None:
                    base_hidden, base_head = cached[i]
                else:
                    with policies.reference_model() as ref:
                        base_hidden, base_head = _hidden_and_head(ref, batch, out)
                    fresh.append((base_hidden, base_head))
                chunk = max(1, _CHUNK_BYTES // (8 * policies.vocab_size))
                for s in range(0, len(targets), chunk):
                    logits = head(hidden[s : s + chunk]).float() * self.scale
                    base_logits = base_head(base_hidden[s : s + chunk]).float() * self.scale
                    t = targets[s : s + chunk]
                    total = total + probe_sums(logits, base_logits, t, torch.ones_like(t))
        size = sum(h.numel() * h.element_size() for h, _ in fresh)
        if cached is None and self._cached_bytes + size <= _BASE_CACHE_BYTES:
            self._base_hidden[(pid, role)] = fresh
            self._cached_bytes += size
        return total

    def _canary_accuracy(self, step: int, runtime: Runtime) -> float | None:
        if not self.canary_ids:
            return None
        if self._canary is None:  # restored from a checkpoint: the ids, in the split
            by_id = {p.id: p for p in runtime.task.problems(self.cfg.task.eval_split)}
            lost = [i for i in self.canary_ids if i not in by_id]
            if lost:
                raise CheckpointError(f"precursors: canary problems {lost[:3]} are not in {self.cfg.task.eval_split}")
            self._canary = [by_id[i] for i in self.canary_ids]
        res = runtime.evaluate(self._canary, canary_plan(self.cfg, step), options=self.cfg.workflow.options)
        return canary_accuracy(float(ep.reward >= 1.0) for ep in res.episodes)

    # --- 4. at log time ---

    def record(self, metrics: Mapping[str, Any]) -> None:
        """The step's final metric row (what metrics.jsonl gets), for the derived precursors of later steps."""
        self.rows.append(as_logged(metrics))

    # --- checkpoints ---

    def state_dict(self) -> dict[str, Any]:
        assert self.base is not None, "precursors are checkpointed after set_up"
        return {
            "version": STATE_VERSION,
            "probes": {
                pid: {r: [asdict(p) for p in ps] for r, ps in roles.items()} for pid, roles in self.probes.items()
            },
            "canary": list(self.canary_ids),
            "base": asdict(self.base),
        }

    def load_state_dict(self, state: Mapping[str, Any] | None) -> None:
        if not state:
            raise CheckpointError(
                "the checkpoint holds no precursor state (entry 'precursors'), which diagnostics.precursors needs: "
                "its probe sets and base values come from the untrained policy"
            )
        if state.get("version") != STATE_VERSION:
            raise CheckpointError(
                f"precursors: checkpoint state version {state.get('version')!r}, expected {STATE_VERSION}"
            )
        self.probes = {
            pid: {r: [Probe(**p) for p in ps] for r, ps in roles.items()} for pid, roles in state["probes"].items()
        }
        self.canary_ids = list(state["canary"])
        self._canary = None
        self.base = BaseValues(**state["base"])

    def read_history(self, run_dir: Path, start: int) -> None:
        """On a resume at `start`: the metric rows of steps 1..start, from metrics.jsonl."""
        self.rows = [r for r in read_jsonl(run_dir / METRICS) if 0 < r.get("step", 0) <= start]


def _hidden_and_head(model: Any, batch: dict[str, torch.Tensor], out: torch.Tensor) -> tuple[torch.Tensor, Any]:
    """The last hidden states at the output positions `out` (a mask over the flattened [B, L] completion
    positions) and the output head."""
    base = base_model(model)
    hidden = completion_hidden_states(base, batch)
    return hidden.reshape(-1, hidden.shape[-1])[out], base.get_output_embeddings()
