import os
import pathlib
import sys

from hypothesis import settings

# tests import their helpers (install_cells, reference) and tools/book_pages.py, the list of
# the book's notebooks that _toc.yml gives, as top-level modules
sys.path.insert(0, str(pathlib.Path(__file__).parent))
sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "tools"))

# CI must pass or fail on the code, not on the draw: there, property tests
# replay a fixed sequence of examples; elsewhere each run explores new ones.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
