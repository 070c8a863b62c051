# Two entry points (README): `make run` and `make test`. Everything installs into .venv from
# pyproject.toml, so a fresh machine with Python 3.11 + pip needs nothing else.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN_ARGS ?= tune zoo:bert-base -o plan.json

.PHONY: run test lint typecheck pytest browser graphviz postgres clean

$(VENV)/.installed-run: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(VENV)/.installed-run $@

run: $(VENV)/.installed-run
	$(BIN)/autotune $(RUN_ARGS)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

# the browser tests drive Debian's chromium and chromedriver: installed here when missing
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { echo "make: installing Debian's chromium and chromium-driver (apt) for the browser tests of the dashboard and report pages"; \
	    apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null; }; }

# the graph views (report --html, candidates --html) are laid out by Debian's Graphviz (dot)
graphviz:
	@command -v dot >/dev/null || \
	  { echo "make: installing Debian's graphviz (apt) for the graph views and their tests"; \
	    apt-get install -y -q graphviz >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q graphviz >/dev/null; }; }

# the PostgreSQL tests start Debian's server (initdb, pg_ctl) on loopback: installed when missing
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  { echo "make: installing Debian's postgresql (apt) for the tests that run studies on a real server (started on loopback, stopped after)"; \
	    apt-get install -y -q postgresql >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null; }; }

# one worker per core (CI has two); a file's tests share a worker, so module fixtures run once
pytest: $(VENV)/.installed-dev browser graphviz postgres
	$(BIN)/python -m pytest -n auto --dist loadfile

test: lint typecheck pytest

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
