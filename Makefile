# Two commands on a fresh machine (Python 3.10+ and make):
#   make book   creates .venv, installs everything, builds the HTML book
#   make test   creates .venv, installs everything, runs every test
VENV   ?= .venv
PYTHON ?= python3
PIP     = $(VENV)/bin/pip --disable-pip-version-check --quiet
STAMP   = $(VENV)/.installed

.PHONY: book test browser install-cells student-edition clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -r requirements.txt
	$(VENV)/bin/python -c "import torch, jupyter_book, pytest"
	$(PIP) install --no-deps -e .
	touch $(STAMP)

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	@echo "The book is in _build/html/index.html"

# Every test, then the chapters once more in a second numeric environment
# (NumPy, ATen, MKL and oneDNN held to baseline vector code, one thread): a
# stored output that depends on the CPU fails here, not on a reader's machine.
test: $(STAMP) browser
	$(VENV)/bin/python -m pytest
	env $$($(VENV)/bin/python tests/second_environment.py) $(VENV)/bin/python -m pytest chapters -p no:cacheprovider

# The browser test of the built book needs Debian's chromium; as root, install it
# when it is missing. Elsewhere that test is skipped and pytest says so.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
	  || echo "chromium not installed: the browser test of the book will be skipped"; }

# After changing repository: in _config.yml, rewrite every chapter's install cell.
install-cells: $(STAMP)
	$(VENV)/bin/python tests/install_cells.py

# The chapters without solutions, with a check cell after each checked exercise.
student-edition: $(STAMP)
	$(VENV)/bin/python -m attnlib.exercises student-edition _build/student

# Graded assignments for otter-grader, one per chapter: student notebooks, autograder bundles
# with hidden tests, reference solutions. COURSE_SEED picks each exercise's numbers.
COURSE_SEED ?= 0
.PHONY: assignments
assignments: $(STAMP)
	$(VENV)/bin/python assignments/build.py _build/assignments --seed $(COURSE_SEED)

clean:
	rm -rf _build $(VENV)
