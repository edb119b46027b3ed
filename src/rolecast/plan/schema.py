"""An analysis plan: what an experiment decided before its first run (docs/sweep.md, "Registered analysis
plans"). A YAML file a sweep matrix names (`plan: lab_plan.yaml`), read into a typed `Plan` and validated with
errors naming the file and the field.

    title: Lab II pilot
    question: where does the study's cliff (a rise, then a terminal fall) happen in a third of the runs of an arm?
    arms: [shared, isolated, isolated-roleclock]     # the matrix's sharing labels the analysis reads
    reference_arm: shared
    cliff: {alpha: 0.05, min_points: 2, min_drop: 0.02, gain_alpha: 0.05, decline_alpha: 0.05,
            counts_as_cliff: [fall_after_gain]}
    seeds: {fit: [0, 1, 2, 3, 4], held_out: [5, 6, 7, 8, 9]}
    predictors:
      use: [{name: probe_ll_change}, {name: head_update_ratio}, {name: entropy_slope, subject: any}]
      thresholds: {rule: max_recall_within_false_alarms, max_false_alarms_per_calm_run: 0.1}
      combined: any
      warn_by: before_cliff_point
      calm_runs: no_fall
      targets: {recall: 0.8, max_false_alarms_per_calm_run: 0.1, min_lead_fraction: 0.1}
    decisions:
      - {name: isolated_falls_more, claim: "Isolated's rise-then-fall rate exceeds Shared's",
         measure: cliff_rate, compare: [isolated, shared], test: mcnemar_exact, alternative: greater, alpha: 0.05}
    amendments:                                       # appended later, never edited: the date, the reason, the fields
      - {date: 2026-12-06, reason: "...", fields: [cliff.min_drop]}

The plan's rules are every top-level field but `title`, `question`, `notes` and `amendments` (`RULE_FIELDS`):
what a table rests on. Pure: nothing here touches the disk but `load_plan`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rolecast.core.errors import ConfigError, yaml_problem
from rolecast.core.registry import is_reference, load_callable
from rolecast.diagnostics.curves import CliffType
from rolecast.diagnostics.precursors import PRECURSORS

PLAN_VERSION = 1
DESCRIPTIVE_FIELDS = ("version", "title", "question", "notes", "amendments")  # changing them changes no rule


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _unique(values: list[Any], what: str) -> list[Any]:
    repeated = sorted({str(v) for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"{what}: repeated {repeated}")
    return values


def _study_cliff() -> list[CliffType]:
    return ["fall_after_gain"]


class CliffRule(_Strict):
    """The cliff definition (docs/analysis.md): the terminal-fall rule (`alpha`, `min_points`, `min_drop`), the
    type tests against the base (`gain_alpha`, `decline_alpha`), and which types count as the cliff in every
    count, test and precursor label of the analysis."""

    alpha: float = Field(0.05, gt=0, lt=1)
    min_points: int = Field(2, ge=1)
    min_drop: float = Field(0.02, ge=0, lt=1)
    gain_alpha: float = Field(0.05, gt=0, lt=1)
    decline_alpha: float = Field(0.05, gt=0, lt=1)
    counts_as_cliff: list[CliffType] = Field(default_factory=_study_cliff, min_length=1)

    @field_validator("counts_as_cliff")
    @classmethod
    def _types(cls, v: list[CliffType]) -> list[CliffType]:
        if "none" in v:
            raise ValueError("'none' is the absence of a fall, not a cliff type")
        return _unique(v, "cliff types")

    def curve_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of `diagnostics.curves.summarize_curve` this rule sets."""
        return self.model_dump(exclude={"counts_as_cliff"})


class SeedSplit(_Strict):
    """Which seeds' runs fit the precursors' thresholds and which measure them (disjoint)."""

    fit: list[int] = []
    held_out: list[int] = []

    @model_validator(mode="after")
    def _disjoint(self) -> SeedSplit:
        _unique(self.fit, "fit")
        _unique(self.held_out, "held_out")
        both = sorted(set(self.fit) & set(self.held_out))
        if both:
            raise ValueError(f"seeds {both} are in both fit and held_out")
        return self


