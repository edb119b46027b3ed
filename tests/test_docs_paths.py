"""Every repository path the README and the docs name exists.

A path counts when it appears in inline code (`...`), a fenced code block or a link target and starts with one
of the repository's top-level folders (configs/, src/, scripts/, docs/, bench/, examples/, tests/). A path in
another repository is written with that repository's name in front (`marl-llm-workflows/examples/...`), which
this check leaves alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCED = re.compile(r"```[^\n]*\n(.*?)```", re.S)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
REPO_PATH = re.compile(r"(?<![\w./:-])((?:configs|src|scripts|docs|bench|examples|tests)/[A-Za-z0-9_./-]*[A-Za-z0-9_])")


def named_paths(text: str) -> set[str]:
    spans = FENCED.findall(text)
    prose = FENCED.sub("", text)
    spans += INLINE.findall(prose) + LINK.findall(prose)
    return {p for span in spans for p in REPO_PATH.findall(span)}


def test_the_scanner_finds_paths_in_code_inline_and_links():
    text = (
        "Run `configs/a.yaml` or [the doc](docs/b.md), see `tests/test_c.py::test_d`.\n"
        "```bash\nrolecast sweep configs/e/matrix.yaml --out runs/x\n```\n"
        "Not `runs/y`, not `marl-llm-workflows/examples/f.py`, not plain configs/g.yaml prose.\n"
    )
    assert named_paths(text) == {"configs/a.yaml", "docs/b.md", "tests/test_c.py", "configs/e/matrix.yaml"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_repo_path_exists(doc):
    missing = sorted(p for p in named_paths(doc.read_text()) if not (ROOT / p).exists())
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"
