"""Role prompt templates as data files, one YAML file per task family (testbed, math, code).

Each top-level key is a prompt name (``solve``, ``refine``, ``evaluate``, ``aggregate``,
``orchestrate``, ``work``, ``synthesize``). Its value maps chat roles (``system``, ``user``) to Jinja
templates. A workflow asks for a prompt by name; a user overrides any entry with their own YAML file
(``task.prompts`` in the config), which is merged over the shipped one.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import yaml

from rolecast.core.errors import PromptFileError, yaml_problem
from rolecast.core.text import last_boxed

PROMPT_DIR = Path(__file__).parent
CHAT_ROLES = ("system", "user")
_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)


def final_answer(text: str) -> str:
    """`{{ s | final_answer }}` in a template: a solution's last `\\boxed{...}` (as `\\boxed{X}`), else its last
    fenced block as written (a code worker's program without the derivation before it), else the whole text
    (an unfinished answer), for a role that should read answers, not working."""
    found = last_boxed(text)
    if found is not None:
        return f"\\boxed{{{found}}}"
    # Fences pair up in order, so the pieces between them at odd positions are blocks; the last closed one is
    # the last odd piece with a piece after it (a split, linear in the text whatever a completion holds).
    pieces = text.split("```")
    last = len(pieces) - 2 if len(pieces) % 2 == 1 else len(pieces) - 3
    return f"```{pieces[last]}```" if last >= 1 and "\n" in pieces[last] else text


_ENV.filters["final_answer"] = final_answer


def families() -> list[str]:  # the top-level files only: prompts/study/ holds override files
    return sorted(p.stem for p in PROMPT_DIR.glob("*.yaml"))


def _load_yaml(path: Path) -> dict[str, dict[str, str]]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ValueError(yaml_problem(e, path)) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of prompt names to templates")
    for name, entry in data.items():
        if not isinstance(entry, dict) or not entry:
            raise ValueError(f"{path}: prompt {name!r} must map chat roles to templates")
        bad = set(entry) - set(CHAT_ROLES)
        if bad:
            raise ValueError(f"{path}: prompt {name!r} has unknown chat role(s) {sorted(bad)}; allowed: {CHAT_ROLES}")
        if "user" not in entry:
            raise ValueError(f"{path}: prompt {name!r} needs a 'user' template")
    return data


def _override_path(override: str) -> Path:
    # a path relative to the shipped prompts (e.g. "study/math.yaml") works from any directory
    src = Path(override) if Path(override).exists() or not (PROMPT_DIR / override).exists() else PROMPT_DIR / override
    if not src.exists():
        raise ValueError(f"task.prompts: {override} does not exist (neither as given nor under {PROMPT_DIR.name}/)")
    return src


@cache
def _compiled(family: str, override: str | None) -> dict[str, dict[str, jinja2.Template]]:
    path = PROMPT_DIR / f"{family}.yaml"
    if not path.exists():
        raise ValueError(f"no prompt family {family!r}; shipped families: {families()}")
    entries = _load_yaml(path)
    if override:
        entries = {**entries, **_load_yaml(_override_path(override))}
    return {name: {role: _ENV.from_string(str(t)) for role, t in entry.items()} for name, entry in entries.items()}


class PromptBook:
    """The prompts of one task family, optionally overridden by a user file."""

    def __init__(self, family: str, override: str | Path | None = None):
        self.family = family
        self._templates = _compiled(family, str(override) if override else None)
        # where the prompts come from: the shipped file, then the override merged over it
        self.files = [PROMPT_DIR / f"{family}.yaml"] + ([_override_path(str(override))] if override else [])

    def describe_files(self) -> str:
        """The prompt files, e.g. "src/rolecast/prompts/math.yaml and my_prompts.yaml" (relative to the working
        directory when they are under it)."""
        names = []
        for f in self.files:
            try:
                names.append(str(f.resolve().relative_to(Path.cwd())))
            except ValueError:
                names.append(str(f))
        return " and ".join(names)

    def names(self) -> set[str]:
        return set(self._templates)

    def has(self, name: str) -> bool:
        return name in self._templates

    def render(self, name: str, **variables: Any) -> list[dict[str, str]]:
        """Chat messages for prompt `name`, ready for the tokenizer's chat template."""
        if name not in self._templates:
            raise PromptFileError(
                f"{self.describe_files()}: no prompt {name!r}; the prompts are {sorted(self._templates)}"
            )
        try:
            return [
                {"role": role, "content": tmpl.render(**variables).strip()}
                for role, tmpl in sorted(self._templates[name].items(), key=lambda kv: CHAT_ROLES.index(kv[0]))
            ]
        except jinja2.UndefinedError as e:
            raise KeyError(f"prompt {self.family}/{name}: {e.message}") from e
