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
	$(PY) -m kinetic.model.crdgen crds helm/kinetic/crds

.PHONY: lint
lint: venv ## ruff, mypy, the rooms' import contracts (pure logic, no cycles) and the size bounds
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/python scripts/check_bounds.py

# `make audit`: pip-audit (PyPI's advisories) over two requirement sets of the three
# packages, written by the script below into $(AUDIT_DIR):
#   installed.txt  every distribution the three need, at the version this venv holds
#                  (what the images and the tests run);
#   floors.txt     each dependency the pyproject files name, at its lowest allowed version
#                  (what a user's resolver may pick): a finding here means a floor to raise.
# Findings no code path of ours reaches are ignored below, each with its reason; a
# finding in what the webhook (aiohttp, via Kopf) or the client reaches raises a floor
# instead. Dependencies the service cannot look up are listed and skipped, not failed;
# AUDIT_STRICT=1 fails on them too.
AUDIT_DIR := $(VENV)/audit
AUDIT_IGNORE :=
# cryptography (the operator's and the dev cluster's floor, 44.0.1): we only generate
# P-256 and RSA keys and sign our own certificates with it. TLS peers are verified by
# Python's ssl module, never by cryptography's X.509 verifier, and nothing decrypts.
# Subgroup attack on binary (SECT) curves: we use none, and do no key agreement.
AUDIT_IGNORE += CVE-2026-26007
# Name constraints not applied to peer names (wildcards): in cryptography.x509.verification.
AUDIT_IGNORE += CVE-2026-34073
# Wildcard DNS names escaping permittedSubtrees: the same verifier.
AUDIT_IGNORE += CVE-2026-69248
# A Bleichenbacher oracle in PKCS#7 EnvelopedData decryption, which we never call.
AUDIT_IGNORE += CVE-2026-69247

define AUDIT_SETS_PY
import sys, tomllib
from importlib import metadata
from pathlib import Path
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ours = {"kinetic": "client", "kinetic-operator": "operator", "kinetic-dev": "devcluster"}
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)

def wanted(req, extras=("",)):
    return req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras)

installed, todo = {}, [(name, ("",)) for name in ours]
while todo:
    name, extras = todo.pop()
    dist = metadata.distribution(name)
    key = canonicalize_name(dist.metadata["Name"])
    if key in installed:
        continue
    installed[key] = dist.version
    for line in dist.requires or []:
        req = Requirement(line)
        if wanted(req, extras):
            todo.append((req.name, tuple(req.extras) or ("",)))

floors = {}
for project in ours.values():
    for line in tomllib.loads(Path(project, "pyproject.toml").read_text())["project"]["dependencies"]:
        req = Requirement(line)
        key = canonicalize_name(req.name)
        if key in ours or not wanted(req):
            continue
        lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
        if not lows:
            sys.exit(f"{project}/pyproject.toml: {line!r} has no floor to audit")
        floors[key] = min(floors.get(key, max(lows)), max(lows))

for name, pins in (("installed", installed), ("floors", floors)):
    text = "".join(f"{k}=={v}\n" for k, v in sorted(pins.items()) if k not in ours)
    (out / f"{name}.txt").write_text(text)
    print(f"{out / name}.txt: {len(text.splitlines())} pinned")
endef
export AUDIT_SETS_PY

.PHONY: audit
audit: venv ## pip-audit the three packages' dependencies: as installed, and at their floors
	$(PY) -c "$$AUDIT_SETS_PY" $(AUDIT_DIR)
	@rc=0; for set in installed floors; do \
	  echo "==> pip-audit: $$set"; \
	  $(VENV)/bin/pip-audit --progress-spinner off --disable-pip --no-deps \
	    -r $(AUDIT_DIR)/$$set.txt $(foreach id,$(AUDIT_IGNORE),--ignore-vuln $(id)) \
	    $(if $(AUDIT_STRICT),--strict) 2>&1 | tee $(AUDIT_DIR)/$$set.out; \
	  [ "$${PIPESTATUS[0]}" = 0 ] || rc=1; \
	  total=$$(wc -l < $(AUDIT_DIR)/$$set.txt); \
	  skipped=$$(grep -c "could not be audited" $(AUDIT_DIR)/$$set.out || true); \
	  [ "$$skipped" = 0 ] || echo "==> $$set: $$skipped of $$total dependencies were not audited" \
	    "(the advisory service had no answer for them); only the rest were checked"; \
	done; exit $$rc

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

# make bench N=300 P=30 CHUNKS=5,10,20; make bench-scale SCALE_N=10000 SCALE_P=30
N ?= 300
P ?= 30
CHUNKS ?= 5,10,20
SCALE_N ?= 10000
SCALE_P ?= 30
SCALE_BASELINE_N ?= 1000
DASH_SOAK ?= 600

.PHONY: bench
bench: cluster-up ## Benchmark N tasks, P at once: plain Job vs container, function (sized units), per-input, chunk-K, skewed and gang batches
	$(PY) bench/run.py --tasks $(N) --parallel $(P) --chunk-sizes $(CHUNKS)

.PHONY: bench-failover
bench-failover: cluster-up ## Operator failover: one replica vs two with leader election (SIGKILL, force-delete, rollout)
	$(PY) bench/failover.py

.PHONY: bench-scale
# Each step runs even when one before it missed a target; the target fails if any step did.
bench-scale: cluster-up ## SCALE_N-input batches, container then function: operator RSS, status size, writes, a probe job's start latency (first beside a plain Job)
	@status=0; \
	$(PY) bench/scale.py --plain-job --inputs $(SCALE_BASELINE_N) --parallel $(SCALE_P) || status=1; \
	$(PY) bench/scale.py --inputs $(SCALE_N) --parallel $(SCALE_P) || status=1; \
	$(PY) bench/scale.py --function --inputs $(SCALE_N) --parallel $(SCALE_P) || status=1; \
	exit $$status

.PHONY: bench-scale-function
bench-scale-function: cluster-up ## The function batch of bench-scale alone: SCALE_N inputs of 0.2 s, the default chunk size
	$(PY) bench/scale.py --function --inputs $(SCALE_N) --parallel $(SCALE_P)

.PHONY: bench-dashboard
bench-dashboard: cluster-up ## `kinetic dashboard` on a SCALE_N-input batch: page loads, table pages, server RSS over DASH_SOAK s
	$(PY) bench/dashboard.py --inputs $(SCALE_N) --soak $(DASH_SOAK)
