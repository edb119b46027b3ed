"""HFBackend's decode loop drops finished rows once half a batch has stopped (`drop_finished`, issue 25): the
outputs stay those of the full batch (each row draws its own uniform of the full batch's draw)."""

from __future__ import annotations

import torch

from rolecast.policies.models import PolicySet, load_tokenizer
from rolecast.policies.shipped import default_path
from rolecast.rollout.engine import GenRequest
from rolecast.rollout.hf import HFBackend


def _generate(ps, tok, drop: bool, temperature: float):
    backend = HFBackend(ps, tok, max_new_tokens=40, temperature=temperature, seed=3, drop_finished=drop)
    problems = ["3 + 4", "9 - 2 + 1", "5 + 5 - 7", "8 - 3"]
    reqs = [GenRequest("p", [{"role": "user", "content": p}]) for p in problems for _ in range(6)]
    return [(g.completion_ids, g.logprobs, g.finish_reason) for g in backend.generate(reqs)]


def test_dropping_finished_rows_keeps_every_row_s_tokens():
    """The embedded testbed model (its answers stop after a few tokens, at different steps), sampled at 1.0 and
    0.7: the same tokens and stop reasons for every row; log-probs within float32 rounding (a matmul over fewer
    rows may sum in another order: measured <= 1e-6 on evaluations of the testbed map)."""
    torch.set_num_threads(1)
    path = str(default_path())
    tok = load_tokenizer(path)
    ps = PolicySet(path, ["p"], mode="full")
    for temperature in (1.0, 0.7):
        full, dropped = _generate(ps, tok, False, temperature), _generate(ps, tok, True, temperature)
        lengths = [len(ids) for ids, _, _ in full]
        assert min(lengths) < max(lengths) and sum(r == "stop" for _, _, r in full) > len(full) // 2
        assert [(ids, r) for ids, _, r in dropped] == [(ids, r) for ids, _, r in full]
        for (_, a, _), (_, b, _) in zip(dropped, full, strict=True):
            torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=0, atol=1e-5)
