"""Fence shapes that used to leave a trailing fence in the program (a syntax error, so a right answer scored 0)."""

import ast

import pytest

from rolecast.rewards.code import extract_program

BODY = "def f(x):\n    return x + 1\n"


@pytest.mark.parametrize(
    "text",
    [
        "```python\ndef f(x):\n    return x + 1```",  # closing fence on the code's own line
        "````python\ndef f(x):\n    return x + 1\n````",  # four-backtick fence
        "Code: ```python\ndef f(x):\n    return x + 1\n```",  # a prefix before the opening fence
        "Code:\n````py\ndef f(x):\n    return x + 1````\nDone.",  # all at once
    ],
)
def test_fence_shapes_give_the_bare_program(text):
    prog = extract_program(text)
    assert prog == BODY
    ast.parse(prog)


def test_four_backtick_fence_may_hold_a_triple_backtick_string():
    text = '````python\nS = "```"\n````'
    assert extract_program(text) == 'S = "```"\n'


def test_last_python_block_still_wins_over_later_plain_block():
    text = "```python\nprint(1)\n```\nthen\n```\nnot code\n```"
    assert extract_program(text) == "print(1)\n"


def test_unclosed_fence_still_takes_the_rest():
    assert extract_program("intro\n```python\ndef g():\n    return 2\n") == "def g():\n    return 2\n"
