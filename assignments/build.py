"""Build the graded assignments: one otter-grader assignment per chapter with exercises.

    python assignments/build.py OUT [--seed N] [--chapters 01 07]

For each chapter, writes an otter "master" notebook into OUT/source/ and runs ``otter assign``
on it, which writes

    OUT/NN_topic/student/NN_topic.ipynb         the notebook to hand out
    OUT/NN_topic/autograder/autograder.zip      the bundle for Gradescope or ``otter run``,
                                                with the hidden tests
    OUT/NN_topic/autograder/NN_topic.ipynb      the reference solutions
    OUT/catalogue.csv                           every exercise: label, chapter, points, auto or by hand

Each checked exercise becomes an autograded question whose hidden test compares the
answer with the reference for the course's numbers (``--seed``); an exercise that asks
why, and every exercise without a checker, gets a written answer graded by hand.
"""
from __future__ import annotations

import argparse
import csv
import json
import pathlib
import re
import shutil
import sys
from contextlib import redirect_stdout

import numpy as np
import sympy as sp
import torch
import yaml

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

import catalogue  # noqa: E402
import tasks  # noqa: E402
from install_cells import repository  # noqa: E402

OTTER_VERSION = "7.0.0"
_BOOK_ROLE = re.compile(r"\{(?:eq|ref|numref|doc)\}`([^`]*)`")


def answer_name(label: str) -> str:
    return "answer_" + label.replace("-", "_")


def literal(value) -> str:
    """Python source that evaluates to ``value`` in a hidden test (with ``sp`` imported)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, sp.Expr):
        return f"sp.sympify({sp.srepr(value)!r})"
    if value is None or isinstance(value, (bool, np.bool_)):
        return repr(None if value is None else bool(value))
    if isinstance(value, tuple):
        return "(" + "".join(f"{literal(x)}, " for x in value) + ")"
    if isinstance(value, (list, np.ndarray)):
        return repr(np.asarray(value, dtype=float).tolist())
    return repr(float(value))


def _cell(kind: str, source: str, **metadata) -> dict:
    cell = {"cell_type": kind, "metadata": metadata, "source": source}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def _test(name: str, points: int, hidden: bool, arguments: str, body: str) -> dict:
    config = f'""" # BEGIN TEST CONFIG\npoints: {points}\nhidden: {str(hidden).lower()}\n""" # END TEST CONFIG\n'
    return _cell("code", f"{config}def {name}({arguments}):\n{body}")


def _plain_text(markdown: str) -> str:
    """The book's markdown for a notebook: cross-references to the book become plain words."""
    return _BOOK_ROLE.sub(lambda m: f"the book's `{m.group(1)}`", markdown)


def question_cells(exercise: catalogue.Exercise, course_seed: int) -> list[dict]:
    """The otter question (and written question) of one exercise."""
    cells = []
    heading = f"### {exercise.title} (`{exercise.label}`)\n\n{_plain_text(exercise.text)}"
    if exercise.checked:
        if exercise.label not in tasks.BY_LABEL:
            raise ValueError(f"exercise {exercise.label} has a checker but no task in assignments/tasks.py: "
                             "add its reference solution there")
        task = tasks.BY_LABEL[exercise.label]
        params = task.params(course_seed)
        name = answer_name(exercise.label)
        numbers = f"\n\n**Your numbers.** {task.numbers.format(**params)}" if task.variants else ""
        with_numbers = " (with your numbers)" if task.variants else ""
        cells += [
            _cell("raw", f"# BEGIN QUESTION\nname: {exercise.label}\npoints: {exercise.auto_points}"),
            _cell("markdown", heading + numbers),
            _cell("raw", "# BEGIN SOLUTION"),
            _cell("code", f"# {exercise.label}{with_numbers}: {exercise.checks}\n"
                          f"# BEGIN SOLUTION NO PROMPT\n{task.code(params)}\n# END SOLUTION\n"
                          f"{name} = answer  # SOLUTION"),
            _cell("raw", "# END SOLUTION"),
            _cell("raw", "# BEGIN TESTS"),
            _test(f"test_{name}_is_answered", 0, False, name,
                  f"    assert {name} is not ..., 'replace ... by your answer'"),
        ]
        if task.variants:
            expected = literal(tasks.run(task, params))
            body = (f"    import sympy as sp\n    from grading import matches\n"
                    f"    assert matches({name}, {expected}, rtol={task.rtol!r})")
        else:
            body = (f"    import attnlib.exercises\n"
                    f"    assert attnlib.exercises.check({exercise.label!r}, {name}).passed")
        cells += [_test(f"test_{name}", exercise.auto_points, True, name, body),
                  _cell("raw", "# END TESTS"), _cell("raw", "# END QUESTION")]
        if exercise.written:
            cells += [
                _cell("raw", f"# BEGIN QUESTION\nname: {exercise.label}-written\nmanual: true\n"
                             f"points: {exercise.manual_points}"),
                _cell("markdown", f"**In words** (`{exercise.label}`): answer the part of the exercise above "
                                  "that asks for a reason or a comparison."),
                _cell("raw", "# BEGIN SOLUTION"), _cell("markdown", _plain_text(exercise.solution) or "-"),
                _cell("raw", "# END SOLUTION"), _cell("raw", "# END QUESTION"),
            ]
    else:
        cells += [
            _cell("raw", f"# BEGIN QUESTION\nname: {exercise.label}\nmanual: true\npoints: {exercise.manual_points}"),
            _cell("markdown", heading + "\n\nRun what the exercise asks in the chapter's notebook, then "
                                        "describe what you found and what it tells you."),
            _cell("raw", "# BEGIN SOLUTION"), _cell("markdown", _plain_text(exercise.solution) or "-"),
            _cell("raw", "# END SOLUTION"), _cell("raw", "# END QUESTION"),
        ]
    return cells


