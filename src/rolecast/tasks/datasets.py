"""Real math and code datasets as tasks: GSM8K, MATH, MATH-500, AIME 2024, DAPO-Math-17k, MBPP (full and
sanitized), HumanEval, DeepCoder, and generic ``math_jsonl`` / ``code_jsonl`` with a column mapping.

Where the data comes from, first that applies:

1. ``path=``: a JSONL / JSON (array) / Parquet file (the split named by ``path_split``, default
   "train"), a directory holding ``<split>.jsonl`` / ``<split>.parquet``, or a mapping ``{split: file}``;
2. the offline copies under the data root (``$ROLECAST_DATA_DIR``, else ``<repo>/../shared/data``, else
   ``<cwd>/../shared/data``; see ../shared/data/MANIFEST.md for the layout);
3. ``hub=True`` (or ``hub="org/name"``): the Hugging Face hub via the ``datasets`` package (optional
   extra ``rolecast[hub]``, imported only then; needs network).

Splits: "train" and "test" where the dataset has them, "validation" where it has one (MBPP). A dataset
with only a test split (MATH-500, AIME 2024, HumanEval) serves all its rows as "test" and a seeded
partition of the same rows as "train" / "validation" (``val_fraction`` of them validation) — for
experiments that train on a benchmark, knowingly. A dataset with only a train split (DAPO) partitions
it into "train" / "validation". Datasets with native train+test carve a validation split out of train
only when ``val_fraction > 0`` is passed.

Rows without a usable answer or tests are skipped; ``task.skipped`` counts them by reason (also logged).
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rolecast.core.errors import DatasetError, DatasetFileMissing, require
from rolecast.core.text import last_boxed
from rolecast.rewards.code import GRADERS as CODE_GRADERS
from rolecast.rewards.code import RLLM_TEST_KINDS, CodeTests, extract_for, score_code_many
from rolecast.rewards.math import GRADERS as MATH_GRADERS
from rolecast.rewards.math import default_verifier, extract_answer, gsm8k_gold, score_math
from rolecast.rewards.math_study import study_extract
from rolecast.tasks.base import Problem, Score, Task, register_task

log = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")

# ----------------------------------------------------------------------------------------------------------
# files


def data_root() -> Path:
    """Where the offline datasets live ($ROLECAST_DATA_DIR, else ../shared/data beside the repo or cwd)."""
    env = os.environ.get("ROLECAST_DATA_DIR")
    if env:
        return Path(env)
    candidates = [
        Path(__file__).resolve().parents[3] / ".." / "shared" / "data",  # the repository root, beside src/
        Path.cwd() / ".." / "shared" / "data",
    ]
    for c in candidates:
        if c.is_dir():
            return c.resolve()
    return candidates[0].resolve()


class Rows(list):
    """Rows of one source, remembering where each came from, so an error names the file and the line an
    editor shows (1-based, blank lines counted) or the row of a Parquet file / JSON array / hub split."""

    def __init__(self, rows: Sequence[dict[str, Any]], source: str, lines: Sequence[int] | None = None):
        super().__init__(rows)
        self.source = source
        self.lines = list(lines) if lines is not None else None

    def where(self, i: int) -> str:
        return f"{self.source}, line {self.lines[i]}" if self.lines is not None else f"{self.source}, row {i + 1}"


def dataset_file(rel: str) -> Path:
    """An offline dataset file under the data root, with an error naming the path and the env var."""
    p = data_root() / rel
    if not p.exists():
        raise DatasetFileMissing(
            f"dataset file {p} not found. Set ROLECAST_DATA_DIR to the folder holding the offline data "
            f"(currently {os.environ.get('ROLECAST_DATA_DIR', 'unset')}), pass path=..., or hub=True to download."
        )
    return p


def read_rows(path: str | Path) -> Rows:
    """Rows of a JSONL, JSON (list of objects) or Parquet file. A malformed line, a row that is not an object
    or a file without rows is a `DatasetError` naming the file and the 1-based line (row for Parquet)."""
    p = Path(path)
    if not p.exists():
        raise DatasetFileMissing(f"dataset file {p} not found")
    if p.is_dir():
        raise DatasetError(f"{p}: is a directory, expected a .jsonl, .json or .parquet file")
    if p.suffix == ".parquet":
        pq = require("pyarrow", "parquet", module="pyarrow.parquet", purpose=f"reading {p}")
        try:
            rows = Rows(pq.read_table(p).to_pylist(), str(p))
        except Exception as e:  # noqa: BLE001 - pyarrow raises its own types for a damaged file
            raise DatasetError(f"{p}: not a readable Parquet file ({type(e).__name__}: {e})") from e
    else:
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            bad_line = p.read_bytes()[: e.start].count(b"\n") + 1
            raise DatasetError(f"{p}, line {bad_line}: not UTF-8 text ({e.reason})") from e
        if p.suffix == ".json" and text.lstrip().startswith("["):
            try:
                rows = Rows(json.loads(text), str(p))
            except json.JSONDecodeError as e:
                raise DatasetError(f"{p}, line {e.lineno}: not valid JSON ({e.msg})") from e
        else:
            # "\n" only: str.splitlines also breaks at U+2028, U+0085, form feeds ..., which JSON strings may hold
            # unescaped, so it would split a valid row and miscount the lines an editor shows.
            objs: list[Any] = []
            lines: list[int] = []
            for n, line in enumerate(text.split("\n"), 1):
                if line.strip():
                    try:
                        objs.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise DatasetError(f"{p}, line {n}: not valid JSON ({e.msg} at column {e.colno})") from e
                    lines.append(n)
            rows = Rows(objs, str(p), lines)
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise DatasetError(f"{rows.where(i)}: expected a JSON object (one row), got {type(r).__name__}")
    if not rows:
        raise DatasetError(f"{p}: the file holds no rows (empty)")
    return rows


def load_hub(name: str, config: str | None, split: str) -> Rows:
    datasets = require("datasets", "hub", purpose=f"loading {name} from the Hugging Face hub (hub=True)")
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # noqa: BLE001 - offline, auth, missing split: all worth one clear message
        raise DatasetError(f"could not load {name} ({config or 'default'}, split {split!r}) from the hub: {e}") from e
    return Rows([dict(r) for r in ds], f"hub dataset {name} ({config or 'default'}, split {split})")


def _partition(n: int, seed: int, val_fraction: float) -> tuple[list[int], list[int]]:
    """Seeded (train, validation) index lists covering range(n)."""
    idx = list(range(n))
    random.Random(seed).shuffle(idx)
    n_val = int(round(n * val_fraction))
    if val_fraction > 0 and n > 1:
        n_val = min(max(n_val, 1), n - 1)
    return sorted(idx[n_val:]), sorted(idx[:n_val])


class _Skip(Exception):
    """A row that cannot become a problem; the message is the counted reason."""


# ----------------------------------------------------------------------------------------------------------
# base


class DatasetTask(Task):
    """A task over rows of a dataset. Subclasses set the class attributes and `make_problem`."""

    name = "dataset"
    family = "math"
    native_splits: tuple[str, ...] = ("train", "test")
    files: Mapping[str, str] = {}  # split -> path under the data root
    hub_name: str | None = None
    hub_config: str | None = None
    hub_splits: Mapping[str, str] = {}  # our split -> hub split name, when they differ

    def __init__(
        self,
        path: str | Path | Mapping[str, str | Path] | None = None,
        *,
        path_split: str = "train",
        hub: bool | str = False,
        seed: int = 0,
        val_fraction: float | None = None,
        limit: int | None = None,
    ):
        self.path = path
        self.path_split = path_split
        self.hub = hub
        self.seed = seed
        if val_fraction is None:
            val_fraction = 0.0 if {"train", "test"} <= set(self.native_splits) else 0.1
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(f"{self.name}: val_fraction must be in [0, 1), got {val_fraction}")
        self.val_fraction = val_fraction
        self.limit = limit
        self.skipped: Counter[str] = Counter()
        self._cache: dict[str, list[Problem]] = {}
        self._raw: dict[str, list[dict[str, Any]]] = {}

    # where rows come from ------------------------------------------------------------------------------

    def _available(self) -> tuple[str, ...]:
        if isinstance(self.path, Mapping):
            return tuple(self.path)
        if self.path is not None and Path(self.path).is_file():
            return (self.path_split,)
        return self.native_splits

    def _source_rows(self, split: str) -> list[dict[str, Any]]:
        if split in self._raw:
            return self._raw[split]
        if isinstance(self.path, Mapping):
            rows = read_rows(self.path[split])
        elif self.path is not None:
            p = Path(self.path)
            if p.is_dir():
                for ext in (".jsonl", ".parquet", ".json"):
                    if (p / f"{split}{ext}").exists():
                        rows = read_rows(p / f"{split}{ext}")
                        break
                else:
                    raise DatasetFileMissing(f"{self.name}: no {split}.jsonl / {split}.parquet / {split}.json in {p}")
            else:
                rows = read_rows(p)
        elif self.hub:
            name = self.hub if isinstance(self.hub, str) else self.hub_name
            if not name:
                raise DatasetError(f"{self.name}: no hub dataset known; pass hub='org/name'")
            rows = load_hub(name, self.hub_config, self.hub_splits.get(split, split))
        else:
            if split not in self.files:
                raise DatasetFileMissing(f"{self.name}: no offline file for split {split!r}; pass path=... or hub=True")
            rows = self._offline_rows(self.files[split])
        self._raw[split] = rows
        return rows

    def offline_what(self) -> str | None:
        """What belongs in this task's offline file, for the message when it is missing. A task that says so also
        reads the file's .jsonl sibling when the file itself (Parquet, as on the hub) is not there."""
        return None

    def _offline_rows(self, rel: str) -> Rows:
        what = self.offline_what()
        if what is None:
            return read_rows(dataset_file(rel))
        p = data_root() / rel
        for candidate in (p, p.with_suffix(".jsonl")):
            if candidate.exists():
                return read_rows(candidate)
        raise DatasetFileMissing(  # a FileNotFoundError, and a UserError: one line, no traceback
            f"{self.name}: {p} not found (offline). Put {what} there as {p.name} or {p.stem}.jsonl; or set "
            f"task.options.path, ROLECAST_DATA_DIR, or hub: true"
        )

    def _rows(self, split: str) -> list[tuple[int, dict[str, Any], str]]:
        """(index within its source split, row, source split) for one of our splits."""
        avail = self._available()
        if split in avail:
            if split == "train" and self.val_fraction > 0 and "validation" not in avail:
                rows = self._source_rows("train")
                tr, _ = _partition(len(rows), self.seed, self.val_fraction)
                return [(i, rows[i], "train") for i in tr]
            rows = self._source_rows(split)
            return [(i, r, split) for i, r in enumerate(rows)]
        if split in ("train", "validation"):
            if split == "validation" and self.val_fraction <= 0:
                raise DatasetError(
                    f"{self.name} has no validation split; pass val_fraction > 0 to carve one out of train"
                )
            base = "train" if "train" in avail else "test"
            rows = self._source_rows(base)
            tr, va = _partition(len(rows), self.seed, self.val_fraction)
            return [(i, rows[i], base) for i in (tr if split == "train" else va)]
        raise DatasetError(f"{self.name} has no {split!r} split; it has {sorted(set(avail) | {'train', 'validation'})}")

    def _where(self, src: str, index: int) -> str:
        rows = self._raw.get(src)
        return rows.where(index) if isinstance(rows, Rows) else f"{self.name} {src} split, row {index + 1}"

    def problems(self, split: str) -> Sequence[Problem]:
        if split not in SPLITS:
            raise DatasetError(f"{self.name}: unknown split {split!r}; expected one of {SPLITS}")
        if split not in self._cache:
            out: list[Problem] = []
            skipped: Counter[str] = Counter()
            for i, row, src in self._rows(split):
                try:
                    out.append(self.admit(self.make_problem(row, i, src)))
                except _Skip as e:
                    skipped[str(e)] += 1
                except (KeyError, TypeError, ValueError) as e:
                    why = e.args[0] if isinstance(e, KeyError) and e.args else f"{type(e).__name__}: {e}"
                    raise DatasetError(f"{self._where(src, i)}: {self.name}: {why}") from e
                if self.limit is not None and len(out) >= self.limit:
                    break
            if skipped and not out:
                raise DatasetError(
                    f"{self.name}/{split}: every row was skipped ({dict(skipped)}); check the file "
                    f"and the column mapping"
                )
            if skipped:
                log.warning("%s/%s: skipped %d rows: %s", self.name, split, sum(skipped.values()), dict(skipped))
                self.skipped.update(skipped)
            self._cache[split] = out
        return self._cache[split]

    def make_problem(self, row: dict[str, Any], index: int, split: str) -> Problem:
        raise NotImplementedError

    def admit(self, problem: Problem) -> Problem:
        """A made problem checked against the task's options; a ValueError names the row (`problems`)."""
        return problem


