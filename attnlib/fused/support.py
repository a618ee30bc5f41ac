"""What the fused path can take: its limits, and whether Triton can run it in this process.

Triton fixes, when it is first imported, whether this process compiles
kernels or interprets them (``TRITON_INTERPRET=1`` at that moment): one
process runs the kernels either on the GPU or in the interpreter, never both.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys

import torch

from ..problem import AttentionProblem

NAME = "fused"
#: The kernels cap scores with ``softcap``, skip and mask outside a ``window`` and fold
#: ``sinks`` into their softmax, forward and backward (attnlib.dispatch.OPT_IN_FEATURES).
#: :func:`attnlib.fused.decode`, which the dispatcher never calls, takes neither window nor sinks.
SUPPORTS_SOFTCAP = True
SUPPORTS_WINDOW = True
SUPPORTS_SINKS = True
HEAD_DIMS = (16, 256)  # smallest and largest E and Ev the kernel takes
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INTERPRETER_DTYPES = (torch.float16, torch.float32)  # NumPy has no bfloat16
#: Batch x heads is the launch grid's second axis, which CUDA limits to 2**16 - 1
#: programs; a larger batch is launched in slices of whole sequences.
MAX_BATCH_HEADS = 65535
#: The largest tile side, BLOCK_M or BLOCK_N. The kernel computes the offset
#: of a tile's first row in 64 bits and offsets inside a tile in 32 bits, so
#: MAX_BLOCK rows of any input must span fewer than 2**31 elements.
MAX_BLOCK = 256
INT32_MAX = 2**31 - 1
ON_THE_CPU = ("on the CPU the kernel runs only in Triton's interpreter, slowly, for validation: with "
              "TRITON_INTERPRET=1 set before Triton is first imported, backend='fused' runs it")


#: Looked up once, at import: cheap, and a plain constant keeps torch.compile quiet.
_TRITON_INSTALLED = importlib.util.find_spec("triton") is not None


def triton_installed() -> bool:
    return _TRITON_INSTALLED


def interpreter_requested() -> bool:
    """True when ``TRITON_INTERPRET`` holds a true value, as Triton reads it."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on", "y")


def triton_interprets() -> bool:
    """Whether Triton runs kernels in its interpreter in this process.

    Before Triton is imported, that is what ``TRITON_INTERPRET`` says now;
    afterwards, what it said at the import, read off Triton's own ``tl.sum``.
    """
    if "triton" not in sys.modules:
        return interpreter_requested()
    from triton.language.standard import sum as triton_sum
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(triton_sum, InterpretedFunction)


def _row_strides(problem: AttentionProblem) -> dict[str, tuple[int, int]]:
    """Each input's (row stride, element stride) as the kernel will read it (see ``kernel_arguments``)."""
    strides = {}
    for name, x in (("query", problem.query), ("key", problem.key), ("value", problem.value)):
        # A tensor whose rows are not contiguous is copied into a contiguous one.
        strides[name] = (x.stride(-2), 1) if x.stride(-1) == 1 else (x.shape[-1], 1)
    mask = problem.attn_mask
    if mask is not None:
        # An axis of size 1 is broadcast: stride 0.
        row = mask.stride(-2) if mask.ndim >= 2 and mask.shape[-2] > 1 else 0
        strides["attn_mask"] = (row, mask.stride(-1) if mask.shape[-1] > 1 else 0)
    return strides


def tile_reach(row_stride: int, element_stride: int) -> int:
    """The largest offset, in elements, that the kernels compute in 32 bits inside a tile of a tensor."""
    # Inside a tile, row and column are below MAX_BLOCK (a head width is at most 256 too).
    return (MAX_BLOCK - 1) * (row_stride + element_stride)


