"""The trainer, one job per module: the loop (grpo.py: session, step, evaluation calls, checkpoints) and what it
calls: update.py (one policy's update) over batching.py, logprobs.py, losses.py and role_batches.py; advantages.py;
guard.py (divergence); schedule.py (lr); resume.py (what a checkpoint holds, resume and rollback) over checkpoint.py
and run_dir.py; sinks.py (console, metrics.jsonl, TensorBoard / W&B) and step_metrics.py (the loop's metric names);
interventions.py, rollback.py, distributed.py, master_weights.py, sampling.py and interrupt.py."""