def _require(row: Mapping[str, Any], key: str, what: str) -> Any:
    if key not in row:
        raise KeyError(f"missing column {key!r} ({what}); row has {sorted(row)}")
    v = row[key]
    if v is None or (isinstance(v, str) and not v.strip()) or (isinstance(v, (list, tuple)) and not v):
        raise _Skip(f"empty {key}")
    return v


def _one_of(task: str, option: str, value: Any, choices: Sequence[str]) -> None:
    """A task option that takes one of `choices`, or ValueError naming the task, the option and the choices."""
    if value not in choices:
        raise ValueError(f"{task}: {option} must be one of {', '.join(choices)}; got {value!r}")


class _UserFile(DatasetTask):
    """A task over the user's own file (math_jsonl, code_jsonl): `path` is required; `name` names the task (its
    problem ids and messages)."""

    def __init__(self, path: Any = None, *, name: str | None = None, **kw: Any):
        if path is None:
            raise ValueError(f"{self.name} needs path= (a file, a directory of <split>.jsonl, or {{split: file}})")
        super().__init__(path, **kw)
        if name:
            self.name = name


def _seeded_split(
    rows: Sequence[tuple[int, dict[str, Any]]], seed: int, n_test: int, n_train: int | None = None
) -> dict[str, list[tuple[int, dict[str, Any], str]]]:
    """The study's held-out split of one source's (index, row)s, as Hugging Face's `train_test_split(seed=...)` /
    `shuffle(seed)` makes it: in the order of `hf_permutation(len(rows), seed)`, the first `n_test` are "test" and
    the next `n_train` (default: all the rest) "train"; each as (source index, row, source split "train")."""
    perm = hf_permutation(len(rows), seed)
    end = len(rows) if n_train is None else n_test + n_train

    def picked(order: list[int]) -> list[tuple[int, dict[str, Any], str]]:
        return [(rows[j][0], rows[j][1], "train") for j in order]

    return {"test": picked(perm[:n_test]), "train": picked(perm[n_test:end])}


