"""Reporting: console output and optional metric sinks (TensorBoard, Weights & Biases)."""
