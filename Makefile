# Two commands do all the set-up on a fresh machine:
#   make book   builds the site into _build/html (executing every chapter)
#   make test   repository checks, library tests, chapter execution, the -W book build, browser
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
VENDOR := _vendor/.complete
PYTEST := $(BIN)/python -m pytest
# Optional: a pip index to install torch from before everything else, e.g. PyTorch's CPU-only
# wheel index (`make book TORCH_INDEX_URL=...`); CI sets it so that no CUDA libraries download.
# CPU_ONLY=1 is the short form for PyTorch's CPU-only index (Linux: a 0.19 GB torch wheel
# instead of 2.7 GB of CUDA wheels; the measurements are in chapters/appendix-running.md).
TORCH_INDEX_URL ?=
PYTORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
ifeq ($(CPU_ONLY),1)
TORCH_INDEX_URL := $(PYTORCH_CPU_INDEX)
endif
TORCH_PIN := $(shell grep -m1 '^torch==' constraints.txt)

.PHONY: help book pdf test test-repo test-lib test-chapters test-notebooks test-site test-portability mutants bench notebooks course clean
.DEFAULT_GOAL := help

# A bare `make` prints this and creates nothing (the environment is 1.9 GB with the CPU-only
# torch wheel). Times: an idle 2-core machine, measured as README.md says.
help:
	@echo "make book              build the site into _build/html, executing every chapter (about 4 min; creates .venv first, about 2 min)"
	@echo "make test              every stage below, in this order (about 12 min idle, 24 min with two other jobs running; plus .venv)"
	@echo "  make test-repo       licences, citation, workflow, references between files (10 s)"
	@echo "  make test-lib        library unit tests and their examples (about 2-4.5 min)"
	@echo "  make test-chapters   each chapter executed once as a reader runs it, its time reported, the run saved (about 2-3.5 min)"
	@echo "  make test-notebooks  the notebook export: every construct, no MyST left (15 s)"
	@echo "  make test-site       the -W build, tiny books, course packs, nbgrader, Chromium on every page, the PDF (about 7-13 min)"
	@echo "make pdf               the whole book as one PDF, _build/pdf/maxmargin-book.pdf; NO_SOLUTIONS=1 leaves the solutions out (about 1.5 min after make test-chapters, else 4 min)"
	@echo "make notebooks         the chapters as plain .ipynb in notebooks/ (seconds after a build, else about 3 min)"
	@echo "make course            course packs in course/, CHAPTERS=\"01 03\" to choose (about 1 min)"
	@echo "make mutants           the mutation check of the library tests (an hour or more)"
	@echo "make bench             benchmarks against plain baselines, and the chapters' time budget on an idle machine (about 6 min)"
	@echo "make test-portability  tests/lib and the chapters under 8 arithmetic settings (about 31 min)"
	@echo "make clean             remove _build, notebooks and course"
	@echo "Options: CPU_ONLY=1 (PyTorch's CPU-only wheel on Linux), TORCH_INDEX_URL=..., PYTHON=python3.11"

# The virtual environment: created on first use, re-installed only when the requirements or the
# pins change. pyproject.toml says what is needed (ranges), constraints.txt which exact versions.
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(if $(TORCH_INDEX_URL),$(BIN)/python -m pip install -q --index-url "$(TORCH_INDEX_URL)" "$(TORCH_PIN)")
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[book,site,test]"
	@touch $@

# Offline MathJax, fetched from the npm registry at a pinned version (scripts/fetch_vendor.sh).
$(VENDOR): scripts/fetch_vendor.sh
	rm -f $@
	bash scripts/fetch_vendor.sh _vendor

book: $(STAMP) $(VENDOR)
	$(BIN)/jupyter-book build . -W -n --keep-going

test: test-repo test-lib test-chapters test-notebooks test-site

test-repo: $(STAMP)
	$(PYTEST) tests/repo -q

test-lib: $(STAMP)
	$(PYTEST) tests/lib -n 2 -q

# Each notebook page executed once, as a reader runs it (the exported notebook, outside the
# repository); the run is saved in _build/executed/ (scripts/executed.py) for test-site.
test-chapters: $(STAMP)
	$(PYTEST) tests/chapters -n 2 -q

# The notebook export (scripts/export.py): conversion of every construct, no MyST, standalone.
test-notebooks: $(STAMP)
	$(PYTEST) tests/notebooks -n 2 -q

# Two workers (tests/site/conftest.py schedules them): one builds the book (from the chapter
# stage's runs when they are current) and drives Chromium; the other builds the tiny books and
# the course packs meanwhile.
test-site: $(STAMP) $(VENDOR)
	$(PYTEST) tests/site -n 2 -q

# Not part of `make test`: tests/lib and the chapters under several arithmetic environments
# (OpenBLAS kernels, torch's SIMD level and BLAS path, 1 and 2 threads, each GD engine), one
# pytest run per row and target; see tests/portability.py (--list, --quick, --rows).
test-portability: $(STAMP)
	$(BIN)/python tests/portability.py --targets tests/lib tests/chapters

# Mutation check (not part of `make test`, see CONTRIBUTING.md): each realistic bug listed in
# tests/mutants.py, applied to a copy of lib/, must make tests/lib fail.
mutants: $(STAMP)
	$(BIN)/python tests/mutants.py

# Every benchmark runs, whatever the verdict of the one before; the exit status is 1 if any
# missed its target (each prints PASS or FAIL and the reason).
bench: $(STAMP)
	@status=0; \
	for b in bench_gd bench_svm bench_explorers bench_chapters; do \
		$(BIN)/python benchmarks/$$b.py || status=1; \
	done; \
	exit $$status

# The whole book as one PDF (scripts/make_pdf.py): the single-page build printed by Chromium,
# solutions after each exercise unless NO_SOLUTIONS=1.
NO_SOLUTIONS ?=
pdf: $(STAMP) $(VENDOR)
	$(BIN)/python scripts/make_pdf.py $(if $(filter 1,$(NO_SOLUTIONS)),--no-solutions)

# Plain notebooks (no MyST) with the numbers of the last build, or of one execution per chapter.
notebooks: $(STAMP)
	rm -rf notebooks
	$(BIN)/python scripts/make_notebooks.py notebooks

# Course packs (scripts/make_course.py): `make course CHAPTERS="01 03"` picks and orders chapters
# (numbers or names; default: every notebook page); course/ is emptied first.
CHAPTERS ?=
course: $(STAMP)
	$(BIN)/python scripts/make_course.py course $(CHAPTERS)

clean:
	rm -rf _build notebooks course
