"""Training math: advantage estimators, policy losses, LR schedules and atomic checkpoints."""
