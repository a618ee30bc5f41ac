"""What a graded assignment's notebook needs from attnlib: whether an answer is filled in, and
a grader that works where otter-grader's does not (Google Colab).

Nothing here knows an answer: the graded answers live in the autograder bundle only.

otter's ``Notebook`` reads its checks from the notebook file, which Colab does not give to
the kernel, and refuses ``check`` and ``export`` there. In Colab, ``notebook()`` returns a
``ColabGrader`` instead: its ``check`` says whether the answer is filled in (the same test as
otter's visible one), and its ``export`` writes the notebook, as Colab holds it, to a file to
hand in and offers it for download.
"""
from __future__ import annotations

import inspect
import json
import math
import pathlib
from typing import Any

import numpy as np
import torch


def answer_name(label: str) -> str:
    """The variable that holds the answer to exercise ``label`` in an assignment's notebook."""
    return "answer_" + label.replace("-", "_")


def is_answered(answer: Any) -> bool:
    """Whether ``answer`` is filled in: not ``...``, None, a string or bytes, and no NaN in it.

    Says nothing about whether it is right; the hidden tests decide that.
    """
    if answer is None or answer is ... or isinstance(answer, (str, bytes)):
        return False
    if isinstance(answer, (tuple, list)):
        return len(answer) > 0 and all(is_answered(item) for item in answer)
    if isinstance(answer, float):
        return not math.isnan(answer)
    if isinstance(answer, torch.Tensor):
        return not (answer.is_floating_point() and bool(torch.isnan(answer.detach()).any()))
    if isinstance(answer, (np.ndarray, np.generic)):
        if answer.dtype.kind in "OUSV":  # objects, strings, raw bytes: not an array of numbers
            return False
        return not (answer.dtype.kind in "fc" and bool(np.isnan(answer).any()))
    return True


def _to_array(answer: Any) -> np.ndarray | None:
    if isinstance(answer, torch.Tensor):
        return answer.detach().cpu().numpy()
    if isinstance(answer, (str, bytes, dict, set)) or answer is None:
        return None
    try:
        return np.asarray(answer)
    except Exception:  # ragged lists and other shapes that are no array
        return None


def describe_form(form: dict) -> str:
    """``form`` (what ``form_problem`` checks) in words: "a tuple of 2 (a number, a number)"."""
    kind = form["kind"]
    if kind == "tuple":
        return f"a tuple of {len(form['items'])} ({', '.join(describe_form(item) for item in form['items'])})"
    if kind == "array":
        return f"a {form['ndim']}-d array of {'bools' if form['dtype'] == 'bool' else 'numbers'}"
    return {"number": "a number", "bool": "a bool", "sympy": "a SymPy expression or its value"}[kind]


def form_problem(answer: Any, form: dict) -> str | None:
    """What is wrong with the form of ``answer`` (None: nothing), against ``form``, a description of the
    reference answer's kind that holds no value: {"kind": "number" | "bool" | "sympy"}, {"kind": "tuple",
    "items": [form, ...]} (a tuple, list, array or tensor of that length) or {"kind": "array", "dtype":
    "bool" | "number", "ndim": k}. It checks what the hidden test requires of the form, so that a check
    cell never passes an answer the grader turns away for its form alone."""
    kind = form["kind"]
    array = _to_array(answer)
    if kind == "tuple":
        items = list(answer) if isinstance(answer, (tuple, list)) else (
            list(array) if array is not None and array.ndim >= 1 and not isinstance(answer, (str, bytes)) else None)
        if items is None or len(items) != len(form["items"]):
            return f"should be {describe_form(form)}, got {_kind_of(answer)}"
        for number, (item, item_form) in enumerate(zip(items, form["items"])):
            problem = form_problem(item, item_form)
            if problem:
                return f"item {number} {problem}"
        return None
    if kind == "array":
        wanted_bool = form["dtype"] == "bool"
        ok = (array is not None and array.ndim == form["ndim"] and array.dtype.kind in "biuf"
              and (array.dtype.kind == "b") == wanted_bool)
        return None if ok else f"should be {describe_form(form)}, got {_kind_of(answer)}"
    scalar = array is not None and array.ndim == 0 and not isinstance(answer, (list, tuple))
    if kind == "bool":
        ok = scalar and array.dtype.kind == "b"
    elif kind == "number":
        ok = scalar and array.dtype.kind in "iuf" or _is_real_sympy_number(answer)
    else:  # a SymPy expression, or its value
        ok = _is_sympy(answer) or (scalar and array.dtype.kind in "iuf")
    return None if ok else f"should be {describe_form(form)}, got {_kind_of(answer)}"


def _is_sympy(x) -> bool:
    return type(x).__module__.startswith("sympy")


def _is_real_sympy_number(x) -> bool:
    return _is_sympy(x) and bool(getattr(x, "is_number", False)) and bool(getattr(x, "is_real", False))


def _kind_of(answer: Any) -> str:
    array = _to_array(answer)
    if isinstance(answer, (tuple, list)):
        return f"a {type(answer).__name__} of {len(answer)}"
    if array is not None and array.ndim >= 1:
        return f"a {array.ndim}-d {type(answer).__name__} of {array.dtype}"
    return f"{type(answer).__name__} {answer!r}"[:80]


def running_in_colab() -> bool:
    """Whether this kernel is Google Colab's, recognised as otter-grader recognises it."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return "google.colab" in str(get_ipython())


class ColabGrader:
    """Stands in for ``otter.Notebook`` in Colab, with the same ``check`` and ``export`` calls."""

    def __init__(self, notebook: str):
        self.notebook = notebook

    def check(self, question: str, global_env: dict | None = None) -> bool:
        env = global_env if global_env is not None else inspect.currentframe().f_back.f_globals
        name = answer_name(question)
        filled = is_answered(env.get(name))
        if filled:
            print(f"{question}: {name} is filled in; the grader decides whether it is right.")
        else:
            print(f"{question}: {name} is not filled in yet: replace ... by your answer "
                  "(a number, an array, a tuple, ..., without NaN).")
        return filled

    def export(self, *args, **kwargs) -> pathlib.Path:
        """Write the notebook as Colab holds it to ``self.notebook`` and offer it for download.

        Hand that file in: the autograder runs the notebook itself. (otter's options, such as
        ``pdf``, are accepted and ignored: Colab has no LaTeX.)
        """
        from google.colab import _message, files

        notebook = _message.blocking_request("get_ipynb", request="", timeout_sec=120)["ipynb"]
        path = pathlib.Path(self.notebook)
        path.write_text(json.dumps(notebook, indent=1))
        print(f"Wrote {path}; hand in that file.")
        files.download(str(path))
        return path


def notebook(name: str):
    """The grader of the assignment notebook ``name``: otter's, or a ``ColabGrader`` in Colab."""
    if running_in_colab():
        return ColabGrader(name)
    import otter  # only the assignments need otter-grader; attnlib does not depend on it

    return otter.Notebook(name)
