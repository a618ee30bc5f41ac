"""The course's grader: an otter-grader plugin that judges in otter's own process, never in the
student's kernel.

otter runs a submission's notebook in a kernel of its own, and by default runs the hidden tests
there too, in the namespace, with the modules, that the student's code has had its hands on. This
plugin (named in the bundle's ``otter_config.json``; the build puts this file at the top of the
bundle, beside ``run_otter.py``, which Gradescope runs) moves the judging out of that kernel:

1. ``before_grading``, in otter's process before the notebook runs: reads who submitted
   (Gradescope's submission metadata, which otter has read already, or, from
   ``assignments/grade.py``, ``ATTNLIB_STUDENT`` in this process's environment), loads
   ``grading.py``, ``tasks.py``, the chapter's tasks and their keys from the bundle, computes the
   submitter's reference answers with the attnlib, NumPy and SymPy of this process, and removes
   the tasks and keys from the disk. It also stops otter from unpickling the kernel's own results
   (a pickle is code: the kernel could run its own in this process).
2. ``before_execution``: appends ``grading.kernel_cell`` to the notebook, which writes the answer
   variables to ``course_answers.json`` as plain data.
3. ``after_grading``: reads that file (``grading.read_answers``: numbers, arrays and SymPy
   expressions of the grader's own making), compares each answer with the reference
   (``grading.matches``) and writes the results: for each question a visible check, in the
   grader's own words, and the hidden score.

A notebook made for another student (its ``student_id`` is not the submitter's) is graded with
the submitter's numbers, and the results say so.
"""
from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import os
import pathlib
import signal
import sys
import threading

import nbformat
from otter.plugins import AbstractOtterPlugin
from otter.test_files.abstract_test import TestCase, TestCaseResult
from otter.test_files.exception_test import ExceptionTestFile

STUDENT_VARIABLE = "student_id"
# Seconds to judge one answer: an expression built to take forever to evaluate scores 0.
JUDGE_SECONDS = 20


def answer_name(label: str) -> str:
    """The variable that holds the answer to exercise ``label`` in an assignment's notebook."""
    return "answer_" + label.replace("-", "_")