# ----------------------------------------------------------------------------------------------------------
# math


class MathTask(DatasetTask):
    family = "math"

    def __init__(self, *args: Any, last_number: bool | None = None, grader: str = "rolecast", **kwargs: Any):
        """`grader`: "rolecast" (math_verify equivalence, `last_number` fallback) or "rllm" (rLLM's, the reference
        study's rules, rewards/math_study.py: last \\boxed{} only, the boxed answer compared as written)."""
        super().__init__(*args, **kwargs)
        _one_of(self.name, "grader", grader, MATH_GRADERS)
        if grader == "rllm" and last_number:
            raise ValueError(
                f"{self.name}: the rllm grader has no last-number fallback; drop last_number or use grader: rolecast"
            )
        self.last_number = grader == "rolecast" if last_number is None else last_number
        self.grader = grader

    def extract_answer(self, text: str | None) -> str | None:
        return study_extract(text) if self.grader == "rllm" else extract_answer(text, last_number=self.last_number)

    def score(self, problem: Problem, text: str | None) -> Score:
        # both graders compare in the verifier's worker processes (the study's sympy step evaluates the answer)
        return score_math(text, str(problem.reference), last_number=self.last_number, grader=self.grader)

    def score_many(self, problems: Sequence[Problem], texts: Sequence[str | None]) -> list[Score]:
        v = default_verifier()
        if self.grader == "rolecast" and v.last_number != self.last_number:
            return [self.score(p, t) for p, t in zip(problems, texts, strict=True)]
        return v.score_many([str(p.reference) for p in problems], texts, self.grader)


@register_task("gsm8k")
class GSM8K(MathTask):
    name = "gsm8k"
    files = {"train": "gsm8k/train.jsonl", "test": "gsm8k/test.jsonl"}
    hub_name, hub_config = "openai/gsm8k", "main"

    def make_problem(self, row, index, split):
        q = _require(row, "question", "the problem")
        gold = gsm8k_gold(_require(row, "answer", "the solution ending in '#### x'"))
        if gold is None:
            raise _Skip("no '####' answer line")
        return Problem(f"gsm8k/{split}/{index}", q, gold, {"split": split, "index": index})


