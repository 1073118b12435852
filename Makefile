# recrawl: the two commands are `make demo` (the main job) and `make test` (the tests).
# Both install what they need: a venv with the pinned dependencies, Kafka's jars from Maven
# Central (once, into ~/.cache/recrawl), Debian's redis-server (apt-get, when missing and root) and
# Debian's chromium for the dashboard's browser test (the same way; a failure there is reported,
# not fatal).

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
DEMO_ARGS ?=

.PHONY: install services test lint up status down clean demo

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -c requirements.lock -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Fetch Kafka's jars and install redis-server and chromium if missing (no service is left running).
services: $(STAMP)
	$(BIN)/python -m infra.prepare

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# The test command: lint, types, then every test against a real Kafka and Redis that the
# test session starts itself (see tests/conftest.py) and stops; then check nothing is left.
test: services lint
	$(BIN)/pytest $(PYTEST_ARGS)
	@if pgrep -af '[p]ytest-of-' >/dev/null; then \
	  echo "processes left behind by the tests:"; pgrep -af '[p]ytest-of-'; exit 1; fi

up: services
	$(BIN)/recrawl infra up

status: $(STAMP)
	$(BIN)/recrawl infra status

down: $(STAMP)
	$(BIN)/recrawl infra down

# Stop the stack and delete its home (data and logs; RECRAWL_HOME or the per-user state folder).
clean: down
	rm -rf "$$($(BIN)/python -c 'from infra.stack import default_home; print(default_home())')"

# The main command: stack, worker, fetcher, test web and producers, live view, summary
# (live accuracy next to the simulator's); stops everything it started.
demo: services
	$(BIN)/recrawl demo $(DEMO_ARGS)
