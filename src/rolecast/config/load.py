"""Loading a run config: YAML, command-line overrides, then validation (config/validate.py)."""