def _boxed_gold(solution: str) -> str:
    gold = last_boxed(solution)
    if gold is None:
        raise _Skip("no \\boxed answer in solution")
    if not gold:
        raise _Skip("empty \\boxed answer in solution")
    return gold


@register_task("math")
class MATH(MathTask):
    name = "math"
    files = {"train": "math/train.jsonl", "test": "math/test.jsonl"}
    hub_name = "EleutherAI/hendrycks_math"  # per-subject configs on the hub; prefer the offline files

    def make_problem(self, row, index, split):
        text = _require(row, "problem", "the problem")
        gold = row.get("answer") or _boxed_gold(_require(row, "solution", "the worked solution"))
        meta = {"split": split, "index": index, "level": row.get("level"), "subject": row.get("type")}
        return Problem(f"math/{split}/{index}", text, gold, meta)


@register_task("math500")
class MATH500(MathTask):
    name = "math500"
    native_splits = ("test",)
    files = {"test": "math500/test.jsonl"}
    hub_name = "HuggingFaceH4/MATH-500"

    def make_problem(self, row, index, split):
        text = _require(row, "problem", "the problem")
        gold = _require(row, "answer", "the gold answer")
        meta = {"split": split, "index": index, "level": row.get("level"), "subject": row.get("subject")}
        return Problem(row.get("unique_id") or f"math500/{index}", text, str(gold), meta)


@register_task("aime2024")
class AIME2024(MathTask):
    name = "aime2024"
    native_splits = ("test",)
    files = {"test": "aime2024/test.jsonl"}
    hub_name = "Maxwell-Jia/AIME_2024"
    hub_splits = {"test": "train"}  # the hub copy calls its only split "train"

    def make_problem(self, row, index, split):
        text = _require(row, "Problem", "the problem")
        gold = _require(row, "Answer", "the integer answer")
        return Problem(f"aime2024/{row.get('ID', index)}", text, str(gold), {"split": split, "index": index})


# DAPO's prompts wrap each problem in a fixed instruction asking for "Answer: $Answer"; our prompts ask for
# \boxed{}, so by default we keep only the problem between the instruction's first paragraph and its "Remember"
# tail (instruction="strip"). The reference study fed the whole wrapped prompt to its role prompts
# (instruction="keep", what the study recipes use).
_DAPO_WRAP = re.compile(r"^Solve the following math problem.*?\n\n(.*?)\n\nRemember to put your answer.*$", re.S)
_CJK = re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff]")


def hf_permutation(n: int, seed: int) -> list[int]:
    """The row order of Hugging Face `datasets`' `shuffle(seed)` / `train_test_split(seed=...)`:
    numpy's default_rng(seed).permutation(n). Lets a split made offline equal the study's split of the hub copy."""
    return [int(i) for i in np.random.default_rng(seed).permutation(n)]


