"""Minor page faults and time of a testbed-shaped forward + backward, with glibc's default malloc and with
`core/allocator.keep_freed_memory`, side by side.

    .venv/bin/python bench/allocator.py [--rounds 3] [--steps 5]

Each measurement is its own process (the setting is process-wide): three warm-up passes, then `--steps` passes of
forward + backward on 64 x 40 tokens, one thread; the rounds alternate default / kept. Prints each round's faults
and s/step and the ratios of the medians. How many faults the default costs depends on the machine (transparent
huge pages, the kernel): that is why this is a benchmark and tests/test_allocator.py checks the mechanism instead.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CODE = """
import resource, sys, time
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM
from rolecast.core.allocator import keep_freed_memory
torch.set_num_threads(1)
applied = keep_freed_memory() if sys.argv[1] == "on" else None
torch.manual_seed(0)
model = Qwen3ForCausalLM(Qwen3Config(vocab_size=2048, hidden_size=192, num_hidden_layers=4, num_attention_heads=6,
    num_key_value_heads=2, head_dim=32, intermediate_size=768))
ids = torch.randint(3, 2000, (64, 40))
def step():
    model(input_ids=ids).logits.logsumexp(-1).mean().backward()
for _ in range(3):
    step()
before, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
for _ in range(int(sys.argv[2])):
    step()
seconds = (time.perf_counter() - start) / int(sys.argv[2])
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, seconds)
"""


def measure(mode: str, steps: int) -> tuple[int, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("ROLECAST_MALLOC", "GLIBC_TUNABLES")}
    out = subprocess.run([sys.executable, "-c", CODE, mode, str(steps)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    _, faults, seconds = out.stdout.split()
    return int(faults), float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, list[tuple[int, float]]] = {"off": [], "on": []}
    for round_ in range(args.rounds):
        for mode in ("off", "on"):
            faults, seconds = measure(mode, args.steps)
            results[mode].append((faults, seconds))
            label = "default" if mode == "off" else "kept"
            print(f"round {round_ + 1} {label:7s} faults {faults:8,d}  {seconds:.3f} s/step")
    faults = {m: statistics.median(f for f, _ in r) for m, r in results.items()}
    seconds = {m: statistics.median(s for _, s in r) for m, r in results.items()}
    print(
        f"median faults default / kept: {faults['off']:,.0f} / {faults['on']:,.0f} = {faults['off'] / faults['on']:.1f}x;"
        f" s/step {seconds['off']:.3f} / {seconds['on']:.3f} = {seconds['off'] / seconds['on']:.2f}x"
    )


if __name__ == "__main__":
    main()
