# Two entry points for a fresh machine: `make demo` and `make test`.
# Each bootstraps its own virtual environment in .venv; nothing else is assumed.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test bench venv clean docker-ready

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

# The Docker tests talk to a real engine: start one if needed (as root: installs
# Debian's docker.io), then build the sandbox images (cached: seconds when unchanged).
docker-ready: $(STAMP)
	bash sandbox_images/ensure-docker.sh
	$(BIN)/runner images build

test: docker-ready
	$(BIN)/python -m pytest -q

bench: docker-ready
	$(BIN)/python bench/bench_restricted.py
	$(BIN)/python bench/bench_docker.py

clean:
	rm -rf $(VENV) .runner-demo .pytest_cache
