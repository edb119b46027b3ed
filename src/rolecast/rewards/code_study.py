"""The study's code grader, rLLM's, rule for rule (selected with the code task option ``grader: rllm``).

The reference study (XHMY/marl-llm-workflows) grades DeepCoder completions with rLLM's LiveCodeBench runner:
``rllm/rewards/code_reward.py`` (``extract_code_from_model``, ``postprocess_lcb_sample``,
``lcb_check_correctness_v2``) and ``rllm/rewards/code_utils/livecodebench.py`` (``run_test``,
``grade_stdio``, ``grade_call_based``). What this module reproduces, and where the sandbox does the rest:

- **extraction** (:func:`extract_program`): the last block matched by three backticks, an optional run of
  word characters, a newline, then anything up to the next three backticks; stripped. No block, no program
  (a fence with a space before its language, an unclosed fence and bare code all count as no code), and a
  non-code block after the code (an example output) is the program.
- **standard input programs** (:func:`stdio_program`): a final ``if __name__ == '__main__':`` block is
  inlined (``clean_if_name``); the imports at the top level are kept at the top, everything else becomes the
  body of a function ``wrapped_function`` (``make_function``), after the study's block of standard imports
  (:data:`IMPORTS`, ``BASE_IMPORTS`` in ``rllm/rewards/code_utils/utils.py``). The sandbox's harness runs it
  as the study does (its ``study`` option): the module is named ``tmp_sol``; ``sys.stdin`` is an in-memory
  text stream of the input (so no ``sys.stdin.buffer``) and ``open`` returns that text whatever it opens;
  what the program prints to ``sys.stdout`` (an in-memory stream too: no ``sys.stdout.buffer``) is the
  output; ``SystemExit`` ends the run without failing it; any other exception fails it.
- **function calls** (:func:`call_program`): the import block, a blank line, then the program; when the text
  ``class Solution`` occurs in it the function is ``Solution().<name>``, else the module's ``<name>``; every
  line of the input is one JSON argument (a blank line is an error); the result, a tuple taken as a list, must
  equal the expected JSON value under ``==`` (so ``True`` equals ``1`` and floats must be equal;
  :func:`rolecast.rewards.compare.study_json_values_match`).
- **comparison of printed output** (:data:`rolecast.rewards.compare.STUDY`): both sides stripped, split at
  newlines and each line stripped; the line counts must agree and each line be equal, or equal as a list of
  ``Decimal`` numbers (a comparison the study's own code would raise on, a signalling NaN, is a failed test).
- with ``reliability_guard`` the harness also applies the study's ``reliability_guard``: ``quit`` and the
  listed ``os``/``shutil``/``subprocess`` functions become ``None`` (a call fails the run).

Known differences left: pandas is not in the sandbox, so the import block's ``import pandas as pd`` is skipped
when it fails (a program using ``pd`` without importing it fails here and passes in the study); a function's
return value crosses the sandbox as JSON, so a tuple nested inside a list compares equal to a list here and
not in the study, and a dict with non-string keys compares by its JSON form.
"""

from __future__ import annotations

import ast
import re

from rolecast.sandbox import parse_quietly

# The study's block of standard imports (rllm/rewards/code_utils/utils.py, BASE_IMPORTS), in its order: a later
# import rebinds a name an earlier one bound. pandas is optional here (it is not in the sandbox).
IMPORTS = "\n".join(
    [
        "from itertools import accumulate, chain, combinations, count, permutations, product, groupby, islice, repeat",
        "from copy import deepcopy",
        "from string import ascii_lowercase, ascii_uppercase",
        "from math import floor, log2, log10, sqrt, comb, gcd, ceil, inf, isqrt, factorial, atan2, pi",
        "from collections import defaultdict, deque, Counter",
        "from bisect import bisect, bisect_left, bisect_right, insort",
        "from heapq import heappush, heappop, heapify, merge, nlargest, nsmallest, heapreplace",
        "from functools import reduce, cache, lru_cache, cmp_to_key, reduce",
        "from random import randrange, shuffle",
        "from operator import itemgetter, sub, xor, or_",
        "from re import search as re_search",
        "from os.path import commonprefix",
        "from typing import List, Tuple, Dict, Set, Optional, Union, Any, Callable, Iterable, Iterator, Generator, Deque",
        "import copy",
        "import string",
        "import math",
        "import collections",
        "import bisect",
        "import heapq",
        "import functools",
        "import random",
        "import itertools",
        "import operator",
        "import re",
        "import datetime",
        "from time import time",
        "import numpy as np",
        "try:\n    import pandas as pd\nexcept ImportError:\n    pass",
        "from math import log, prod",
        "from collections import deque, defaultdict, Counter, OrderedDict",
        "from itertools import accumulate, permutations, combinations, product, groupby, islice, chain, repeat, "
        "zip_longest, cycle, pairwise",
        "from functools import lru_cache, reduce, partial",
        "from operator import iand",
        "import sys",
        "import io, os",
    ]
)
# modules the harness imports once before it forks a case (the import block then costs each case nothing)
PREIMPORT = (
    "itertools copy string math collections bisect heapq functools random operator re os.path typing datetime "
    "time numpy sys io os decimal json unittest.mock shutil subprocess faulthandler"
).split()

_FENCE = re.compile(r"```(?:\w+)?\n(.*?)```", re.DOTALL)


def extract_program(text: str | None) -> str | None:
    """The study's program: the last fenced block of its pattern, stripped; None without one."""
    if not text:
        return None
    blocks = _FENCE.findall(text)
    return blocks[-1].strip() if blocks else None


def _unparse(stmts: list[ast.stmt]) -> str:
    return ast.unparse(ast.Module(body=stmts, type_ignores=[]))


def _inline_main(code: str) -> str:
    """A final ``if __name__ == '__main__':`` block replaced by its body (the study's ``clean_if_name``)."""
    try:
        tree = parse_quietly(code)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            return _unparse(tree.body[:-1]) + "\n" + _unparse(last.body)
    except Exception:
        pass
    return code


def stdio_program(code: str) -> str:
    """What the study runs for a standard-input problem: the import block, the program's top-level imports,
    then the rest of it as the body of ``wrapped_function`` (unchanged when it does not parse)."""
    code = _inline_main(code)
    try:
        tree = parse_quietly(code)
        imports: list[ast.stmt] = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
        rest = [s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
        fn = ast.FunctionDef(
            name="wrapped_function",
            args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
            body=rest,
            decorator_list=[],
            lineno=-1,
        )
        return IMPORTS + "\n" + _unparse(imports) + "\n" + ast.unparse(fn)
    except Exception:
        return code


def call_program(code: str) -> str:
    """What the study runs for a function-call problem: the import block, a blank line, the program."""
    return IMPORTS + "\n\n" + code
