"""Check the book's pages against its notation page: every symbol their math uses is defined there,
no page writes a form the page rules out, and a few prose slips are caught.

    python tools/check_notation.py [--notation notation.md] [--root .] [pages ...]

With no pages it checks the intro, the notation page and every chapter page of ``_toc.yml``
under ROOT. It reads only Markdown (the notebooks' Markdown cells and the LaTeX their code cells
print), so it runs in about a second, with no kernel and no book build. Exit status 1 and a
report by page when anything is found.

The notation page's tables are the specification. A table whose header has the columns
``Symbol`` and ``Not written`` defines symbols: every ``$...$`` of its Symbol cell is a
symbol, every entry of its Not-written cell (separated by ";") a form no page writes. A form
that is pure math (``$\\mathbb{E}$``, ``$s_h$``) is wrong wherever it appears; a form with words
around its math (``window of $W$``, ``$h$ heads``) is wrong only in that phrase, because the
letter itself means something else on another row. A table with the columns ``Letter`` and
``Pages`` lists local letters: free for one derivation, on the pages its Pages cell names only.
A row whose meaning says "in chapters 2 to 4 and 7" defines its symbol on those chapters only.

A prime makes a symbol of its own: ``z'`` must be defined (or local) as ``z`` is, except on
an index letter (``j'``, ``a'``), where it is a second index of the same kind. A ruled-out
phrase is found across a line break, and with a display equation as its math ("the sample
variance" followed by ``$$ S^2 = ... $$``). The Markdown inside a directive (an exercise, a
solution, an admonition) is read as prose and math; only code blocks are skipped.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import book_pages  # noqa: E402  (the toc's pages, as every tool reads them)

GREEK = {
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta", "vartheta",
    "iota", "kappa", "lambda", "mu", "nu", "xi", "pi", "rho", "sigma", "tau", "upsilon", "phi",
    "varphi", "chi", "psi", "omega", "Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi", "Sigma",
    "Phi", "Psi", "Omega", "ell",
}
FONTS = {"mathcal", "mathbb", "mathbf", "boldsymbol", "mathscr", "mathfrak"}
ACCENTS = {"bar", "hat", "tilde", "overline", "widehat", "widetilde", "vec", "dot"}
UPRIGHT = {"operatorname", "mathrm"}
WORDS = {"begin", "end", "text", "texttt", "mathtt", "textbf", "textit", "mbox", "label", "tag", "href", "mathit"}
# commands that carry no symbol of their own: the letters of their arguments are still read
# a derivative's d (\frac{d}{dz}) is an operator, not the width d
DERIVATIVE = re.compile(r"\\frac\s*\{\s*d\s*\}\s*\{\s*d")
MATH_SYMBOL = re.compile(r"\\\\|\\[a-zA-Z]+|\\.|[A-Za-z]|[_^{}]|[^A-Za-z_^{}\\]")


@dataclasses.dataclass(frozen=True)
class Finding:
    page: str
    kind: str       # "undefined", "ruled out", "prose", "index base"
    symbol: str
    snippet: str

    def __str__(self) -> str:
        return f"{self.page}: {self.kind} {self.symbol}: {self.snippet}"


def _group(tokens: list[str], start: int) -> tuple[str, int]:
    """The text of the brace group (or single token) at ``start``, and the index after it."""
    if start >= len(tokens):
        return "", start
    if tokens[start] != "{":
        return tokens[start], start + 1
    depth, end = 0, start
    while end < len(tokens):
        depth += {"{": 1, "}": -1}.get(tokens[end], 0)
        if depth == 0:
            break
        end += 1
    return "".join(tokens[start + 1:end]), end + 1


def canonical(form: str) -> str:
    """One spelling for one symbol: ``d_{\\text{model}}``, ``d_\\mathrm{model}`` -> ``d_{model}``."""
    form = re.sub(r"\\(?:text|mathrm|operatorname)\s*\{([^{}]*)\}", lambda m: "\\up{" + m[1].strip() + "}", form)
    form = re.sub(r"\s+", "", form)
    form = re.sub(r"_\{\\up\{([^{}]*)\}\}|_\\up\{([^{}]*)\}", lambda m: "_{" + (m[1] or m[2]) + "}", form)
    form = re.sub(r"([_^])([A-Za-z0-9])", r"\1{\2}", form)
    form = re.sub(r"\\(bar|hat|tilde|mathcal|mathbb|mathbf)([A-Za-z])", r"\\\1{\2}", form)
    return form.replace("\\up{", "\\operatorname{")


def symbols(math: str, defined: set[str]) -> list[str]:
    """The symbols a piece of LaTeX uses, as ``canonical`` spells them.

    A letter with a subscript (``d_k``, ``W_q``, ``H_{kv}``) is one symbol when ``defined`` has
    it; otherwise it is its base letter, and the subscript's letters are read as symbols too
    (the index letters). Words in ``\\text`` are prose; ``\\operatorname{E}`` and
    ``\\mathrm{lse}`` are upright symbols; ``dX`` (a capital after d) is a gradient.
    """
    tokens = MATH_SYMBOL.findall(DERIVATIVE.sub(r"\\frac{}{", math))
    found: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        name = token[1:] if token.startswith("\\") else ""
        if name in WORDS:
            _, i = _group(tokens, i + 1)
            continue
        if name in UPRIGHT or name in FONTS or name in ACCENTS:
            argument, i = _group(tokens, i + 1)
            if name in UPRIGHT:
                base = "\\operatorname{" + argument.strip() + "}"
            elif name in FONTS:
                base = f"\\{name}{{{argument.strip()}}}"
            else:
                inner = canonical(f"\\{name}{{{argument.strip()}}}")
                if inner in defined:
                    found.append(inner)
                else:
                    found += symbols(argument, defined)
                continue
        elif name in GREEK:
            base, i = token, i + 1
        elif re.fullmatch(r"[A-Za-z]", token):
            base, i = token, i + 1
            if token == "d" and i < len(tokens) and re.fullmatch(r"[A-Z]", tokens[i]) \
                    and "d" + tokens[i] in defined:
                base, i = "d" + tokens[i], i + 1
            elif token == "d" and i < len(tokens) and tokens[i][1:] in UPRIGHT:
                _, i = _group(tokens, i + 1)     # d\mathrm{lse}: the gradient of a tensor
                base = "dX"
        else:
            i += 1
            continue
        if i < len(tokens) and tokens[i] == "'":
            derivative = i + 1 < len(tokens) and tokens[i + 1] == "("
            base, i = (base if derivative else base + "'"), i + 1  # z' a symbol; f'(x) f's slope
        if i < len(tokens) and tokens[i] == "_":
            subscript, after = _group(tokens, i + 1)
            with_subscript = canonical(f"{base}_{{{subscript}}}")
            if with_subscript in defined:
                found.append(with_subscript)
                i = after
                continue
        found.append(canonical(base))
    return found


# --- the pages' math -------------------------------------------------------------------------

DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
ROLE = re.compile(r"\{math\}`([^`]*)`")
# inline math may run over a line break, never over a paragraph's end
INLINE = re.compile(r"(?<![\\$])\$(?!\$)((?:\\\$|[^$\n]|\n(?![ \t]*\n))+?)\$(?!\$)")
INLINE_CODE = re.compile(r"`[^`\n]*`")
FENCE = re.compile(r"[ \t]*(`{3,}|~{3,}|:{3,})[ \t]*(\{[^}]*\})?(.*)")
# directives whose body is not Markdown: code, raw output, and math (read as math)
CODE_DIRECTIVES = {"{code-block}", "{code-cell}", "{code}", "{raw}", "{eval-rst}", "{literalinclude}"}


def unfenced(text: str) -> str:
    """The Markdown a reader reads as prose and math: code blocks removed, a ``{math}``
    directive turned into ``$$...$$``, and the body of any other directive (an exercise, a
    solution, an admonition) kept, without its ``:option:`` lines. A fence closes only at a
    fence of its own character at least as long, so a code block inside a solution does not
    end the solution."""
    kept: list[str] = []
    stack: list[tuple[str, str]] = []       # (closing fence, what the body is)
    options = False
    for line in text.splitlines():
        fence = FENCE.fullmatch(line)
        body = stack[-1][1] if stack else "prose"
        if fence and stack and not fence[2] and not fence[3].strip() \
                and fence[1][0] == stack[-1][0][0] and len(fence[1]) >= len(stack[-1][0]):
            kept.append("$$" if body == "math" else "")
            stack.pop()
            continue
        if fence and body == "prose":
            directive = fence[2] or ""
            kind = ("math" if directive == "{math}" else
                    "code" if not directive or directive in CODE_DIRECTIVES else "prose")
            stack.append((fence[1], kind))
            kept.append("$$" if kind == "math" else "")
            options = True
            continue
        if options and re.match(r"[ \t]*:[\w-]+:", line):
            kept.append("")
            continue
        options = False
        kept.append("" if body == "code" else line)
    return "\n".join(kept)


def markdown_texts(path: pathlib.Path) -> list[str]:
    """The Markdown a reader sees on a page: the file, or a notebook's Markdown cells and the
    LaTeX its code cells print (SymPy's displays)."""
    if path.suffix == ".md":
        return [path.read_text()]
    texts = []
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "markdown":
            texts.append("".join(cell["source"]))
        for output in cell.get("outputs", []):
            latex = "".join(output.get("data", {}).get("text/latex", "")).strip()
            if latex.startswith("$"):        # math, not a listing typeset as LaTeX
                texts.append("$$" + latex.strip("$") + "$$")
    return texts


def math_pieces(text: str) -> tuple[list[str], str]:
    """The math of a Markdown text, and its prose with code removed, display math written
    inline where it stands (so that a phrase can end in it: "the sample variance" and then a
    display) and all white space one space (so that a phrase broken by a line is one)."""
    displays: list[str] = []

    def take(match: re.Match) -> str:
        displays.append(match[1])
        return f"\0{len(displays) - 1}\0"

    marked = ROLE.sub(lambda m: "$" + m[1] + "$", unfenced(text))
    marked = DISPLAY.sub(take, INLINE_CODE.sub(" ", marked))
    pieces = displays + [m[1] for m in INLINE.finditer(re.sub(r"\0\d+\0", " ", marked))]
    prose = re.sub(r"\0(\d+)\0", lambda m: " $" + displays[int(m[1])] + "$ ", marked)
    return pieces, " ".join(prose.split())


# --- the notation page -------------------------------------------------------------------------

@dataclasses.dataclass
class Notation:
    defined: dict[str, str]                          # symbol -> the meaning's first words
    ruled_out: dict[str, str]                        # a symbol no page writes -> its row
    ruled_out_math: list[tuple[re.Pattern, str, str]]  # (pattern, math of several symbols, row)
    phrases: list[tuple[re.Pattern, str, str]]       # (pattern, the form as written, its row)
    local: dict[str, set[str]]                       # letter -> page stems that may use it
    only_on: dict[str, set[str]]                     # symbol -> the chapters its row names
    path: pathlib.Path | None = None


def _top_level_split(math: str) -> list[str]:
    """``a, b`` -> ``["a", "b"]``, but ``T(n, d)`` stays one form."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(math):
        depth += {"(": 1, "{": 1, "[": 1, ")": -1, "}": -1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(math[start:index])
            start = index + 1
    return [part.strip() for part in parts + [math[start:]] if part.strip()]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def _tables(text: str):
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.startswith("|") and number + 1 < len(lines) and re.match(r"\|\s*:?-", lines[number + 1]):
            header = _cells(line)
            rows = []
            for body in lines[number + 2:]:
                if not body.startswith("|"):
                    break
                rows.append(dict(zip(header, _cells(body))))
            yield header, rows


def _without_specification(text: str) -> str:
    """The notation page without the cells that name forms (its Not-written column, its
    local letters): those name symbols, they do not use them."""
    lines = text.splitlines()
    kept, column, local = [], None, False
    for line in lines:
        if not line.startswith("|"):
            column, local = None, False
            kept.append(line)
            continue
        cells = _cells(line)
        if column is None and not local:
            column = cells.index("Not written") if "Not written" in cells else -1
            local = "Letter" in cells and "Pages" in cells
        if local:
            continue
        if column is not None and column >= 0 and column < len(cells):
            cells[column] = ""
        kept.append("| " + " | ".join(cells) + " |")
    return "\n".join(kept)


def _phrase_pattern(form: str) -> re.Pattern:
    """A regex for a ruled-out phrase such as ``window of $W$`` or ``$h$ heads``: its words in
    order, a few words apart at most, around inline math that starts with the form's symbol."""
    parts = []
    for math, words in re.findall(r"\$([^$]+)\$|([^$]+)", form):
        if math:
            symbol = re.escape(math.strip())
            parts.append(r"\$\s*" + symbol + r"(?![A-Za-z_{])[^$]*\$")
        else:
            parts += [r"\b(?i:" + re.escape(word) + ")" for word in words.split()]
    gap = r"[^$.;:()]{0,12}?"
    return re.compile(gap.join(parts))


# "in chapters 2 to 4 and 7": a symbol defined on those chapters only
ONLY_IN_CHAPTERS = re.compile(r"\bin chapters ((?:\d+)(?:(?:\s*,\s*|\s+to\s+|\s+and\s+)\d+)*)")


def _chapter_keys(chapters: str) -> set[str]:
    """``2 to 4 and 7`` -> ``{"02", "03", "04", "07"}``."""
    keys: set[str] = set()
    for start, end in re.findall(r"(\d+)(?:\s+to\s+(\d+))?", chapters):
        keys.update(f"{n:02d}" for n in range(int(start), int(end or start) + 1))
    return keys


def read_notation(path: pathlib.Path) -> Notation:
    notation = Notation({}, {}, [], [], {}, {}, path.resolve())
    forms: list[tuple[str, str]] = []
    for header, rows in _tables(path.read_text()):
        if "Symbol" in header and "Not written" in header:
            for row in rows:
                meaning = "row " + row["Symbol"]
                chapters = ONLY_IN_CHAPTERS.search(row.get("Meaning", ""))
                for math in re.findall(r"\$([^$]+)\$", row["Symbol"]):
                    for symbol in _top_level_split(math):
                        if symbol.strip() and symbol.strip() != r"\dots":
                            notation.defined[canonical(symbol)] = meaning
                            if chapters:
                                notation.only_on[canonical(symbol)] = _chapter_keys(chapters[1])
                for form in row["Not written"].split(";"):
                    if form.strip() and form.strip() != "-":
                        forms.append((form.strip(), meaning))
        elif "Letter" in header and "Pages" in header:
            for row in rows:
                pages = set(re.findall(r"\d\d(?:_\d)?|intro|notation", row["Pages"]))
                for math in re.findall(r"\$([^$]+)\$", row["Letter"]):
                    for symbol in _top_level_split(math):
                        notation.local.setdefault(canonical(symbol), set()).update(pages)
    for form, meaning in forms:
        pure = re.fullmatch(r"\$([^$]+)\$", form)
        if pure:
            for original in _top_level_split(pure[1]):
                symbol = canonical(original)
                if symbol == r"\dots":
                    continue
                if symbols(symbol, set(notation.defined) | {symbol}) != [symbol]:
                    # several symbols, as "AV" or "T(n,d)": caught as written, not letter by letter
                    pattern = re.compile(r"(?<![A-Za-z\\])" + re.escape(symbol) + r"(?![A-Za-z])")
                    notation.ruled_out_math.append((pattern, original, meaning))
                    continue
                if symbol in notation.defined:
                    raise ValueError(f"{path}: the form ${symbol}$ is ruled out for '{meaning}' but "
                                     f"defined for '{notation.defined[symbol]}'; write it as a phrase "
                                     "(e.g. 'window of $W$') so that only that use is caught")
                notation.ruled_out[symbol] = meaning
        else:
            notation.phrases.append((_phrase_pattern(form), form, meaning))
    return notation


# --- the check ---------------------------------------------------------------------------------

# A {ref} to a chapter renders as its title, so "Chapter {ref}`ch:x`" reads "Chapter The cost of
# attention"; {numref}`Chapter %s <ch:x>` gives the number.
TITLE_AFTER_NUMBER_WORD = re.compile(r"\b(?:Chapters?|Sections?|Chs?\.)\s+\{(?:ref|doc)\}`[^`]*`")

# Indices count from 0 (the notation page says so): a sum or a range that starts an index letter
# at 1 is the slip this catches, e.g. \sum_{i=1}^{d} or h = 1, \dots, H.
INDEX_LETTERS = {"i", "j", "h", "a", "r", "t", "\\kappa"}
INDEX_LETTER = r"(?:[ijhart]|\\kappa)'?"
FROM_ONE = re.compile(r"\\(?:sum|prod)_\{\s*" + INDEX_LETTER + r"\s*=\s*1\s*\}"
                      r"|(?<![A-Za-z\\])" + INDEX_LETTER + r"\s*=\s*1\s*,\s*(?:2\s*,\s*)?\\[lc]?dots")

def page_key(path: pathlib.Path) -> str:
    """The key a local letter's Pages cell uses: ``10_2`` for 10_2_training, ``13`` for 13_..."""
    match = re.match(r"(\d\d(?:_\d)?)_", path.name)
    return match[1] if match else path.stem


def _allowed(symbol: str, key: str, notation: Notation) -> bool:
    pages = notation.local.get(symbol)
    return pages is not None and (key in pages or key[:2] in pages)


def check_page(path: pathlib.Path, notation: Notation, root: pathlib.Path) -> list[Finding]:
    name = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    key = page_key(path)
    findings: list[Finding] = []
    seen: set[tuple[str, str]] = set()

    def report(kind: str, symbol: str, snippet: str) -> None:
        if (kind, symbol) not in seen:       # the first place a page slips is enough to find it
            seen.add((kind, symbol))
            findings.append(Finding(name, kind, symbol, " ".join(snippet.split())[:120]))

    texts = markdown_texts(path)
    if path == notation.path:
        texts = [_without_specification(text) for text in texts]
    for text in texts:
        pieces, prose = math_pieces(text)
        for math in pieces:
            flat = canonical(math)
            base = FROM_ONE.search(math)
            if base:
                report("index base", "from 1 (indices count from 0)", math)
            for pattern, form, meaning in notation.ruled_out_math:
                if pattern.search(flat):
                    report("ruled out", f"${form}$ ({meaning})", math)
            for symbol in symbols(math, set(notation.defined) | set(notation.ruled_out)):
                if symbol in notation.ruled_out:
                    report("ruled out", f"${symbol}$ ({notation.ruled_out[symbol]})", math)
                elif symbol.endswith("'") and symbol[:-1] in INDEX_LETTERS:
                    continue                  # j', a': a second index of the same kind
                elif symbol not in notation.defined and not _allowed(symbol, key, notation):
                    report("undefined", f"${symbol}$", math)
                elif symbol in notation.only_on and key[:2] not in notation.only_on[symbol] \
                        and not _allowed(symbol, key, notation) and key not in ("notation", "intro"):
                    report("outside its chapters", f"${symbol}$ ({notation.defined[symbol]})", math)
        for match in TITLE_AFTER_NUMBER_WORD.finditer(text):
            report("prose", "a title after 'Chapter' (write {numref}`Chapter %s <label>`)", match[0])
        for pattern, form, meaning in notation.phrases:
            for match in pattern.finditer(prose):
                report("prose", f"'{form}' ({meaning})", match[0])
    return findings


def default_pages(root: pathlib.Path) -> list[pathlib.Path]:
    """The intro, the notation page and every chapter page of ROOT's ``_toc.yml``."""
    chapters = [root / f"{page.file}.ipynb" for page in book_pages.toc_pages(root / "_toc.yml")
                if page.file.startswith("chapters/")]
    return [root / "intro.md", root / "notation.md", *chapters]


def check(pages: list[pathlib.Path], notation_path: pathlib.Path, root: pathlib.Path) -> list[Finding]:
    notation = read_notation(notation_path)
    return [finding for page in pages for finding in check_page(page, notation, root)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=pathlib.Path, default=pathlib.Path("."),
                        help="the book's directory (default: the current one)")
    parser.add_argument("--notation", type=pathlib.Path, default=None,
                        help="the notation page (default: ROOT/notation.md)")
    parser.add_argument("pages", nargs="*", type=pathlib.Path,
                        help="pages to check (.md or .ipynb; default: the intro, the notation page "
                             "and every chapter page of ROOT/_toc.yml)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    notation = (args.notation or root / "notation.md").resolve()
    pages = [page.resolve() for page in args.pages] or default_pages(root)
    findings = check(pages, notation, root)
    for finding in findings:
        print(finding)
    print(f"{len(findings)} finding(s) in {len({f.page for f in findings})} of {len(pages)} page(s)",
          file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
