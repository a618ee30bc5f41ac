"""The code of the book's solutions: each ``{solution}`` block's Python, by its exercise's label.

chapters/conftest.py runs every page's solutions under nbval after the page's own cells, in the
page's kernel (as a student who copies a solution to the end of the chapter would), and asks
that no check answer "not yet"; tests/test_solutions.py checks that they are all there.
"""
import re

SOLUTION = re.compile(r"^(`{3,}|:{3,})\{solution\}\s*(\S+).*?^\1[ \t]*$", re.M | re.S)
PYTHON_BLOCK = re.compile(r"^```(?:python|ipython3?)\n(.*?)^```", re.M | re.S)
# a solution that calls attnlib's Triton kernel (fused.attention, backend="fused")
RUNS_TRITON = re.compile(r"\bfused\.|backend=[\"']fused[\"']")


def solution_blocks(notebook: dict) -> list[tuple[str, str]]:
    """``(label, code)`` for each Python block of each solution, in the page's order."""
    blocks = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for match in SOLUTION.finditer("".join(cell["source"])):
            blocks += [(match.group(2), code) for code in PYTHON_BLOCK.findall(match.group(0))]
    return blocks


def item_names(blocks: list[tuple[str, str]]) -> list[str]:
    """The nbval item of each block: ``Solution <label>``, then ``Solution <label> (2)``, ... for a
    solution of several blocks (item names must be unique within their notebook)."""
    seen: dict[str, int] = {}
    names = []
    for label, _ in blocks:
        seen[label] = seen.get(label, 0) + 1
        names.append(f"Solution {label}" + (f" ({seen[label]})" if seen[label] > 1 else ""))
    return names
