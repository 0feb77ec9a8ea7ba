# Two entry points for a fresh machine: `make demo` and `make test`.
# Each bootstraps its own virtual environment in .venv; nothing else is assumed.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test bench venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	RUNNER_HOME=$${RUNNER_HOME:-$(CURDIR)/.runner-demo} $(BIN)/runner demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/bench_restricted.py

clean:
	rm -rf $(VENV) .runner-demo .pytest_cache
