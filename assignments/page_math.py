"""The checkers' prompts typeset for the instructor page.

A prompt (``attnlib.book.exercises.CHECKERS[label].prompt``) is what a student reads in a terminal or
a notebook's output, so it is written in plain text: "Var(q . k)", "sigma_q = 2", "1/sqrt(d)".
The book renders MyST, so the instructor page shows the same prompt with its math typeset and its
Python names as code. :func:`typeset` rewrites one prompt for the page; nothing else reads it,
and the prompts themselves stay as they are.

Rules apply in order, each only to the text that earlier rules left as plain text (outside
``$...$`` and backticks). Exact phrases come first, then patterns that cover the common forms
("d = 16", "L = S = 1024", "8 x 3", "d_k"). ``tests/test_page_math.py`` fails on a phrase no
prompt uses any more and on plain-text math left in a typeset prompt.
"""
from __future__ import annotations

import re

# (plain text, page markdown): phrases of the prompts, longest first where one contains another.
# No "|" inside math: the page is a Markdown table, where "|" splits cells.
PHRASES: list[tuple[str, str]] = [
    # Python names, as code
    ("merge_states(merge_states(A, B), C)", "`merge_states(merge_states(A, B), C)`"),
    ("merge_states(A, merge_states(B, C))", "`merge_states(A, merge_states(B, C))`"),
    ("out[0, :, 0, 0]", "`out[0, :, 0, 0]`"),
    ("out.sum()", "`out.sum()`"),
    ("window=(1, 0)", "`window=(1, 0)`"),
    ("totals[i]", "`totals[i]`"),
    # math
    ("Var(q . k / sqrt(d)) = 2", r"$\operatorname{Var}(q \cdot k / \sqrt{d}) = 2$"),
    ("Var(q . k) / d", r"$\operatorname{Var}(q \cdot k) / d$"),
    ("Var(q . k)", r"$\operatorname{Var}(q \cdot k)$"),
    ("Var(q.k)/d_k", r"$\operatorname{Var}(q \cdot k) / d_k$"),
    ("q . k / sqrt(512)", r"$q \cdot k / \sqrt{512}$"),
    ("q . k", r"$q \cdot k$"),
    ("sigma_q = 2", r"$\sigma_q = 2$"),
    ("sigma_k = 1/2", r"$\sigma_k = 1/2$"),
    ("rho = 0.3", r"$\rho = 0.3$"),
    ("Student-t df = 3 / sqrt(3)", r"Student-$t$, $\mathrm{df} = 3$, divided by $\sqrt{3}$"),
    ("c -> 0", r"$c \to 0$"),
    ("c -> infinity", r"$c \to \infty$"),
    ("n x n", r"$n \times n$"),
    ("sum_jl |J_jl|", r"$\sum_{j,l} \lvert J_{jl} \rvert$"),
    ("the sum of |J_jl| over row j", r"the sum of $\lvert J_{jl} \rvert$ over row $j$"),
    ("the smallest kappa with |J|_2 <= kappa (1 - p_max)",
     r"the smallest $\kappa$ with $\lVert J \rVert_2 \leq \kappa\,(1 - p_{\max})$"),
    ("d p_0 / d Delta", r"$\partial p_0 / \partial \Delta$"),
    ("expression in Delta and T", r"expression in $\Delta$ and $T$"),
    ("positive Delta / T", r"positive $\Delta / T$"),
    ("dL/dz", r"$\partial \mathcal{L} / \partial z$"),
    ("sqrt(d_model)", r"$\sqrt{d_\mathrm{model}}$"),
    ("d_model = 768", r"$d_\mathrm{model} = 768$"),
    ("d_model = d_k", r"$d_\mathrm{model} = d_k$"),
    ("(3072/24)^-1/2", r"$(3072/24)^{-1/2}$"),
    ("8/d_k", r"$8/d_k$"),
    ("T != 1", r"$T \neq 1$"),
    ("N >= 10000", r"$N \geq 10000$"),
    ("T in {0.25, 0.5, 1, 2}", r"$T \in \{0.25, 0.5, 1, 2\}$"),
    ("max |error|", r"max $\lvert \mathrm{error} \rvert$"),
    ("|grad W_q| / tau", r"$\lVert \nabla_{W_q} \rVert / \tau$"),
    ("z_0..z_2, v_00..v_21, dO_0, dO_1", r"$z_0, \dots, z_2$, $v_{00}, \dots, v_{21}$, $dO_0$, $dO_1$"),
    ("sum_j P_j dP_j", r"$\sum_j P_j \, dP_j$"),
    ("sum_a dO_a O_a", r"$\sum_a dO_a O_a$"),
    ("(m, l, acc)", r"$(m, \ell, \mathrm{acc})$"),
    ("5 tanh(z / 5)", r"$5 \tanh(z / 5)$"),
    ("muP", r"$\mu$P"),
    # single letters that are math in their sentence
    ("expressions in d,", "expressions in $d$,"),
    ("expression in d,", "expression in $d$,"),
    ("within q, none within k", "within $q$, none within $k$"),
    ("q, k, v", "$q$, $k$, $v$"),
    ("with respect to q and v", "with respect to $q$ and $v$"),
    ("the final l ", r"the final $\ell$ "),
    ("float32 P ", "float32 $P$ "),
    ("gradient dV", "gradient $dV$"),
    ("T relative", "$T$ relative"),
    ("divided by T", "divided by $T$"),
    ("of row i", "of row $i$"),
    ("n rows", "$n$ rows"),
    ("largest n ", "largest $n$ "),
]

