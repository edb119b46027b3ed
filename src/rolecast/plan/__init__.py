"""Registered analysis plans: a typed plan file a sweep matrix names (`schema.py`), and the append-only record of
when a sweep's design was registered and how it was amended (`registration.py`). docs/sweep.md, "Registered
analysis plans"."""
