"""The instructor page's typeset prompts: every phrase of the map is still used by a prompt, no
plain-text math is left on the page, and the math is well formed for MyST inside a table."""
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "assignments"))
import page_math  # noqa: E402

from attnlib.book import exercises  # noqa: E402

PROMPTS = {label: checker.prompt for label, checker in exercises.CHECKERS.items()}
# what plain-text math looks like in a prompt: sqrt(...), a Greek name, a subscript, an arrow
PLAIN_MATH = re.compile(r"sqrt\(|\b(?:sigma|rho|tau|nu|infinity|Var)\b|\bsum_|\b[A-Za-z]_\w+|->|!=|>=|<=|\^"
                        r"|\w \. \w|\bd\b(?! \()")
MATH = re.compile(r"\$([^$]*)\$")


def test_every_phrase_is_in_a_prompt():
    unused = [plain for plain, _ in page_math.PHRASES if not any(plain in p for p in PROMPTS.values())]
    assert not unused, f"phrases no prompt uses any more: {unused}"


@pytest.mark.parametrize("label", PROMPTS)
def test_no_plain_text_math_is_left(label):
    typeset = page_math.typeset(PROMPTS[label])
    plain = re.sub(r"\$[^$]*\$|`[^`]*`", " ", typeset)
    assert not PLAIN_MATH.search(plain), f"{label}: plain-text math in {typeset!r}"


@pytest.mark.parametrize("label", PROMPTS)
def test_math_is_well_formed(label):
    typeset = page_math.typeset(PROMPTS[label])
    assert typeset.count("$") % 2 == 0, typeset
    for math in MATH.findall(typeset):
        assert "|" not in math, f"{label}: '|' splits a Markdown table's cell: {math!r}"
        depth = 0
        for char in re.sub(r"\\[{}]", "", math):
            depth += {"{": 1, "}": -1}.get(char, 0)
            assert depth >= 0, math
        assert depth == 0, math


def test_the_prompts_students_read_stay_plain():
    assert "Var(q . k)" in PROMPTS["ex-02-unequal-scales"]
    assert page_math.typeset(PROMPTS["ex-02-unequal-scales"]).startswith(r"$\operatorname{Var}(q \cdot k)$")
