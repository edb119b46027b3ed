"""Policies: loading models, LoRA adapters or full copies per policy id, and the role router."""

from rolecast.policies.models import PolicySet, load_model, load_tokenizer, resolve_model_path
from rolecast.policies.router import Routing, build_routing

__all__ = ["PolicySet", "Routing", "build_routing", "load_model", "load_tokenizer", "resolve_model_path"]
