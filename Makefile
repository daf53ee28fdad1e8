# The two commands of the README: `make test` (the suite, then `make user-install`) and `make demo`. Both set up what they need themselves.
# `make test-fast` is the inner loop (no e2e, no slow tests). CI (.ci/run): make lint, typecheck, docs, test.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ragaudit-installed
DEMO_STAMP := $(VENV)/.ragaudit-demo-installed
PHOENIX_VENV := .venv-phoenix
PHOENIX_VERSION ?= 20.26.1
PHOENIX_STAMP := $(PHOENIX_VENV)/.installed-$(PHOENIX_VERSION)

.PHONY: test test-fast judge-matrix user-install demo bench bench-peers lint typecheck system-deps docs docs-serve docs-screenshots clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Everything for the tests, lint, typecheck and benchmarks.
$(STAMP): pyproject.toml setup.py $(wildcard src/ragaudit/metrics/*.c src/ragaudit/metrics/*.h) | $(PY)
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

# Only what `ragaudit demo` imports (the `demo` extra), so a first `make demo` installs no test tooling
# or benchmark peers. Its own stamp: `make demo` after `make test` reinstalls nothing.
$(DEMO_STAMP): pyproject.toml setup.py $(wildcard src/ragaudit/metrics/*.c src/ragaudit/metrics/*.h) | $(PY)
	$(PY) -m pip install -q -e ".[demo]"
	touch $(DEMO_STAMP)

# A real Phoenix server for the end-to-end tests, in a virtualenv of its own so its dependencies
# never mix with ours. Skipped (and the e2e tests with it) when RAGAUDIT_SKIP_E2E=1.
$(PHOENIX_STAMP):
	@if [ "$${RAGAUDIT_SKIP_E2E:-0}" = "1" ]; then echo "RAGAUDIT_SKIP_E2E=1: not installing Phoenix"; else \
	  $(PYTHON) -m venv $(PHOENIX_VENV) && \
	  $(PHOENIX_VENV)/bin/python -m pip install -q --upgrade pip && \
	  $(PHOENIX_VENV)/bin/python -m pip install -q "arize-phoenix==$(PHOENIX_VERSION)" && \
	  touch $(PHOENIX_STAMP); fi

# Headless Chromium renders the HTML report in a test, and redis-server backs the shared-budget tests
# (the tests start their own servers on free ports). Installed from Debian when we may (root with
# apt-get, as in CI); elsewhere those tests skip and say why.
system-deps:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	        || echo "warning: could not install chromium; the HTML rendering test will skip"; \
	    else echo "note: chromium not found; the HTML rendering test will skip"; fi; }
	@command -v redis-server >/dev/null 2>&1 || \
	  { if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null \
	        && (service redis-server stop >/dev/null 2>&1 || true)) \
	        || echo "warning: could not install redis-server; the shared-budget tests will skip"; \
	    else echo "note: redis-server not found; the shared-budget tests will skip"; fi; }
	@command -v prometheus >/dev/null 2>&1 || \
	  { if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
	        && (service prometheus stop >/dev/null 2>&1 || true)) \
	        || echo "warning: could not install prometheus; the alert test will skip"; \
	    else echo "note: prometheus not found; the alert test will skip"; fi; }

test: $(STAMP) $(PHOENIX_STAMP) system-deps otelcol
	$(PY) -m pytest $(PYTEST_ARGS)
	$(MAKE) user-install

# CI installs like a user (noxfile.py): each quick start and each extra in an empty virtualenv with only
# what it says to install (newest versions), the quick starts' marked code run as written, and the lowest
# versions pyproject.toml allows. uv's cache makes reruns fast. Figures: .nox/user-install/*.json.
user-install: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/nox -s user_install $(NOX_ARGS)

# The OpenTelemetry Collector the tests run examples/collector/ on: otelcol/builder-config.yaml built by the
# OpenTelemetry Collector Builder into ~/.cache/ragaudit/otelcol/<sha256 of the manifest>/ (once per machine
# and manifest; the first build takes many minutes). Where Go is absent it says so and builds nothing, and
# the tests that need the Collector skip with that reason.
.PHONY: otelcol
otelcol:
	@bash scripts/build_otelcol.sh >/dev/null

# The inner loop: no Phoenix server, no browser, no test marked e2e or slow.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not e2e and not slow" $(PYTEST_ARGS)

# The judge's tests against every openai major it supports, each in a fresh venv made by uv with only
# ragaudit, that openai and pytest (noxfile.py's judge_matrix; issue 44).
judge-matrix: $(STAMP)
	$(VENV)/bin/nox -s judge_matrix

# The demo, then the same questions through the offline careless generator (scripted mistakes) to show
# the audit catching them; both append to the same span file and audit log.
demo: $(DEMO_STAMP)
	$(VENV)/bin/ragaudit demo $(DEMO_ARGS)
	@echo
	$(VENV)/bin/ragaudit demo --careless $(DEMO_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/run_all.py $(BENCH_ARGS)

# RAGAS, DeepEval and TruLens for the judge-cost comparison, kept out of our own virtualenv.
bench-peers:
	$(PYTHON) -m venv .venv-peers
	.venv-peers/bin/python -m pip install -q ragas deepeval trulens trulens-providers-openai "langchain-community<0.4"

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples scripts docs/_hooks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The docs site (MkDocs Material + mkdocstrings): docs/ -> site/. --strict: a broken link, a missing
# page or an API name that does not resolve fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

# Retake docs/images/*.png from the real programs (the HTML report, a judged trace in a real Phoenix).
docs-screenshots: $(STAMP) $(PHOENIX_STAMP) system-deps
	$(PY) scripts/docs_screenshots.py

clean:
	rm -rf $(VENV) $(PHOENIX_VENV) .nox build dist site .pytest_cache ragaudit-traces.jsonl ragaudit-audit.jsonl
