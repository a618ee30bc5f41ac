"""The fused attention forward kernel, in Triton (FlashAttention-2's forward pass).

One program computes one block of ``BLOCK_M`` query rows of one (batch, query
head): it streams over the keys in tiles of ``BLOCK_N``, keeping for every
row a running maximum ``m``, a running sum ``l`` and an unnormalised output
``acc`` in fp32 -- the online softmax of Chapter 8 and ``attnlib.tiled``,
step for step; the comments give Chapter 8's equation numbers. The
``L x S`` score matrix never exists; each ``BLOCK_M x BLOCK_N`` tile of it
lives in registers for one loop iteration.

Scores are kept in base 2: ``s = scale * log2(e) * q.k`` so that
``exp(scale * q.k - m) = exp2(s - m)``; the log-sum-exp written at the end
is converted back to natural units.

Sliding windows (``WINDOW``): query ``i`` sits at key position
``p = i + causal_offset`` and sees keys ``p - window_left <= j <= p +
window_right``. A block visits only the key tiles some of its rows can see;
tiles wholly outside every row's window are never loaded, so the work grows
with ``L x W``, not ``L x S``. Sinks (``HAS_SINKS``): each head's logit joins
every row's softmax denominator as a virtual key whose value is 0 (it seeds
the running state), so the log-sum-exp written includes it.

Offsets: a tensor may hold more than 2**31 elements, so every offset of a
block's or a tile's first row from the start of a tensor is computed in
64 bits; offsets inside one tile (at most 256 rows, see
``attnlib.fused.MAX_BLOCK``) stay in 32 bits, which the library checks
before a launch. The per-element address arithmetic thus costs what it
did in 32 bits.

This module is imported only where Triton is installed, by
:func:`attnlib.fused.kernels.kernel_module`; :mod:`attnlib.fused.forward`
lays out the arguments, picks the tile sizes and launches the kernel.
"""
import triton
import triton.language as tl

LOG2_E = tl.constexpr(1.4426950408889634)  # log2(e): exp(x) = exp2(x * log2(e))
LN_2 = tl.constexpr(0.6931471805599453)  # ln(2): back from base 2 to natural units

# What ``MASK_KIND`` says about the ``mask`` tensor.
NO_MASK = tl.constexpr(0)
BOOL_MASK = tl.constexpr(1)  # True = may attend
FLOAT_MASK = tl.constexpr(2)  # added to the scores; -inf forbids


