"""The old log-probs of one policy's update: the denominator of its PPO ratio exp(logp - old), from one of three
sources (`train.old_logprobs`):

- `sampler` (the default): the log-probs the sampler recorded for each token (the sampling distribution at the
  rollout's temperature). On the run's first step the trainer's own log-probs must match them within
  `train.logprob_check_tol` (`check`, on the first micro-batch), or generation and training do not compute the same
  distribution;
- `trainer`, when the update is one pass over one mini-batch (one epoch, and `per_step` or all turns in one
  mini-batch): the forward's own log-probs, detached, as verl takes them;
- `trainer`, otherwise: the trainer's log-probs under the weights before this update, computed up front over all the
  policy's turns (verl's `compute_log_prob`).

With `trainer`, the mean |sampler - trainer| log-prob per token is the policy's `logprob_gap` metric.
"""

from __future__ import annotations

import torch

from rolecast.config.schema import TrainSettings
from rolecast.core.episode import Turn
from rolecast.policies.models import PolicySet
from rolecast.training.batching import padded_rows
from rolecast.training.distributed import Dist
from rolecast.training.logprobs import trainer_logprobs


class OldLogprobs:
    """The old log-probs' source for one policy's update (module docstring). `prepare` before the first
    mini-batch; `for_micro` per micro-batch; `gap` at the end."""

    def __init__(self, pid: str, train: TrainSettings, check: bool):
        self.pid, self.train = pid, train
        self.check = check and train.old_logprobs == "sampler"  # the first-step check, until its first micro-batch
        self.on_policy = False  # trainer: the forward's own log-probs serve
        self.recomputed: dict[int, torch.Tensor] | None = None  # trainer: per turn (by id), before the update
        self._gap = [0.0, 0.0]  # |sampler - trainer| summed over tokens, and the tokens

    def prepare(
        self,
        turns: list[Turn],
        policies: PolicySet,
        pad_id: int,
        temperature: float,
        dist: Dist,
    ) -> None:
        """train.old_logprobs trainer: decide whether the forward's own log-probs serve (on-policy), else compute
        the trainer's before the update."""
        train = self.train
        if train.old_logprobs != "trainer":
            return
        n_all = int(dist.total(len(turns))[0])
        self.on_policy = train.epochs == 1 and (train.update_schedule == "per_step" or n_all <= train.mini_batch_size)
        if self.on_policy:
            return
        with policies.training(self.pid) as model:
            recomputed = trainer_logprobs(model, turns, pad_id, policies.device, temperature, train.micro_batch_tokens)
        for t in turns:
            self._gap[0] += float((torch.tensor(t.logprobs) - recomputed[id(t)]).abs().sum())
            self._gap[1] += len(t.completion_ids)
        self.recomputed = recomputed

    def for_micro(
        self, logp: torch.Tensor, sampled: torch.Tensor, mask: torch.Tensor, micro: list[Turn]
    ) -> torch.Tensor:
        """The ratio's denominator for a micro-batch whose forward gave `logp`: the sampler's (`sampled`), the
        forward's own or the trainer's."""
        if self.on_policy:
            self._gap[0] += float(((logp.detach() - sampled).abs() * mask).sum())
            self._gap[1] += float(mask.sum())
            return logp.detach()
        if self.recomputed is not None:
            return padded_rows([self.recomputed[id(t)] for t in micro], sampled.shape[1]).to(sampled.device)
        return sampled

    def check_sampler(self, logp: torch.Tensor, old: torch.Tensor, mask: torch.Tensor) -> None:
        """On a run's first step, once: the trainer's log-probs must match the sampler's."""
        if not self.check:
            return
        gap_ = float(((logp.detach() - old).abs() * mask).sum() / mask.sum().clamp(min=1))
        if gap_ > self.train.logprob_check_tol:
            raise RuntimeError(
                f"policy {self.pid!r}: trainer log-probs differ from the sampler's by {gap_:.4f} per "
                f"token (tolerance {self.train.logprob_check_tol}); generation and training do not "
                f"compute the same distribution (temperature, padding/position ids, dropout or "
                f"dtype mismatch)"
            )
        self.check = False

    def gap(self, dist: Dist) -> float | None:
        """train.old_logprobs trainer: the mean |sampler - trainer| log-prob per token before this update, over
        every process; None with the sampler's."""
        if self.train.old_logprobs != "trainer":
            return None
        gap_sum, gap_tokens = dist.total(*self._gap)
        return gap_sum / gap_tokens if gap_tokens else float("nan")
