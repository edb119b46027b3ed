"""A sweep matrix: YAML -> typed `MatrixConfig` -> validated cells, each with its own `RunConfig`.

A cell is one training run (one point of workflow x task x model x sharing x seed) or one base-model
evaluation (one per (workflow, task, model, seed): evaluated with the seed of the cells it serves, so their
"final - base" carries the base evaluation's own sampling noise, and every sharing arm of a seed shares it). Every cell's `RunConfig` is built and checked here as far as
any machine can check it (workflow, task, prompts, routing, registries), so a bad axis value or override fails
at load, naming the matrix file, the axis or override and the value, before anything runs. What a machine must
provide (the device, the model path, optional packages) is checked where a cell runs: a matrix of `cuda` cells
lists on a laptop, and `describe` marks the cells this machine cannot run.

Precedence of a cell's settings, lowest first: the base run config, `set:`, the axis values (written into
their fields: workflow.name, task.name, model.path, routing.sharing, seed), the per-axis-value
`overrides:` (in axis order), the cell's own `set:` (explicit `cells:` only), then what the sweep owns
(run_dir; for base evaluations train.steps=0 and only the start evaluation).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rolecast.config.load import load_config
from rolecast.config.schema import CONFIG_DIR, DEFAULT_CONFIG, RunConfig
from rolecast.config.validate import check_environment
from rolecast.core.errors import ConfigError, MatrixError, yaml_problem
from rolecast.plan.schema import PlanFile, check_against_matrix, load_plan
from rolecast.tasks import TASKS
from rolecast.workflows import get_workflow

AxisName = Literal["workflow", "task", "model", "sharing", "seed"]
AXES: tuple[str, ...] = ("workflow", "task", "model", "sharing", "seed")
# the RunConfig field each axis sets
AXIS_FIELDS: dict[str, str] = {
    "workflow": "workflow.name",
    "task": "task.name",
    "model": "model.path",
    "sharing": "routing.sharing",
    "seed": "seed",
}
SWEEP_OWNED = ("run_dir",)  # fields the sweep sets for every cell; a matrix may not set them
BASE_EVAL_PREFIX = "base-"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Axes(_Strict):
    """Each axis lists its values; an axis left out takes the base config's value (one value)."""

    workflow: list[str] | None = None
    task: list[str] | None = None
    model: list[str] | None = None
    sharing: list[str] | None = None
    seed: list[int] | None = None


class CellEntry(_Strict):
    """One cell of an explicit `cells:` list; an axis left out takes the base config's value."""

    workflow: str | None = None
    task: str | None = None
    model: str | None = None
    sharing: str | None = None
    seed: int | None = None
    set: dict[str, Any] = {}


class Resources(_Strict):
    """What one cell needs: Ray schedules each cell with these; the process pool sizes itself by num_cpus,
    and every executor but `local` gives each cell that many torch threads."""

    num_cpus: int = Field(1, gt=0)
    num_gpus: float = Field(0, ge=0)


class MatrixConfig(_Strict):
    # the run config every cell starts from (relative to the matrix file; default: testbed). It may name axes,
    # e.g. `study/{task}_{workflow}.yaml`: each cell starts from the file its axis labels name
    base: str | None = None
    out: str | None = None  # where cell directories go (default: runs/<matrix file stem>)
    axes: Axes | None = None
    cells: list[CellEntry] | None = None  # instead of axes: an explicit list
    # per axis value: {axis: {value: {dotted.field: value, ...}}}; the key `config` names another base file
    overrides: dict[AxisName, dict[str | int, dict[str, Any]]] = {}
    set: dict[str, Any] = {}  # overrides for every cell
    base_eval: bool = True  # one base-model evaluation per (workflow, task, model, seed)
    resources: Resources = Resources()
    # the analysis plan (relative to the matrix file): registered with the matrix before the first cell runs
    plan: str | None = None
    # cells of the product to leave out, each a partial assignment of axis labels ({workflow: single, sharing: shared})
    exclude: list[dict[AxisName, str | int]] = []


@dataclass(frozen=True)
class Cell:
    name: str
    kind: Literal["train", "base_eval"]
    axes: dict[str, Any]  # axis -> label (the value as written in the matrix)
    config: RunConfig
    base_cell: str | None = None  # the base evaluation of this cell's (workflow, task, model, seed)
    sources: tuple[str, ...] = field(default=())  # where its overrides came from (for error messages)

    @property
    def run_dir(self) -> Path:
        assert self.config.run_dir is not None
        return Path(self.config.run_dir)


