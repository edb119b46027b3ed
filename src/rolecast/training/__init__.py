"""The trainer, one job per module: the loop (grpo.py: session, step, evaluation calls, checkpoints) and what it
calls: optimizer.py (every policy's optimizer, lr schedule and lr clock; the only module that sets an lr, over the
pure schedules of schedule.py); update.py (one policy's update) over its parts old_logprobs.py, loss_step.py,
role_batches.py (the gradient capture), distributed.py and interventions.py, and below them batching.py and
logprobs.py; guard.py (divergence); resume.py (what a checkpoint holds, resume and rollback) over checkpoint.py and
run_dir.py; rollback.py (when and where to roll back); sinks.py (console, metrics.jsonl, TensorBoard / W&B) and
step_metrics.py (the loop's metric names); master_weights.py, sampling.py and interrupt.py."""
