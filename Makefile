# The README's two commands are `make book` and `make test`. Each creates or reuses .venv.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_WORKERS ?= 2
# seconds one notebook cell may run in `make test` (a chapter must finish in 60 s on 2 cores)
CELL_TIMEOUT ?= 300
# extra options for `make book`, e.g. BOOK_ARGS="--chapters 03 --keep-going"
BOOK_ARGS ?=

.PHONY: help setup book test test-fast lint format student solutions grade bench clean

help:
	@echo "make book       execute every chapter, then build the book site into build/book/"
	@echo "                (BOOK_ARGS=\"--chapters 03 --keep-going\" for a part of it)"
	@echo "make test       unit tests + notebook checks (nbval) + the site in Chromium, in .venv"
	@echo "make lint       ruff"
	@echo "make student    the handout into student/: chapters with solutions stubbed, adapter.py, README"
	@echo "make solutions  executed solution copies into solutions/"
	@echo "make grade      grade SUBMISSIONS=folder (one sub-folder per student) into reports/;"
	@echo "                STUDENT=path/to/folder: the pytest suite on one student (junit XML);"
	@echo "                neither: self-test of the suite on the solutions"
	@echo "make bench      speed benchmarks (print ratios, no pass/fail)"

setup:
	@bash scripts/bootstrap.sh

book: setup
	$(PY) -m pipemare_lite book --out build/book --timeout $(CELL_TIMEOUT) $(BOOK_ARGS)

test: setup
	$(PY) -m ruff check .
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope --durations 25 tests chapters \
		--nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
		--nbval-cell-timeout $(CELL_TIMEOUT)

test-fast: setup
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope tests -m "not slow"

lint: setup
	$(PY) -m ruff check .

format: setup
	$(PY) -m ruff format pipemare_lite tests

student: setup
	$(PY) -m pipemare_lite assign student --out student

solutions: setup
	$(PY) -m pipemare_lite assign solutions --out solutions

grade: setup
ifdef SUBMISSIONS
	$(PY) -m pipemare_lite grade $(SUBMISSIONS) --out reports
else
	$(PY) -m pytest -c pyproject.toml --rootdir . -p pipemare_lite.book.exercises.pytest_grading \
	    tests/grading -p no:cacheprovider $(if $(STUDENT),--student=$(abspath $(STUDENT)),) \
	    --junitxml reports/grades.xml
endif

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf build student solutions reports .pytest_cache
