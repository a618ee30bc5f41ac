"""The notation page is the book's specification of its symbols: every page follows it, and the
checker that says so catches a collision put back (tools/check_notation.py)."""
from __future__ import annotations

import json
import pathlib

import pytest

import check_notation

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTATION = ROOT / "notation.md"


def findings_on(tmp_path: pathlib.Path, name: str, markdown: str, notation=NOTATION):
    page = tmp_path / name
    page.write_text(markdown)
    return check_notation.check([page], notation, tmp_path)


def notebook(tmp_path: pathlib.Path, name: str, markdown: str, latex_output: str) -> pathlib.Path:
    """A notebook with one Markdown cell and one code cell that printed ``latex_output``."""
    cells = [{"cell_type": "markdown", "metadata": {}, "source": [markdown]},
             {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": ["show()"],
              "outputs": [{"output_type": "display_data", "metadata": {},
                           "data": {"text/latex": [latex_output], "text/plain": ["..."]}}]}]
    path = tmp_path / name
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_every_page_follows_the_notation():
    findings = check_notation.check(check_notation.default_pages(ROOT), NOTATION, ROOT)
    by_page: dict[str, list[str]] = {}
    for finding in findings:
        by_page.setdefault(finding.page, []).append(f"  {finding.kind} {finding.symbol}: {finding.snippet}")
    report = "\n".join(f"{page} ({len(lines)}):\n" + "\n".join(lines) for page, lines in by_page.items())
    if findings:
        pytest.fail(f"{len(findings)} notation finding(s) on {len(by_page)} page(s):\n{report}", pytrace=False)


@pytest.mark.parametrize("markdown, expected", [
    # chapter 13's window before the notation was decided, and chapter 2's blackboard E
    ("A window of $W$ keys covers the recent past.", ("prose", "'window $W$'")),
    (r"so $\mathbb{E}[q \cdot k] = 0$ for independent vectors", ("ruled out", r"$\mathbb{E}$")),
    # chapter 6's head count and head index, chapter 13's sink logit and weights, ch10's coordinate c
    ("The layer has $h$ heads of width $d_k$.", ("prose", "'$h$ heads'")),
    ("Head $i$ gets its own slice of the width.", ("prose", "'head $i$'")),
    (r"$$ w_{ij} = \frac{e^{z_{ij}}}{e^{s_h} + \sum_{j'} e^{z_{ij'}}} $$", ("ruled out", "$s_{h}$")),
    (r"$$ w_{ij} = \frac{e^{z_{ij}}}{e^{s_h} + \sum_{j'} e^{z_{ij'}}} $$", ("ruled out", "$w_{ij}$")),
    (r"the output is $O_{ic} = \sum_j p_{ij} V_{jc}$", ("ruled out", "$O_{ic}$")),
    # chapter 7's time, budget and bytes per number; 9.3's peak and bandwidth
    (r"$$ T(n, d) = O(n^2 d) $$", ("ruled out", "$T(n, d)$")),
    ("a memory budget of $B$ bytes", ("prose", "'budget $B$'")),
    ("with $s$ bytes per number", ("prose", "'$s$ bytes'")),
    ("a peak of $P$ operations per second", ("prose", "'peak $P$'")),
    ("a bandwidth of $B$ bytes per second", ("prose", "'bandwidth $B$'")),
    # an index counted from 1: chapter 2's sum, chapter 12's ALiBi heads
    (r"$$ s = q \cdot k = \sum_{i=1}^{d} q_i k_i $$", ("index base", "from 1")),
    (r"$$ m_h = 2^{-8h/H}, \quad h = 1, \dots, H $$", ("index base", "from 1")),
    # a chapter's title where its number was meant (review item 60)
    ("as Chapter {ref}`ch:variance-symbolic` derived", ("prose", "a title after 'Chapter'")),
    # a symbol the notation page does not define at all
    (r"the gain $\Omega$ of the layer", ("undefined", r"$\Omega$")),

    # review 2026-12-04 item 34: chapter 3's estimator, a display equation after "variance"
    ("the unbiased sample variance\n\n$$\nS^2 = \\frac{1}{N-1} \\sum (s - \\bar s)^2 ,\n$$",
     ("prose", "'variance $S^2$'")),
    # a phrase broken by a line
    ("The layer has $h$\nheads of width $d_k$.", ("prose", "'$h$ heads'")),
    ("A window\nof $W$ keys.", ("prose", "'window $W$'")),
    # chapter 6's solution: the prose after a code block inside a solution directive
    ("````{solution} ex-06-x\n:class: dropdown\n\n```python\nhot = 1\n```\n\n"
     "the temperature can live in the\ndenominator or in $W^Q$.\n````", ("ruled out", "$W^Q$")),
    (":::{note}\nThe projection $W^K$ of the keys.\n:::", ("ruled out", "$W^K$")),
    # 10.4's base-2 score: a primed letter is a symbol of its own
    (r"where $s' = \tau \log_2 e \; q \cdot k$ is the score in base 2", ("ruled out", "$s'$")),
    (r"so that $q'$ is the query after the change", ("undefined", "$q'$")),
    # 14.2's projection and LayerNorm biases, once written as chapter 8's tile sizes and
    # chapter 11's bandwidth
    ("The key bias $b_k$ is the one term softmax never sees.", ("prose", "'bias $b_k$'")),
    ("and the gain $\\gamma$ and bias $\\beta$ learned", ("prose", "'bias $\\beta$'")),
])
def test_a_collision_put_back_is_reported(tmp_path, markdown, expected):
    findings = findings_on(tmp_path, "13_attention_in_models.md", markdown)
    assert expected in {(f.kind, f.symbol.split(" (")[0]) for f in findings}, findings


