"""What every layer uses and that imports nothing of rolecast above it: the episode data model, errors, devices,
the registry and loader, metric keys and the run-directory layout (docs/architecture.md)."""