@register_task("dapo_math")
class DAPOMath(MathTask):
    """DAPO-Math-17k in either layout, detected per row:

    - the deduplicated copy ``open-r1/DAPO-Math-17k-Processed`` (config ``en`` is what the study trained on):
      ``prompt`` = the wrapped problem as a string, ``solution`` = the gold answer (also ``source_prompt``,
      ``reward_model``, ``extra_info``);
    - the original ``BytedTsinghua-SIA/DAPO-Math-17k``: ``prompt`` = chat messages (a list, or that list as a
      JSON string), ``reward_model.ground_truth``; every problem appears many times.

    Rows are deduplicated on the prompt text (first kept; the processed copy is already unique) and filtered to
    ``language`` ("en": no CJK characters, as the processed ``en`` config; "all"; "cn"). Splits: the study's
    held-out split, made as it made it (Hugging Face ``train_test_split(test_size, seed)``): "test" = the
    first ceil(test_size x n) rows of numpy's default_rng(split_seed).permutation(n), "train" = the rest
    (12704 / 1412 rows for the ``en`` copy). "validation" needs ``val_fraction > 0`` (carved out of train).
    """

    name = "dapo_math"
    native_splits = ("train",)
    files = {"train": "dapo_math/train.parquet"}
    hub_name, hub_config = "open-r1/DAPO-Math-17k-Processed", "en"

    def __init__(
        self,
        *args: Any,
        test_size: float = 0.1,
        split_seed: int = 42,
        language: str = "en",
        instruction: str = "strip",
        val_fraction: float | None = 0.0,
        **kwargs: Any,
    ):
        super().__init__(*args, val_fraction=val_fraction, **kwargs)
        if not 0.0 < test_size < 1.0:
            raise ValueError(f"dapo_math: test_size must be in (0, 1), got {test_size}")
        _one_of("dapo_math", "language", language, ("en", "cn", "all"))
        _one_of("dapo_math", "instruction", instruction, ("strip", "keep"))
        self.test_size, self.split_seed, self.language, self.instruction = test_size, split_seed, language, instruction

    def offline_what(self) -> str:
        return (
            "DAPO-Math-17k, in the layout of open-r1/DAPO-Math-17k-Processed (config 'en', the copy the study "
            "trained on) or of BytedTsinghua-SIA/DAPO-Math-17k,"
        )

    def _prompt_text(self, row: Mapping[str, Any], index: int) -> str:
        prompt = _require(row, "prompt", "the problem (a string, or chat messages)")
        if isinstance(prompt, str) and prompt.lstrip().startswith("[") and "solution" not in row:
            try:  # the original layout with its message list stored as a JSON string
                prompt = json.loads(prompt)
            except json.JSONDecodeError:
                pass  # a problem that happens to start with "[": plain text
        if isinstance(prompt, str):
            return prompt
        if isinstance(prompt, Sequence):
            user = [m.get("content", "") for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
            if user and user[0].strip():
                return user[0]
        raise _Skip("no user message in prompt")

    def _unique_rows(self) -> list[tuple[int, dict[str, Any]]]:
        """(source index, row) after deduplication and the language filter, in source order."""
        cached: list[tuple[int, dict[str, Any]]] | None = getattr(self, "_unique", None)
        if cached is not None:
            return cached
        seen: set[str] = set()
        out = []
        for i, row in enumerate(self._source_rows("train")):
            try:
                text = self._prompt_text(row, i)
            except _Skip as e:
                self.skipped[str(e)] += 1
                continue
            if text in seen:
                continue
            seen.add(text)
            cjk = bool(_CJK.search(text))
            if (self.language == "en" and cjk) or (self.language == "cn" and not cjk):
                continue
            out.append((i, row))
        self._unique: list[tuple[int, dict[str, Any]]] | None = out
        return out

    def _rows(self, split: str) -> list[tuple[int, dict[str, Any], str]]:
        rows = self._unique_rows()
        n = len(rows)
        if n < 2:
            raise ValueError(f"dapo_math: {n} usable row(s) after deduplication; the held-out split needs at least 2")
        parts = _seeded_split(
            rows, self.split_seed, math.ceil(self.test_size * n), math.floor((1 - self.test_size) * n)
        )
        if split == "test":
            return parts["test"]
        if split not in ("train", "validation"):
            raise ValueError(f"dapo_math has no {split!r} split")
        train = parts["train"]
        if self.val_fraction > 0:
            tr, va = _partition(len(train), self.seed, self.val_fraction)
            return [train[j] for j in (tr if split == "train" else va)]
        if split == "validation":
            raise ValueError("dapo_math has no validation split; pass val_fraction > 0 to carve one out of train")
        return train

    def make_problem(self, row, index, split):
        text = self._prompt_text(row, index).strip()
        if self.instruction == "strip":
            m = _DAPO_WRAP.match(text)
            if m:
                text = m.group(1).strip()
        gold = row.get("solution")
        if gold is None:
            rm = _require(row, "reward_model", "{'ground_truth': ...}")
            if isinstance(rm, str):
                rm = json.loads(rm)
            gold = rm.get("ground_truth") if isinstance(rm, Mapping) else None
        if gold is None or not str(gold).strip():
            raise _Skip("empty reward_model.ground_truth")
        extra = row.get("extra_info")
        idx = extra.get("index", index) if isinstance(extra, Mapping) else index
        return Problem(f"dapo_math/{idx}", text, str(gold).strip(), {"split": split, "index": index})


@register_task("math_jsonl")
class MathJSONL(_UserFile, MathTask):
    """Any math file: ``problem_key`` holds the statement, ``answer_key`` the gold answer (or, with
    ``answer_from="boxed"`` / ``"gsm8k"``, a solution to take it from), which becomes `Problem.reference`; the
    file's keys stay the user's ("answer" by default)."""

    name = "math_jsonl"

    def __init__(
        self,
        path: Any = None,
        *,
        problem_key: str = "problem",
        answer_key: str = "answer",
        answer_from: str = "answer",
        **kw: Any,
    ):
        super().__init__(path, **kw)
        _one_of(self.name, "answer_from", answer_from, ("answer", "boxed", "gsm8k"))
        self.problem_key, self.answer_key, self.answer_from = problem_key, answer_key, answer_from

    def make_problem(self, row, index, split):
        text = _require(row, self.problem_key, "the problem (problem_key)")
        raw = _require(row, self.answer_key, "the answer (answer_key)")
        gold: str | None
        if self.answer_from == "boxed":
            gold = _boxed_gold(str(raw))
        elif self.answer_from == "gsm8k":
            gold = gsm8k_gold(str(raw))
            if gold is None:
                raise _Skip("no '####' answer line")
        else:
            gold = str(raw).strip()
        return Problem(f"{self.name}/{split}/{index}", str(text), gold, {"split": split, "index": index})


# ----------------------------------------------------------------------------------------------------------
# code


class CodeTask(DatasetTask):
    family = "code"
    executes_code = True

    def __init__(
        self,
        *args: Any,
        partial: bool = False,
        timeout_s: float | None = None,
        grader: str = "rolecast",
        reliability_guard: bool = False,
        **kwargs: Any,
    ):
        """`grader`: "rolecast" (rolecast.rewards.code) or "rllm" (rLLM's LiveCodeBench runner, the reference
        study's, rolecast.rewards.code_study; LiveCodeBench-style tests only). `reliability_guard` (rllm grader
        only): the runner's guard too, under which quit() and some os/shutil/subprocess functions are None."""
        _one_of(self.name, "grader", grader, CODE_GRADERS)
        if reliability_guard and grader != "rllm":
            raise ValueError(f"{self.name}: reliability_guard is the rllm grader's; set grader: rllm or drop it")
        super().__init__(*args, **kwargs)
        self.partial = partial
        self.timeout_s = timeout_s
        self.grader = grader
        self.reliability_guard = reliability_guard

    def admit(self, problem: Problem) -> Problem:
        # The study's runner (grader "rllm") runs LiveCodeBench's stdio/functional tests only. Caught here, a
        # dataset whose tests it cannot run (MBPP's asserts, HumanEval's check()) fails as it loads, naming the
        # row; caught at scoring, every text of the first batch raised and the run stopped with GraderBug.
        kind = problem.reference.kind if isinstance(problem.reference, CodeTests) else None
        if self.grader == "rllm" and kind not in RLLM_TEST_KINDS:
            raise ValueError(
                f"grader 'rllm' (the study's LiveCodeBench runner) runs {' and '.join(RLLM_TEST_KINDS)} tests, "
                f"and this row's are {kind!r}: set task.options.grader: rolecast"
            )
        return problem

    def extract_answer(self, text: str | None) -> str | None:
        return extract_for(text, self.grader)

    def score(self, problem: Problem, text: str | None) -> Score:
        return self.score_many([problem], [text])[0]

    def score_many(self, problems: Sequence[Problem], texts: Sequence[str | None]) -> list[Score]:
        return score_code_many(
            list(texts),
            [p.reference for p in problems],
            partial=self.partial,
            timeout_s=self.timeout_s,
            grader=self.grader,
            reliability_guard=self.reliability_guard,
        )


def _mbpp_text(statement: str, first_test: str) -> str:
    return f"{statement.strip()}\nYour code should pass this test:\n{first_test.strip()}"


@register_task("mbpp")
class MBPP(CodeTask):
    """MBPP (full, 974): the official train/validation/test (374/90/500) split; tests = ``test_list``."""

    name = "mbpp"
    native_splits = ("train", "validation", "test")
    files = {s: f"mbpp/full/{s}.jsonl" for s in native_splits}
    hub_name, hub_config = "google-research-datasets/mbpp", "full"
    text_key = "text"

    def make_problem(self, row, index, split):
        statement = _require(row, self.text_key, "the task description")
        tests = _require(row, "test_list", "assert statements")
        meta = {"split": split, "index": index, "reference_solution": row.get("code")}
        return Problem(
            f"{self.name}/{row.get('task_id', index)}", _mbpp_text(statement, tests[0]), CodeTests.mbpp(row), meta
        )


@register_task("mbpp_sanitized")
class MBPPSanitized(MBPP):
    """MBPP sanitized (427): train/validation/test 120/43/257; ``test_imports`` run before the program."""

    name = "mbpp_sanitized"
    files = {s: f"mbpp/sanitized/{s}.jsonl" for s in MBPP.native_splits}
    hub_config = "sanitized"
    text_key = "prompt"


@register_task("humaneval")
class HumanEval(CodeTask):
    """HumanEval (164): the prompt (signature + docstring) is the problem; tests = ``check(entry_point)``."""

    name = "humaneval"
    native_splits = ("test",)
    files = {"test": "humaneval/test.jsonl"}
    hub_name = "openai/openai_humaneval"

    def make_problem(self, row, index, split):
        prompt = _require(row, "prompt", "signature + docstring")
        for k in ("test", "entry_point"):
            _require(row, k, "HumanEval tests")
        meta = {
            "split": split,
            "index": index,
            "entry_point": row["entry_point"],
            "reference_solution": row.get("canonical_solution"),
        }
        return Problem(row.get("task_id") or f"humaneval/{index}", prompt, CodeTests.humaneval(row), meta)


def _lcb_tests(raw: Any, fn_name: str | None) -> Any:
    try:
        tests = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as e:
        raise _Skip("tests column is not valid JSON") from e
    if not isinstance(tests, list) or not tests:
        raise _Skip("no tests")
    if not all(isinstance(t, Mapping) and "input" in t and "output" in t for t in tests):
        raise _Skip("tests not in LiveCodeBench format (input/output/testtype)")
    try:
        return CodeTests.livecodebench(tests, fn_name)
    except ValueError as e:
        raise _Skip(str(e)) from e


def _deepcoder_tests(
    raw: Any, fn_name: str | None, per_test_timeout_s: float | None, function_call_tests: str = "call"
) -> Any:
    """DeepCoder's tests in any of its subsets' layouts, as CodeTests:

    - LiveCodeBench style (lcbv5, and the study's prepared copy): ``[{"input", "output", "testtype":
      "stdin" | "stdin_stdout" | "functional", "metadata": {"func_name"}}]``;
    - PrimeIntellect style: ``[{"type": "stdin_stdout" | "function_call", "fn_name", "input", "output"}]``,
      where a function call's ``input`` is the list of arguments and ``output`` its return value wrapped in a
      one-element list (the TACO convention: the list is unwrapped);
    - TACO style: ``{"inputs": [...], "outputs": [...], "fn_name"?}``.

    Function-call tests become "functional" tests (the function is called with the arguments and its return
    value compared), never standard-input programs. `per_test_timeout_s` limits each test.

    ``function_call_tests="stdin"`` is the study's behaviour instead: its runner reads the test type from the key
    ``testtype`` (rllm/rewards/code_reward.py, postprocess_lcb_sample), which PrimeIntellect and TACO tests do
    not have, so every test not marked ``testtype: functional`` runs as a standard-input program: a list of
    arguments joined by newlines as its input, the expected value as its output. A test whose arguments are not
    all text, or whose expected value is not text, fails there whatever the program does (a TypeError joining
    them, an AttributeError stripping the value): it is kept as a test that always fails (`broken`)."""
    try:
        tests = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as e:
        raise _Skip("tests column is not valid JSON") from e
    if isinstance(tests, Mapping) and "inputs" in tests and "outputs" in tests:
        fn_name = fn_name or tests.get("fn_name")
        tests = [
            {"input": i, "output": o, "fn_name": tests.get("fn_name")}
            for i, o in zip(tests["inputs"], tests["outputs"], strict=False)
        ]
    if not isinstance(tests, list) or not tests:
        raise _Skip("no tests")
    if not all(isinstance(t, Mapping) and "input" in t and "output" in t for t in tests):
        raise _Skip("tests without input/output")
    if function_call_tests not in ("call", "stdin"):
        raise ValueError(f"function_call_tests must be 'call' or 'stdin', got {function_call_tests!r}")
    if function_call_tests == "stdin" and tests[0].get("testtype") != "functional":
        return _study_stdin_tests(tests, per_test_timeout_s)

    def call_name(t: Mapping[str, Any]) -> str | None:
        meta = t.get("metadata")
        return t.get("fn_name") or (meta.get("func_name") if isinstance(meta, Mapping) else None)

    functional = [
        t.get("testtype") == "functional" or t.get("type") == "function_call" or bool(call_name(t)) for t in tests
    ]
    if any(functional) and not all(functional):
        raise _Skip("mixed stdin and function-call tests")
    if not functional[0]:
        return CodeTests(
            kind="stdio",
            inputs=tuple(str(t["input"]) for t in tests),
            outputs=tuple(str(t["output"]) for t in tests),
            timeout_s=per_test_timeout_s,
        )
    name = fn_name or next((call_name(t) for t in tests if call_name(t)), None)
    if not name:
        raise _Skip("function-call tests without a function name")

    def args(x: Any) -> str:  # one JSON value per line, one line per argument
        return x if isinstance(x, str) else "\n".join(json.dumps(a) for a in x)

    def ret(x: Any) -> str:
        if isinstance(x, str):
            return x
        return json.dumps(x[0] if isinstance(x, list) and len(x) == 1 else x)

    return CodeTests(
        kind="functional",
        inputs=tuple(args(t["input"]) for t in tests),
        outputs=tuple(ret(t["output"]) for t in tests),
        entry_point=str(name),
        timeout_s=per_test_timeout_s,
    )


def _study_stdin_tests(tests: Sequence[Mapping[str, Any]], per_test_timeout_s: float | None) -> Any:
    """Every test as a standard-input test, as the study's runner takes a test list whose first test is not
    ``testtype: functional`` (grade_stdio / call_method in rllm/rewards/code_utils/livecodebench.py)."""
    inputs, outputs, broken = [], [], []
    for j, t in enumerate(tests):
        x, y = t["input"], t["output"]
        if isinstance(x, list) and all(isinstance(a, str) for a in x):
            x = "\n".join(x)
        if not isinstance(x, str) or not isinstance(y, str):
            broken.append(j)
            x, y = "", ""
        inputs.append(x)
        outputs.append(y)
    return CodeTests(
        kind="stdio",
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        timeout_s=per_test_timeout_s,
        broken=tuple(broken),
    )


# LiveCodeBench's code-generation prompt as the reference study wraps each DeepCoder problem in it
# (rllm/system_prompts.py, rllm/data/utils.py fetch_live_code_bench_system_prompt)
LCB_SYSTEM_MESSAGE = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will generate "
    "a correct Python program that matches the specification and passes all tests."
)
LCB_FORMAT_WITH_STARTER = (
    "You will use the following starter code to write the solution to the problem and enclose your code within "
    "delimiters."
)
LCB_FORMAT_WITHOUT_STARTER = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on the "
    "sample inputs). Enclose your code within delimiters as follows. Ensure that when the python program runs, it "
    "reads the inputs, runs the algorithm and writes output to STDOUT."
)


