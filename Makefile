# Self-Attention, Executed: `make book` builds the website, `make test` runs every test.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Same environment for executing, testing and benchmarking: no progress bars in saved outputs.
export SELFATTN_PROGRESS = 0
export PYDEVD_DISABLE_FILE_VALIDATION = 1

.PHONY: install book book-student test test-lib test-notebooks test-build test-site execute bench clean

$(STAMP): requirements.txt pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

book: install
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	@echo
	@echo "Built. Open $(CURDIR)/_build/html/index.html"
	@echo "or serve it: $(PY) -m http.server -d _build/html  (then http://localhost:8000)"

# Library, exercise checkers and notebook hygiene.
test-lib: install
	$(PY) -m pytest tests -n 2 -q

# Strict nbval: every chapter in _toc.yml re-runs and must reproduce its committed outputs.
test-notebooks: install
	@chapters="$$($(PY) tools/book.py chapters)"; \
	if [ -z "$$chapters" ]; then echo "test-notebooks: no chapter in _toc.yml yet"; exit 0; fi; \
	$(PY) -m pytest -p no:cacheprovider --nbval --nbval-current-env --nbval-cell-timeout=900 \
	  --sanitize-with tests/nbval_sanitize.cfg -n 2 --dist loadfile -q $$chapters

# The website, warnings as errors.
test-build: install
	rm -rf _build/html
	$(VENV)/bin/jupyter-book build . -W -n --keep-going

test: test-lib test-notebooks test-build
	@echo "make test: all passed"

execute: install
	$(PY) tools/execute.py $(NOTEBOOKS)

bench: install
	$(PY) -m selfattn.bench

clean:
	rm -rf _build .pytest_cache .hypothesis
