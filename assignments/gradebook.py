"""Merge the chapters' grades into one course gradebook.

    python assignments/gradebook.py GRADEBOOK.csv RESULTS [RESULTS ...]

Each RESULTS is the folder ``grade.py`` wrote for one chapter (its ``scores.csv``), named after the
chapter (``results/07_cost_of_attention``), or a ``totals.csv`` of ``written.py totals`` (then the
written points count too). Writes one row per student: each chapter's points, the course total and
the possible points, and the chapters whose notebook was made for another student (graded with
the submitter's numbers: worth a look). A student missing from a chapter gets 0 there. The CSV
imports into a spreadsheet or an LMS's gradebook (match on the email column).
"""
from __future__ import annotations

import argparse
import csv
import pathlib


def chapter_scores(path: pathlib.Path) -> tuple[str, dict[str, float], float | None, dict[str, str]]:
    """(chapter, student -> points, possible points or None, student -> whom their notebook was made for)."""
    table = path / "scores.csv" if path.is_dir() else path
    if not table.is_file():
        raise ValueError(f"each RESULTS should be a folder with grade.py's scores.csv or a totals.csv, got "
                         f"{str(path)!r}")
    with open(table) as file:
        rows = list(csv.DictReader(file))
    points = {row["student"]: float(row["total"]) for row in rows}
    possible = {row.get("possible") for row in rows} - {None}
    made_for = {row["student"]: row.get("notebook made for", "") for row in rows}
    chapter = path.name if path.is_dir() else path.parent.name
    return chapter, points, float(possible.pop()) if len(possible) == 1 else None, made_for


def merge(out: pathlib.Path, chapters: list[pathlib.Path]) -> None:
    found = [chapter_scores(path) for path in chapters]
    students = sorted({student for _, points, _, _ in found for student in points})
    header = ["student", *[chapter for chapter, _, _, _ in found], "total", "possible", "notebooks made for another"]
    possible = sum(p for _, _, p, _ in found if p is not None)
    with open(out, "w", newline="") as file:
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(header)
        for student in students:
            scores = [points.get(student, 0.0) for _, points, _, _ in found]
            other = [chapter for chapter, _, _, made in found if made.get(student) not in ("", None, student)]
            writer.writerow([student, *[f"{score:g}" for score in scores], f"{sum(scores):g}", f"{possible:g}",
                             " ".join(other)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python assignments/gradebook.py", description=__doc__.split("\n")[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("results", type=pathlib.Path, nargs="+")
    args = parser.parse_args(argv)
    try:
        merge(args.out, args.results)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