def livecodebench_prompt(statement: str, starter_code: str | None = None) -> str:
    """The study's problem text, byte for byte: the system message, a blank line, the statement as given (no
    separator before the format line, as in the study), the format instruction and code block, the answer line."""
    text = LCB_SYSTEM_MESSAGE + "\n\n" + statement
    if starter_code:
        text += f"### Format: {LCB_FORMAT_WITH_STARTER}\n```python\n{starter_code}\n```\n\n"
    else:
        text += f"### Format: {LCB_FORMAT_WITHOUT_STARTER}\n```python\n# YOUR CODE HERE\n```\n\n"
    return text + "### Answer: (use the provided format with backticks)\n\n"


@register_task("deepcoder")
class DeepCoder(CodeTask):
    """DeepCoder-Preview (agentica-org/DeepCoder-Preview-Dataset). Default subset: ``primeintellect``, the
    study's training set: one file of rows ``problem``, ``tests`` (JSON string, see `_deepcoder_tests`),
    ``metadata`` (dict or JSON string; ``func_name`` for function problems), optional ``starter_code``.
    Its splits are the study's: rows with at least one test, in the order of numpy's
    default_rng(split_seed).permutation (Hugging Face ``shuffle(seed=42)``); "test" = the first ``test_size``
    (1000), "train" = the rest. Each test runs with ``per_test_timeout_s`` (the study's 3 s per test).
    ``runtime_results``: the study's JSON of tests that passed a reference run ({problem: {test: {"status":
    "passed"}}}); given, a problem the file names keeps only those tests and is dropped when none is left, and a
    problem the file does not name keeps all its tests, before the shuffle, as the study's data preparation
    (examples/deepcoder/prepare_deepcoder_data.py) did. ``problem_format``: ``rolecast`` (the statement, and
    the starter code after it) or ``livecodebench`` (the study's: LiveCodeBench's system message, the statement,
    then its format instructions with the starter code or a ``# YOUR CODE HERE`` block,
    rllm/data/utils.py ``fetch_live_code_bench_system_prompt``). ``subset: lcbv5`` keeps the LiveCodeBench
    subset with its own train/test files. ``function_call_tests``: ``call`` (function-call tests call the
    function) or ``stdin`` (the study's runner: they run as standard-input programs, see `_deepcoder_tests`).
    Grading options (``grader``, ``reliability_guard``): `CodeTask`."""

    name = "deepcoder"
    hub_name = "agentica-org/DeepCoder-Preview-Dataset"
    SUBSETS = {
        "primeintellect": {"train": "deepcoder/primeintellect/train.parquet"},
        "lcbv5": {"train": "deepcoder/train.jsonl", "test": "deepcoder/test.jsonl"},
    }

    def __init__(
        self,
        *args: Any,
        subset: str = "primeintellect",
        test_size: int = 1000,
        split_seed: int = 42,
        per_test_timeout_s: float | None = 3.0,
        runtime_results: str | None = None,
        problem_format: str = "rolecast",
        function_call_tests: str = "call",
        **kwargs: Any,
    ):
        _one_of("deepcoder", "function_call_tests", function_call_tests, ("call", "stdin"))
        _one_of("deepcoder", "subset", subset, sorted(self.SUBSETS))
        _one_of("deepcoder", "problem_format", problem_format, ("rolecast", "livecodebench"))
        self.function_call_tests, self.problem_format = function_call_tests, problem_format
        self.subset, self.test_size, self.split_seed = subset, test_size, split_seed
        self.per_test_timeout_s, self.runtime_results = per_test_timeout_s, runtime_results
        self.files = self.SUBSETS[subset]
        self.native_splits = tuple(self.files)
        self.hub_config = subset
        kwargs.setdefault("val_fraction", 0.0)
        super().__init__(*args, **kwargs)

    def _single_source(self) -> bool:
        """Whether the rows come from one file that the study's split divides (else: native train/test)."""
        if isinstance(self.path, Mapping):
            return "test" not in self.path
        if self.path is not None:
            return Path(self.path).is_file() or not any(
                (Path(self.path) / f"test{e}").exists() for e in (".jsonl", ".parquet", ".json")
            )
        return "test" not in self.files

    def offline_what(self) -> str:
        return f"the {self.subset} subset of agentica-org/DeepCoder-Preview-Dataset"

    def _kept_rows(self) -> list[tuple[int, dict[str, Any]]]:
        cached: list[tuple[int, dict[str, Any]]] | None = getattr(self, "_kept", None)
        if cached is not None:
            return cached
        keep = json.loads(Path(self.runtime_results).read_text()) if self.runtime_results else None
        out = []
        for i, row in enumerate(self._source_rows("train")):
            if keep is not None:
                passed = keep.get(str(i))
                if passed is None:  # not in the file: the study keeps the problem with all its tests
                    out.append((i, row))
                    continue
                try:
                    tests = json.loads(row["tests"]) if isinstance(row.get("tests"), str) else row.get("tests")
                except json.JSONDecodeError:
                    tests = None
                if isinstance(tests, list):
                    tests = [t for j, t in enumerate(tests) if passed.get(str(j), {}).get("status") == "passed"]
                    if not tests:
                        continue
                    row = {**row, "tests": json.dumps(tests)}
            out.append((i, row))
        self._kept: list[tuple[int, dict[str, Any]]] | None = out
        return out

    def _rows(self, split: str) -> list[tuple[int, dict[str, Any], str]]:
        if not self._single_source():
            return super()._rows(split)
        rows = self._kept_rows()
        if len(rows) <= self.test_size:
            raise ValueError(
                f"deepcoder: test_size={self.test_size} leaves no training problems among {len(rows)} rows"
            )
        if split not in ("train", "test"):
            raise ValueError(
                f"deepcoder ({self.subset}) has splits 'train' and 'test' (the seeded held-out "
                f"{self.test_size}), not {split!r}"
            )
        return _seeded_split(rows, self.split_seed, self.test_size)[split]

    def make_problem(self, row, index, split):
        statement = _require(row, "problem", "the problem statement")
        meta_raw = row.get("metadata") or {}
        if isinstance(meta_raw, str):
            try:
                meta_raw = json.loads(meta_raw) if meta_raw.strip() else {}
            except json.JSONDecodeError:
                meta_raw = {}
        fn = meta_raw.get("func_name") if isinstance(meta_raw, Mapping) else None
        tests = _deepcoder_tests(
            _require(row, "tests", "the tests"), fn, self.per_test_timeout_s, self.function_call_tests
        )
        if self.problem_format == "livecodebench":
            text = livecodebench_prompt(statement, row.get("starter_code") or None)
        else:
            text = statement.strip()
            starter = (row.get("starter_code") or "").strip()
            if starter:
                text += f"\n\nStart from this code:\n```python\n{starter}\n```"
        return Problem(f"deepcoder/{self.subset}/{index}", text, tests, {"split": split, "index": index})


