"""From outcomes to per-turn rewards and advantages: the one module that writes them.

Each is written in one place: `score_episodes` writes an episode's `reward` (and its final answer and its claims'
truth), `attribute` every `turn.reward`, `assign_advantages` every `turn.advantage`; what they write is computed
by pure functions (the attributions below, `objectives.advantages.group_advantages`).

`score_episodes` scores every episode's final text and every turn's claim (what the turn asserted:
an answer, a verdict on a reviewed answer, a pick among candidates) in one batch through the task's
verifier. An attribution gives each turn its reward (one per turn, in order):
- ``team``: the final 0/1 outcome copied to every turn of every role (the study's default);
- ``role``: a role-local reward where one is defined (a generator's own answer, an evaluator's verdict
  matching the truth of the answer it reviewed, an aggregator picking a correct candidate when one
  existed, a synthesizer's final answer); turns without one (e.g. the orchestrator) get the team reward;
- ``package.module:function`` or ``path/to/file.py:function``: your own, called as ``fn(episode)`` after claims
  are scored, returning one reward per turn (`resolve_attribution` finds it; config validation calls it, so a typo
  fails before a model loads).
An episode that a prompt cap ended (`rollout.max_prompt_tokens`) takes the attribution's rewards too, or, with
``rollout.ended_reward: committed``, what the reference study's committed trajectories keep (`committed_rewards`).

One episode's content never ends a run (docs/sandbox.md, "Grader errors"): an unexpected exception while scoring
one text scores that text 0 with reason ``grader_error``; the episode's metadata keeps the exception
(``grader_error``), it is logged once per episode, and the step's metrics count such episodes
(``rollout/grader_errors``). But when the same exception type fails more than half of a batch's texts (and at least
two), the grader is broken, not the completions: :class:`GraderBug` stops the run.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rolecast.core.episode import AnswerClaim, Episode, PickClaim, Turn, VerdictClaim
from rolecast.core.registry import Registry, is_reference, load_callable
from rolecast.objectives.advantages import group_advantages
from rolecast.rewards.score import GRADER_ERROR, GraderFault, Score, grader_error
from rolecast.tasks.base import Problem, Task

log = logging.getLogger(__name__)

AttributionFn = Callable[[Episode], Sequence[float]]  # one reward per turn of the episode, in order
ATTRIBUTIONS: Registry[AttributionFn] = Registry("reward attribution")
register_attribution = ATTRIBUTIONS.register


def score_episodes(episodes: Sequence[Episode], problems: dict[str, Problem], task: Task) -> None:
    """Set `episode.reward`/`final_answer` and each claim's `correct` (None where undefined)."""
    keys: dict[tuple[str, str | None], int] = {}

    def need(pid: str, text: str | None) -> None:
        keys.setdefault((pid, text), len(keys))

    for ep in episodes:
        for text in _scored_texts(ep):
            need(ep.problem_id, text)
    order = sorted(keys, key=keys.__getitem__)
    scores = score_batch(task, [problems[pid] for pid, _ in order], [text for _, text in order])
    result = dict(zip(order, scores, strict=True))

    def correct(pid: str, text: str | None) -> bool:
        return result[(pid, text)].reward >= 1.0

    for ep in episodes:
        final = result[(ep.problem_id, ep.final_text)]
        ep.reward, ep.final_answer = final.reward, final.answer
        if final.reason:
            ep.metadata["score_reason"] = final.reason
        faults = [result[(ep.problem_id, text)].fault for text in _scored_texts(ep)]
        _note_faults(ep, [f for f in faults if f is not None])
        for t in ep.turns:
            c = t.claim
            if isinstance(c, AnswerClaim):
                c.correct = correct(ep.problem_id, c.text)
            elif isinstance(c, VerdictClaim):
                c.reviewed_correct = correct(ep.problem_id, c.reviewed)
                # the first_match parsers report an unparseable verdict as "unknown": never right (rolecast's: Incorrect)
                c.correct = c.verdict != "unknown" and bool(c.accept) == c.reviewed_correct
            elif isinstance(c, PickClaim):
                flags = [correct(ep.problem_id, cand) for cand in c.candidates]
                c.candidates_correct = flags
                c.correct = flags[c.picked] if any(flags) else None


class GraderBug(RuntimeError):
    """Most of a batch failed to score with the same exception: a bug of the grader, not the completions' doing."""


def score_batch(task: Task, problems: Sequence[Problem], texts: Sequence[str | None]) -> list[Score]:
    """The task's scores of `texts`, one text's failure contained (see the module docstring). Should `score_many`
    itself raise, each text is scored on its own. Raises GraderBug when one exception type failed more than half
    of the texts, and at least two."""
    try:
        scores = list(task.score_many(problems, texts))
    except Exception as e:  # noqa: BLE001 - the belt: find out text by text who fails
        log.warning("%s: score_many raised %s; scoring the batch one text at a time", task.name, GraderFault.of(e))
        scores = [_score_one(task, p, t) for p, t in zip(problems, texts, strict=True)]
    faults = [s.fault for s in scores if s.fault is not None]
    if faults:
        kind, n = Counter(f.exception for f in faults).most_common(1)[0]
        if n >= 2 and 2 * n > len(scores):
            first = next(f for f in faults if f.exception == kind)
            raise GraderBug(
                f"{task.name}: scoring raised {kind} on {n} of {len(scores)} texts, a bug of the grader rather than "
                f"the completions; the first: {first}"
            )
    return scores


