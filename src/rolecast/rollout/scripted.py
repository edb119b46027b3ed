"""A backend that answers with a Python function instead of a model: for testing workflow control flow."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .engine import Generation, GenRequest

Respond = Callable[[str, list[dict[str, str]]], str]  # (policy_id, messages) -> completion text


class ScriptedBackend:
    def __init__(self, respond: Respond):
        self.respond = respond
        self.batches: list[list[GenRequest]] = []  # every backend call, to assert on batching

    def generate(self, requests: Sequence[GenRequest]) -> list[Generation]:
        self.batches.append(list(requests))
        out = []
        for r in requests:
            text = self.respond(r.policy_id, r.messages)
            prompt = "".join(m["content"] for m in r.messages).encode()
            completion = list(text.encode())
            out.append(Generation(list(prompt), completion, [0.0] * len(completion), text, "stop"))
        return out