@register_task("code_jsonl")
class CodeJSONL(_UserFile, CodeTask):
    """Any code file: ``problem_key`` holds the statement, ``tests_key`` the tests in ``test_format``:
    "asserts" (a list of assert statements), "livecodebench" (list or JSON string of input/output/testtype;
    ``fn_name_key`` names the function column for functional tests) or "humaneval" (``tests_key`` holds
    check(); ``prompt`` is ``problem_key``, ``entry_point`` from ``entry_point_key``). The tests become
    `Problem.reference`."""

    name = "code_jsonl"

    def __init__(
        self,
        path: Any = None,
        *,
        problem_key: str = "problem",
        tests_key: str = "tests",
        test_format: str = "livecodebench",
        fn_name_key: str | None = None,
        entry_point_key: str = "entry_point",
        **kw: Any,
    ):
        super().__init__(path, **kw)
        _one_of(self.name, "test_format", test_format, ("asserts", "livecodebench", "humaneval"))
        self.problem_key, self.tests_key, self.test_format = problem_key, tests_key, test_format
        self.fn_name_key, self.entry_point_key = fn_name_key, entry_point_key

    def make_problem(self, row, index, split):
        text = _require(row, self.problem_key, "the problem (problem_key)")
        raw = _require(row, self.tests_key, "the tests (tests_key)")
        if self.test_format == "asserts":
            if isinstance(raw, str):
                raw = json.loads(raw) if raw.lstrip().startswith("[") else [raw]
            tests = CodeTests(kind="asserts", asserts=tuple(str(t) for t in raw))
        elif self.test_format == "humaneval":
            ep = _require(row, self.entry_point_key, "the entry point (entry_point_key)")
            tests = CodeTests(kind="humaneval", prompt=str(text), test=str(raw), entry_point=str(ep))
        else:
            fn = row.get(self.fn_name_key) if self.fn_name_key else None
            tests = _lcb_tests(raw, fn)
        return Problem(f"{self.name}/{split}/{index}", str(text), tests, {"split": split, "index": index})
