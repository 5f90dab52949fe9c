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

.PHONY: lab test test-fast setup setup-tests bench doctor lint lock labextension clean

$(STAMP): requirements.txt constraints.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is needed (found " + sys.version.split()[0] + "): run make with PYTHON=/path/to/python3.11")'
	$(PYTHON) -m coursekit.setup.evcxr_build --background  # compiles while pip installs
	$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); echo "could not create a virtual environment: Python's venv/ensurepip is missing (Debian/Ubuntu: sudo apt-get install python3-venv)"; exit 1; }
	$(PY) -m pip install --progress-bar on -r requirements.txt -c constraints.txt -e .
	touch $@

setup: $(STAMP)
	$(PY) -m coursekit setup

# The tests also need the grading sandbox and a browser (Debian packages, when root or sudo).
setup-tests: $(STAMP)
	$(PY) -m coursekit setup --for tests

lab: setup
	$(PY) -m coursekit lab --port $(PORT)

test: setup-tests
	$(PY) -m pytest -n $(JOBS)

test-fast: setup-tests
	$(PY) -m pytest -m "not full" -n $(JOBS)

bench: setup-tests
	$(PY) -m coursekit bench

doctor: $(STAMP)
	$(PY) -m coursekit doctor

lint: $(STAMP)
	$(VENV)/bin/ruff check --no-cache coursekit tests ship bench conftest.py nbgrader_config.py
	$(VENV)/bin/ruff format --check --no-cache coursekit tests ship bench conftest.py nbgrader_config.py

# Re-resolve the lock after editing requirements.txt.
# Lock with the oldest Python the kit supports, Debian 12's own (tests/test_structure.py checks
# that every locked package accepts it): make lock PYTHON=/usr/bin/python3
lock:
	rm -rf .lockenv && $(PYTHON) -m venv .lockenv
	.lockenv/bin/pip install --quiet -r requirements.txt
	(echo "# Full lock of the Python environment (pip freeze), used as pip's constraints file."; \
	 .lockenv/bin/pip freeze --exclude-editable) > constraints.txt
	rm -rf .lockenv

# Rebuild the prebuilt JupyterLab extension (coursekit/kernel/highlight) after editing its
# source; needs Node.js and npm (learners and CI use the committed build).
HIGHLIGHT := coursekit/kernel/highlight
labextension: $(STAMP)
	rm -rf .labext && mkdir .labext && cp -r $(HIGHLIGHT)/src $(HIGHLIGHT)/*.json .labext/
	cd .labext && npm install --no-audit --no-fund --loglevel=error && npx tsc && jupyter-builder build .
	rm -rf $(HIGHLIGHT)/labextension && cp -r .labext/labextension .labext/package-lock.json $(HIGHLIGHT)/
	rm -rf .labext

clean:
	rm -rf $(VENV)
