"""One citation style: author-year in the text and in the bibliography.

sphinxcontrib-bibtex cites by author and year in the text
(``bibtex_reference_style: author_year``), but labels the list with
pybtex's styles, which know only alpha labels ([VSP+17]) and numbers. This
extension registers a pybtex label style that writes the label as the text
cites it ("Vaswani et al., 2017", "Milakov and Gimelshein, 2018"), and a
formatting style ``author_year`` (pybtex's ``plain``, sorted by author, year
and title, with those labels). ``bibtex_default_style: author_year`` in
``_config.yml`` selects it. A label is plain text, so the text's citations
write "et al." upright too: ``bibtex_reference_style: author_year_upright``
is sphinxcontrib-bibtex's ``author_year`` with that one change.

Two entries with the same label get a letter after the year (2022a, 2022b),
as in any author-year list.
"""
from __future__ import annotations

import codecs
from collections import Counter
from dataclasses import dataclass, field

import latexcodec  # noqa: F401  (registers the 'ulatex' codec; pybtex depends on it)

from pybtex.plugin import register_plugin
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.richtext import Text
from pybtex.style.labels import BaseLabelStyle
from pybtex.style import template
from sphinx.application import Sphinx
from sphinxcontrib.bibtex.plugin import register_plugin as register_bibtex_plugin
from sphinxcontrib.bibtex.style.referencing import PersonStyle
from sphinxcontrib.bibtex.style.template import join as bibtex_join
from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle


def plain(latex: str) -> str:
    """A BibTeX field as a reader sees it: accents decoded, braces removed."""
    return codecs.decode(latex, "ulatex").replace("{", "").replace("}", "")


def surname(person) -> str:
    """'de Jong', 'Ré', 'Kaiser': the family name as the text cites it. A family name of
    several words ('Ben Allal') is tied with no-break spaces, as the text's citations tie it."""
    return plain(" ".join([*person.prelast_names, "\u00a0".join(person.last_names)]))


def is_others(person) -> bool:
    """The "others" of a BibTeX author list ("Dehghani, Mostafa and others")."""
    return str(person) == "others"


def who(entry) -> str:
    """The names the text cites: one, two, or the first et al."""
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    if not people:
        for field in ("organization", "institution", "publisher", "title"):
            if field in entry.fields:
                return plain(entry.fields[field])
        return entry.key
    if len(people) == 1:
        return surname(people[0])
    # BibTeX's "and others" stands for authors not listed: more than two in all
    if len(people) == 2 and not is_others(people[1]):
        return f"{surname(people[0])} and {surname(people[1])}"
    return f"{surname(people[0])} et al."


class AuthorYearLabelStyle(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        labels = [self.format_label(entry) for entry in sorted_entries]
        total = Counter(labels)
        seen = Counter()
        for label in labels:
            if total[label] == 1:
                yield label
            else:
                yield label + "abcdefghijklmnopqrstuvwxyz"[seen[label]]
                seen[label] += 1

    def format_label(self, entry) -> str:
        year = entry.fields.get("year", "n.d.")
        return f"{who(entry)}, {year}"


def persons_of(entry, role: str) -> list:
    """The entry's persons in ``role``; a missing role is a missing field, as in pybtex's
    ``names``, so that a template can fall back (from authors to editors)."""
    try:
        return entry.persons[role]
    except KeyError:
        raise template.FieldIsMissing(role, entry) from None


@template.node
def names_et_al(children, context, role, **kwargs):
    """The persons of ``role`` joined as pybtex's ``names`` joins them, with BibTeX's
    "and others" printed as "et al." ("Dehghani et al.", not "Dehghani and others")."""
    persons = persons_of(context["entry"], role)
    style = context["style"]
    named = [style.format_name(person, style.abbreviate_names) for person in persons
             if not is_others(person)]
    if len(named) == len(persons):
        return template.join(**kwargs)[named].format_data(context)
    # "Greg Yang, Edward J. Hu, et al.": the named authors, then the ones left unnamed
    return Text(template.join(sep=", ")[named].format_data(context), "," if len(named) > 1 else "", " et al.")


class AuthorYearStyle(PlainStyle):
    default_label_style = "author_year"
    default_sorting_style = "author_year_title"

    def format_names(self, role, as_sentence=True):
        formatted = names_et_al(role, sep=", ", sep2=" and ", last_sep=", and ")
        return template.sentence[formatted] if as_sentence else formatted


@dataclass
class PersonStyleEtAl(PersonStyle):
    """Names in the text: the first et al. for three or more authors, and also for an
    author list that ends in BibTeX's "and others"."""

    def author_or_editor_or_title(self, full: bool):
        joined = dict(sep=self.sep, sep2=self.sep2, last_sep=self.last_sep,
                      other=None if full else self.other)
        return template.first_of[template.optional[cited_names("author", **joined)],
                                 template.optional[cited_names("editor", **joined)],
                                 template.tag("em")[template.field("title")]]


@template.node
def cited_names(children, data, role, other=None, **kwargs):
    persons = persons_of(data["entry"], role)
    style = data["style"]
    named = [style.person.style_plugin.format(person, style.person.abbreviate) for person in persons
             if not is_others(person)]
    if other is not None and len(named) < len(persons):
        return Text(named[0].format_data(data), other)
    return bibtex_join(other=other, **kwargs)[named].format_data(data)


@dataclass
class UprightAuthorYearReferenceStyle(AuthorYearReferenceStyle):
    """[Vaswani et al., 2017] in the text, exactly as the list labels it."""

    person: PersonStyle = field(default_factory=lambda: PersonStyleEtAl(other=" et al."))


def setup(app: Sphinx) -> dict:
    register_plugin("pybtex.style.labels", "author_year", AuthorYearLabelStyle)
    register_plugin("pybtex.style.formatting", "author_year", AuthorYearStyle)
    register_bibtex_plugin("sphinxcontrib.bibtex.style.referencing", "author_year_upright",
                           UprightAuthorYearReferenceStyle)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