def test_a_letter_defined_for_some_chapters_is_caught_on_others(tmp_path):
    """$d$ means $d_k$ in chapters 2 to 4 and 7 only: 14.1's $w \\approx m + n d$ read it as a
    quantisation step (review 2026-12-04 item 5)."""
    sentence = r"the weight is read as $w \approx m + n d$"
    found = findings_on(tmp_path, "14_1_the_checkpoints.md", sentence)
    assert [(f.kind, f.symbol.split(" (")[0]) for f in found] == [("outside its chapters", "$d$")]
    assert findings_on(tmp_path, "03_variance_monte_carlo.md", r"for every width $d$") == []


def test_the_math_a_code_cell_prints_is_checked(tmp_path):
    """SymPy's displays are math the reader sees: chapter 10's weights printed as alpha_1, ..."""
    page = notebook(tmp_path, "10_1_gradients.ipynb", "The weights $p_0, p_1$ of one row.",
                    r"$\displaystyle \alpha_{1} \left(g_{1} - \alpha_{1} g_{1}\right)$")
    kinds = {(f.kind, f.symbol.split(" (")[0]) for f in check_notation.check([page], NOTATION, tmp_path)}
    assert ("ruled out", r"$\alpha_{1}$") in kinds, kinds


def test_the_symbols_the_page_defines_pass(tmp_path):
    markdown = "\n\n".join([
        r"The $H$ heads of width $d_k = d_{\text{model}} / H$ read $H_{kv}$ key/value heads.",
        r"A ring of $W$ ranks holds blocks of $L_b = n / W$ positions; a window of $w$ keys.",
        r"$$ z_{ij} = \tau\, q_i \cdot k_j, \qquad p_{ij} = e^{z_{ij} - \mathrm{lse}_i} $$",
        r"$\operatorname{E}[s] = 0$ and $\operatorname{Var}(s) = d_k$; $dX = \partial \mathcal{L} / \partial X$.",
        r"```{math}" "\n" r"O_{ia} = \sum_j p_{ij} V_{ja}, \qquad \zeta_h" "\n```",
        r"Key 0 is the first: {math}`j = 0, \dots, S-1`.",
        "Code is not math: `W = 4` and `alpha_1` are names.",
        "```python\n# W^Q, E = 64: code, not math\n```",
        r"A second index is primed, $\sum_{j'} e^{z_{ij'}}$; $z'_{ij} = z_{ij} \log_2 e$ and $m'_i$.",
        r"A derivative is no width: $\frac{d}{dz} \mathrm{cap}_c(z)$, $\sigma'(z)$, $d\mathrm{lse}_i$.",
    ])
    assert findings_on(tmp_path, "13_attention_in_models.md", markdown) == []


