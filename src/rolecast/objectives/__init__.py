"""The GRPO objective as pure tensor functions in registries: advantage estimators (advantages.py) and the
clipped policy-gradient loss with its aggregations (losses.py). The trainer applies them; the config validation
reads their registries, so they sit below both."""
