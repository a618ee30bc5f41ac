"""A heading's formula as plain text, for the PDF's bookmarks (a PDF outline holds text only).

    >>> tex_text(r"\\operatorname{Var}(q \\cdot k)/d_k")
    'Var(q · k)/dₖ'

Covers what the book's headings use: operator names, \\text, square roots, sub- and superscripts
(as Unicode where every character has one: dₖ, 10⁹; else d_model), Greek letters and a few
symbols. An unknown command keeps its name without the backslash.
"""
from __future__ import annotations

import re

SYMBOLS = {
    "cdot": "·", "times": "×", "infty": "∞", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "approx": "≈",
    "ne": "≠", "neq": "≠", "to": "→", "rightarrow": "→", "in": "∈", "sum": "∑", "ldots": "…", "dots": "…",
    "top": "ᵀ", "log": "log", "exp": "exp", "max": "max", "min": "min", "softmax": "softmax",
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "varepsilon": "ε", "theta": "θ",
    "lambda": "λ", "mu": "μ", "nu": "ν", "xi": "ξ", "pi": "π", "rho": "ρ", "sigma": "σ", "tau": "τ",
    "phi": "φ", "psi": "ψ", "omega": "ω", "Sigma": "Σ", "Delta": "Δ", "ell": "ℓ",
    ",": " ", ";": " ", "!": "", " ": " ", "quad": " ", "{": "{", "}": "}", "%": "%", "_": "_",
}
SUB = dict(zip("0123456789+-=()aehijklmnoprstuvx", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ"))
SUP = dict(zip("0123456789+-=()in", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁱⁿ"))
WRAPPERS = {"operatorname", "text", "mathrm", "mathit", "mathbf", "mathsf", "mathtt", "textrm", "boldsymbol",
            "mathcal", "left", "right", "big", "Big", "bigl", "bigr"}


def _group(tex: str, start: int) -> tuple[str, int]:
    """The argument at ``start``: a {braced group} (its inside) or one character or command."""
    while start < len(tex) and tex[start] == " ":
        start += 1
    if start >= len(tex):
        return "", start
    if tex[start] == "{":
        depth = 0
        for end in range(start, len(tex)):
            depth += {"{": 1, "}": -1}.get(tex[end], 0)
            if depth == 0:
                return tex[start + 1:end], end + 1
        return tex[start + 1:], len(tex)
    if tex[start] == "\\":
        name = re.match(r"\\([A-Za-z]+|.)", tex[start:]).group(0)
        return name, start + len(name)
    return tex[start], start + 1


def _script(text: str, table: dict, mark: str) -> str:
    return "".join(table[c] for c in text) if text and all(c in table for c in text) else f"{mark}{text}"


def tex_text(tex: str) -> str:
    """Plain text for a TeX formula (inline math, without its delimiters)."""
    out, i = [], 0
    while i < len(tex):
        char = tex[i]
        if char == "\\":
            name = re.match(r"\\([A-Za-z]+|.)", tex[i:]).group(1)
            i += 1 + len(name)
            if name in WRAPPERS:
                continue  # its argument is read as a group next
            if name == "sqrt":
                argument, i = _group(tex, i)
                inner = tex_text(argument)
                out.append("√" + (inner if len(inner) <= 2 or inner.isalnum() or "_" not in inner and
                                  not re.search(r"[ +−·/]", inner) else f"({inner})"))
                continue
            if name == "frac":
                top, i = _group(tex, i)
                bottom, i = _group(tex, i)
                out.append(f"{tex_text(top)}/{tex_text(bottom)}")
                continue
            out.append(SYMBOLS.get(name, name))
        elif char in "_^":
            argument, i = _group(tex, i + 1)
            inner = tex_text(argument)
            out.append(_script(inner, SUB if char == "_" else SUP, char))
        elif char in "{}":
            i += 1
        elif char == "-":
            out.append("−")
            i += 1
        elif char == "~":
            out.append(" ")
            i += 1
        else:
            out.append(char)
            i += 1
    return re.sub(r" {2,}", " ", "".join(out)).strip()