@dataclass
class Matrix:
    path: Path
    out: Path
    settings: MatrixConfig
    cells: list[Cell]
    text: str = ""  # the matrix file as read (its sha256 is registered)
    plan: PlanFile | None = None
    extra_set: dict[str, Any] = field(default_factory=dict)  # --set, on top of the file's `set`

    @property
    def train_cells(self) -> list[Cell]:
        return [c for c in self.cells if c.kind == "train"]

    def cell(self, name: str) -> Cell:
        return next(c for c in self.cells if c.name == name)


def label(value: Any) -> str:
    """A file-name-safe label for an axis value: 'Qwen/Qwen3-0.6B' -> 'Qwen3-0.6B', 'pkg.mod:fn' -> 'pkg.mod_fn'."""
    text = str(value).rstrip("/")
    if "/" in text:
        text = text.rsplit("/", 1)[1]
    return re.sub(r"[^A-Za-z0-9._+=-]", "_", text) or "_"


def cell_name(axes: dict[str, Any]) -> str:
    return f"{label(axes['task'])}-{label(axes['workflow'])}-{label(axes['model'])}-{label(axes['sharing'])}-s{axes['seed']}"


def base_cell_name(axes: dict[str, Any]) -> str:
    """base-{task}-{workflow}-{model}-s{seed}: one base evaluation per (workflow, task, model, seed)."""
    return f"{BASE_EVAL_PREFIX}{label(axes['task'])}-{label(axes['workflow'])}-{label(axes['model'])}-s{axes['seed']}"


# ---------------------------------------------------------------------------------------------------------
# Loading


def load_matrix(path: str | Path, *, out: str | Path | None = None, extra_set: dict[str, Any] | None = None) -> Matrix:
    """Read, expand and validate a matrix. `out` and `extra_set` (CLI `--set`, applied after `set:`) override
    the file's. Raises MatrixError naming the file, the axis / field and the value at fault."""
    source = Path(path)
    if not source.is_file():
        raise MatrixError(f"matrix file {source} does not exist")
    text = source.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise MatrixError(yaml_problem(e, source)) from None
    if not isinstance(data, dict):
        raise MatrixError(f"{source}: the top level must be a mapping (base, axes or cells, overrides, set, out)")
    try:
        settings = MatrixConfig.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
            msg = "unknown field (misspelled?)" if err["type"] == "extra_forbidden" else err["msg"]
            got = (
                "" if err["type"] == "extra_forbidden" or isinstance(err["input"], dict) else f" (got {err['input']!r})"
            )
            lines.append(f"{source}: {loc}: {msg}{got}")
        raise MatrixError("invalid matrix:\n  " + "\n  ".join(lines)) from None
    if extra_set:
        settings.set = {**settings.set, **extra_set}
    out_dir = Path(out) if out is not None else Path(settings.out) if settings.out else Path("runs") / source.stem
    cells = expand(settings, source, out_dir)
    plan = _load_plan(settings, source, cells)
    return Matrix(source, out_dir, settings, cells, text, plan, dict(extra_set or {}))


def _load_plan(settings: MatrixConfig, source: Path, cells: list[Cell]) -> PlanFile | None:
    """The matrix's analysis plan, validated, and checked against the arms (sharing labels) and seeds it has."""
    if settings.plan is None:
        return None
    path = Path(settings.plan)
    path = path if path.is_absolute() else source.parent / path
    try:
        plan = load_plan(path)
    except ConfigError as e:
        raise MatrixError(f"{source}: plan: {e}") from None
    train = [c for c in cells if c.kind == "train"]
    problems = check_against_matrix(
        plan.plan, {str(c.axes["sharing"]) for c in train}, {int(c.axes["seed"]) for c in train}
    )
    if problems:
        raise MatrixError(f"{source}: plan {path}: " + "; ".join(problems))
    return plan


def _resolve_config_file(name: str, matrix_path: Path, where: str) -> Path:
    """A base config path: relative to the matrix file first, then the shipped configs directory."""
    p = Path(name)
    for candidate in [p] if p.is_absolute() else [matrix_path.parent / p, CONFIG_DIR / p]:
        if candidate.is_file():
            return candidate
    raise MatrixError(
        f"{matrix_path}: {where}: config file {name!r} not found (looked beside the matrix and in the shipped configs)"
    )


