"""AdamW over float32 master copies of bf16 / fp16 weights: mixed precision for full fine-tuning.

A bf16 weight has 8 bits of mantissa: an update smaller than about 1/256 of the weight rounds away, so a
bf16 model trained with plain AdamW at a small learning rate stops moving. The usual recipe keeps a float32
copy of every weight: the optimizer steps the copy (its moments are float32 too) and the model gets the
copy rounded to its own dtype after each step. Forward and backward still run in the model's dtype.

The model's parameters keep their gradients (clipping, per-role diagnostics and the distributed reduction
all read them there); `step` upcasts them onto the masters. The masters travel in `state_dict`, so a
resumed run continues from the same float32 weights, not from their rounded copies.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

MASTER_KEY = "fp32_master_weights"


def needs_master(params: Iterable[torch.Tensor]) -> bool:
    """Whether any of a policy's trainable parameters is in a low-precision float dtype (bf16 or fp16)."""
    return any(p.dtype in (torch.bfloat16, torch.float16) for p in params)


class MasterWeightAdamW(torch.optim.AdamW):
    """`torch.optim.AdamW` whose parameters are float32 masters of the model's low-precision ones."""

    def __init__(self, params: Iterable[torch.nn.Parameter], **kwargs: Any) -> None:
        self.model_params = list(params)
        masters = [p.detach().float().clone().requires_grad_(True) for p in self.model_params]
        super().__init__(masters, **kwargs)
        self.masters = masters

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        if closure is not None:  # it would recompute the model's gradients after they were copied to the masters
            raise ValueError("MasterWeightAdamW.step takes no closure")
        for p, m in zip(self.model_params, self.masters, strict=True):
            m.grad = None if p.grad is None else p.grad.float()
        loss = super().step()
        for p, m in zip(self.model_params, self.masters, strict=True):
            p.copy_(m)
            m.grad = None
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.model_params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def state_dict(self) -> dict[str, Any]:
        sd = super().state_dict()
        sd[MASTER_KEY] = [m.detach().clone() for m in self.masters]
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore moments and masters; a state saved without masters (a float32 run) starts them from
        the model's current weights, which the caller has just restored."""
        state_dict = dict(state_dict)
        masters = state_dict.pop(MASTER_KEY, None)
        super().load_state_dict(state_dict)
        with torch.no_grad():
            for i, (p, m) in enumerate(zip(self.model_params, self.masters, strict=True)):
                if masters is None:
                    m.copy_(p.float())
                    continue
                if masters[i].shape != m.shape:
                    raise ValueError(f"{MASTER_KEY}[{i}]: shape {tuple(masters[i].shape)}, parameter {tuple(m.shape)}")
                m.copy_(masters[i].to(m.device, torch.float32))
                p.copy_(m)
