"""A backend that answers with a Python function instead of a model: for testing workflow control flow."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rolecast.rollout.engine import Generation, GenRequest, Sampling

Respond = Callable[[str, list[dict[str, str]]], str]  # (policy_id, messages) -> completion text


class ScriptedBackend:
    """Satisfies `engine.Backend`: every reseed and every call's sampling are recorded (the script decides the
    text)."""

    def __init__(self, respond: Respond, temperature: float = 0.7):
        self.respond = respond
        self.temperature = temperature
        self.seeds: list[int] = []  # every reseed, in order
        self.batches: list[list[GenRequest]] = []  # every backend call, to assert on batching
        self.samplings: list[Sampling | None] = []  # every call's sampling, in order

    def reseed(self, seed: int) -> None:
        self.seeds.append(seed)

    def generate(self, requests: Sequence[GenRequest], sampling: Sampling | None = None) -> list[Generation]:
        self.batches.append(list(requests))
        self.samplings.append(sampling)
        out = []
        for r in requests:
            text = self.respond(r.policy_id, r.messages)
            prompt = "".join(m["content"] for m in r.messages).encode()
            completion = list(text.encode())
            out.append(Generation(list(prompt), completion, [0.0] * len(completion), text, "stop"))
        return out
