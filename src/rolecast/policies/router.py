"""Which trainable parameters answer each role call: `shared`, `isolated`, or an explicit map."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import nn

from rolecast.core.errors import FieldError

if TYPE_CHECKING:
    from rolecast.config.schema import RoutingSettings

_POLICY_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # also a valid PEFT adapter name (no dots or slashes)
SHARED_POLICY = "shared"


@functools.cache
def _module_dict_attributes() -> frozenset[str]:
    return frozenset(n for n in dir(nn.ModuleDict()) if not n.startswith("_"))


@dataclass(frozen=True)
class Routing:
    """role or agent instance ("generator/1") -> policy id; instance entries win over role entries."""

    table: dict[str, str]

    def __call__(self, role: str, instance: str) -> str:
        return self.table.get(instance) or self.table.get(role) or self.table["*"]

    @property
    def policy_ids(self) -> list[str]:
        return sorted(set(self.table.values()))


def build_routing(
    roles: list[str], sharing: str, mapping: dict[str, str] | None = None, policies: list[str] | None = None
) -> Routing:
    """Check everything a routing needs before a model is loaded; errors name the bad entry.
    `policies`, when given, declares the policy ids that exist: a map naming any other is a typo."""
    if policies is not None and sharing != "map":
        raise ValueError("routing.policies is only used with routing.sharing: map")
    if sharing == "shared":
        if mapping:
            raise ValueError("routing.map is only used with routing.sharing: map")
        return Routing({"*": SHARED_POLICY})
    if sharing == "isolated":
        if mapping:
            raise ValueError("routing.map is only used with routing.sharing: map")
        return Routing({r: r for r in roles})
    if sharing != "map":
        raise ValueError(f"routing.sharing must be shared, isolated or map, got {sharing!r}")
    if not mapping:
        raise ValueError("routing.sharing: map needs routing.map (role or role/i -> policy id)")
    for key, pid in mapping.items():
        role = key.split("/", 1)[0]
        if key != "*" and role not in roles:
            raise ValueError(f"routing.map: {key!r} is not a role of this workflow; roles: {roles}")
        if "/" in key and not key.split("/", 1)[1].isdigit():
            raise ValueError(f"routing.map: instance key {key!r} must look like role/<index>")
        if policies is not None and pid not in policies:
            raise ValueError(
                f"routing.map: policy {pid!r} for {key!r} does not exist; routing.policies declares {sorted(policies)}"
            )
        if not _POLICY_ID.match(str(pid)) or str(pid) in "lora_":
            # PEFT stores adapters under "lora_A.<name>" and finds its own modules by the "lora_" prefix in
            # names: a name inside "lora_" collides with that prefix
            raise ValueError(
                f"routing.map: policy id {pid!r} for {key!r} must be an identifier (letters, digits, _) "
                f"that is not part of 'lora_'"
            )
        if str(pid) in _module_dict_attributes():
            # PEFT keeps each adapter as a key of torch ModuleDicts, which refuse keys that name their attributes
            raise ValueError(
                f"routing.map: policy id {pid!r} for {key!r} is reserved (a torch ModuleDict attribute); "
                f"choose another name"
            )
    # An instance entry alone is not enough: a workflow may run more instances than the map names.
    missing = [r for r in roles if r not in mapping and "*" not in mapping]
    if missing:
        raise ValueError(f"routing.map: role(s) {missing} have no role-level policy; add them or a '*' default")
    return Routing(dict(mapping))


def routing_for(roles: list[str], settings: RoutingSettings) -> Routing:
    """The routing a run's `routing` settings describe over its workflow's `roles`, or FieldError("routing", ...)
    naming what is wrong. Config validation builds it to check it and the runtime to use it: one call."""
    try:
        return build_routing(roles, settings.sharing, settings.map, settings.policies)
    except ValueError as e:
        raise FieldError("routing", str(e)) from None
