"""Grade the written answers of a folder of submissions by hand, and add them to the autograder's scores.

    python assignments/written.py collect SUBMISSIONS BUILD OUT
        reads every submission (NAME.ipynb, or the NAME.zip a notebook's export cell writes) in
        SUBMISSIONS and writes OUT/written.md (each written question: its points, then every
        student's answer) and OUT/written_scores.csv (student, question, points, score: fill in
        the scores). BUILD is the build folder, whose catalogue.csv holds the points.
    python assignments/written.py totals RESULTS SCORES OUT.csv
        RESULTS holds one folder per student with otter's results.json (``otter run -o
        RESULTS/NAME``); SCORES is the filled-in written_scores.csv. Writes each student's
        auto, written and total points.

On Gradescope, the written questions are manual questions of the same programming assignment
instead (the instructor page says how); this is for a course graded without it.
"""
from __future__ import annotations

import argparse
import csv
import json
import pathlib
import re
import zipfile

_LABEL = re.compile(r"\(`(ex-[\w-]+)`\)")
BEGIN_QUESTION = "<!-- BEGIN QUESTION -->"


def read_submission(path: pathlib.Path) -> dict:
    """The notebook of a submission: an .ipynb, or the one inside an export .zip."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as bundle:
            names = [name for name in bundle.namelist() if name.endswith(".ipynb")]
            if len(names) != 1:
                raise ValueError(f"a submission zip should hold one notebook, got {names} in {path}")
            return json.loads(bundle.read(names[0]))
    return json.loads(path.read_text())


def written_answers(notebook: dict) -> dict[str, str]:
    """Question name (``label-written``, or ``label`` for an exercise without a checker) -> the answer's text."""
    answers, question = {}, None
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "markdown":
            continue
        if BEGIN_QUESTION in source and _LABEL.search(source):
            label = _LABEL.search(source).group(1)
            question = f"{label}-written" if "**In words**" in source else label
        elif question and "otter_answer_cell" in cell["metadata"].get("tags", []):
            answers[question] = source.strip()
            question = None
    return answers


def manual_points(build: pathlib.Path) -> dict[str, int]:
    """Question name -> points, from the build's catalogue.csv."""
    with open(build / "catalogue.csv") as table:
        rows = list(csv.DictReader(table))
    # a checked exercise (its numbers not "-") has its written part as a question of its own
    return {(row["label"] + "-written" if row["numbers"] != "-" else row["label"]): int(row["by hand"])
            for row in rows if row["by hand"] != "0"}


def collect(submissions: pathlib.Path, build: pathlib.Path, out: pathlib.Path) -> None:
    paths = sorted(p for p in submissions.iterdir() if p.suffix in (".ipynb", ".zip"))
    if not paths:
        raise ValueError(f"submissions should be a folder of .ipynb or .zip files, got none in {submissions}")
    points = manual_points(build)
    answers = {path.stem: written_answers(read_submission(path)) for path in paths}
    questions = sorted({question for found in answers.values() for question in found})
    unknown = [q for q in questions if q not in points]
    if unknown:
        raise ValueError(f"the submissions' written questions should be in {build / 'catalogue.csv'}, got {unknown}: "
                         "is BUILD the build these notebooks came from?")
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for question in questions:
        lines.append(f"## {question} ({points[question]} points)\n")
        for student, found in answers.items():
            lines += [f"### {student}\n", found.get(question, "*(no answer)*") + "\n"]
    (out / "written.md").write_text("\n".join(lines))
    with open(out / "written_scores.csv", "w", newline="") as table:
        writer = csv.writer(table, lineterminator="\n")  # plain line ends, for sed and editors
        writer.writerow(["student", "question", "points", "score"])
        writer.writerows([student, question, points[question], ""] for student in answers for question in questions)


def totals(results: pathlib.Path, scores: pathlib.Path, out: pathlib.Path) -> None:
    """Each student's auto, written and total points: every student with results in ``results`` (a
    chapter with no written part has a scores file with a header only) and every student ``scores``
    names."""
    written: dict[str, float] = {}
    with open(scores) as table:
        for number, row in enumerate(csv.DictReader(table), start=2):
            if any(row.get(column) is None for column in ("student", "question", "points", "score")):
                raise ValueError(f"scores should have the columns student, question, points and score in every "
                                 f"row, got line {number} of {scores} without some of them")
            if row["score"].strip() == "":
                raise ValueError(f"scores should have a score in every row, got none for {row['student']}, "
                                 f"{row['question']} in {scores}")
            score = float(row["score"])
            if not 0 <= score <= float(row["points"]):
                raise ValueError(f"a score should be between 0 and its points ({row['points']}), got {score} for "
                                 f"{row['student']}, {row['question']}")
            written[row["student"]] = written.get(row["student"], 0.0) + score
    graded_students = {path.parent.name for path in results.glob("*/results.json")}
    rows = [("student", "auto", "written", "total")]
    for student in sorted(graded_students | set(written)):
        graded = results / student / "results.json"
        if not graded.is_file():
            raise ValueError(f"results should hold {student}/results.json (otter run -o {results / student}), "
                             f"got no such file")
        auto = sum(test.get("score", 0) for test in json.loads(graded.read_text())["tests"])
        mine = written.get(student, 0.0)
        rows.append((student, f"{auto:g}", f"{mine:g}", f"{auto + mine:g}"))
    with open(out, "w", newline="") as table:
        csv.writer(table, lineterminator="\n").writerows(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python assignments/written.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gather = sub.add_parser("collect", help="every written answer of a folder of submissions, to grade by hand")
    gather.add_argument("submissions", type=pathlib.Path)
    gather.add_argument("build", type=pathlib.Path)
    gather.add_argument("out", type=pathlib.Path)
    add = sub.add_parser("totals", help="otter's scores plus the written ones, per student")
    add.add_argument("results", type=pathlib.Path)
    add.add_argument("scores", type=pathlib.Path)
    add.add_argument("out", type=pathlib.Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "collect":
            collect(args.submissions, args.build, args.out)
        else:
            totals(args.results, args.scores, args.out)
    except ValueError as exc:
        parser.error(str(exc))


if __name__ == "__main__":
    main()