class ThresholdRule(_Strict):
    """How a precursor's threshold is fitted on the `fit` seeds (diagnostics/precursors.fit_threshold)."""

    rule: Literal["max_recall_within_false_alarms"] = "max_recall_within_false_alarms"
    max_false_alarms_per_calm_run: float = Field(0.1, ge=0)


class PredictorSpec(_Strict):
    """One precursor: a name in diagnostics/precursors.PRECURSORS or a 'module:function' / 'file.py:function'
    over metric rows (then `direction` is required); `subject`: a policy or role, or "any" (the run fires when
    any subject does)."""

    name: str = Field(min_length=1)
    subject: str = "any"
    direction: Literal["above", "below"] | None = None

    @model_validator(mode="after")
    def _known(self) -> PredictorSpec:
        if is_reference(self.name):
            if self.direction is None:
                raise ValueError(f"{self.name}: a precursor given as a function needs its direction (above|below)")
            load_callable(self.name, "name")
        elif self.name not in PRECURSORS:
            raise PRECURSORS.unknown(self.name, references=True)
        return self


class Targets(_Strict):
    """What a precursor must reach on the held-out seeds for the plan to call it a warning."""

    recall: float = Field(0.8, ge=0, le=1)
    max_false_alarms_per_calm_run: float = Field(0.1, ge=0)
    min_lead_fraction: float = Field(0.1, ge=0, le=1)


class Predictors(_Strict):
    use: list[PredictorSpec] = []
    thresholds: ThresholdRule = ThresholdRule()
    combined: Literal["any", "none"] = "any"  # the combined rule: alarm when any predictor does
    # a warning counts when it fires strictly before the cliff's first evaluated point, or before the last
    # evaluation that was still in the band (the fall may have begun in between)
    warn_by: Literal["before_cliff_point", "before_last_good_point"] = "before_cliff_point"
    # calm runs: runs with no fall of any type, or every run whose type is not counted as a cliff
    calm_runs: Literal["no_fall", "not_a_counted_cliff"] = "no_fall"
    targets: Targets = Targets()

    @field_validator("use")
    @classmethod
    def _unique_names(cls, v: list[PredictorSpec]) -> list[PredictorSpec]:
        _unique([(p.name, p.subject) for p in v], "predictors (name, subject)")
        return v


class Decision(_Strict):
    """A decision rule: the claim, and the test that must reject at `alpha` for the write-up to make it.
    `compare: [b, a]` tests arm b against arm a. cliff_rate (the share of runs whose type the plan counts as a
    cliff): fisher_exact (independent runs) or mcnemar_exact (runs paired by seed); final, peak, gain:
    paired_t over seeds."""

    name: str = Field(min_length=1)
    claim: str = Field(min_length=1)
    measure: Literal["cliff_rate", "final", "peak", "gain"]
    compare: list[str] = Field(min_length=2, max_length=2)
    test: Literal["fisher_exact", "mcnemar_exact", "paired_t"]
    alternative: Literal["greater", "less", "two-sided"] = "greater"
    alpha: float = Field(0.05, gt=0, lt=1)

    @model_validator(mode="after")
    def _test_fits_measure(self) -> Decision:
        counts = self.measure == "cliff_rate"
        if counts != (self.test in ("fisher_exact", "mcnemar_exact")):
            want = "fisher_exact or mcnemar_exact" if counts else "paired_t"
            raise ValueError(f"measure {self.measure} is tested with {want}, not {self.test}")
        if self.compare[0] == self.compare[1]:
            raise ValueError(f"compare: an arm against itself ({self.compare[0]})")
        return self