def install_source(ref: str) -> str:
    url, _ = repository()
    return (
        "# Installs attnlib (the version this assignment was written for) and otter-grader when they are\n"
        "# missing, as in Colab; torch is never installed or upgraded here.\n"
        "import importlib.util, subprocess, sys\n"
        "missing = [spec for name, spec in [(\"attnlib\", \"attnlib @ git+" + url + "@" + ref + "\"),\n"
        f"                                    (\"otter\", \"otter-grader=={OTTER_VERSION}\")]\n"
        "           if importlib.util.find_spec(name) is None]\n"
        "if missing:\n"
        "    subprocess.check_call([sys.executable, \"-m\", \"pip\", \"install\", \"--quiet\", *missing])"
    )


def master_notebook(chapter: str, found: list[catalogue.Exercise], course_seed: int, ref: str) -> dict:
    config = {
        "name": chapter, "init_cell": False, "check_all_cell": False, "run_tests": False,
        "export_cell": {"pdf": False, "instructions": "Download the zip file this cell writes and hand it in."},
        "generate": {"pdf": False, "filtering": False, "show_stdout": False},
        "autograder_files": ["grading.py"], "requirements": "requirements.txt", "overwrite_requirements": True,
        "tests": {"files": False, "ok_format": False},
    }
    title = found[0].chapter_title
    introduction = (
        f"# Assignment: {title}\n\n"
        f"The exercises of the chapter *{title}*. Work here or in the chapter's notebook, then put each answer "
        "in the cell that names it: the comment above the cell says what the answer is. A check cell says whether "
        "an answer is filled in, not whether it is right; the grader decides that with tests you do not see.\n\n"
        "Where an exercise gives **your numbers**, use them instead of the chapter's: the chapter's solutions, "
        "and `attnlib.exercises.check`, know only the chapter's numbers. Questions marked *in words* are read "
        "and graded by hand."
    )
    cells = [_cell("raw", "# ASSIGNMENT CONFIG\n" + yaml.safe_dump(config, sort_keys=False)),
             _cell("markdown", introduction),
             _cell("code", install_source(ref)),
             # otter's own first cell would import otter before the cell above installs it
             _cell("code", f"import otter\ngrader = otter.Notebook({chapter + '.ipynb'!r})"),
             _cell("code", tasks.setup_code(chapter[:2]))]
    for exercise in found:
        cells += question_cells(exercise, course_seed)
    for number, cell in enumerate(cells):
        cell["id"] = f"cell-{number}"
    return {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                        "name": "python3"}},
            "nbformat": 4, "nbformat_minor": 5}


def requirements(ref: str) -> str:
    """What the autograder's machine installs: attnlib does not list torch, so it is named here,
    from PyTorch's CPU index (grading needs no GPU, and the CUDA build is gigabytes)."""
    url, _ = repository()
    return (f"--extra-index-url https://download.pytorch.org/whl/cpu\ntorch=={torch.__version__.split('+')[0]}\n"
            f"attnlib @ git+{url}@{ref}\notter-grader=={OTTER_VERSION}\n")


def build(out: pathlib.Path, course_seed: int, chapters: list[str] | None = None, ref: str | None = None
          ) -> list[pathlib.Path]:
    """Build the assignments of ``chapters`` (all when None) into ``out``; returns the chapters' folders."""
    from otter.assign import main as otter_assign

    ref = ref or repository()[1]
    source = out / "source"
    source.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "grading.py", source / "grading.py")
    (source / "requirements.txt").write_text(requirements(ref))
    built = []
    for path in catalogue.chapter_paths():
        found = catalogue.chapter_exercises(path)
        if not found or (chapters and path.stem[:2] not in chapters):
            continue
        master = source / path.name
        master.write_text(json.dumps(master_notebook(path.stem, found, course_seed, ref), indent=1) + "\n")
        result = out / path.stem
        shutil.rmtree(result, ignore_errors=True)
        with redirect_stdout(sys.stderr):
            otter_assign(str(master), str(result), no_pdfs=True, no_run_tests=True)
        # otter names the bundle with the time it was built; one stable name is easier to hand on
        (bundle,) = (result / "autograder").glob("*-autograder_*.zip")
        bundle.rename(result / "autograder" / "autograder.zip")
        built.append(result)
    with open(out / "catalogue.csv", "w", newline="") as table:
        csv.writer(table).writerows([catalogue.COLUMNS, *catalogue.rows()])
    return built


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python assignments/build.py", description=__doc__.split("\n")[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--seed", type=int, default=0, help="the course seed that picks each exercise's numbers")
    parser.add_argument("--chapters", nargs="*", help="two-digit chapter numbers (default: all)")
    parser.add_argument("--ref", help="the tag or commit of attnlib to install (default: repository.branch "
                                      "in _config.yml)")
    args = parser.parse_args(argv)
    for result in build(args.out, args.seed, args.chapters, args.ref):
        print(f"wrote {result}")


if __name__ == "__main__":
    main()
