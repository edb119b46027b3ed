"""The checks of a run config against what it names (tasks, prompts, routing, devices, paths, packages): run by
`load_config` and before a run is assembled; the schema itself touches no disk or device."""
