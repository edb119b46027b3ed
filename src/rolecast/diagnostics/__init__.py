"""Per-role gradient statistics, curves (peak / final / cliff), failure signatures and the early warning."""