@triton.jit
def _attend_to_key_tiles(
    acc, m, l, q,
    key_base, value_base, mask_base,
    rows, tile_begin, tile_end, keys_visible, query_len, causal_offset, scale_log2, softcap_log2,
    window_left, window_right,
    stride_ks, stride_vs, stride_ml, stride_ms,
    HEAD_DIM: tl.constexpr, VALUE_DIM: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr,
    SOFTCAP: tl.constexpr, WINDOW: tl.constexpr, CHECK_EDGES: tl.constexpr,
):
    """Fold the key tiles in ``[tile_begin, tile_end)`` into the state ``(acc, m, l)`` of one query block.

    ``key_base``, ``value_base`` point at the (batch, head)'s first key and
    value, ``mask_base`` at the mask row of the block's first query.

    With ``SOFTCAP``, scores are capped to ``c * tanh(s / c)`` before the
    masks; ``softcap_log2 = c * log2(e)`` is the cap in base-2 units.

    ``CHECK_EDGES`` is False for the tiles that every row of the block sees
    whole (left of the causal diagonal, inside every row's window, before
    the last key): they skip the bounds, causal and window masks, and most
    of the time goes there.
    """
    dims = tl.arange(0, BLOCK_E)
    value_dims = tl.arange(0, BLOCK_EV)
    tile_cols = tl.arange(0, BLOCK_N)  # a key's place in its tile
    tile_rows = tl.arange(0, BLOCK_M)
    for tile_start in range(tile_begin, tile_end, BLOCK_N):
        cols = tile_start + tile_cols
        # The tile's first key, in 64 bits: S x stride can pass 2**31.
        key_tile = key_base + tl.cast(tile_start, tl.int64) * stride_ks
        value_tile = value_base + tl.cast(tile_start, tl.int64) * stride_vs
        # Masked loads: keys past the last visible one and the padded width
        # (BLOCK_E > HEAD_DIM) read as 0, which adds nothing to q . k.
        key_ok = dims[None, :] < HEAD_DIM
        value_ok = value_dims[None, :] < VALUE_DIM
        if CHECK_EDGES:
            key_ok = key_ok & (cols[:, None] < keys_visible)
            value_ok = value_ok & (cols[:, None] < keys_visible)
        k = tl.load(key_tile + tile_cols[:, None] * stride_ks + dims[None, :], mask=key_ok, other=0.0)
        v = tl.load(value_tile + tile_cols[:, None] * stride_vs + value_dims[None, :],
                    mask=value_ok, other=0.0)

        # One tile of scores, z_ij = scale * q_i . k_j, times log2(e) so that
        # every exp below is an exp2. "ieee" keeps fp32 inputs in fp32 (no
        # TF32), like torch's matmul; fp16/bf16 products are exact in fp32.
        scores = tl.dot(q, tl.trans(k), input_precision="ieee") * scale_log2
        if SOFTCAP:
            # Soft-capping (Chapter 12), in base 2: c tanh(s / c) times log2(e) is
            # C tanh(S / C) with S = s log2(e), C = c log2(e). tanh(y) is written as
            # 1 - 2 / (exp(2y) + 1), an exp2 that saturates to +-1 for large |y|.
            doubled = scores * (2.0 * LOG2_E / softcap_log2)
            scores = softcap_log2 * (1.0 - 2.0 / (tl.math.exp2(doubled) + 1.0))

        # Masks: a forbidden (i, j) gets the score -inf, so its weight is exp2(-inf) = 0.
        if CHECK_EDGES or MASK_KIND != NO_MASK:
            allowed = cols[None, :] < keys_visible
            if IS_CAUSAL:
                allowed = allowed & (cols[None, :] <= rows[:, None] + causal_offset)
            if WINDOW:
                positions = rows[:, None] + causal_offset  # each query's place among the keys
                allowed = allowed & (cols[None, :] >= positions - window_left)
                allowed = allowed & (cols[None, :] <= positions + window_right)
            if MASK_KIND != NO_MASK:
                mask_ok = (rows[:, None] < query_len) & (cols[None, :] < keys_visible)
                mask_tile = mask_base + tl.cast(tile_start, tl.int64) * stride_ms
                mask_ptrs = mask_tile + tile_rows[:, None] * stride_ml + tile_cols[None, :] * stride_ms
                if MASK_KIND == BOOL_MASK:
                    allowed = allowed & (tl.load(mask_ptrs, mask=mask_ok, other=0) != 0)
                else:
                    bias = tl.load(mask_ptrs, mask=mask_ok, other=float("-inf")).to(tl.float32)
                    allowed = allowed & (bias != float("-inf"))
                    scores = scores + bias * LOG2_E
                # Zero the values of keys no row of the block may see: a weight
                # of 0 times a NaN stored there (padding) would still be NaN.
                seen_by_some_row = tl.max(allowed.to(tl.int32), axis=0) > 0
                v = tl.where(seen_by_some_row[:, None], v, 0.0)
            scores = tl.where(allowed, scores, float("-inf"))

        # (eq. 8.2) m_new = max(m, rowmax(Z_tile)).
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        # A row with no allowed key so far still has m_new = -inf; shifting by
        # 0 instead gives exp2(-inf - 0) = 0 where exp2(-inf + inf) would be NaN.
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        # How much the state summed against the old maximum shrinks: exp(m - m_new).
        correction = tl.math.exp2(m - shift)
        # Unnormalised weights exp(Z_tile - m_new): at most 1, so they never overflow.
        weights = tl.math.exp2(scores - shift[:, None])
        # (eq. 8.3) l_new = l * exp(m - m_new) + rowsum(exp(Z_tile - m_new)).
        l = l * correction + tl.sum(weights, axis=1)
        # (eq. 8.4) acc_new = acc * exp(m - m_new) + exp(Z_tile - m_new) V_tile.
        # The weights are rounded to the input dtype so that this product also
        # runs on tensor cores; it accumulates in fp32.
        acc = acc * correction[:, None] + tl.dot(weights.to(v.dtype), v, input_precision="ieee")
        m = m_new
    return acc, m, l


