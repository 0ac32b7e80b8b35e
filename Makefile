# costguard developer entry points. Everything runs from the project virtualenv .venv,
# created on first use and re-installed only when pyproject.toml changes.
#
#   make test       install, make sure PostgreSQL, Chromium, Prometheus and jemalloc exist, run the whole suite
#   make test-fast  the same without @pytest.mark.slow tests
#   make lint       ruff + mypy (strict)
#   make demo       the simulated-fleet demo
#   make bench      run the benchmarks and rewrite BENCHMARKS.md
#   make mutation   mutation-test the safety core and rewrite MUTATION.md (slow: ~1 h on 2 cores)
#   make mutation-sample  15 seeded mutants per gated safety-core module, as CI runs them
#   make dist       build the wheel and the sdist into dist/ (distribution costguard-gpu)
#   make image      build the daemon and agent images with the tags the Helm chart expects
#   make clean      remove .venv, caches and build output

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.costguard-installed
PYTEST_ARGS ?=
# pytest-xdist workers for `test` and `test-fast` (CI has 2 cores); 0 runs in one process.
# Each worker has its own throwaway PostgreSQL server, temp dirs and ports.
PYTEST_WORKERS ?= 2

.PHONY: venv test test-fast lint demo bench clean postgres chromium prometheus jemalloc mutation mutation-sample dist image

venv: $(STAMP)

$(STAMP): pyproject.toml
	@PYTHON="$(PYTHON)" scripts/ensure-venv.sh $(VENV)
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

postgres:
	@scripts/ensure-postgres.sh

# Debian's headless Chromium + ChromeDriver for the console's browser tests
chromium:
	@scripts/ensure-chromium.sh

# Debian's Prometheus server + promtool for the Kubernetes tests (tests/k8s)
prometheus:
	@scripts/ensure-prometheus.sh

# Debian's jemalloc, the image's allocator, for the tests that run a process on it
jemalloc:
	@scripts/ensure-jemalloc.sh

# pytest exits 5 when it collected no test: that is a broken run, never a green one.
define run_pytest
	@rc=0; $(BIN)/pytest $(1) $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then \
	  echo "ERROR: pytest ran no tests (exit 5): collection is broken or everything was deselected." >&2; \
	fi; \
	exit $$rc
endef

test: $(STAMP) postgres chromium prometheus jemalloc
	$(call run_pytest,-q -n $(PYTEST_WORKERS) --dist worksteal)

test-fast: $(STAMP) postgres chromium prometheus jemalloc
	$(call run_pytest,-q -n $(PYTEST_WORKERS) --dist worksteal -m "not slow")

lint: $(STAMP)
	$(BIN)/ruff check costguard tests bench scripts
	$(BIN)/mypy costguard bench scripts/mutation.py

demo: $(STAMP)
	$(BIN)/costguard demo

bench: $(STAMP) jemalloc
	$(BIN)/python -m bench

# Not part of `test`: each safety-core module is mutated alone and must fail the tests of
# its own folder (scripts/mutation.py; modules in pyproject.toml [tool.costguard.mutation]).
mutation: $(STAMP)
	$(BIN)/python scripts/mutation.py --check

mutation-sample: $(STAMP)
	$(BIN)/python scripts/mutation.py --sample 15 --check

# The distribution is costguard-gpu (`costguard` on the package index is another project):
# install the wheel this builds, `pip install dist/costguard_gpu-*.whl`.
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --no-isolation --wheel --sdist --outdir dist .
	@ls -1 dist

# The images the chart runs by default (deploy/helm/costguard/values.yaml: image.repository
# and agent.image.repository, tagged with the chart's appVersion); push them to a registry
# the cluster pulls from, or set those values to where you pushed them.
IMAGE_REPO ?= ghcr.io/costguard
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' costguard/__init__.py)
image:
	docker build -f deploy/Dockerfile -t $(IMAGE_REPO)/costguard:$(VERSION) .
	docker build -f deploy/agent.Dockerfile -t $(IMAGE_REPO)/costguard-agent:$(VERSION) .

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .bench .mutation mutants build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
