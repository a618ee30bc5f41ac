"""Count what a computation allocates, op by op, without timing anything.

:func:`largest_intermediate` runs a function under a torch dispatch mode
that sees the result of every aten operation and keeps the largest fresh
allocation (a result that is a view of, or written into, one of the op's
inputs allocates nothing and is not counted). Unlike a reading of the
process's memory, the count is exact and the same on every machine, so
chapters can print it and tests can assert bounds on it.
:func:`saved_for_backward` counts, the same way, what autograd keeps
alive between a forward pass and its backward pass.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


@dataclass(frozen=True)
class Allocation:
    """One tensor an op created: its size in bytes, shape, dtype and the op's name."""

    nbytes: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    op: str


def _storage_ptrs(values) -> set[int]:
    leaves, _ = tree_flatten(values)
    return {t.untyped_storage().data_ptr() for t in leaves if isinstance(t, torch.Tensor)}


class _LargestAllocation(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.largest = Allocation(0, (), torch.float32, "none")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        reused = _storage_ptrs((args, kwargs))
        leaves, _ = tree_flatten(result)
        for t in leaves:
            if not isinstance(t, torch.Tensor) or t.untyped_storage().data_ptr() in reused:
                continue
            nbytes = t.untyped_storage().nbytes()
            if nbytes > self.largest.nbytes:
                self.largest = Allocation(nbytes, tuple(t.shape), t.dtype, str(func.overloadpacket))
        return result


def largest_intermediate(fn, *args, **kwargs) -> tuple[object, Allocation]:
    """Run ``fn(*args, **kwargs)``; return its result and the largest tensor any op allocated."""
    mode = _LargestAllocation()
    with mode:
        result = fn(*args, **kwargs)
    return result, mode.largest


@dataclass(frozen=True)
class SavedTensor:
    """One storage autograd keeps for the backward pass.

    ``role`` says whose memory it is: ``"input"`` (an argument's storage,
    which exists anyway), ``"output"`` (the result's) or ``"extra"``
    (memory kept alive only for the backward pass).
    """

    nbytes: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    role: str


def saved_for_backward(fn, *args, **kwargs) -> tuple[object, list[SavedTensor]]:
    """Run ``fn(*args, **kwargs)``; return its result and what autograd saved for its backward.

    Every tensor an autograd node saves passes through a
    ``torch.autograd.graph.saved_tensors_hooks`` pack hook; tensors that
    share a storage (views, reshapes) are counted once, with the storage's
    size in bytes. The count is exact and the same on every machine.
    """
    saved: dict[int, tuple[int, tuple[int, ...], torch.dtype]] = {}  # by storage address

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        saved.setdefault(storage.data_ptr(), (storage.nbytes(), tuple(tensor.shape), tensor.dtype))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = fn(*args, **kwargs)
    inputs, outputs = _storage_ptrs((args, kwargs)), _storage_ptrs(result)

    def role(ptr: int) -> str:
        return "input" if ptr in inputs else "output" if ptr in outputs else "extra"

    return result, [SavedTensor(*facts, role(ptr)) for ptr, facts in saved.items()]
