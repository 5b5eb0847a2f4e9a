# Two commands do all the set-up on a fresh machine:
#   make book   builds the site into _build/html (executing every chapter)
#   make test   library tests, chapter execution, the -W book build, browser checks
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
VENDOR := _vendor/.complete
PYTEST := $(BIN)/python -m pytest

.PHONY: book test test-lib test-chapters test-site mutants bench notebooks course clean

# The virtual environment: created on first use, re-installed only when the pins change.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e ".[book,test]"
	@touch $@

# Offline MathJax and widget JavaScript, fetched from the npm registry at pinned versions.
$(VENDOR): scripts/fetch_vendor.sh
	rm -f $@
	bash scripts/fetch_vendor.sh _vendor

book: $(STAMP) $(VENDOR)
	$(BIN)/jupyter-book build . -W -n --keep-going

test: test-lib test-chapters test-site

test-lib: $(STAMP)
	$(PYTEST) tests/lib -n 2 -q

test-chapters: $(STAMP)
	$(PYTEST) tests/chapters -n 2 -q

test-site: $(STAMP) $(VENDOR)
	$(PYTEST) tests/site -q

# Mutation check (not part of `make test`, see CONTRIBUTING.md): each realistic bug listed in
# tests/mutants.py, applied to a copy of lib/, must make tests/lib fail.
mutants: $(STAMP)
	$(BIN)/python tests/mutants.py

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_gd.py
	$(BIN)/python benchmarks/bench_svm.py

notebooks: $(STAMP)
	$(BIN)/python scripts/make_notebooks.py notebooks

course: $(STAMP)
	$(BIN)/python scripts/make_course.py course

clean:
	rm -rf _build notebooks course
