"""What the host does with a job's source before it enters the sandbox: compile assert-style tests with their
calls, comparisons and asserts guarded (the checks themselves run in the harness's judge), and find the
names and modules the tests use and the modules the program imports."""

from __future__ import annotations

import ast
import functools
import re
import sys
import threading
import warnings
from types import CodeType

_CMP_OPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot, ast.In, ast.NotIn)
# builtins whose behaviour depends on the frame that calls them: calling them through __rc_call would change it
_FRAME_BUILTINS = frozenset({"super", "locals", "vars", "globals", "eval", "exec", "dir", "breakpoint"})


class _Guard(ast.NodeTransformer):
    """Route every call, comparison and assert of test code through the harness's checks."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in _FRAME_BUILTINS:
            return node
        return ast.Call(func=ast.Name("__rc_call", ast.Load()), args=[node.func, *node.args], keywords=node.keywords)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        ops = ast.Tuple([ast.Constant(_CMP_OPS.index(type(op))) for op in node.ops], ast.Load())
        return ast.Call(func=ast.Name("__rc_cmp", ast.Load()), args=[ops, node.left, *node.comparators], keywords=[])

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        self.generic_visit(node)
        node.test = ast.Call(func=ast.Name("__rc_truth", ast.Load()), args=[node.test], keywords=[])
        return node


_WARNINGS_LOCK = threading.Lock()  # catch_warnings swaps process-wide state: one thread at a time


def parse_quietly(src: str) -> ast.Module:
    """ast.parse without the SyntaxWarnings/DeprecationWarnings of someone else's code (invalid escapes), and
    with one kind of failure: source nested deeper than the parser or the AST builder go (a line of 3,000 unary
    minus signs, 4,000 chained calls: RecursionError or MemoryError from CPython's parser) raises SyntaxError,
    so that every caller's `except SyntaxError` holds for a program a policy wrote."""
    with _WARNINGS_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(src)
        except (RecursionError, MemoryError) as e:
            raise SyntaxError(f"too deeply nested to parse ({type(e).__name__})") from None


@functools.lru_cache(maxsize=4096)
def guard_code(src: str, filename: str) -> CodeType | str:
    """`src` compiled with its calls, comparisons and asserts guarded; the source itself if it does not parse
    (the harness then compiles it and reports the error as the test's failure)."""
    try:
        with _WARNINGS_LOCK, warnings.catch_warnings():  # dataset tests' invalid escapes ('\d') are not ours to report
            warnings.simplefilter("ignore")
            tree = _Guard().visit(ast.parse(src))
            return compile(ast.fix_missing_locations(tree), filename, "exec")
    except (SyntaxError, ValueError):
        return src


# stdlib modules with import-time side effects (printing, a browser, site's path set-up): never imported for a
# test that merely has a variable of that name
_NEVER_PREIMPORT = frozenset({"this", "antigravity", "site", "idlelib", "turtle", "turtledemo", "tkinter", "__main__"})


@functools.lru_cache(maxsize=4096)
def modules_used(src: str) -> tuple[str, ...]:
    """Modules a piece of test code imports or names (``sys.getsizeof``): tracked and restored for its checks."""
    try:
        tree = parse_quietly(src)
    except (SyntaxError, ValueError):
        return ()
    mods: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            mods.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            mods.add(n.module)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in sys.stdlib_module_names:
            mods.add(n.value.id)  # `sys.getsizeof(...)` with `sys` from the program (MBPP)
    return tuple(sorted(mods - _NEVER_PREIMPORT))


@functools.lru_cache(maxsize=4096)
def names_used(src: str) -> tuple[str, ...]:
    """Every name a piece of test code mentions: what the judge asks the program for (if it has it)."""
    try:
        tree = parse_quietly(src)
    except (SyntaxError, ValueError):
        return tuple(sorted(set(re.findall(r"[A-Za-z_]\w*", src))))
    return tuple(sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}))


def program_imports(src: str) -> set[str]:
    """Top-level standard-library modules a program imports (best effort: it may not parse). Only those: the
    harness may import them with privileges, so nothing of the program's choosing beyond the stdlib, and not
    the stdlib's few modules with import-time side effects."""
    return {m for m in _imports_in(src) if m in sys.stdlib_module_names} - _NEVER_PREIMPORT


_IMPORT_LINE = re.compile(r"^[^\S\n]*(?:from|import)[^\S\n]+([A-Za-z_]\w*)", re.M)


def _imports_in(src: str) -> set[str]:
    try:
        tree = parse_quietly(src)
    except (SyntaxError, ValueError):
        # whitespace within the line only: `^\s*` spans blank lines and backtracks quadratically over many
        return set(_IMPORT_LINE.findall(src))
    mods: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            mods.update(a.name.split(".")[0] for a in n.names)
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            mods.add(n.module.split(".")[0])
    return mods
