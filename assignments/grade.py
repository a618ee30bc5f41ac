"""Grade a folder of submissions of one chapter without Gradescope or Docker.

    python assignments/grade.py CHAPTER SUBMISSIONS RESULTS

CHAPTER is the chapter's folder in the build (``_build/assignments/07_cost_of_attention``).
Each submission in SUBMISSIONS is named by its student: ``EMAIL.ipynb``, or the ``EMAIL.zip`` a
notebook's export cell writes. Each is graded with otter, as ``otter run`` does, as that
student: the course's grader (``course_judge.py``) reads the student from this process's
``ATTNLIB_STUDENT`` before the notebook runs, and grades the answers against that student's
numbers (a notebook made for another student is graded with the submitter's numbers, and its
results say so). Writes ``RESULTS/EMAIL/results.json``, ``RESULTS/scores.csv`` (each
question's points, the total, the possible points and whom each notebook was made for) and
``RESULTS/flags.csv`` (``scan.py``: code that reaches for the grader). ``written.py totals
RESULTS ...`` adds the written answers; ``gradebook.py`` merges chapters.

The submissions' code runs in this environment, in kernels of its own: run it in a container or
a throwaway account if you do not trust it (the judging never runs in those kernels, but they
can read and write what this account can).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import course_judge  # noqa: E402
import grading  # noqa: E402
import scan  # noqa: E402
import tasks  # noqa: E402
import written  # noqa: E402


def grade_as(submission: pathlib.Path, bundle: pathlib.Path, student: str, out: pathlib.Path | None = None):
    """otter's results for ``submission`` graded as ``student`` (an email, as the roster has it)."""
    from otter.run import main as otter_run

    previous = os.environ.get(grading.STUDENT_VARIABLE)
    os.environ[grading.STUDENT_VARIABLE] = tasks.student_key(student)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return otter_run(str(submission), autograder=str(bundle), output_dir=str(out) if out else None,
                             no_logo=True)
    finally:
        if previous is None:
            del os.environ[grading.STUDENT_VARIABLE]
        else:
            os.environ[grading.STUDENT_VARIABLE] = previous


def grade_folder(chapter: pathlib.Path, submissions: pathlib.Path, results: pathlib.Path) -> dict[str, float]:
    """Student -> points, for every submission in ``submissions``; flags in ``results/flags.csv``."""
    bundle = chapter / "autograder" / "autograder.zip"
    if not bundle.is_file():
        raise ValueError(f"chapter should be a chapter folder of a build with an autograder.zip, got "
                         f"{str(chapter)!r}, which has none")
    found = sorted([*submissions.glob("*.ipynb"), *submissions.glob("*.zip")])
    if not found:
        raise ValueError(f"submissions should be a folder of EMAIL.ipynb or EMAIL.zip files, got none in "
                         f"{str(submissions)!r}")
    points, rows = {}, []
    for submission in found:
        out = results / submission.stem
        out.mkdir(parents=True, exist_ok=True)
        graded = grade_as(submission, bundle, submission.stem, out)
        points[submission.stem] = graded.total
        made_for = course_judge.declared_student(_notebook_of(submission, out)) or ""
        rows.append({"student": tasks.student_key(submission.stem),
                     **{label: f"{graded.results[label].score:g}" for label in sorted(graded.results)},
                     "total": f"{graded.total:g}", "possible": f"{graded.possible:g}", "notebook made for": made_for})
    questions = sorted({name for row in rows for name in row} - {"student", "total", "possible", "notebook made for"})
    with open(results / "scores.csv", "w", newline="") as table:  # a notebook otter could not run has no questions
        writer = csv.DictWriter(table, fieldnames=["student", *questions, "total", "possible", "notebook made for"],
                                restval="0", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    scan.write_flags(scan.scan(submissions, chapter), results / "flags.csv")
    return points


def _notebook_of(submission: pathlib.Path, scratch: pathlib.Path) -> pathlib.Path:
    """The notebook file of ``submission`` (an .ipynb, or the one in an export .zip)."""
    if submission.suffix != ".zip":
        return submission
    notebook = scratch / "submitted.ipynb"
    notebook.write_text(json.dumps(written.read_submission(submission)))
    return notebook


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python assignments/grade.py", description=__doc__.split("\n")[0])
    parser.add_argument("chapter", type=pathlib.Path)
    parser.add_argument("submissions", type=pathlib.Path)
    parser.add_argument("results", type=pathlib.Path)
    args = parser.parse_args(argv)
    try:
        points = grade_folder(args.chapter, args.submissions, args.results)
    except ValueError as exc:
        parser.error(str(exc))
    for student, total in points.items():
        print(f"{student}: {total:g}")
    print(f"scores (each question, total, possible, whom each notebook was made for): {args.results / 'scores.csv'}")
    print(f"flags (code to read before trusting a grade): {args.results / 'flags.csv'}")


if __name__ == "__main__":
    main()
