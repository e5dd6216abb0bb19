# The two commands of the README: `make run` (the UI on http://127.0.0.1:3000) and `make test`.
# Both create the virtualenv at .venv and install the project on first use.
PYTHON ?= python3.11
# `make run PORT=3001` when 3000 is taken
PORT ?= 3000
# The metrics endpoint `make run` starts beside the UI (http://127.0.0.1:9464/metrics)
METRICS_PORT ?= 9464
# Where `make run` keeps Dagster's run history, schedules and logs (with ./dagster.yaml).
RUN_HOME ?= $(CURDIR)/.dagster_home
VENV := .venv
STAMP := $(VENV)/.installed-stamp

.PHONY: install run test test-fast format

$(STAMP): pyproject.toml
	@echo "installing batch_pipeline into $(VENV) (the first time takes a minute or two)"
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[dev,deploy]'
	touch $(STAMP)

install: $(STAMP)

# `dagster dev` and the metrics endpoint, plus (when SAN_DATABASE_URL is unset) a living sandbox
# on the embedded default.
# `exec`: a SIGTERM that make passes on reaches the command itself, which stops all of it.
run: $(STAMP)
	mkdir -p $(RUN_HOME) && ln -sf $(CURDIR)/dagster.yaml $(RUN_HOME)/dagster.yaml
	DAGSTER_HOME=$(RUN_HOME) METRICS_PORT=$(METRICS_PORT) exec $(VENV)/bin/python -m san_sandbox ui -- --host 127.0.0.1 --port $(PORT)

# --dist loadfile: a test module runs on one worker, in order (the UI test walks through steps).
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	scripts/install-chromium
	$(VENV)/bin/python -m pytest -n 2 --dist loadfile batch_pipeline_tests

# The quick tier while changing code: everything but the `system` tests (Docker, the browser,
# the daemon, the experiments). `make test` is the whole suite, and what CI runs. --dist load:
# test by test across the workers (the system tests are the ones that need a file's order).
test-fast: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/python -m pytest -n 2 --dist load -m "not system" batch_pipeline_tests

# Fix what the linter can and format the tree (what `make test` checks first).
format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
