# Kinetic on Kubernetes: developer entry points. `make help` lists them.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# helm-sdkpy needs Python 3.12+; use pyenv's 3.12 when the machine has one.
PYTHON ?= $(shell for p in $$(ls -d $$HOME/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null) $$(command -v python3.12) python3; do [ -x "$$p" ] || p=$$(command -v $$p); [ -n "$$p" ] && { echo $$p; break; }; done)

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The three packages (client, operator, devcluster) editable, plus the test tools.
$(VENV)/.installed: pyproject.toml client/pyproject.toml operator/pyproject.toml devcluster/pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

.PHONY: venv
venv: $(VENV)/.installed ## Create .venv: client, operator and dev cluster (editable), test tools

.PHONY: prereqs
prereqs: ## Install what a fresh machine lacks: Debian packages, the Kubernetes build (cached)
	@bash scripts/install-prereqs.sh

.PHONY: images
images: prereqs venv ## Build the images (runner, operator, stand-ins) offline; only what changed
	$(VENV)/bin/kinetic local images

.PHONY: cluster-up
cluster-up: prereqs venv ## Start the local cluster (control plane, a kubelet on containerd, images, storage, the chart)
	$(VENV)/bin/kinetic local up

.PHONY: cluster-down
cluster-down: venv ## Stop everything cluster-up started
	$(VENV)/bin/kinetic local down

.PHONY: cluster-status
cluster-status: venv ## Show what is running in the local cluster
	$(VENV)/bin/kinetic local status

.PHONY: crds
crds: venv ## Regenerate crds/*.yaml from the pydantic models
	$(PY) -m kinetic.crdgen crds helm/kinetic/crds

.PHONY: lint
lint: venv ## ruff (lint and format) and mypy with the pydantic plugin
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

.PHONY: unit
unit: venv ## Fast tests that need no cluster
	$(PY) -m pytest tests/unit -q

.PHONY: test
test: cluster-up ## The whole suite: unit tests, then integration tests on the local cluster
	$(PY) -m pytest tests -q

.PHONY: kind-e2e
kind-e2e: venv ## The integration suite on a kind cluster (needs a Docker engine; not on this machine class)
	bash scripts/kind-e2e.sh

.PHONY: demo
demo: cluster-up ## Run the main example on the local cluster
	$(PY) examples/demo.py

# make bench N=300 P=30 CHUNK=10; make bench-scale SCALE_N=10000 SCALE_P=100
N ?= 300
P ?= 30
CHUNK ?= 10
SCALE_N ?= 10000
SCALE_P ?= 100

.PHONY: bench
bench: cluster-up ## Benchmark N tasks, P at once: plain Job vs container, function, chunked batches
	$(PY) bench/run.py --tasks $(N) --parallel $(P) --chunk-size $(CHUNK)

.PHONY: bench-scale
bench-scale: cluster-up ## A SCALE_N-input batch: operator RSS, status size, a probe job's start latency
	$(PY) bench/scale.py --inputs $(SCALE_N) --parallel $(SCALE_P)