@triton.jit
def _key_tiles_of_query_block(
    block_start, batch, key_lengths, query_len, key_len, causal_offset, window_left, window_right,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
    HAS_KEY_LENGTHS: tl.constexpr, WINDOW: tl.constexpr,
):
    """Which keys the query block starting at row ``block_start`` visits.

    Returns ``(first_tile, full_tiles_begin, full_tiles_end, keys_visible)``:
    the block visits the tiles from ``first_tile`` up to the last key that
    any of its rows may see (``keys_visible``, exclusive); those in
    ``[full_tiles_begin, full_tiles_end)`` every row sees whole, the others
    are masked. Tiles outside are skipped, not masked: with a causal mask
    that is about half of all tiles, with key lengths everything past the
    padding, with a window all but about ``(W + BLOCK_M) / BLOCK_N`` tiles per block.
    """
    keys_visible = key_len
    if HAS_KEY_LENGTHS:
        keys_visible = tl.minimum(keys_visible, tl.load(key_lengths + batch))
    full_tiles_end = (keys_visible // BLOCK_N) * BLOCK_N
    # Row i sits at key position i + causal_offset. Keys to the right: the
    # block's last real row sees the most, its first row the fewest ...
    first_position = block_start + causal_offset
    last_position = tl.minimum(block_start + BLOCK_M, query_len) - 1 + causal_offset
    if IS_CAUSAL:
        keys_visible = tl.minimum(keys_visible, tl.maximum(last_position + 1, 0))
        full_tiles_end = tl.minimum(full_tiles_end, (tl.maximum(first_position + 1, 0) // BLOCK_N) * BLOCK_N)
    first_tile = 0
    full_tiles_begin = 0
    if WINDOW:
        keys_visible = tl.minimum(keys_visible, tl.maximum(last_position + window_right + 1, 0))
        full_tiles_end = tl.minimum(
            full_tiles_end, (tl.maximum(first_position + window_right + 1, 0) // BLOCK_N) * BLOCK_N)
        # ... and keys to the left, the other way round: the first row reaches
        # furthest, the last row least far.
        first_tile = (tl.maximum(first_position - window_left, 0) // BLOCK_N) * BLOCK_N
        full_tiles_begin = tl.cdiv(tl.maximum(last_position - window_left, 0), BLOCK_N) * BLOCK_N
        # A window narrower than the block's rows leaves no tile whole: then
        # everything from first_tile to keys_visible is masked.
        full_tiles_begin = tl.minimum(tl.maximum(full_tiles_begin, first_tile), keys_visible)
        full_tiles_end = tl.maximum(full_tiles_end, full_tiles_begin)
    return first_tile, full_tiles_begin, full_tiles_end, keys_visible


@triton.jit
def attention_forward_kernel(
    query, key, value, output, log_sum_exp, mask, key_lengths, sinks,
    stride_qb, stride_qh, stride_ql,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_ol,
    stride_mb, stride_mh, stride_ml, stride_ms,
    query_heads, group_size, query_len, key_len, causal_offset, scale_log2, softcap_log2,
    window_left, window_right,
    HEAD_DIM: tl.constexpr, VALUE_DIM: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr,
    IS_CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr, HAS_KEY_LENGTHS: tl.constexpr,
    SOFTCAP: tl.constexpr, WINDOW: tl.constexpr, HAS_SINKS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """``O = softmax(scale * Q K^T + mask) V`` and its log-sum-exp for one block of query rows.

    Grid: ``(cdiv(L, BLOCK_M), B * Hq)``. Tensors: ``query (B, Hq, L, E)``,
    ``key (B, Hkv, S, E)``, ``value (B, Hkv, S, Ev)``, ``output (B, Hq, L, Ev)``
    (each with a contiguous last dimension), ``log_sum_exp (B * Hq, L)`` fp32
    contiguous, ``mask`` broadcast to ``(B, Hq, L, S)`` by its strides (0 on
    broadcast axes), ``key_lengths (B,)`` int32, ``sinks (Hq,)`` fp32 in the
    units of the scaled (and capped) scores (natural, not base 2). ``window_left`` and
    ``window_right`` are finite (the launcher bounds an open side by the
    lengths). ``E`` and ``Ev`` are padded to the powers of two ``BLOCK_E``
    and ``BLOCK_EV``; the loads mask the padding.
    """
    block = tl.program_id(0)
    batch_head = tl.program_id(1)
    batch = (batch_head // query_heads).to(tl.int64)
    head = (batch_head % query_heads).to(tl.int64)
    kv_head = head // group_size  # GQA/MQA: this query head reads a shared K/V head, no copy
    block_start = block * BLOCK_M
    tile_rows = tl.arange(0, BLOCK_M)  # a query's place in the block
    rows = block_start + tile_rows
    dims = tl.arange(0, BLOCK_E)
    value_dims = tl.arange(0, BLOCK_EV)

    # Where this (batch, head) and this block start, in 64 bits: batch and
    # head are int64, and so is the block's first row.
    first_row = block_start.to(tl.int64)
    key_base = key + batch * stride_kb + kv_head * stride_kh
    value_base = value + batch * stride_vb + kv_head * stride_vh
    mask_base = mask + batch * stride_mb + head * stride_mh + first_row * stride_ml
    q_block = query + batch * stride_qb + head * stride_qh + first_row * stride_ql
    q_ptrs = q_block + tile_rows[:, None] * stride_ql + dims[None, :]
    q = tl.load(q_ptrs, mask=(rows[:, None] < query_len) & (dims[None, :] < HEAD_DIM), other=0.0)

    first_tile, full_tiles_begin, full_tiles_end, keys_visible = _key_tiles_of_query_block(
        block_start, batch, key_lengths, query_len, key_len, causal_offset, window_left, window_right,
        BLOCK_M, BLOCK_N, IS_CAUSAL, HAS_KEY_LENGTHS, WINDOW,
    )

    # State per query row before any key: m = -inf, l = 0, acc = 0, all fp32.
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_EV], dtype=tl.float32)
    if HAS_SINKS:
        # The head's sink is one more key with logit zeta_h and value 0: the state
        # starts as if it had been folded in, m = zeta_h (base 2, like the scores),
        # l = exp2(zeta_h - m) = 1, acc = 0. It joins every denominator and the lse.
        m = tl.zeros([BLOCK_M], dtype=tl.float32) + tl.load(sinks + head) * LOG2_E
        l = tl.full([BLOCK_M], 1.0, dtype=tl.float32)

    acc, m, l = _attend_to_key_tiles(
        acc, m, l, q, key_base, value_base, mask_base,
        rows, full_tiles_begin, full_tiles_end, keys_visible, query_len, causal_offset, scale_log2,
        softcap_log2, window_left, window_right, stride_ks, stride_vs, stride_ml, stride_ms,
        HEAD_DIM, VALUE_DIM, BLOCK_E, BLOCK_EV, BLOCK_M, BLOCK_N, IS_CAUSAL, MASK_KIND, SOFTCAP, WINDOW,
        CHECK_EDGES=False,
    )
    acc, m, l = _attend_to_key_tiles(
        acc, m, l, q, key_base, value_base, mask_base,
        rows, full_tiles_end, keys_visible, keys_visible, query_len, causal_offset, scale_log2,
        softcap_log2, window_left, window_right, stride_ks, stride_vs, stride_ml, stride_ms,
        HEAD_DIM, VALUE_DIM, BLOCK_E, BLOCK_EV, BLOCK_M, BLOCK_N, IS_CAUSAL, MASK_KIND, SOFTCAP, WINDOW,
        CHECK_EDGES=True,
    )
    if WINDOW:  # the tiles that the window's left edge cuts (the order of tiles is free)
        acc, m, l = _attend_to_key_tiles(
            acc, m, l, q, key_base, value_base, mask_base,
            rows, first_tile, full_tiles_begin, keys_visible, query_len, causal_offset, scale_log2,
            softcap_log2, window_left, window_right, stride_ks, stride_vs, stride_ml, stride_ms,
            HEAD_DIM, VALUE_DIM, BLOCK_E, BLOCK_EV, BLOCK_M, BLOCK_N, IS_CAUSAL, MASK_KIND, SOFTCAP, WINDOW,
            CHECK_EDGES=True,
        )

    # (eq. 8.5) O = acc / l. A row that saw no allowed key has l = 0 and
    # acc = 0: its output is 0, not 0/0 (with a sink, l = 1 and acc = 0).
    has_keys = l > 0
    safe_l = tl.where(has_keys, l, 1.0)
    out = acc / safe_l[:, None]
    o_block = output + batch * stride_ob + head * stride_oh + first_row * stride_ol
    o_ptrs = o_block + tile_rows[:, None] * stride_ol + value_dims[None, :]
    tl.store(o_ptrs, out.to(output.dtype.element_ty),
             mask=(rows[:, None] < query_len) & (value_dims[None, :] < VALUE_DIM))
    # (eq. 8.6) lse = m + log(l), here (m + log2 l) * ln 2 since m is in base 2;
    # -inf for a row with no allowed key (and no sink). The backward pass rebuilds the weights from it.
    lse = tl.where(has_keys, (m + tl.math.log2(safe_l)) * LN_2, float("-inf"))
    tl.store(log_sum_exp + batch_head.to(tl.int64) * query_len + rows, lse, mask=rows < query_len)