_NAME = r"[A-Za-z](?:_[A-Za-z0-9]+)?"  # one letter, perhaps with a subscript: d, d_k, L_b
PATTERNS: list[tuple[re.Pattern, str]] = [
    # the names of the answer's parts, as the student's code names them
    (re.compile(r"\b(a pair|a triple) \(([\w ,]+)\)"),
     lambda m: f"{m.group(1)} (" + ", ".join(f"`{name.strip()}`" for name in m.group(2).split(",")) + ")"),
    # Python names: a dotted name, a constant, a snake_case name of more than one letter
    (re.compile(r"\b[a-z]\w*\.[a-z_]\w*\b|\b[A-Z]+_[A-Z_]+\b|\b[a-z]{2,}_\w+\b"), lambda m: f"`{m.group(0)}`"),
    # an equation: "d = 16", "L = S = 1024", "d_k = 64", "1/sqrt(d)" as a value
    (re.compile(rf"\b{_NAME}(?: = {_NAME})* = -?\d[\d./]*\b"), lambda m: f"${m.group(0)}$"),
    (re.compile(r"\b(\d+)/sqrt\((\w+)\)"), lambda m: f"${m.group(1)}/\\sqrt{{{m.group(2)}}}$"),
    (re.compile(r"\b(\d+) x (\d+)\b"), lambda m: rf"${m.group(1)} \times {m.group(2)}$"),
    # a lone name with a subscript: d_k, L_b
    (re.compile(r"\b[A-Za-z]_[A-Za-z0-9]+\b"), lambda m: f"${m.group(0)}$"),
]

_PROTECTED = re.compile(r"(\$[^$]*\$|`[^`]*`)")


def _outside_protected(text: str, rewrite) -> str:
    """``text`` with ``rewrite`` applied to the parts outside math and code."""
    return "".join(part if _PROTECTED.fullmatch(part) else rewrite(part) for part in _PROTECTED.split(text))


def typeset(prompt: str) -> str:
    """``prompt`` in MyST markdown: math in ``$...$``, Python names in backticks."""
    text = prompt
    for plain, page in PHRASES:
        text = _outside_protected(text, lambda part: part.replace(plain, page))
    for pattern, page in PATTERNS:
        text = _outside_protected(text, lambda part: pattern.sub(page, part))
    return text
