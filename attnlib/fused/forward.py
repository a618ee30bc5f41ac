"""The forward pass: launching the forward kernel behind the contract."""
from __future__ import annotations

import contextlib

import torch

from ..problem import AttentionProblem, check_problem
from .kernels import kernel_module
from .layout import as_4d, batch_slices, cdiv, kernel_arguments
from .support import MAX_BLOCK, unsupported_reason
from .tiles import COMPILE_OPTIONS, INTERPRETER_BLOCKS, autotuned_kernel


def launch(problem: AttentionProblem, blocks: tuple[int, int] | None):
    """Output ``(..., Hq, L, Ev)`` in the input dtype and log-sum-exp ``(..., Hq, L)`` in fp32."""
    why_not = unsupported_reason(problem)
    if why_not is not None:
        raise ValueError(f"backend='fused' cannot run this call: {why_not}")
    device = problem.query.device
    if problem.key_len == 0:  # no key at all: every row is a row with no allowed key
        lse = torch.full(problem.query.shape[:-1], float("-inf"), dtype=torch.float32, device=device)
        if problem.sinks is not None:  # only the sink in each denominator: lse = s_h
            heads_axis = (-1, 1) if problem.query.ndim >= 3 else (-1,)
            lse = problem.sinks.to(torch.float32).reshape(heads_axis).expand(lse.shape).clone()
        return torch.zeros(problem.output_shape, dtype=problem.query.dtype, device=device), lse
    output = torch.empty(problem.output_shape, dtype=problem.query.dtype, device=device)
    log_sum_exp = torch.empty(problem.query.shape[:-1], dtype=torch.float32, device=device)
    if output.numel() == 0:
        return output, log_sum_exp
    arguments = kernel_arguments(problem, as_4d(output), log_sum_exp)
    kernel = kernel_module().attention_forward_kernel
    if device.type == "cpu":
        arguments.update(zip(("BLOCK_M", "BLOCK_N"), blocks or INTERPRETER_BLOCKS))
    elif blocks is None:
        kernel = autotuned_kernel(torch.cuda.get_device_capability(device), problem.query_len,
                                   problem.key_len, problem.query.dtype, window=problem.window is not None)
        arguments.update(COMPILE_OPTIONS)
    else:
        arguments.update(BLOCK_M=blocks[0], BLOCK_N=blocks[1], **COMPILE_OPTIONS)
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        for part in batch_slices(arguments, problem.query_heads):
            batch_heads = part["query"].shape[0] * problem.query_heads
            kernel[lambda meta: (cdiv(problem.query_len, meta["BLOCK_M"]), batch_heads)](**part)
    return output, log_sum_exp


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    causal_alignment: str = "top_left",
    softcap: float | None = None,
    window: tuple[int | None, int | None] | None = None,
    sinks: torch.Tensor | None = None,
    blocks: tuple[int, int] | None = None,
    return_lse: bool = False,
):
    """The fused kernels' ``softmax(scale * Q K^T + mask) V``, differentiable.

    Same arguments and contract as :func:`attnlib.scaled_dot_product_attention`
    (no dropout; ``softcap`` caps the scores to ``softcap * tanh(s / softcap)``
    before the mask; ``window`` and ``sinks`` as there). Shapes ``query (..., Hq, L, E)``, ``key (..., Hkv, S, E)``,
    ``value (..., Hkv, S, Ev)`` -> output ``(..., Hq, L, Ev)``. ``blocks =
    (BLOCK_M, BLOCK_N)`` fixes the tile sizes (default: autotuned on a GPU,
    ``INTERPRETER_BLOCKS`` on the CPU). With ``return_lse=True`` also returns
    ``lse (..., Hq, L)`` in fp32, ``lse_i = log sum_j exp(s_ij)`` over the
    allowed keys (and the sink), ``-inf`` for a row with none. Both are
    differentiable (w.r.t. query, key, value and sinks): the backward kernels
    compute the gradients (``blocks`` sets the forward's tiles only).
    """
    if blocks is not None and not (
        isinstance(blocks, tuple) and len(blocks) == 2
        and all(isinstance(b, int) and not isinstance(b, bool) and 16 <= b <= MAX_BLOCK and b & (b - 1) == 0
                for b in blocks)
    ):
        raise ValueError(f"blocks must be None or a pair of powers of two from 16 to {MAX_BLOCK} "
                         f"(BLOCK_M, BLOCK_N), got {blocks!r}")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__} {return_lse!r}")
    problem = check_problem(query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa,
                            causal_alignment, softcap, window, sinks)
    output, lse = _differentiable_launch(problem, blocks)
    return (output, lse) if return_lse else output


def _differentiable_launch(problem: AttentionProblem, blocks: tuple[int, int] | None):
    """``launch`` as an autograd node whose backward runs the backward kernels.

    Without grad it is ``launch`` itself (autograd records nothing).
    """
    from .backward import FusedAttentionFunction  # backward.py imports launch from here

    return FusedAttentionFunction.apply(problem.query, problem.key, problem.value, problem.sinks, problem, blocks)


def forward(problem: AttentionProblem) -> torch.Tensor:
    """The dispatcher's entry: the kernel's output, with autotuned tiles on a GPU; differentiable."""
    return _differentiable_launch(problem, None)[0]