def unaddressable_reason(problem: AttentionProblem) -> str | None:
    """None when the kernel's 32-bit offsets inside a tile reach every element of ``problem``, else why not."""
    for name, length in (("query", problem.query_len), ("key", problem.key_len)):
        if length > INT32_MAX - MAX_BLOCK:
            return (f"{name} has {length} rows; the kernel counts rows in 32 bits, "
                    f"up to {INT32_MAX - MAX_BLOCK}")
    if problem.window is not None and problem.query_len + problem.key_len > INT32_MAX - 2 * MAX_BLOCK:
        return (f"with a window the kernels compute key positions up to L + S = "
                f"{problem.query_len + problem.key_len} in 32 bits, up to {INT32_MAX - 2 * MAX_BLOCK}")
    for name, (row_stride, element_stride) in _row_strides(problem).items():
        reach = tile_reach(row_stride, element_stride)
        if reach > INT32_MAX:
            return (f"{name} has row stride {row_stride}: offsets inside a tile of {MAX_BLOCK} rows "
                    f"reach {reach}, past the 2**31 - 1 of the kernel's 32-bit offsets; a contiguous "
                    f"{name} has a smaller stride")
    return None


def _float_mask_requires_grad(problem: AttentionProblem) -> bool:
    mask = problem.attn_mask
    return torch.is_grad_enabled() and mask is not None and mask.dtype != torch.bool and mask.requires_grad


def unsupported_reason(problem: AttentionProblem) -> str | None:
    """None when the kernel can take ``problem``, else a sentence saying why not.

    On the CPU, the first reason is that the kernel runs there only in Triton's interpreter.
    """
    device = problem.query.device
    if device.type == "cpu" and not (triton_installed() and triton_interprets()):
        if triton_installed():
            return ON_THE_CPU
        return f"{ON_THE_CPU}; Triton is not installed either (pip install 'triton>=3.2')"
    if not triton_installed():
        return "Triton is not installed (pip install 'triton>=3.2'; CUDA builds of PyTorch bring it)"
    if problem.dropout_p > 0:
        return f"the fused kernel has no dropout, got dropout_p={problem.dropout_p}"
    if _float_mask_requires_grad(problem):
        return ("the fused kernels compute no gradient for a float attn_mask that requires grad "
                "(the gradients of query, key and value they do compute); naive does")
    dtype = problem.query.dtype
    if dtype not in KERNEL_DTYPES:
        return f"the fused kernel takes float16, bfloat16 and float32, got {dtype}"
    low, high = HEAD_DIMS
    if not (low <= problem.head_dim <= high and low <= problem.value_dim <= high):
        return (f"the fused kernel takes head widths E and Ev from {low} to {high}, "
                f"got E={problem.head_dim}, Ev={problem.value_dim}")
    unaddressable = unaddressable_reason(problem)
    if unaddressable is not None:
        return unaddressable
    if device.type == "cuda":
        if triton_interprets():
            return ("Triton interprets kernels in this process (TRITON_INTERPRET=1 was set when it "
                    "was imported), so it cannot compile the kernel for the GPU")
        capability = torch.cuda.get_device_capability(device)
        if dtype == torch.bfloat16 and capability < (8, 0):
            return f"bfloat16 needs compute capability 8.0 or newer, this GPU has {capability[0]}.{capability[1]}"
        if problem.query_heads > MAX_BATCH_HEADS:
            return f"query heads must be at most {MAX_BATCH_HEADS}, got {problem.query_heads}"
        return None
    if device.type == "cpu":
        if dtype not in INTERPRETER_DTYPES:
            return f"on the CPU the kernel runs in Triton's interpreter, which computes in NumPy and has no {dtype}"
        return None
    return f"the fused kernel runs on CUDA (or on the CPU in Triton's interpreter), got device {device}"


def auto_declines(problem: AttentionProblem) -> str | None:
    """Why ``backend="auto"`` leaves a call the kernel could run to another path.

    On the CPU auto gives the same reason whether or not the interpreter is
    on, so what a chapter prints does not depend on the environment.
    """
    return ON_THE_CPU if problem.query.device.type == "cpu" else None


def triton_version() -> tuple[int, int]:
    """(major, minor) of the installed Triton, read without importing it."""
    major, minor = importlib.metadata.version("triton").split(".")[:2]
    return int(major), int(minor)

