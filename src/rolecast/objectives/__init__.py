"""The GRPO objective as pure tensor functions: advantage estimators (advantages.py) and the clipped
policy-gradient loss with its aggregations (losses.py), in registries, and the output head's log-probs and
entropies that the loss takes (head_logprobs.py, a custom autograd kernel). They import nothing of rolecast but
core; the trainer applies them and the config validation reads their registries."""
