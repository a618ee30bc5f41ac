"""Choosing a path, and telling the caller which one ran and why.

Each backend is a module with ``NAME``, ``unsupported_reason(problem)``
(None when it can take the call, else a sentence saying why not) and
``forward(problem)``. ``backend="auto"`` tries them in ``AUTO_ORDER`` and
takes the first that accepts; a backend may also define
``auto_declines(problem)``, a reason consulted by auto only (e.g. tiled
leaves small problems to naive), and ``auto_prefers(problem)``, the reason
auto gives the paths after it when it takes this one for a measured cause
(e.g. tiled for short queries against many keys, from
``benchmarks/decode_dispatch.py``). A named backend that cannot take the call
raises with its reason instead of quietly running another path.

Keywords added to the contract after a backend was written (``softcap``,
``window``, ``sinks``) are opt-in: a backend takes a call that uses one only if its module
declares the flag named in ``OPT_IN_FEATURES`` (e.g.
``SUPPORTS_SOFTCAP = True``), so that no path ignores a keyword it has
never heard of.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field

import torch

from . import fused, naive, tiled
from .problem import AttentionProblem

BACKENDS = {naive.NAME: naive, tiled.NAME: tiled, fused.NAME: fused}
AUTO_ORDER = (fused.NAME, tiled.NAME, naive.NAME)
#: keyword -> (the module flag a backend declares to take it, whether a call uses it)
OPT_IN_FEATURES = {
    "softcap": ("SUPPORTS_SOFTCAP", lambda problem: problem.softcap is not None),
    "window": ("SUPPORTS_WINDOW", lambda problem: problem.window is not None),
    "sinks": ("SUPPORTS_SINKS", lambda problem: problem.sinks is not None),
}


def unsupported_reason(backend, problem: AttentionProblem) -> str | None:
    """Why ``backend`` (a module) cannot take ``problem``: an opt-in keyword it has not
    declared, else its own ``unsupported_reason``; None when it can."""
    for keyword, (flag, used) in OPT_IN_FEATURES.items():
        if used(problem) and not getattr(backend, flag, False):
            return f"{keyword} is not implemented in this path"
    return backend.unsupported_reason(problem)


@dataclass(frozen=True)
class Dispatch:
    """Which backend ran (``backend``) and why each other one did not (``passed_over``)."""

    requested: str
    backend: str
    passed_over: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"backend={self.requested!r} ran {self.backend!r}"]
        lines += [f"  not {name!r}: {why}" for name, why in self.passed_over.items()]
        return "\n".join(lines)


#: Per thread and per asyncio task, as contextvars are: a thread starts with none.
_last: contextvars.ContextVar[Dispatch | None] = contextvars.ContextVar("attnlib_last_dispatch", default=None)
_logs: contextvars.ContextVar[tuple[list, ...]] = contextvars.ContextVar("attnlib_dispatch_logs", default=())


def choose(problem: AttentionProblem, requested: str) -> Dispatch:
    """Pick the backend for ``problem`` without running it."""
    if not isinstance(requested, str) or (requested != "auto" and requested not in BACKENDS):
        raise ValueError(
            f"backend must be 'auto' or one of {tuple(BACKENDS)}, got {requested!r}"
        )
    if requested != "auto":
        why_not = unsupported_reason(BACKENDS[requested], problem)
        if why_not is not None:
            raise ValueError(f"backend={requested!r} cannot run this call: {why_not}")
        passed_over = {name: "not requested" for name in BACKENDS if name != requested}
        return Dispatch(requested, requested, passed_over)
    passed_over = {}
    for name in AUTO_ORDER:
        why_not = unsupported_reason(BACKENDS[name], problem)
        if why_not is None and hasattr(BACKENDS[name], "auto_declines"):
            why_not = BACKENDS[name].auto_declines(problem)
        if why_not is None:
            why_first = getattr(BACKENDS[name], "auto_prefers", lambda problem: None)(problem)
            why_first = why_first or f"{name!r} came first in auto's order"
            later = {n: why_first for n in AUTO_ORDER if n != name and n not in passed_over}
            return Dispatch(requested, name, {**passed_over, **later})
        passed_over[name] = why_not
    raise AssertionError("the naive backend accepts every checked call")


def run(problem: AttentionProblem, requested: str):
    """Run ``problem`` on the chosen backend and remember the choice."""
    dispatch = choose(problem, requested)
    output = BACKENDS[dispatch.backend].forward(problem)
    _remember(dispatch)
    return output


def _remember(dispatch: Dispatch) -> None:
    # A compiled graph carries no Python side effects, and contextvars would break it in two:
    # calls inside torch.compile are not recorded (explain() says what they run).
    if torch.compiler.is_compiling():
        return
    _last.set(dispatch)
    for log in _logs.get():
        log.append(dispatch)


def last_dispatch() -> Dispatch | None:
    """The :class:`Dispatch` of the most recent ``scaled_dot_product_attention`` call in this
    thread (or asyncio task): which backend ran, and why each other one did not.

    None before the first call. Calls in other threads do not change it; to see every call
    of a block (each layer of a model), use :func:`record_dispatches`. Calls inside a
    ``torch.compile``'d function are not recorded: the compiled code runs without Python
    side effects; :func:`attnlib.explain` with the same arguments says which path it takes.
    """
    return _last.get()


@contextlib.contextmanager
def record_dispatches():
    """Record the :class:`Dispatch` of every ``scaled_dot_product_attention`` call in a block::

        with attnlib.record_dispatches() as log:
            model(tokens)
        print(len(log), {d.backend for d in log})

    ``log`` is a list that grows by one entry per call, in order, made in this thread (or
    asyncio task) while the block runs; blocks may nest, and each records the calls inside it.
    """
    log: list[Dispatch] = []
    token = _logs.set((*_logs.get(), log))
    try:
        yield log
    finally:
        _logs.reset(token)
