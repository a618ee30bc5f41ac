"""Laying the caller's tensors out for the kernels: 4-d views, strides, masks, key lengths."""
from __future__ import annotations

import math

import torch

from ..problem import AttentionProblem
from .kernels import kernel_module
from .support import MAX_BATCH_HEADS


def as_4d(x: torch.Tensor) -> torch.Tensor:
    """``(..., H, N, W)`` as ``(B, H, N, W)``; a view when the strides allow it."""
    if x.ndim == 2:
        return x[None, None]
    if x.ndim == 3:
        return x[None]
    # B spelled out: -1 is ambiguous when a dimension is 0.
    return x.reshape(math.prod(x.shape[:-3]), *x.shape[-3:])


def contiguous_rows(x: torch.Tensor) -> torch.Tensor:
    """The kernel reads each row (the last dimension) as contiguous memory."""
    return x if x.stride(-1) == 1 else x.contiguous()


def next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def cdiv(n: int, d: int) -> int:
    return -(-n // d)


def key_lengths(mask: torch.Tensor) -> torch.Tensor | None:
    """``(B,)`` int32 key lengths when a bool ``(B, H, L, S)`` mask is pure key padding, else None.

    Pure key padding: one row for every head and query (broadcast, stride 0
    or size 1), ``True`` on a prefix ``j < length`` and ``False`` after it,
    as :func:`attnlib.padding_mask` builds. The kernel then stops at
    ``length`` instead of loading the mask. The check costs one pass over ``(B, S)``.
    """
    for axis in (1, 2):
        if mask.shape[axis] != 1 and mask.stride(axis) != 0:
            return None
    rows = mask[:, 0, 0, :]
    lengths = rows.sum(dim=-1)
    prefix = torch.arange(mask.shape[-1], device=mask.device)[None, :] < lengths[:, None]
    return lengths.to(torch.int32) if torch.equal(rows, prefix) else None


def window_reaches(problem: AttentionProblem) -> tuple[int, int]:
    """``problem.window`` as two finite reaches ``(left, right)`` that allow the same keys.

    Query ``i`` sits at key position ``p = i + causal_offset``, between
    ``causal_offset`` and ``L - 1 + causal_offset``; a reach to the left of
    that last position's, or to the right of ``S - 1`` from the first, is
    as good as unbounded. An open side (None) becomes that bound, and so
    does a wider reach: the kernels' positions stay within the lengths.
    Without a window: ``(0, 0)``, unread.
    """
    if problem.window is None:
        return 0, 0
    offset = problem.causal_offset
    widest = (max(problem.query_len - 1 + offset, 0), max(problem.key_len - 1 - offset, 0))
    return tuple(bound if reach is None else min(reach, bound) for reach, bound in zip(problem.window, widest))


def kernel_arguments(problem: AttentionProblem, output: torch.Tensor, log_sum_exp: torch.Tensor) -> dict:
    """Every argument of ``attention_forward_kernel`` but the tile sizes, by name.

    ``output`` is ``(B, Hq, L, Ev)`` and ``log_sum_exp`` holds ``B * Hq * L``
    fp32 values; both contiguous.
    """
    module = kernel_module()
    query, key, value = (contiguous_rows(as_4d(x)) for x in (problem.query, problem.key, problem.value))
    mask_kind, mask, lengths = module.NO_MASK.value, None, None
    if problem.attn_mask is not None:
        full_mask = as_4d(problem.attn_mask.expand(*problem.query.shape[:-1], problem.key_len))
        if full_mask.dtype == torch.bool:
            lengths = key_lengths(full_mask)
            if lengths is None:
                mask_kind, mask = module.BOOL_MASK.value, full_mask.view(torch.uint8)
        else:
            mask_kind, mask = module.FLOAT_MASK.value, full_mask
    mask_strides = mask.stride() if mask is not None else (0, 0, 0, 0)
    window_left, window_right = window_reaches(problem)
    # In the compute dtype (fp32 for fp16 and bf16), in the units of the scaled (and capped)
    # scores; the kernel turns them into base 2.
    sinks = problem.sinks.to(problem.compute_dtype).contiguous() if problem.sinks is not None else None
    return dict(
        query=query, key=key, value=value, output=output, log_sum_exp=log_sum_exp,
        # A pointer the flags leave unread still needs a tensor behind it.
        mask=mask if mask is not None else query,
        key_lengths=lengths if lengths is not None else query,
        sinks=sinks if sinks is not None else query,
        stride_qb=query.stride(0), stride_qh=query.stride(1), stride_ql=query.stride(2),
        stride_kb=key.stride(0), stride_kh=key.stride(1), stride_ks=key.stride(2),
        stride_vb=value.stride(0), stride_vh=value.stride(1), stride_vs=value.stride(2),
        stride_ob=output.stride(0), stride_oh=output.stride(1), stride_ol=output.stride(2),
        stride_mb=mask_strides[0], stride_mh=mask_strides[1], stride_ml=mask_strides[2], stride_ms=mask_strides[3],
        query_heads=problem.query_heads, group_size=problem.group_size,
        query_len=problem.query_len, key_len=problem.key_len, causal_offset=problem.causal_offset,
        scale_log2=problem.scale * math.log2(math.e),
        # unread without a cap, but a launch needs a number
        softcap_log2=(problem.softcap or 1.0) * math.log2(math.e),
        window_left=window_left, window_right=window_right,
        HEAD_DIM=problem.head_dim, VALUE_DIM=problem.value_dim,
        BLOCK_E=max(16, next_power_of_2(problem.head_dim)),
        BLOCK_EV=max(16, next_power_of_2(problem.value_dim)),
        IS_CAUSAL=problem.is_causal, MASK_KIND=mask_kind, HAS_KEY_LENGTHS=lengths is not None,
        SOFTCAP=problem.softcap is not None, WINDOW=problem.window is not None,
        HAS_SINKS=problem.sinks is not None,
    )


#: Kernel arguments that hold ``B * Hq * L`` fp32 values (one per query row) in one contiguous run.
PER_ROW_ARGUMENTS = ("log_sum_exp", "delta")
#: Kernel arguments with one value per query head, shared by the whole batch.
PER_HEAD_ARGUMENTS = ("sinks",)


def batch_slices(arguments: dict, heads: int):
    """``arguments`` for consecutive slices of the batch of at most ``MAX_BATCH_HEADS`` (batch, head) pairs.

    ``heads``: the heads per sequence that the launch's grid counts.

    Every tensor argument but those of ``PER_HEAD_ARGUMENTS`` (passed
    whole) has the batch as its first axis (those of ``PER_ROW_ARGUMENTS``
    are viewed as ``(B, Hq * L)``); each slice is a view. The kernel finds
    its batch and head from its program id within the slice.
    """
    tensors = {name: value for name, value in arguments.items()
               if isinstance(value, torch.Tensor) and name not in PER_HEAD_ARGUMENTS}
    batch = next(value.shape[0] for name, value in tensors.items() if name not in PER_ROW_ARGUMENTS)
    for name in PER_ROW_ARGUMENTS:
        if name in tensors:
            tensors[name] = tensors[name].view(batch, -1)
    step = MAX_BATCH_HEADS // heads
    for start in range(0, batch, step):
        yield dict(arguments, **{name: value[start:start + step] for name, value in tensors.items()})
