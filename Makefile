# The two commands of the README: `make run` (the UI on http://127.0.0.1:3000) and `make test`.
# Both create the virtualenv at .venv and install the project on first use.
PYTHON ?= python3.11
# make run PORT=3001 when 3000 is taken
PORT ?= 3000
VENV := .venv
STAMP := $(VENV)/.installed-stamp

.PHONY: install run test format

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[dev,deploy]'
	touch $(STAMP)

install: $(STAMP)

# DAGSTER_HOME keeps run history, schedules and logs in .dagster_home, with ./dagster.yaml.
# `dagster dev`, plus (when SAN_DATABASE_URL is unset) a living sandbox on the embedded default.
run: $(STAMP)
	mkdir -p .dagster_home && ln -sf ../dagster.yaml .dagster_home/dagster.yaml
	DAGSTER_HOME=$(CURDIR)/.dagster_home $(VENV)/bin/python -m batch_pipeline.sandbox ui -- --host 127.0.0.1 --port $(PORT)

# --dist loadfile: a test module runs on one worker, in order (the UI test walks through steps).
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	scripts/install-chromium
	$(VENV)/bin/python -m pytest -n 2 --dist loadfile batch_pipeline_tests

# Fix what the linter can and format the tree (what `make test` checks first).
format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
