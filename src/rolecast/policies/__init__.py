"""Policies: loading models, LoRA adapters or full copies per policy id (models.py), the role router (router.py) and
the names of the shipped models (shipped.py). Import from those modules: this package root stays empty so that
reading the shipped names (the command line's parser) does not load torch and transformers."""