class Amendment(_Strict):
    """A change to the plan after it was registered, written by the user: when it was decided, why, and which
    fields it changes. The registration records when the sweep first saw it and what changed."""

    date: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    fields: list[str] = []

    @field_validator("date", mode="before")
    @classmethod
    def _date_text(cls, v: Any) -> Any:
        return str(v) if v is not None and not isinstance(v, str) else v  # YAML reads 2026-12-06 as a date

    @field_validator("fields")
    @classmethod
    def _plan_fields(cls, v: list[str]) -> list[str]:
        for path in v:
            if not is_plan_field(path):
                raise ValueError(f"{path!r} is not a field of the plan (e.g. cliff.min_drop, seeds.fit, decisions)")
        return v


class Plan(_Strict):
    version: Literal[1] = 1
    title: str = Field(min_length=1)
    question: str = ""
    arms: list[str] = []  # the matrix's sharing labels the analysis reads; [] = every arm
    reference_arm: str | None = None
    cliff: CliffRule = CliffRule()
    seeds: SeedSplit = SeedSplit()
    predictors: Predictors = Predictors()
    decisions: list[Decision] = []
    amendments: list[Amendment] = []
    notes: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> Plan:
        _unique(self.arms, "arms")
        _unique([d.name for d in self.decisions], "decision names")
        if self.reference_arm is not None and self.arms and self.reference_arm not in self.arms:
            raise ValueError(f"reference_arm {self.reference_arm!r} is not among arms {self.arms}")
        if self.arms:
            for d in self.decisions:
                stray = [a for a in d.compare if a not in self.arms]
                if stray:
                    raise ValueError(f"decision {d.name}: compare names {stray}, not among arms {self.arms}")
        return self


RULE_FIELDS = tuple(f for f in Plan.model_fields if f not in DESCRIPTIVE_FIELDS)


def is_plan_field(path: str) -> bool:
    """Whether a dotted path names a field of the plan (cliff, cliff.min_drop, predictors.targets.recall)."""
    model: Any = Plan
    for part in path.split("."):
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            return False
        annotation = fields[part].annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return True


def is_rule_field(path: str) -> bool:
    return path.split(".", 1)[0] in RULE_FIELDS


@dataclass(frozen=True)
class PlanFile:
    """A plan as read: its path, its text (what the registration keeps), the text's sha256, and the plan."""

    path: Path
    text: str
    sha256: str
    plan: Plan


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def parse_plan(text: str, source: str) -> Plan:
    """The plan a YAML text holds; ConfigError naming `source` and each field at fault."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(yaml_problem(e, source)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: an analysis plan is a mapping (title, cliff, seeds, predictors, decisions, ...)")
    try:
        return Plan.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
            msg = "unknown field (misspelled?)" if err["type"] == "extra_forbidden" else err["msg"]
            msg = msg.removeprefix("Value error, ")
            scalar = err["type"] != "extra_forbidden" and not isinstance(err["input"], (dict, list))
            lines.append(f"{source}: {loc}: {msg}" + (f" (got {err['input']!r})" if scalar else ""))
        raise ConfigError("invalid analysis plan:\n  " + "\n  ".join(lines)) from None


def load_plan(path: str | Path) -> PlanFile:
    """Read and validate a plan file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"analysis plan {p} does not exist")
    text = p.read_text(encoding="utf-8")
    return PlanFile(p, text, sha256_text(text), parse_plan(text, str(p)))


def check_against_matrix(plan: Plan, arms: set[str], seeds: set[int]) -> list[str]:
    """What the plan names that the matrix does not have: arms (sharing labels), seeds. Each a message naming the
    plan's field."""
    problems = []
    known = sorted(arms)
    for where, names in (
        ("arms", plan.arms),
        ("reference_arm", [plan.reference_arm] if plan.reference_arm else []),
        *((f"decisions.{d.name}.compare", d.compare) for d in plan.decisions),
    ):
        stray = [a for a in names if a not in arms]
        if stray:
            problems.append(f"{where}: {stray} not a sharing label of the matrix ({known})")
    for where, values in (("seeds.fit", plan.seeds.fit), ("seeds.held_out", plan.seeds.held_out)):
        stray_seeds = [s for s in values if s not in seeds]
        if stray_seeds:
            problems.append(f"{where}: seed(s) {stray_seeds} not in the matrix (seeds: {sorted(seeds)})")
    return problems