def _axis_points(
    settings: MatrixConfig, source: Path, defaults: dict[str, Any]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(axes labels, cell-level `set`) for every training cell, in matrix order."""
    if settings.axes is not None and settings.cells is not None:
        raise MatrixError(f"{source}: give either `axes` (a cartesian product) or `cells` (an explicit list), not both")
    if settings.cells is not None:
        if not settings.cells:
            raise MatrixError(f"{source}: cells: the list is empty")
        return [
            ({a: (getattr(c, a) if getattr(c, a) is not None else defaults[a]) for a in AXES}, c.set)
            for c in settings.cells
        ]
    axes = settings.axes or Axes()
    values: dict[str, list[Any]] = {}
    for a in AXES:
        given = getattr(axes, a)
        if given is None:
            values[a] = [defaults[a]]
            continue
        if not given:
            raise MatrixError(
                f"{source}: axes.{a}: the axis is empty (list at least one value, or leave it out "
                f"to use the base config's {AXIS_FIELDS[a]})"
            )
        dupes = sorted({str(v) for v in given if given.count(v) > 1})
        if dupes:
            raise MatrixError(f"{source}: axes.{a}: repeated value(s) {dupes}")
        values[a] = list(given)
    return [(dict(zip(AXES, combo, strict=True)), {}) for combo in itertools.product(*(values[a] for a in AXES))]


def _check_axis_value(axis: str, value: Any) -> None:
    """The registry checks of one axis value, so the error names the value rather than a whole cell. A model
    path is not checked here: it belongs to the machine a cell runs on (`cannot_run_here`)."""
    if axis == "workflow":
        get_workflow(str(value))
    elif axis == "task":
        if value not in TASKS:
            raise TASKS.unknown(str(value))
    elif axis == "sharing":
        if value not in ("shared", "isolated", "map"):
            raise ValueError(f"unknown sharing mode {value!r}; known: shared, isolated, map")


def _templated(settings: MatrixConfig) -> bool:
    """`base` names axes (`study/{task}_{workflow}.yaml`): each cell starts from the file its labels name."""
    return settings.base is not None and "{" in settings.base


def _base_file(settings: MatrixConfig, source: Path, labels: dict[str, Any]) -> Path:
    """The run config a cell with these axis labels starts from."""
    if settings.base is None:
        return DEFAULT_CONFIG
    if not _templated(settings):
        return _resolve_config_file(settings.base, source, "base")
    try:
        name = settings.base.format(**{a: labels[a] for a in AXES})
    except (KeyError, IndexError, ValueError) as e:
        raise MatrixError(
            f"{source}: base: {settings.base!r} names an unknown axis ({e}); axes: {list(AXES)}"
        ) from None
    return _resolve_config_file(name, source, "base")


def _axis_defaults(base_file: Path, source: Path) -> dict[str, Any]:
    """The values of the axes a matrix leaves out: the base config's."""
    try:
        base = load_config(base_file, environment=False)
    except ConfigError as e:
        raise MatrixError(f"{source}: base: {e}") from None
    return {
        "workflow": base.workflow.name,
        "task": base.task.name,
        "model": base.model.path,
        "sharing": base.routing.sharing,
        "seed": base.seed,
    }


Point = tuple[dict[str, Any], dict[str, Any]]  # (axis -> label, the cell's own `set`)


def _excluded(settings: MatrixConfig, source: Path, points: list[Point]) -> list[Point]:
    for i, rule in enumerate(settings.exclude):
        if not rule:
            raise MatrixError(f"{source}: exclude[{i}]: an empty rule would leave out every cell")
    kept = [
        (axes, cell_set)
        for axes, cell_set in points
        if not any(all(str(axes[a]) == str(v) for a, v in rule.items()) for rule in settings.exclude)
    ]
    if not kept:
        raise MatrixError(f"{source}: exclude leaves no cell")
    return kept


_AXIS_OF_FIELD = {f: a for a, f in AXIS_FIELDS.items()}


def _check_overrides(settings: MatrixConfig, source: Path, points: list[Point]) -> None:
    """Overrides must name values the matrix uses, and may not set another axis's field or the sweep's own."""
    used = {a: {str(p[a]) for p, _ in points} for a in AXES}
    for axis, by_value in settings.overrides.items():
        for value, fields in by_value.items():
            where = f"overrides.{axis}.{value}"
            if str(value) not in used[axis]:
                raise MatrixError(
                    f"{source}: {where}: {value!r} is not a value of axis {axis} (values: {sorted(used[axis])})"
                )
            for key in fields:
                if key in SWEEP_OWNED:
                    raise MatrixError(
                        f"{source}: {where}: {key} is set by the sweep (one directory per cell under out)"
                    )
                if key in _AXIS_OF_FIELD and _AXIS_OF_FIELD[key] != axis:
                    raise MatrixError(
                        f"{source}: {where}: {key} is axis {_AXIS_OF_FIELD[key]}'s field; "
                        f"set it through axes.{_AXIS_OF_FIELD[key]}"
                    )
                if key == "config" and not isinstance(fields[key], str):
                    raise MatrixError(f"{source}: {where}.config: a config file path, got {fields[key]!r}")


def _check_sets(settings: MatrixConfig, source: Path, points: list[Point]) -> None:
    """`set:` (the matrix's and each cell's) may not set an axis's field, the sweep's own or a base file."""
    for where, fields in [("set", settings.set)] + [(f"cells[{i}].set", s) for i, (_, s) in enumerate(points)]:
        for key in fields:
            if key in _AXIS_OF_FIELD:
                what = f"axis {_AXIS_OF_FIELD[key]}'s field; use axes.{_AXIS_OF_FIELD[key]}"
            elif key in SWEEP_OWNED:
                what = "set by the sweep"
            elif key == "config":
                what = "not a field (base files go in `base`)"
            else:
                continue
            raise MatrixError(f"{source}: {where}: {key} is {what}")


class _PerValue:
    """The matrix's per-axis-value overrides, looked up by the value's label."""

    def __init__(self, settings: MatrixConfig):
        self.by_label: dict[str, dict[str, dict[str, Any]]] = {
            a: {str(v): fields for v, fields in by_value.items()} for a, by_value in settings.overrides.items()
        }

    def __call__(self, axis: str, value: Any) -> dict[str, Any]:
        return self.by_label.get(axis, {}).get(str(value), {})


def _check_axis_values(points: list[Point], per_value: _PerValue, source: Path) -> None:
    """Each axis value once: registry checks on the value the field will get."""
    checked: set[tuple[str, str]] = set()
    for axes, _ in points:
        for a in AXES:
            effective = per_value(a, axes[a]).get(AXIS_FIELDS[a], axes[a])
            if (a, str(effective)) in checked:
                continue
            checked.add((a, str(effective)))
            try:
                _check_axis_value(a, effective)
            except ValueError as e:
                shown = f"{axes[a]!r}" + (f" ({AXIS_FIELDS[a]} {effective!r})" if effective != axes[a] else "")
                raise MatrixError(f"{source}: axes.{a}: bad value {shown}: {e}") from None


def _cell_overrides(
    settings: MatrixConfig, source: Path, point: Point, per_value: _PerValue, cell_base: Path
) -> tuple[dict[str, Any], list[str], Path]:
    """A training cell's overrides in precedence order (`set`, axis values, per-value overrides, the cell's own
    `set`), where they came from, and the config file they apply to."""
    axes, cell_set = point
    overrides: dict[str, Any] = dict(settings.set)
    sources = ["set"] if settings.set else []
    cfg_file = cell_base
    for a in AXES:
        overrides[AXIS_FIELDS[a]] = axes[a]
    for a in AXES:
        ov = dict(per_value(a, axes[a]))
        if ov:
            sources.append(f"overrides.{a}.{axes[a]}")
        if "config" in ov:
            if cfg_file != cell_base:
                raise MatrixError(
                    f"{source}: two axis values of one cell name a config file ({cfg_file} and "
                    f"{ov['config']}, via overrides.{a}.{axes[a]})"
                )
            cfg_file = _resolve_config_file(ov.pop("config"), source, f"overrides.{a}.{axes[a]}.config")
        overrides.update(ov)
    if cell_set:
        sources.append("cells[].set")
    overrides.update(cell_set)
    return overrides, sources, cfg_file


Group = tuple[dict[str, Any], dict[str, Any], tuple[str, ...], Path]  # a base evaluation's axes, overrides, file


def _train_cells(
    settings: MatrixConfig, source: Path, out_dir: Path, points: list[Point], base_file: Path
) -> tuple[list[Cell], dict[str, Group]]:
    """The training cells, and the base evaluation each (workflow, task, model, seed) group gets (by name): the
    settings of the group's first training cell, so it runs exactly the start evaluation that cell would have
    run (the evaluation's sampling seed comes from the run seed and step 0)."""
    per_value = _PerValue(settings)
    _check_axis_values(points, per_value, source)
    cells: list[Cell] = []
    groups: dict[str, Group] = {}
    for axes, cell_set in points:
        cell_base = _base_file(settings, source, axes) if _templated(settings) else base_file
        overrides, sources, cfg_file = _cell_overrides(settings, source, (axes, cell_set), per_value, cell_base)
        name = cell_name(axes)
        overrides["run_dir"] = str(out_dir / name)
        base_name = base_cell_name(axes) if settings.base_eval else None
        if base_name is not None:
            overrides["eval.at_start"] = False  # the group's base evaluation gives this number once
            groups.setdefault(base_name, (axes, overrides, tuple(sources), cfg_file))
        cfg = _validated(cfg_file, overrides, source, name, axes, sources)
        cells.append(Cell(name, "train", dict(axes), cfg, base_name, tuple(sources)))
    names = [c.name for c in cells]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise MatrixError(
            f"{source}: two cells would share a directory: {clash} (axis values whose labels "
            f"coincide, or a repeated entry in cells)"
        )
    return cells, groups


def _base_cells(groups: dict[str, Group], source: Path, out_dir: Path) -> list[Cell]:
    """One base-model evaluation per (workflow, task, model, seed): no training, only the start evaluation."""
    cells = []
    for base_name, (group_axes, group_overrides, group_sources, group_file) in groups.items():
        ov = {
            **group_overrides,
            "run_dir": str(out_dir / base_name),
            "train.steps": 0,
            "eval.at_start": True,
            "eval.at_end": False,
        }
        cfg = _validated(group_file, ov, source, base_name, group_axes, group_sources)
        axes = {a: group_axes[a] for a in ("workflow", "task", "model", "seed")}
        cells.append(Cell(base_name, "base_eval", axes, cfg, None, group_sources))
    return cells


def expand(settings: MatrixConfig, source: Path, out_dir: Path) -> list[Cell]:
    """Every cell of the matrix (base evaluations first), each with a RunConfig checked as far as any machine
    can check it (config/validate.py's `check_definition`); what a machine must provide (device, model path,
    packages) is checked where a cell runs (`cannot_run_here` says what this one lacks)."""
    if _templated(settings):  # the axes' first labels name the file whose values fill the axes left out
        given = settings.axes or Axes()
        base_file = _base_file(settings, source, {a: (getattr(given, a) or [None])[0] for a in AXES})
    else:
        base_file = _base_file(settings, source, {})
    points = _axis_points(settings, source, _axis_defaults(base_file, source))
    points = _excluded(settings, source, points)
    _check_overrides(settings, source, points)
    _check_sets(settings, source, points)
    train_cells, groups = _train_cells(settings, source, out_dir, points, base_file)
    return _base_cells(groups, source, out_dir) + train_cells


def _validated(
    cfg_file: Path,
    overrides: dict[str, Any],
    source: Path,
    name: str,
    axes: dict[str, Any],
    sources: list[str] | tuple[str, ...],
) -> RunConfig:
    try:
        return load_config(cfg_file, overrides, environment=False)
    except ConfigError as e:
        where = ", ".join(f"{a}={axes[a]}" for a in AXES if a in axes)
        via = f"; overrides from {', '.join(sources)}" if sources else ""
        raise MatrixError(f"{source}: cell {name} ({where}{via}): {e}") from None


def cannot_run_here(cell: Cell) -> str | None:
    """Why `cell` cannot run on this machine (its device, model path or a package it needs), or None."""
    try:
        check_environment(cell.config)
    except ConfigError as e:
        return str(e)
    return None


def describe(matrix: Matrix) -> list[str]:
    """One line per cell, for `--dry-run` and logs; a cell this machine cannot run says why (a sweep on Ray runs
    it elsewhere, where it is checked again)."""
    lines = []
    for c in matrix.cells:
        kind = "base eval" if c.kind == "base_eval" else f"{c.config.train.steps} steps"
        problem = cannot_run_here(c)
        lines.append(f"{c.name}  ({kind})" + (f"  cannot run here: {problem}" if problem else ""))
    return lines
