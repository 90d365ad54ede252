# Self-Attention, Executed: `make book` builds the website, `make test` runs every test.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Same environment for executing, testing and benchmarking: no progress bars in saved outputs.
export SELFATTN_PROGRESS = 0
export PYDEVD_DISABLE_FILE_VALIDATION = 1

.PHONY: install lint book book-en book-zh translations book-student notebooks test test-lib test-notebooks test-build test-site execute bench clean

$(STAMP): requirements.txt pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# Both editions: English in _build/html, Chinese in _build/html/zh (one site, a language
# switch on every page), warnings as errors.
book: book-en book-zh
	@echo
	@echo "Built. Open $(CURDIR)/_build/html/index.html (中文: _build/html/zh/index.html)"
	@echo "or serve it: $(PY) -m http.server -d _build/html  (then http://localhost:8000)"

book-en: install
	$(VENV)/bin/jupyter-book build . -W -n --keep-going

# The Chinese edition (Sphinx gettext, catalogs in locales/zh_CN, tools/i18n.py): the same
# sources with language zh_CN. First checks that the catalogs hold every current message.
book-zh: install
	$(PY) -m tools.i18n check
	rm -rf _build/zh _build/html/zh
	$(PY) -m tools.i18n config _build/zh/_config.yml
	$(VENV)/bin/jupyter-book build . --config _build/zh/_config.yml --path-output _build/zh -W -n --keep-going
	mkdir -p _build/html
	mv _build/zh/_build/html _build/html/zh

# After the English changed: extract the messages and update the catalogs (new messages
# empty, changed ones fuzzy), then print what is left to translate (CONTRIBUTING.md).
translations: install
	$(PY) -m tools.i18n update

# Library, exercise checkers and notebook hygiene.
test-lib: install
	$(PY) -m pytest tests -n 2 -q

# Strict nbval, run as a Colab reader runs the book: a wheel of the library installed in a
# fresh venv, each chapter copied alone into an empty folder (tools/reader_run.py). Every
# chapter in _toc.yml must run there and reproduce its committed outputs, with claims raising,
# twice: on this CPU's floating-point path with the book's pinned packages, and on a second
# path that stands for another machine (unvectorised ATen kernels, MKL's compatible path) with
# Colab's own package versions (tools/colab_constraints.txt; the venv of those is kept in
# COLAB_VENV between runs, about 5 GB, 2-3 minutes to build). Prints each chapter's time.
COLAB_VENV ?= /tmp/colab-venv
test-notebooks: install
	COLAB_VENV=$(COLAB_VENV) $(PY) -m tools.reader_run

# The main path alone: every chapter run as a reader who skips every Deeper part, its `deeper`
# code cells removed (tools/main_path_run.py; docs/design.md: "The main path must read and run
# on its own"), in the reader's mode (claims print, nothing is recorded), in a temporary copy.
# Fails if a remaining cell raises or a claim fails. A pass of its own: strict nbval's passes
# above cannot be reused, since they must run the Deeper cells too and compare every output,
# and outputs may change (other random draws) once the Deeper cells are gone; so it runs the
# chapters once more, two kernels at once on the two cores (each kernel one thread), longest
# first, outputs not compared: 6 minutes on a shared 2-core machine (371 s, 2026-12-04), so
# `make test` stays within the CI's 40 (it took about 29 before).
.PHONY: test-main-path
test-main-path: install
	$(PY) -m tools.main_path_run --workers 2

# Refresh tools/colab_constraints.txt from a copy of Colab's runtime list, e.g.
#   git clone https://github.com/googlecolab/backend-info /tmp/backend-info
#   make colab-versions FREEZE=/tmp/backend-info/pip-freeze.gpu.txt PYTHON_VERSION=3.13.15 \
#     SOURCE="backend-info at <commit>"
.PHONY: colab-versions
colab-versions: install
	@test -n "$(FREEZE)" -a -n "$(PYTHON_VERSION)" || { echo "usage: make colab-versions FREEZE=path/to/pip-freeze.gpu.txt PYTHON_VERSION=3.x.y (os-info-gpu.txt) [SOURCE=...]"; exit 1; }
	$(PY) -m tools.colab_versions $(FREEZE) --python $(PYTHON_VERSION) $(if $(SOURCE),--source "$(SOURCE)")

# Formatting and lint (ruff, configured in pyproject.toml and chapters/ruff.toml), and no code
# or output line of a chapter wider than the website's code column (79 characters).
lint: install
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -p no:cacheprovider -q tests/test_line_width.py

# The website, warnings as errors: both languages and the student edition, built side by side
# (each build is one process; their folders are separate, see book-zh and book-student).
test-build: install
	rm -rf _build/html
	$(MAKE) -j3 --output-sync=target book-en book-zh book-student

# The notebook editions for Jupyter and Colab (committed; tests/test_notebook_edition.py checks
# they are current): notebooks/chapters/, the chapters with plain Jupyter markdown (glued values,
# author-year citations, no MyST syntax), and student/chapters/, the same without solutions.
notebooks: install
	$(PY) -m tools.notebook_edition