def _load(path: pathlib.Path, name: str):
    """The module in the file ``path``, executed afresh (put in ``sys.modules`` while it runs, as
    dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(name)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        if previous is not None:
            sys.modules[name] = previous
    return module


def declared_student(notebook_path: pathlib.Path) -> str | None:
    """The ``student_id`` the notebook's build wrote (``student_id = 'alice@uni.edu'``), read from
    the file before it runs; None when there is none."""
    try:
        notebook = json.loads(pathlib.Path(notebook_path).read_text())
        for cell in notebook["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and source.startswith(f"{STUDENT_VARIABLE} = "):
                value = ast.parse(source.splitlines()[0]).body[0].value
                return value.value.strip().lower() if isinstance(value, ast.Constant) and type(
                    value.value) is str else None
    except (ValueError, KeyError, TypeError, SyntaxError, AttributeError, IndexError, OSError):
        return None
    return None


def submitters(metadata, student_key, environment=os.environ) -> list[str]:
    """Whoever submitted, first the first user's email: Gradescope's metadata (``users``: ``email``
    and ``sid``), or, when that names no one (``otter run``), ``ATTNLIB_STUDENT``."""
    found = []
    users = metadata.get("users", []) if isinstance(metadata, dict) else []
    for user in users if isinstance(users, list) else []:
        for field in ("email", "sid"):
            if isinstance(user, dict) and user.get(field):
                found.append(str(user[field]))
    if not found and environment.get("ATTNLIB_STUDENT"):
        found = [environment["ATTNLIB_STUDENT"]]
    keys = []
    for identity in found:
        with contextlib.suppress(ValueError):
            keys.append(student_key(identity))
    return list(dict.fromkeys(keys))


class _NoKernelResults:
    """Stands in for ``pickle`` where otter reads the results the kernel wrote: the grader reads
    plain data only."""

    @staticmethod
    def load(file):
        raise RuntimeError("the course's grader judges outside the kernel and reads no pickle from it")


@contextlib.contextmanager
def _time_limit(seconds: int):
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return

    def expire(signum, frame):
        raise TimeoutError("judging took too long")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class CourseJudge(AbstractOtterPlugin):
    """otter's plugin events, run in otter's process (see the module's docstring)."""

    def before_grading(self, config=None):
        import otter.execute

        notebook = pathlib.Path(self.submission_path)
        folder = notebook.parent
        self.grading = _load(folder / "grading.py", "course_grading")
        tasks = _load(folder / "tasks.py", "tasks")  # "tasks": the bank's ``from tasks import Task``
        previous = sys.modules.get("tasks")
        sys.modules["tasks"] = tasks
        try:
            bank = tasks.load_bank(folder / self.grading.BANK)
        finally:
            if previous is not None:
                sys.modules["tasks"] = previous
        keys = json.loads((folder / self.grading.KEYS).read_text())
        for private in self.grading.PRIVATE_FILES:  # gone before the student's code runs
            for copy in (folder / private, folder.parent / "source" / "files" / private):
                with contextlib.suppress(FileNotFoundError):
                    copy.unlink()
        self.message = None
        self.student = ""
        if keys["per_student"]:
            who = submitters(self.submission_metadata, tasks.student_key)
            declared = declared_student(notebook)
            if not who:
                self.student = None
                self.message = ("No submission metadata names who submitted this notebook, so it is not graded: "
                                "grade it on Gradescope, or with assignments/grade.py, which names each student.")
            elif declared in who:
                self.student = declared
            else:
                self.student = who[0]
                self.message = (f"This notebook's student_id is not the identity you submitted as ({who[0]}): "
                                f"it is graded with the numbers of {who[0]}, not the notebook's. Hand in the "
                                f"notebook made for you, with {STUDENT_VARIABLE} as it is.")
        self.questions = {}
        for label, task in bank.tasks.items():
            reference = None
            if self.student is not None:
                params = task.params(key=keys["keys"][label], student=self.student)
                reference = self.grading.decode(self.grading.encode(tasks.run(task, params)))
            form = keys["forms"][label]
            self.questions[label] = (task, reference, form)
            if reference is not None:  # every comparison's code is loaded before the notebook runs
                self.grading.matches(reference, reference, task.rtol, task.atol, task.also_at)
        self._pickle = otter.execute.pickle
        otter.execute.pickle = _NoKernelResults

    def before_execution(self, submission):
        names = [answer_name(label) for label in self.questions]
        submission.cells.append(nbformat.v4.new_code_cell(self.grading.kernel_cell(names)))
        return submission

    def after_grading(self, results):
        import otter.execute

        otter.execute.pickle = self._pickle
        folder = pathlib.Path(self.submission_path).parent
        names = [answer_name(label) for label in self.questions]
        answers = self.grading.read_answers(folder / self.grading.ANSWERS, names)
        judged = []
        for label, (task, reference, form) in self.questions.items():
            name = answer_name(label)
            answer = answers[name]
            problem = self.message or self.grading.form_message(name, answer, form)
            right = False
            if reference is not None:
                try:
                    with _time_limit(JUDGE_SECONDS):
                        right = self.grading.matches(answer, reference, task.rtol, task.atol, task.also_at)
                except TimeoutError:
                    right = False
            visible = TestCase(f"{name} is answered", None, False, 0, None, None)
            hidden = TestCase(name, None, True, task.points, None, None)
            test_file = ExceptionTestFile(label, "course_judge", [visible, hidden], all_or_nothing=False)
            test_file.test_case_results = [
                TestCaseResult(visible, problem or "", problem is None),
                TestCaseResult(hidden, "" if right else "not the answer for your numbers", right),
            ]
            judged.append(test_file)
        results.results = {test_file.name: test_file for test_file in judged}
        results._catastrophic_error = None
        if self.message:
            results.set_output(self.message)
        results.set_plugin_data("course_judge.CourseJudge", {"student": self.student})
