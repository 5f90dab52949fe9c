# The two commands a learner needs: `make lab` and `make test`. Both install what is missing
# first (a second run takes seconds). See README.md.

SYSTEM_PYTHON := $(shell command -v python3)
PYTHON ?= $(SYSTEM_PYTHON)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8888
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
JOBS ?= 2

.PHONY: lab test test-fast setup bench doctor lint lock clean

$(STAMP): requirements.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --progress-bar on -r requirements.txt -c constraints.txt -e .
	touch $@

setup: $(STAMP)
	$(PY) -m coursekit setup

lab: setup
	$(PY) -m coursekit lab --port $(PORT)

test: setup
	$(PY) -m pytest -n $(JOBS) --dist loadscope

test-fast: setup
	$(PY) -m pytest -m "not full" -n $(JOBS)

bench: setup
	$(PY) -m coursekit bench

doctor: $(STAMP)
	$(PY) -m coursekit doctor

lint: $(STAMP)
	$(VENV)/bin/ruff check coursekit tests nbgrader_config.py
	$(VENV)/bin/ruff format --check coursekit tests nbgrader_config.py

# Re-resolve the lock after editing requirements.txt.
lock:
	rm -rf .lockenv && $(PYTHON) -m venv .lockenv
	.lockenv/bin/pip install --quiet -r requirements.txt
	(echo "# Full lock of the Python environment (pip freeze), used as pip's constraints file."; \
	 .lockenv/bin/pip freeze --exclude-editable) > constraints.txt
	rm -rf .lockenv

clean:
	rm -rf $(VENV)
