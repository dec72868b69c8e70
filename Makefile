# The two set-up commands of README.md live here: `make demo` and `make test`.
# Both build their own virtualenv and install what they need on a fresh machine.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# pip takes the CPU build from the machine's local index at this exact version.
TORCH  ?= torch==2.13.0

.PHONY: demo test lint typecheck unit crd system-deps checkov clean mutation

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[dev,local]"
	touch $@

# Debian packages the tests run for real: Prometheus and promtool; Chromium and its chromedriver,
# which open the HTML report headless. Each is installed only where it is missing, with one
# `apt-get update` for all of them.
APT_NEEDED = $(strip \
  $(if $(shell command -v promtool),,prometheus) \
  $(if $(shell command -v chromium),,chromium) \
  $(if $(shell command -v chromedriver),,chromium-driver))
system-deps:
	@if [ -n "$(APT_NEEDED)" ]; then \
	  echo "installing Debian packages '$(APT_NEEDED)' (real Prometheus, headless Chromium for the tests)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(APT_NEEDED) >/dev/null; \
	fi

# checkov scans the chart's manifests in the tests. It pins old versions of packages the project
# uses (packaging, networkx, hatchling...), so it gets a virtualenv of its own.
CHECKOV := $(VENV)/tools/checkov/bin/checkov
$(CHECKOV): | $(BIN)/python
	$(PYTHON) -m venv $(VENV)/tools/checkov
	$(VENV)/tools/checkov/bin/pip install --quiet "checkov==3.3.30"
checkov: $(CHECKOV)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports  # the import contracts in pyproject.toml

typecheck: $(STAMP)
	$(BIN)/mypy core operator sidecar tests bench

unit: $(STAMP) system-deps $(CHECKOV)
	$(BIN)/python -m pytest

test: lint typecheck unit

# Mutation testing of the modules that decide and act (README: "Mutation testing"). Slow, so not
# part of `make test`: MODULES="wire guardrails" for some of them, BUDGET seconds per module, JOBS
# mutants at once (the runner's and the checkpoint's tests wait on Prometheus: JOBS=6 suits them).
MODULES ?=
BUDGET  ?= 900
JOBS    ?= 1
mutation: $(STAMP) system-deps
	$(BIN)/python -m bench.mutation --budget $(BUDGET) --jobs $(JOBS) $(MODULES)

# The CRD is generated from the models; the chart ships the same file (drift tests check both).
crd: $(STAMP)
	$(BIN)/gpuwise crd > crds/trainingjob.yaml
	cp crds/trainingjob.yaml charts/gpuwise/crds/trainingjob.yaml

demo: $(STAMP)
	$(BIN)/python examples/demo.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
