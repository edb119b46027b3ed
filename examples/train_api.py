from rolecast import load_config, train

# a recipe, with two fields changed (any field: the dotted names `--set` takes)
cfg = load_config("configs/testbed.yaml", {"workflow.name": "voting", "train.steps": 3})
result = train(cfg)  # a TrainResult
print(f"run directory: {result.run_dir}")
print(f"policies: {', '.join(result.policies)}")
print(f"held-out accuracy: {result.base_accuracy:.3f} -> {result.final_accuracy:.3f}")
