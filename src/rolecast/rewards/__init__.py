"""Verifiers: math answer equivalence (``rewards.math``) and sandboxed code tests (``rewards.code``).

Submodules import their heavy dependencies (sympy via math_verify, subprocess pools) lazily, so importing
this package is cheap.
"""
