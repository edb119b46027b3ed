"""What distinguishes the runs of a report, and which of them a comparison may pair.

A sweep's cells are distinguished by its matrix's axes (workflow, task, model, sharing, seed) and, should they
differ, their step counts: the matrix pairs the cells that share every axis but the compared one (sharing) by
design, whatever overrides it applies per sharing mode. A directory of ad-hoc runs has no design: its runs are
distinguished by the fields of their config.yaml that differ, and two runs are paired only when their configs
are the same in every field but sharing (same seed, same steps, same lr, same evaluation...).

Fields that differ only between workflows (a workflow's own options and defaults) are not counted: the workflow
already tells those runs apart. Bookkeeping fields that do not change what is trained or measured (where the run
is written, logging, checkpoint cadence, threads, devices) are never counted."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

AXES = ("workflow", "task", "model", "sharing", "seed")
GROUP_AXES = ("workflow", "task", "model")  # a figure, a comparison: one (workflow, task, model)
COMPARED = "sharing"
SEED = "seed"
STEPS = "train.steps"
# config.yaml fields that say where and how a run was written, not what it trained or measured
BOOKKEEPING = (
    "run_dir",
    "threads",
    "logging.",
    "checkpoint.",
    "model.device",
    "rollout.decode_threads",
    "rollout.max_batch",
)
# config fields the axes already name
AXIS_FIELDS = {"workflow.name": "workflow", "task.name": "task", "model.path": "model", "routing.sharing": "sharing"}


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'train': {'lr': 1e-4}} -> {'train.lr': 1e-4}; lists become tuples (hashable)."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{key}."))
        else:
            out[key] = tuple(v) if isinstance(v, list) else v
    return out


def config_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config's fields that can distinguish runs: flattened, without bookkeeping, the axes' own fields
    and the seed."""
    return {
        k: v
        for k, v in flatten(config).items()
        if k not in AXIS_FIELDS and k != SEED and not any(k == b or k.startswith(b) for b in BOOKKEEPING)
    }


def _short_names(fields: Sequence[str]) -> dict[str, str]:
    """A field's last part when no other field shares it ("train.lr" -> "lr"), else its whole name."""
    leaves: dict[str, int] = defaultdict(int)
    for f in fields:
        leaves[f.rsplit(".", 1)[-1]] += 1
    return {f: f.rsplit(".", 1)[-1] if leaves[f.rsplit(".", 1)[-1]] == 1 else f for f in fields}


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, tuple):
        return ",".join(map(fmt, v))
    return str(v)


@dataclass
class Design:
    """The fields that tell a report's runs apart (display order: axes, then config fields, then the seed),
    their short names, the config fields that differ within each (workflow, task, model), and the axes that are
    the same in every run."""

    varying: list[str]
    short: dict[str, str]
    same: dict[str, Any] = field(default_factory=dict)
    by_group: dict[tuple[str, ...], list[str]] = field(default_factory=dict)

    @property
    def config_varying(self) -> list[str]:
        return [f for f in self.varying if f not in AXES]

    def group_fields(self, fields: Mapping[str, Any]) -> list[str]:
        """The config fields that tell apart the runs of this run's (workflow, task, model)."""
        return self.by_group.get(group_of(fields), [])


def group_of(fields: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(fmt(fields.get(a)) for a in GROUP_AXES)


def design(fields_of: Iterable[Mapping[str, Any]]) -> Design:
    """The design of these runs (each given by its fields: the axes, and config fields)."""
    runs = list(fields_of)
    varying_axes = [a for a in AXES if len({fmt(r.get(a)) for r in runs}) > 1]
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[group_of(r)].append(r)
    names = sorted({k for r in runs for k in r if k not in AXES})
    # a config field distinguishes runs when it differs among runs of one (workflow, task, model); runs without
    # a config (a pending cell) do not count
    by_group = {
        g: [f for f in names if len({fmt(r[f]) for r in members if f in r}) > 1] for g, members in groups.items()
    }
    config_varying = [f for f in names if any(f in fs for fs in by_group.values())]
    order = [a for a in varying_axes if a != SEED] + config_varying + ([SEED] if SEED in varying_axes else [])
    short = {a: a for a in AXES} | _short_names(config_varying)
    same = {a: runs[0].get(a) for a in AXES if a not in varying_axes and runs and runs[0].get(a) is not None}
    return Design(order, short, same, by_group)


def describe(fields: Mapping[str, Any], names: Sequence[str], d: Design) -> str:
    """'steps=3 lr=0.0003' for the given config fields."""
    return " ".join(f"{d.short[f]}={fmt(fields.get(f))}" for f in names)


def label(fields: Mapping[str, Any], d: Design) -> str:
    """A row's name: the varying task/model ("testbed-large/"), workflow-sharing, the seed when not 0 ("-s1"),
    then the config fields that differ ("steps=12 lr=0.0003")."""
    text = "-".join(str(fields[a]) for a in ("workflow", "sharing") if fields.get(a) is not None)
    if fields.get(SEED) not in (None, 0):
        text += f"-s{fields[SEED]}"
    prefix = [str(fields.get(a)) for a in ("task", "model") if a in d.varying]
    if prefix:
        text = "/".join(prefix) + f"/{text}"
    extra = describe(fields, d.group_fields(fields), d)
    return f"{text} {extra}" if extra else text


def arm(fields: Mapping[str, Any], d: Design) -> str:
    """What a curve of one (workflow, task, model) figure is: the sharing mode and the config fields that
    differ, without the seed (seeds of one arm are averaged)."""
    extra = describe(fields, d.group_fields(fields), d)
    mode = fmt(fields.get(COMPARED))
    return f"{mode} {extra}" if extra else mode


def condition(fields: Mapping[str, Any], d: Design) -> tuple[str, ...]:
    """Everything a paired comparison holds fixed: the group's axes and every varying config field (the sharing
    mode and the seed are what vary within it)."""
    return group_of(fields) + tuple(fmt(fields.get(f)) for f in d.group_fields(fields))


def differences(a: Mapping[str, Any], b: Mapping[str, Any], d: Design) -> list[str]:
    """'steps 3 vs 12' for each varying config field in which two runs differ."""
    names = d.group_fields(a)
    return [f"{d.short[f]} {fmt(a.get(f))} vs {fmt(b.get(f))}" for f in names if fmt(a.get(f)) != fmt(b.get(f))]
