# Two commands on a fresh machine (Python 3.10+ and make):
#   make book   creates .venv, installs everything, builds the HTML book
#   make test   creates .venv, installs everything, runs every test
VENV   ?= .venv
PYTHON ?= python3
PIP     = $(VENV)/bin/pip --disable-pip-version-check --quiet
STAMP   = $(VENV)/.installed

.PHONY: book test install-cells student-edition clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -r requirements.txt
	$(VENV)/bin/python -c "import torch, jupyter_book, pytest"
	$(PIP) install --no-deps -e .
	touch $(STAMP)

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	@echo "The book is in _build/html/index.html"

test: $(STAMP)
	$(VENV)/bin/python -m pytest

# After changing repository: in _config.yml, rewrite every chapter's install cell.
install-cells: $(STAMP)
	$(VENV)/bin/python tests/install_cells.py

# The chapters without solutions, with a check cell after each checked exercise.
student-edition: $(STAMP)
	$(VENV)/bin/python -m attnlib.exercises student-edition _build/student

clean:
	rm -rf _build $(VENV)
