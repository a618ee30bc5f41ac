"""One decoding step with the keys split over programs (Flash-Decoding)."""
from __future__ import annotations

import contextlib
import math
import os

import torch

from ..problem import AttentionProblem, check_problem
from .forward import launch
from .kernels import kernel_module
from .layout import as_4d, batch_slices, cdiv, contiguous_rows, key_lengths, next_power_of_2
from .support import unsupported_reason
from .tiles import COMPILE_OPTIONS, INTERPRETER_BLOCKS, TileConfig


#: Fewest keys one part of a split decoding step takes: below that, merging costs more than it saves.
MIN_KEYS_PER_SPLIT = 256
#: The decoding kernel's launch on a GPU, by kind of product as in AUTOTUNE_CONFIGS; its
#: BLOCK_M is the group of query heads, padded to 16. Neither spills at E = 128
#: (tests/test_fused_compile.py).
DECODE_CONFIGS = {"tensor_cores": TileConfig(16, 64, 4, 3), "fma": TileConfig(16, 32, 8, 1)}


def decode_config(capability: tuple[int, int], dtype: torch.dtype) -> TileConfig:
    """The decoding kernel's configuration on a GPU of ``capability``."""
    fma = capability < (8, 0) or dtype == torch.float32
    return DECODE_CONFIGS["fma" if fma else "tensor_cores"]


def decode_arguments(problem: AttentionProblem, partial_acc: torch.Tensor, partial_m: torch.Tensor,
                     partial_l: torch.Tensor, lengths: torch.Tensor | None, keys_per_split: int,
                     block_n: int) -> dict:
    """Every argument of ``decode_split_kernel`` by name, for ``problem`` with one query per row."""
    q, k, v = (contiguous_rows(as_4d(x)) for x in (problem.query, problem.key, problem.value))
    return dict(
        query=q, key=k, value=v, partial_acc=partial_acc, partial_m=partial_m, partial_l=partial_l,
        key_lengths=lengths if lengths is not None else q,
        stride_qb=q.stride(0), stride_qh=q.stride(1),
        stride_kb=k.stride(0), stride_kh=k.stride(1), stride_ks=k.stride(2),
        stride_vb=v.stride(0), stride_vh=v.stride(1), stride_vs=v.stride(2),
        kv_heads=problem.kv_heads, group_size=problem.group_size, key_len=problem.key_len,
        keys_per_split=keys_per_split, scale_log2=problem.scale * math.log2(math.e),
        HEAD_DIM=problem.head_dim, VALUE_DIM=problem.value_dim,
        BLOCK_E=max(16, next_power_of_2(problem.head_dim)),
        BLOCK_EV=max(16, next_power_of_2(problem.value_dim)),
        HAS_KEY_LENGTHS=lengths is not None, BLOCK_M=max(16, next_power_of_2(problem.group_size)),
        BLOCK_N=block_n,
    )


