# The two commands of the README: `make test` and `make demo`. Both set up .venv themselves.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ragaudit-installed

.PHONY: test demo bench lint typecheck clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

demo: $(STAMP)
	$(VENV)/bin/ragaudit demo $(DEMO_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples

typecheck: $(STAMP)
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build dist .pytest_cache ragaudit-traces.jsonl ragaudit-audit.jsonl
