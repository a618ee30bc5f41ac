# Two commands on a fresh machine (Python 3.10-3.14 and make):
#   make book   creates .venv, installs everything, builds the HTML book
#   make test   creates .venv, installs everything, runs every test
#   make pdf    the whole book as one PDF, _build/html/book.pdf (after make book)
# Both run tools/make.py, which is also the way without make (Windows):
#   python tools/make.py book | test
# Each command first prepares Chapter 14's checkpoints in their cache (once, about a minute;
# attnlib.checkpoints.prepare), so that no chapter or test is the first to load one.
# TORCH=cpu (default: the CPU build of the pinned torch), TORCH=cuda (the package index's
# build, CUDA on Linux) or TORCH=env (keep the torch PYTHON already has, e.g. a CUDA one).
VENV   ?= .venv
PYTHON ?= python3
TORCH  ?= cpu
MAKE_PY = $(PYTHON) tools/make.py --venv $(VENV) --torch $(TORCH)

.PHONY: env book pdf test install-cells jupyter-edition student-edition assignments clean

env:
	$(MAKE_PY) env

book:
	$(MAKE_PY) book

test:
	$(MAKE_PY) test

# The whole book as one PDF, _build/html/book.pdf (which every page's download menu links):
# the book on one HTML page, printed by Chromium (tools/book_pdf.py).
pdf:
	$(MAKE_PY) pdf

# After changing repository: in _config.yml, rewrite every chapter's install cell.
install-cells: env
	$(VENV)/bin/python tests/install_cells.py

# The chapters for Colab and Jupyter: the book's markup as Markdown, its cross-references,
# equation numbers and citations read from the built book and linked into the published one.
jupyter-edition: book
	$(VENV)/bin/python tools/jupyter_edition.py jupyter _build/jupyter

# The same without solutions, with a check cell after each checked exercise.
student-edition: book
	$(VENV)/bin/python tools/jupyter_edition.py student _build/student

# Graded assignments for otter-grader, one per chapter: student notebooks, autograder bundles,
# reference solutions (instructor.md). BANK is the question bank kept outside the repository
# (default: the public example bank, practice only); REF the tag or commit the autograder installs
# (needed with BANK; ALLOW_BRANCH=1 accepts a branch, with a warning); ROSTER the students' emails
# (needed with BANK: each student gets numbers of their own); REFERENCE_STUDENT whose numbers the
# reference notebook has; COURSE_SEED draws the numbers; MAX_SHARED_PAIRS refuses a task more pairs
# of students share a scoring answer of; STRICT=1 refuses what the build warns about. The bank is
# checked first (seconds); the book is built only when it is missing or older than its sources.
COURSE_SEED ?= 0
BANK ?=
REF ?=
ROSTER ?=
REFERENCE_STUDENT ?=
ALLOW_BRANCH ?=
MAX_SHARED_PAIRS ?=
STRICT ?=
ASSIGNMENT_OPTIONS = _build/assignments --seed $(COURSE_SEED) \
	$(if $(BANK),--bank $(BANK)) $(if $(REF),--ref $(REF)) $(if $(ROSTER),--roster $(ROSTER)) \
	$(if $(REFERENCE_STUDENT),--reference-student $(REFERENCE_STUDENT)) $(if $(ALLOW_BRANCH),--allow-branch) \
	$(if $(MAX_SHARED_PAIRS),--max-shared-pairs $(MAX_SHARED_PAIRS)) $(if $(STRICT),--strict)
assignments: $(VENV)/bin/python
	$(VENV)/bin/python assignments/build.py --check $(ASSIGNMENT_OPTIONS)
	$(MAKE) _build/html/index.html
	$(VENV)/bin/python assignments/build.py $(ASSIGNMENT_OPTIONS)

$(VENV)/bin/python:
	$(MAKE_PY) env

_build/html/index.html: $(wildcard chapters/*.ipynb *.md _toc.yml _config.yml references.bib attnlib/*.py)
	$(MAKE_PY) book

clean:
	rm -rf _build $(VENV)
