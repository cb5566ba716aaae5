# kforge — run `make help` for the targets.
PYTHON ?= python3
# Installed only when no torch is importable; a torch you already have is never replaced.
TORCH_SPEC ?= torch==2.13.0
# Where that torch comes from: PyTorch's CPU wheels when no NVIDIA GPU is visible (PyPI's default
# build bundles CUDA, several GB a CPU machine never uses), PyPI otherwise or where that index cannot be
# reached. TORCH_INDEX= forces PyPI.
TORCH_INDEX ?= $(shell nvidia-smi -L >/dev/null 2>&1 || echo https://download.pytorch.org/whl/cpu)
PYTEST_ARGS ?=
# litellm otherwise fetches a price list at import (and MLflow's server imports litellm).
export LITELLM_LOCAL_MODEL_COST_MAP := True

.DEFAULT_GOAL := help
.PHONY: help setup test test-gpu

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "} {printf "  make %-12s %s\n", $$1, $$2}'

setup: ## install kforge (editable) with its test extras; installs torch first only if none is importable (CPU wheels where no NVIDIA GPU is visible)
	@$(PYTHON) -c "import torch; print('using torch', torch.__version__)" 2>/dev/null || \
		$(PYTHON) -m pip install "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX) --timeout 30 --retries 1) || \
		$(PYTHON) -m pip install "$(TORCH_SPEC)"
	$(PYTHON) -m pip install -e ".[dev]"

test: ## run the test suite (GPU tests skip themselves where no GPU is visible)
	$(PYTHON) -m pytest $(PYTEST_ARGS)

test-gpu: ## run only the GPU tests (on a machine with an NVIDIA GPU)
	$(PYTHON) -m pytest -m gpu $(PYTEST_ARGS)

DEMO_BACKEND ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo cuda || echo cpu)
DEMO_ARGS ?=
MLFLOW_PORT ?= 5000

MODELS ?= gpt-5
BACKENDS ?= $(DEMO_BACKEND)
LEVELS ?= 1,2,3
ITERATIONS ?=
KERNELBENCH ?=
REPRODUCE_ARGS ?=

.PHONY: demo ui reproduce tables
demo: ## the whole pipeline offline: oracle model (not an LLM), built-in suite, cpu (cuda with a GPU), into MLflow
	$(PYTHON) pipelines/synthesize.py experiment=demo backend=$(DEMO_BACKEND) $(DEMO_ARGS)

ui: ## browse the runs: mlflow ui on ./mlflow.db (http://127.0.0.1:5000; another port: MLFLOW_PORT=5001); prints each experiment's runs table
	@$(PYTHON) -m kforge.tracking.view sqlite:///$(CURDIR)/mlflow.db http://127.0.0.1:$(MLFLOW_PORT)
	$(PYTHON) -m mlflow ui --backend-store-uri sqlite:///$(CURDIR)/mlflow.db --port $(MLFLOW_PORT)

reproduce: ## the paper's ablations (MODELS=gpt-5,anthropic/claude-opus-4-5 BACKENDS=cuda LEVELS=1,2,3 KERNELBENCH=dir), then the tables
	$(PYTHON) pipelines/reproduce.py --models $(MODELS) --backends $(BACKENDS) --levels $(LEVELS) \
		$(if $(ITERATIONS),--iterations $(ITERATIONS)) $(if $(KERNELBENCH),--kernelbench $(KERNELBENCH)) \
		$(if $(REPRODUCE_ARGS),-- $(REPRODUCE_ARGS))

tables: ## rebuild the ablation tables and plots in results/ from ./mlflow.db
	$(PYTHON) pipelines/tables.py