def test_a_local_letter_is_free_only_on_its_pages(tmp_path):
    """$f$ is local to chapter 8 (a proof about functions); elsewhere it is undefined."""
    assert findings_on(tmp_path, "08_online_softmax.md", "for any function $f$") == []
    elsewhere = findings_on(tmp_path, "10_1_gradients.md", "for any function $f$")
    assert [(f.kind, f.symbol) for f in elsewhere] == [("undefined", "$f$")]


def test_a_form_ruled_out_must_not_be_defined_elsewhere(tmp_path):
    """A bare letter that another row defines can be ruled out only as a phrase."""
    notation = tmp_path / "notation.md"
    notation.write_text("| Symbol | Meaning | Not written |\n|---|---|---|\n"
                        "| $W$ | ranks of a ring | |\n| $w$ | a window | $W$ |\n")
    with pytest.raises(ValueError, match=r"\$W\$ is ruled out for 'row \$w\$' but defined"):
        check_notation.read_notation(notation)


def test_the_command_line_reports_by_page(tmp_path, capsys):
    page = tmp_path / "13_attention_in_models.md"
    page.write_text("A window of $W$ keys.")
    status = check_notation.main(["--notation", str(NOTATION), "--root", str(tmp_path), str(page)])
    out = capsys.readouterr().out
    assert status == 1
    assert out.startswith("13_attention_in_models.md: prose 'window $W$'"), out


# The four breaches of review 2026-12-04 item 34, as each page had it: (page, the text now, the breach)
PUT_BACK = [
    ("chapters/03_variance_monte_carlo.ipynb", r"\hat\sigma^2 = \frac{1}{N-1}", r"S^2 = \frac{1}{N-1}",
     ("prose", "'variance $S^2$'")),
    ("chapters/06_heads_and_temperature.ipynb", "denominator or in $W_q$.", "denominator or in $W^Q$.",
     ("ruled out", "$W^Q$")),
    ("chapters/10_4_fused_backward.ipynb", r"$P = 2^{z' - \mathrm{lse}\log_2 e}$",
     r"$P = 2^{s' - \mathrm{lse}\log_2 e}$", ("ruled out", "$s'$")),
    ("chapters/14_1_the_checkpoints.ipynb", "the weight is read as minimum + level × step.",
     r"the weight is read as $w \approx m + n d$.", ("outside its chapters", "$d$")),
]


@pytest.mark.parametrize("page, now, breach, expected", PUT_BACK, ids=[p[0].split("/")[1][:5] for p in PUT_BACK])
def test_each_breach_the_review_found_is_reported_when_put_back_in_its_page(tmp_path, page, now, breach, expected):
    notebook = json.loads((ROOT / page).read_text())
    cells = [cell for cell in notebook["cells"] if now in "".join(cell["source"])]
    assert len(cells) == 1, f"{page} no longer holds {now!r}: update PUT_BACK"
    cells[0]["source"] = "".join(cells[0]["source"]).replace(now, breach)
    (tmp_path / "chapters").mkdir()
    copy = tmp_path / page
    copy.write_text(json.dumps(notebook))
    found = {(f.kind, f.symbol.split(" (")[0]) for f in check_notation.check([copy], NOTATION, tmp_path)}
    assert expected in found, found
