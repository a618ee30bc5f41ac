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
