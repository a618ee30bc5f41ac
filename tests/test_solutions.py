"""Every solution's code runs after its chapter, and every check it makes passes.

A student who copies a solution into the chapter's notebook must get no
error, and ``attnlib.book.exercises.check`` must call the solution correct. The
solutions run under nbval, after their page's cells and in the page's kernel
(chapters/conftest.py), so that one execution of each page serves both its
stored outputs and its solutions; here, that every solution is one of nbval's items.
"""
import json
import pathlib
import subprocess
import sys

import book_pages
from solution_cells import item_names, solution_blocks

ROOT = pathlib.Path(__file__).resolve().parents[1]

# the chapter and section pages, as _toc.yml lists them, whose solutions hold code
PAGES_WITH_SOLUTION_CODE = [path for path in book_pages.notebooks()
                            if solution_blocks(json.loads(path.read_text()))]


def test_most_chapters_have_solutions_with_code():
    chapters = {path.name[:2] for path in PAGES_WITH_SOLUTION_CODE}
    assert len(chapters) >= 10, sorted(chapters)


def test_every_solution_runs_under_nbval_after_its_pages_cells():
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-n", "0", *map(str, PAGES_WITH_SOLUTION_CODE)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    collected = [line for line in run.stdout.splitlines() if "::" in line]
    for path in PAGES_WITH_SOLUTION_CODE:
        items = [line.split("::", 1)[1] for line in collected if line.startswith(f"chapters/{path.name}::")]
        solutions = item_names(solution_blocks(json.loads(path.read_text())))
        assert items[-len(solutions):] == solutions, f"{path.name}: {items}"
        assert len(items) > len(solutions), f"{path.name}: no cells before the solutions"