def decode_splits(programs: int, key_len: int, multiprocessors: int) -> int:
    """Into how many parts :func:`decode` splits the keys.

    Enough parts that ``programs`` (batch x key/value heads) times the parts
    give every multiprocessor two programs, but no part shorter than
    ``MIN_KEYS_PER_SPLIT`` keys.
    """
    wanted = cdiv(2 * multiprocessors, programs)
    return max(1, min(wanted, key_len // MIN_KEYS_PER_SPLIT))


def decode(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    splits: int | None = None,
    return_lse: bool = False,
):
    """One decoding step, ``softmax(scale * q K^T) V`` for a single query, with the keys split over programs.

    Flash-Decoding: ``query (..., Hq, 1, E)`` against a cache ``key (..., Hkv,
    S, E)``, ``value (..., Hkv, S, Ev)``. The cache is cut into ``splits``
    parts (default: :func:`decode_splits`), each folded into a partial state
    ``(m, l, acc)`` by its own program, which takes all query heads of one
    key/value head so that each cached byte is read once; the partial
    states are merged with Chapter 8's rule; more than 65535 (sequence,
    key/value head) pairs, the grid's limit, are launched in slices of whole
    sequences. ``attn_mask``: None or key
    padding as :func:`attnlib.padding_mask` builds it. Returns the output
    ``(..., Hq, 1, Ev)`` in the input dtype, and ``lse (..., Hq, 1)`` with
    ``return_lse=True``; a sequence with no key gives 0 and ``-inf``.
    """
    if splits is not None and (not isinstance(splits, int) or isinstance(splits, bool) or splits < 1):
        raise ValueError(f"splits must be None or a positive int, got {splits!r}")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__} {return_lse!r}")
    problem = check_problem(query, key, value, attn_mask, 0.0, False, scale, enable_gqa, "top_left")
    if problem.query_len != 1:
        raise ValueError(f"query must hold one query per sequence and head (L = 1) to decode, "
                         f"got L = {problem.query_len}")
    why_not = unsupported_reason(problem)
    if why_not is not None:
        raise ValueError(f"fused.decode cannot run this call: {why_not}")
    lengths = None
    if attn_mask is not None:
        full_mask = as_4d(attn_mask.expand(*query.shape[:-1], problem.key_len))
        lengths = key_lengths(full_mask) if full_mask.dtype == torch.bool else None
        if lengths is None:
            raise ValueError("attn_mask must be None or key padding (True on a prefix of the keys, "
                             "the same for every head, as attnlib.padding_mask builds) to decode, "
                             f"got a {attn_mask.dtype} mask of shape {tuple(attn_mask.shape)}")
    device = problem.query.device
    if problem.key_len == 0 or problem.query.numel() == 0:
        output, lse = launch(problem, None) if problem.key_len == 0 else (
            torch.empty(problem.output_shape, dtype=query.dtype, device=device),
            torch.empty(query.shape[:-1], dtype=torch.float32, device=device))
        return (output, lse) if return_lse else output
    batch, kv_heads, group = math.prod(key.shape[:-3]), problem.kv_heads, problem.group_size
    config = None if device.type == "cpu" else decode_config(torch.cuda.get_device_capability(device), query.dtype)
    block_n = INTERPRETER_BLOCKS[1] if config is None else config.block_n
    if splits is None:
        multiprocessors = (torch.cuda.get_device_properties(device).multi_processor_count
                           if device.type == "cuda" else os.cpu_count() or 1)
        splits = decode_splits(batch * kv_heads, problem.key_len, multiprocessors)
    keys_per_split = cdiv(cdiv(problem.key_len, splits), block_n) * block_n
    splits = cdiv(problem.key_len, keys_per_split)  # no part left empty
    # Batch first, like the inputs, so that a launch can take a slice of whole sequences.
    partial_m = torch.empty(batch, kv_heads, splits, group, dtype=torch.float32, device=device)
    partial_l = torch.empty_like(partial_m)
    partial_acc = torch.empty(*partial_m.shape, problem.value_dim, dtype=torch.float32, device=device)
    arguments = decode_arguments(problem, partial_acc, partial_m, partial_l, lengths, keys_per_split, block_n)
    if config is not None:
        arguments.update(num_warps=config.num_warps, num_stages=config.num_stages, **COMPILE_OPTIONS)
    kernel = kernel_module("decode_kernel").decode_split_kernel
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        # B * Hkv programs on the grid's second axis, which CUDA caps at MAX_BATCH_HEADS.
        for part in batch_slices(arguments, kv_heads):
            kernel[(splits, part["query"].shape[0] * kv_heads)](**part)
    output, lse = merge_partial_states(*(x.flatten(0, 1) for x in (partial_m, partial_l, partial_acc)))
    output = output.reshape(problem.output_shape).to(query.dtype)
    lse = lse.reshape(query.shape[:-1])
    return (output, lse) if return_lse else output


def merge_partial_states(m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor):
    """Merge partial softmax states over dimension 1 (Chapter 8's rule), in base 2.

    ``m``, ``l`` ``(N, parts, R)``, ``acc`` ``(N, parts, R, Ev)``, with ``m``
    the running maximum of base-2 scores. Returns the normalised output
    ``(N, R, Ev)`` and the natural log-sum-exp ``(N, R)``: 0 and ``-inf`` for
    a row that saw no key in any part.
    """
    m_all = m.amax(dim=1, keepdim=True)
    # exp2(m_part - m_all) shrinks each part's sums to the common maximum; a part (or a row)
    # that saw no key has m = -inf and weighs 0, never exp2(-inf + inf) = NaN.
    weight = torch.where(m == float("-inf"), 0.0, torch.exp2(m - m_all.nan_to_num(neginf=0.0)))
    l_all = (weight * l).sum(dim=1)
    acc_all = (weight[..., None] * acc).sum(dim=1)
    has_keys = l_all > 0
    output = torch.where(has_keys[..., None], acc_all / torch.where(has_keys, l_all, 1.0)[..., None], 0.0)
    lse = torch.where(has_keys, (m_all.squeeze(1) + torch.log2(torch.where(has_keys, l_all, 1.0)))
                      * math.log(2.0), float("-inf"))
    return output, lse