def _score_one(task: Task, problem: Problem, text: str | None) -> Score:
    try:
        return task.score(problem, text)
    except Exception as e:  # noqa: BLE001 - the belt
        return grader_error(e)


def _scored_texts(ep: Episode) -> list[str | None]:
    """Every text of `ep` that is scored, in order: its final text, then its claims' (an answer; the answer a verdict
    reviewed; a pick's candidates)."""
    texts: list[str | None] = [ep.final_text]
    for t in ep.turns:
        c = t.claim
        if isinstance(c, AnswerClaim):
            texts.append(c.text)
        elif isinstance(c, VerdictClaim):
            texts.append(c.reviewed)
        elif isinstance(c, PickClaim):
            texts.extend(c.candidates)
    return texts


def _note_faults(ep: Episode, faults: list[GraderFault]) -> None:
    """Record an episode's grader errors in its metadata (what the step's metrics count) and log them once."""
    if not faults:
        return
    distinct = list(dict.fromkeys(str(f) for f in faults))
    ep.metadata[GRADER_ERROR] = distinct
    log.error(
        "%s scoring problem %s, sample %d (%d of its texts scored 0): %s",
        GRADER_ERROR, ep.problem_id, ep.sample, len(faults), "; ".join(distinct),
    )  # fmt: skip


@register_attribution("team")
def team(ep: Episode) -> list[float]:
    return [ep.reward] * len(ep.turns)


@register_attribution("role")
def role_local(ep: Episode) -> list[float]:
    rewards = []
    for t in ep.turns:
        correct = t.claim.correct if t.claim is not None else None
        rewards.append(ep.reward if correct is None else float(correct))
    return rewards


def committed_rewards(ep: Episode, family: str) -> list[float]:
    """rollout.ended_reward committed, for an episode an over-long prompt ended: what the reference study's
    committed trajectories keep (rllm applies use_final_outcome_reward only at the end of a completed run): a
    turn's role-local reward where its claim was set before the episode ended (a voter's own answer, an
    evaluator's verdict), else 0; on code tasks 0 throughout (the study's code workflows commit placeholders)."""
    rewards = []
    for t in ep.turns:
        correct = t.claim.correct if t.claim is not None and family != "code" else None
        rewards.append(float(correct) if correct is not None else 0.0)
    return rewards


ENDED_REWARDS = ("team", "committed")  # rollout.ended_reward


def resolve_attribution(name: str, field: str = "train.attribution") -> AttributionFn:
    """The attribution `name` means: a registered one, or the function a "package.module:function" /
    "path/to/file.py:function" reference names. A `ConfigError` naming `field` otherwise (config validation calls
    this, so a typo fails when the config is checked, not at the first step)."""
    entry = ATTRIBUTIONS.get(name)
    if entry is not None:
        return entry
    if not is_reference(name):
        raise ATTRIBUTIONS.unknown(name, field, references=True)
    return _load_reference(name, field)


@functools.cache
def _load_reference(ref: str, field: str) -> AttributionFn:
    """Loaded once per run, not at every step (a file.py reference would otherwise be executed again each time)."""
    return load_callable(ref, field)


def attribute(episodes: Sequence[Episode], mode: str, *, ended_reward: str = "team", family: str = "") -> None:
    """Write every turn's reward (the one place that does): by attribution `mode` (train.attribution), or, for an
    episode a prompt cap ended under `ended_reward` "committed" (rollout.ended_reward), `committed_rewards` of the
    task's prompt `family`."""
    if ended_reward not in ENDED_REWARDS:
        raise ValueError(f"ended_reward must be one of {ENDED_REWARDS}, got {ended_reward!r}")
    fn = resolve_attribution(mode)
    for ep in episodes:
        ended = ended_reward == "committed" and ep.metadata.get("ended") == "max_prompt_tokens"
        rewards = committed_rewards(ep, family) if ended else _checked(fn(ep), ep, mode)
        for t, r in zip(ep.turns, rewards, strict=True):
            t.reward = r


def _checked(rewards: Any, ep: Episode, mode: str) -> list[float]:
    """An attribution's rewards for `ep`, or a ValueError naming the attribution: one finite number per turn."""
    try:
        out = [float(r) for r in rewards]
    except TypeError:
        out = None
    if out is None or len(out) != len(ep.turns) or not all(map(math.isfinite, out)):
        raise ValueError(
            f"train.attribution {mode!r} returned {rewards!r:.200} for an episode of {len(ep.turns)} turns; an "
            f"attribution returns one finite reward per turn, in order (it does not set turn.reward itself)"
        )
    return out


def assign_advantages(
    groups: Mapping[Any, Sequence[Turn]], name: str = "grpo", eps: float = 1e-6, singleton: str = "zero"
) -> None:
    """Write every turn's advantage (the one place that does): `name`'s estimator (train.advantage) over each
    group's rewards (objectives/advantages.py)."""
    values = group_advantages([[t.reward for t in g] for g in groups.values()], name, eps, singleton)
    for group, advantages in zip(groups.values(), values, strict=True):
        for t, a in zip(group, advantages, strict=True):
            t.advantage = a
