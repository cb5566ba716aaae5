# kforge — run `make help` for the targets.
PYTHON ?= python3
# Installed only when no torch is importable; a torch you already have is never replaced.
TORCH_SPEC ?= torch==2.13.0
# Where that torch comes from: PyTorch's CPU wheels when no NVIDIA GPU is visible (PyPI's default
# build bundles CUDA, several GB a CPU machine never uses), PyPI otherwise or where that index cannot be
# reached. TORCH_INDEX= forces PyPI.
TORCH_INDEX ?= $(shell nvidia-smi -L >/dev/null 2>&1 || echo https://download.pytorch.org/whl/cpu)
PYTEST_ARGS ?=
# `make test` runs the suite in this many pytest-xdist workers, a test file to each (its module fixtures run once);
# TEST_JOBS=0 runs it in one process.
TEST_JOBS ?= 2
# litellm otherwise fetches a price list at import (and MLflow's server imports litellm).
export LITELLM_LOCAL_MODEL_COST_MAP := True
# The checkout this Makefile is in: `make -f CHECKOUT/Makefile reproduce` from another directory runs this
# checkout's scripts and writes its store (mlflow.db, results/) where it is started, as in the checkout.
KFORGE_ROOT := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))

.DEFAULT_GOAL := help
.PHONY: help setup chromium lint test test-gpu

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "} {printf "  make %-12s %s\n", $$1, $$2}'

setup: ## install kforge (editable) with its test extras; installs torch first only if none is importable (CPU wheels where no NVIDIA GPU is visible)
	@$(PYTHON) -c "import torch; print('using torch', torch.__version__)" 2>/dev/null || \
		$(PYTHON) -m pip install "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX) --timeout 30 --retries 1) || \
		$(PYTHON) -m pip install "$(TORCH_SPEC)"
	$(PYTHON) -m pip install -e ".[dev]"
	@$(MAKE) --no-print-directory chromium

# The browser test (tests/test_mlflow_browser.py) drives Debian's chromium; Playwright downloads no browser.
chromium: ## install Debian's chromium for the browser test where it is missing (as root with apt-get; else says so)
	@if [ -x /usr/bin/chromium ]; then echo "using /usr/bin/chromium for the browser test"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
		|| echo "kforge: chromium could not be installed: tests/test_mlflow_browser.py will skip"; \
	else echo "kforge: no /usr/bin/chromium, and not root with apt-get: tests/test_mlflow_browser.py will skip" \
		"(Debian: sudo apt-get install chromium)"; fi

lint: ## ruff over the project's code (candidate corpora and built-in solutions are data and left as written)
	$(PYTHON) -m ruff check kforge tests benchmarks pipelines scripts

test: lint ## lint, then run the test suite in TEST_JOBS=2 workers (GPU tests skip themselves where no GPU is visible)
	$(PYTHON) -m pytest -n $(TEST_JOBS) --dist loadfile $(PYTEST_ARGS)

test-gpu: ## run only the GPU tests (on a machine with an NVIDIA GPU)
	$(PYTHON) -m pytest -m gpu $(PYTEST_ARGS)

# `make demo backend=opencl` (or DEMO_BACKEND=) picks the backend; by default cuda with a GPU, else cpu.
DEMO_BACKEND ?= $(or $(backend),$(shell nvidia-smi -L >/dev/null 2>&1 && echo cuda || echo cpu))
DEMO_ARGS ?=
# `make demo precision=bf16`: the demo in another precision (fp32, tf32, bf16, fp16; conf/precision/).
precision ?=
MLFLOW_PORT ?= 5000

MODELS ?= gpt-5
BACKENDS ?= $(DEMO_BACKEND)
LEVELS ?= 1,2,3
ITERATIONS ?=
KERNELBENCH ?=
REPRODUCE_ARGS ?=
# QUICK=1: a quick look at every ablation: level 1 only, 2 iterations, no torch.compile reference (its
# compile dominates on a CPU) and a short timing budget per kernel.
QUICK ?=
QUICK_ARGS :=
ifeq ($(QUICK),1)
LEVELS := 1
ITERATIONS := 2
# its own variable: a REPRODUCE_ARGS given on the command line would replace a +=, and drop these
QUICK_ARGS := verify.compile_ref=false verify.timing.budget_s=1
endif

.PHONY: demo ui reproduce tables
demo: ## the whole pipeline offline: oracle model (not an LLM), built-in suite, cpu (cuda with a GPU; backend=opencl|triton|...; precision=bf16), into MLflow
	$(PYTHON) $(KFORGE_ROOT)/pipelines/synthesize.py experiment=demo backend=$(DEMO_BACKEND) $(if $(precision),precision=$(precision)) $(DEMO_ARGS)

ui: ## browse the runs: `kforge ui` on ./mlflow.db (http://127.0.0.1:5000; another port: MLFLOW_PORT=5001); prints each experiment's addresses
	$(PYTHON) -m kforge.cli ui --store $(CURDIR)/mlflow.db --port $(MLFLOW_PORT)

reproduce: ## the paper's ablations (MODELS=gpt-5,anthropic/claude-opus-4-5 BACKENDS=cuda LEVELS=1,2,3 KERNELBENCH=dir; QUICK=1: a quick look), then the tables
	$(PYTHON) $(KFORGE_ROOT)/pipelines/reproduce.py --models $(MODELS) --backends $(BACKENDS) --levels $(LEVELS) \
		$(if $(ITERATIONS),--iterations $(ITERATIONS)) $(if $(KERNELBENCH),--kernelbench $(KERNELBENCH)) \
		$(if $(strip $(QUICK_ARGS) $(REPRODUCE_ARGS)),-- $(QUICK_ARGS) $(REPRODUCE_ARGS))

tables: ## rebuild the ablation tables and plots in results/ from ./mlflow.db
	$(PYTHON) $(KFORGE_ROOT)/pipelines/tables.py