# The student edition: the same site with every solution removed (from the pages and from
# the downloadable notebooks; see tools/student_edition.py and _ext/book_site.py). It also
# rewrites student/chapters/ (committed): the solution-free notebooks its Colab button opens.
book-student: install
	rm -rf _build/student
	$(PY) -m tools.student_edition _build/student/_config.yml
	$(VENV)/bin/jupyter-book build . --config _build/student/_config.yml --path-output _build/student -W -n --keep-going
	mv _build/student/_build/html _build/student/html
	@echo
	@echo "Built the student edition. Open $(CURDIR)/_build/student/html/index.html"

# Autograding (tools/grader.py, otter-grader): an assignment per chapter with exercises, in
# _build/grader/chNN/dist/ (autograder/: the autograder zip and the notebook with the book's
# solutions; student/: the notebook to hand out). Each question is one exercise; its tests
# are the book's checkers. Then grades both notebooks of every chapter with otter's own runner
# (no container): every reference answer must pass, every student stub fail. CHAPTERS="3 5"
# for some.
.PHONY: grader
grader: install
	$(PY) -m tools.grader $(if $(CHAPTERS),--chapters $(CHAPTERS))

# The website in a real browser (tests_site/): headless Chromium with the internet blocked,
# against _build/html (built if absent) and the student edition (rebuilt; `make test` passes
# SITE_BUILT=1, as test-build has just built both). Skipped, and says so, where Chromium is
# not installed; in CI (CI set) its absence is an error.
CHROMIUM ?= /usr/bin/chromium
SITE_BUILT ?=
test-site: install
	@if [ ! -x "$(CHROMIUM)" ]; then \
	  if [ -n "$$CI" ]; then echo "make test-site: no Chromium at $(CHROMIUM) in CI (.ci/run installs it)"; exit 1; fi; \
	  echo; echo "make test-site: SKIPPED the browser tests: no Chromium at $(CHROMIUM) (apt-get install chromium)"; echo; \
	else \
	  if [ -z "$(SITE_BUILT)" ]; then \
	    test -f _build/html/index.html || $(MAKE) test-build || exit 1; \
	    $(MAKE) book-student || exit 1; \
	  fi; \
	  CHROMIUM="$(CHROMIUM)" $(PY) -m pytest -p no:cacheprovider tests_site -q --durations=5; \
	fi

test: lint test-lib test-floors test-notebooks test-main-path test-build
	$(MAKE) test-site SITE_BUILT=1
	@echo "make test: all passed"

# Recording the book (SELFATTN_RECORD=1, set by tools/execute.py): claims raise and each chapter
# writes chapters/results/<chNN>.json. Any other run of a chapter writes nothing there.
execute: install
	$(PY) -m tools.execute $(NOTEBOOKS)

bench: install
	SELFATTN_RECORD=1 $(PY) -m selfattn.bench

# The book on a GPU in one command (tools/gpu_check.py, at most ~8 minutes): versions, the
# kernels against SDPA in float64, every chapter executed on the GPU, the Triton-vs-SDPA-flash
# benchmark (writes chapters/results/bench_gpu.json), one summary line. DRY_RUN=1: the same
# script on the CPU at tiny sizes (Triton interpreter, two chapters; tests/test_gpu_check.py
# runs it). Without the venv (a GPU machine with torch and Triton installed) it uses python3;
# or say which: make gpu-check PY=/path/to/python
.PHONY: gpu-check
gpu-check:
	$(if $(wildcard $(PY)),$(PY),python3) -m tools.gpu_check $(if $(filter-out 0,$(DRY_RUN)),--dry-run)

clean:
	rm -rf _build .pytest_cache .hypothesis

# A release (tools/release.py): sets the version (lib/selfattn/__init__.py, the one place),
# pins every chapter's Colab setup cell and the launch buttons to the tag vVERSION, dates
# CHANGELOG.md's Unreleased section, updates CITATION.cff and builds the wheel into dist/.
# It commits nothing: it prints the commands that commit, tag and push.
# `python -m tools.release --check` says whether the version's places agree.
.PHONY: release
release: install
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=x.y.z"; exit 1; }
	$(PY) -m tools.release $(VERSION)

# The library at its dependencies' floors (tools/floors.py): torch, numpy, matplotlib,
# ipywidgets, pillow and tqdm at exactly the lowest versions pyproject.toml declares (the torch
# API that sets its floor: tests/test_dependency_floors.py), in a venv of their own
# (FLOORS_VENV, kept between runs), running a subset of the library's tests. Part of `make
# test`: a few minutes on a fresh machine (torch 2.5 is a 5 GB CUDA build), a minute after.
FLOORS_VENV ?= /tmp/floors
.PHONY: test-floors
test-floors: install
	$(PY) -m tools.floors --venv $(FLOORS_VENV)

# The whole book as one PDF per language (tools/pdf.py): every page of the built site printed
# by Chromium (no TeX), MathJax typeset, code wrapped, a bookmark per chapter, into
# _build/pdf/self-attention-executed-{en,zh}.pdf. Builds the site first if it is missing.
# tests_site/test_pdf.py (in `make test`) prints both and checks them.
.PHONY: pdf
pdf: install
	test -f _build/html/index.html -a -f _build/html/zh/index.html || $(MAKE) book
	CHROMIUM="$(CHROMIUM)" $(PY) -m tools.pdf
