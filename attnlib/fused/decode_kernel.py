"""The decoding kernel, in Triton: one query per sequence against a long cache, split over programs.

It folds its part of the keys with the forward kernel's loop,
:func:`attnlib.fused.forward_kernel._attend_to_key_tiles`.
"""
import triton
import triton.language as tl

from .forward_kernel import NO_MASK, _attend_to_key_tiles


@triton.jit
def decode_split_kernel(
    query, key, value, partial_acc, partial_m, partial_l, key_lengths,
    stride_qb, stride_qh,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    kv_heads, group_size, key_len, keys_per_split, scale_log2,
    HEAD_DIM: tl.constexpr, VALUE_DIM: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr,
    HAS_KEY_LENGTHS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """One decoding step, split over the keys (Flash-Decoding): one part of the cache, one key/value head.

    Grid: ``(splits, B * Hkv)``, B that of a slice of the batch (``decode``
    launches B * Hkv <= 65535 at a time). Each program takes the ``group_size`` query
    heads that share one key/value head as the rows of its block (one query
    each, ``query (B, Hq, 1, E)``), so every key and value of the cache is
    read by one program only, and folds the keys
    ``[split * keys_per_split, (split + 1) * keys_per_split)`` into a partial
    state ``(m, l, acc)``, in base 2, written to ``partial_m``, ``partial_l``
    ``(B, Hkv, splits, group_size)`` and ``partial_acc`` ``(B, Hkv, splits,
    group_size, Ev)``, all fp32 and contiguous. Merging the splits' states is
    Chapter 8's rule for merging two states, done by ``attnlib.fused.decode``.
    ``keys_per_split`` is a multiple of ``BLOCK_N``.
    """
    split = tl.program_id(0)
    batch_kv = tl.program_id(1)
    splits = tl.num_programs(0)
    batch = (batch_kv // kv_heads).to(tl.int64)
    kv_head = (batch_kv % kv_heads).to(tl.int64)
    group_rows = tl.arange(0, BLOCK_M)  # query heads kv_head * group_size + r, r < group_size
    dims = tl.arange(0, BLOCK_E)
    value_dims = tl.arange(0, BLOCK_EV)
    first_query_head = query + batch * stride_qb + kv_head * group_size * stride_qh
    # 64-bit: the heads are this block's rows, and a query sliced from a long prefill has heads
    # L * E elements apart, so that a group of them can span more than 2**31 elements.
    q = tl.load(first_query_head + group_rows[:, None].to(tl.int64) * stride_qh + dims[None, :],
                mask=(group_rows[:, None] < group_size) & (dims[None, :] < HEAD_DIM), other=0.0)
    key_base = key + batch * stride_kb + kv_head * stride_kh
    value_base = value + batch * stride_vb + kv_head * stride_vh

    keys_visible = key_len
    if HAS_KEY_LENGTHS:
        keys_visible = tl.minimum(keys_visible, tl.load(key_lengths + batch))
    split_begin = split * keys_per_split
    split_end = tl.minimum(split_begin + keys_per_split, keys_visible)
    full_tiles_end = split_begin + tl.maximum(split_end - split_begin, 0) // BLOCK_N * BLOCK_N

    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_EV], dtype=tl.float32)
    # The same loop as the forward kernel's, without causal mask or mask tensor
    # (one query per sequence sees the whole cache): whole tiles, then the last part.
    acc, m, l = _attend_to_key_tiles(
        acc, m, l, q, key_base, value_base, query,
        group_rows, split_begin, full_tiles_end, split_end, group_size, 0, scale_log2, 1.0, 0, 0,
        stride_ks, stride_vs, 0, 0,
        HEAD_DIM, VALUE_DIM, BLOCK_E, BLOCK_EV, BLOCK_M, BLOCK_N, False, NO_MASK, False, False,
        CHECK_EDGES=False,
    )
    acc, m, l = _attend_to_key_tiles(
        acc, m, l, q, key_base, value_base, query,
        group_rows, full_tiles_end, split_end, split_end, group_size, 0, scale_log2, 1.0, 0, 0,
        stride_ks, stride_vs, 0, 0,
        HEAD_DIM, VALUE_DIM, BLOCK_E, BLOCK_EV, BLOCK_M, BLOCK_N, False, NO_MASK, False, False,
        CHECK_EDGES=True,
    )

    state = (batch_kv.to(tl.int64) * splits + split) * group_size
    row_ok = group_rows < group_size
    tl.store(partial_m + state + group_rows, m, mask=row_ok)
    tl.store(partial_l + state + group_rows, l, mask=row_ok)
    tl.store(partial_acc + (state + group_rows[:, None]) * VALUE_DIM + value_dims[None, :], acc,
             mask=row_ok[:, None] & (value_dims[None, :] < VALUE_DIM))
