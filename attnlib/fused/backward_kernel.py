"""The fused attention backward kernels, in Triton (FlashAttention-2's backward pass).

The forward pass saved the output ``O`` and, per query row, the log-sum-exp
``lse`` of its scores -- not the ``L x S`` weights. The backward pass
recomputes each tile of weights from them, ``P = exp(s - lse)`` (eq. 8.8), and
turns the gradient ``dO`` arriving at the output into the inputs' gradients
(eq. 8.9), tile by tile, as :func:`attnlib.tiled._backward` does in torch:

    D   = rowsum(dO * O)             (one number per query row)
    dV  = P^T dO                     (summed over the query rows)
    dP  = dO V^T
    dS  = P * (dP - D)               (the softmax's backward, row by row)
    dQ  = scale * dS K
    dK  = scale * dS^T Q

Three kernels share the work so that every sum stays inside one program (no
atomics: the results are the same on every run):

- :func:`attention_backward_preprocess_kernel` computes ``D``;
- :func:`attention_backward_key_value_kernel` owns one block of keys: it
  visits the query tiles that may see them, for every query head of the
  group sharing its key/value head (GQA/MQA), and sums ``dK`` and ``dV``;
- :func:`attention_backward_query_kernel` owns one block of queries: it
  visits the key tiles they may see, as the forward kernel does, and sums ``dQ``.

Each recomputes ``P`` and ``dS`` for its tiles (:func:`_tile_gradients`):
twice the forward's work in products, but no ``L x S`` matrix in memory.
The key/value kernel lays its tiles out keys by queries (``S^T = K Q^T``)
so that ``P^T`` and ``dS^T`` come out of the products the way ``dV`` and
``dK`` need them, as in FlashAttention-2 and Triton's tutorial.

Scores are in base 2 as in the forward kernel (``s = scale * log2(e) * q.k``,
``P = exp2(s - lse * log2(e))``). A row with no allowed key has
``lse = -inf``; read as ``+inf`` it gives ``P = exp2(s - inf) = 0``, and
so ``dS = 0`` and a zero gradient, never NaN.

A window (``WINDOW``) is skipped and masked as in the forward kernel, from
both sides: the query kernel visits the forward's key tiles, the key/value
kernel only the query tiles whose windows reach its keys. Sinks need nothing
here: the saved ``lse`` includes them, so ``P = exp(s - lse)`` is already the
weight with the sink in its denominator; their own gradient,
``-sum_i P_sink,i D_i``, is a sum over rows that :mod:`attnlib.fused.backward`
takes in torch.

Offsets follow the forward kernel: a block's or a tile's first row from the
start of a tensor in 64 bits, offsets inside a tile in 32 bits.

:mod:`attnlib.fused.backward` lays out the arguments and launches the kernels.
"""
import triton
import triton.language as tl

from .forward_kernel import BOOL_MASK, LN_2, LOG2_E, NO_MASK, _key_tiles_of_query_block


@triton.jit
def attention_backward_preprocess_kernel(
    output, grad_output, delta,
    stride_ob, stride_oh, stride_ol,
    stride_dob, stride_doh, stride_dol,
    query_heads, query_len,
    VALUE_DIM: tl.constexpr, BLOCK_EV: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """``D = rowsum(dO * O)`` for one block of query rows, in fp32.

    Grid: ``(cdiv(L, BLOCK_M), B * Hq)``. ``output`` and ``grad_output`` are
    ``(B, Hq, L, Ev)`` with a contiguous last dimension; ``delta`` holds
    ``B * Hq * L`` fp32 values, contiguous.
    """
    block = tl.program_id(0)
    batch_head = tl.program_id(1)
    batch = (batch_head // query_heads).to(tl.int64)
    head = (batch_head % query_heads).to(tl.int64)
    block_start = block * BLOCK_M
    first_row = block_start.to(tl.int64)
    tile_rows = tl.arange(0, BLOCK_M)
    rows = block_start + tile_rows
    value_dims = tl.arange(0, BLOCK_EV)
    in_bounds = (rows[:, None] < query_len) & (value_dims[None, :] < VALUE_DIM)

    o_block = output + batch * stride_ob + head * stride_oh + first_row * stride_ol
    do_block = grad_output + batch * stride_dob + head * stride_doh + first_row * stride_dol
    o = tl.load(o_block + tile_rows[:, None] * stride_ol + value_dims[None, :], mask=in_bounds, other=0.0)
    do = tl.load(do_block + tile_rows[:, None] * stride_dol + value_dims[None, :], mask=in_bounds, other=0.0)
    # D_i = sum_e dO_ie O_ie: how much the output row already points along dO_i.
    # It is the term every weight of row i shares in the softmax's backward.
    row_term = tl.sum(do.to(tl.float32) * o.to(tl.float32), axis=1)
    tl.store(delta + batch_head.to(tl.int64) * query_len + rows, row_term, mask=rows < query_len)


@triton.jit
def _tile_gradients(
    scores, grad_weights, lse_log2, row_term, query_positions, key_positions, mask_ptrs,
    keys_visible, query_len, causal_offset, softcap_log2, window_left, window_right,
    IS_CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr,
    CHECK_EDGES: tl.constexpr,
):
    """Weights ``P`` and score gradients ``dS`` of one tile, in fp32, from its two products.

    ``scores`` holds ``scale * log2(e) * q.k`` and ``grad_weights`` holds
    ``dP = dO . v`` for the tile's (query, key) pairs. The tile may lie
    either way round (queries along its rows in the query kernel, along its
    columns in the key/value kernel, which so never transposes a tile held
    in registers): the per-query ``lse_log2`` (``lse * log2(e)``, ``+inf``
    for a row with no allowed key) and ``row_term`` (``D``), the positions
    and ``mask_ptrs`` (the tile's mask entries) come broadcast to its
    orientation. ``dS`` is the gradient of the scores before the cap,
    ``s = scale * q.k``, in natural units.

    ``CHECK_EDGES`` is False for tiles that every query sees whole, as in
    the forward kernel: no bounds, no causal or window mask.
    """
    if SOFTCAP:
        # The cap as in the forward kernel, C tanh(S / C) in base-2 units ...
        doubled = scores * (2.0 * LOG2_E / softcap_log2)
        scores = softcap_log2 * (1.0 - 2.0 / (tl.math.exp2(doubled) + 1.0))
        # ... and its slope, d/ds c tanh(s / c) = 1 - tanh^2(s / c), where
        # tanh(s / c) is the capped score over the cap (in any units).
        capped_over_cap = scores / softcap_log2
        cap_slope = 1.0 - capped_over_cap * capped_over_cap

    # The forward's masks: a forbidden (i, j) gets the score -inf, so P_ij = 0.
    if CHECK_EDGES or MASK_KIND != NO_MASK:
        allowed = key_positions < keys_visible
        if IS_CAUSAL:
            allowed = allowed & (key_positions <= query_positions + causal_offset)
        if WINDOW:
            positions = query_positions + causal_offset  # each query's place among the keys
            allowed = allowed & (key_positions >= positions - window_left)
            allowed = allowed & (key_positions <= positions + window_right)
        if MASK_KIND != NO_MASK:
            mask_ok = (query_positions < query_len) & (key_positions < keys_visible)
            if MASK_KIND == BOOL_MASK:
                allowed = allowed & (tl.load(mask_ptrs, mask=mask_ok, other=0) != 0)
            else:
                bias = tl.load(mask_ptrs, mask=mask_ok, other=float("-inf")).to(tl.float32)
                allowed = allowed & (bias != float("-inf"))
                scores = scores + bias * LOG2_E
        scores = tl.where(allowed, scores, float("-inf"))

    # (eq. 8.8) P = exp(s - lse), the forward's normalised weights, from the saved lse.
    weights = tl.math.exp2(scores - lse_log2)
    # dS = P * (dP - D): the softmax's backward, D = rowsum(dO * O) = rowsum(P * dP).
    grad_scores = weights * (grad_weights - row_term)
    if SOFTCAP:
        grad_scores = grad_scores * cap_slope  # through the cap, to the uncapped scores
    if CHECK_EDGES or MASK_KIND != NO_MASK:
        # A forbidden (i, j) has P_ij = 0, but dP_ij may be NaN (a NaN value
        # in padding) and 0 * NaN = NaN: its gradient is 0 by where, not by product.
        grad_scores = tl.where(allowed, grad_scores, 0.0)
    return weights, grad_scores


@triton.jit
def _key_block_gradients(
    grad_k, grad_v, k, v,
    query_base, grad_output_base, lse_base, delta_base, mask_base,
    key_start, tile_begin, tile_end, keys_visible, query_len, causal_offset, scale_log2, softcap_log2,
    window_left, window_right, stride_ql, stride_dol, stride_ml, stride_ms,
    HEAD_DIM: tl.constexpr, VALUE_DIM: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr,
    SOFTCAP: tl.constexpr, WINDOW: tl.constexpr, CHECK_EDGES: tl.constexpr,
):
    """Add to ``(grad_k, grad_v)`` of one key block the query tiles in ``[tile_begin, tile_end)`` of one head.

    The ``*_base`` pointers point at the head's first query row (``mask_base``
    at its mask entry for the block's first key). The tiles lie keys by
    queries, ``(BLOCK_N, BLOCK_M)``: ``S^T = K Q^T``, so that ``P^T`` and
    ``dS^T`` come out ready for ``dV = P^T dO`` and ``dK = dS^T Q``.
    """
    dims = tl.arange(0, BLOCK_E)
    value_dims = tl.arange(0, BLOCK_EV)
    tile_rows = tl.arange(0, BLOCK_M)  # a query's place in its tile
    tile_cols = tl.arange(0, BLOCK_N)  # a key's place in the block
    cols = key_start + tile_cols
    for tile_start in range(tile_begin, tile_end, BLOCK_M):
        rows = tile_start + tile_rows
        first_row = tl.cast(tile_start, tl.int64)  # the tile's first row, in 64 bits
        # Rows past the last query read as q = dO = D = 0 and lse = +inf: P = 0, dS = 0.
        row_ok = rows < query_len
        # Q^T, (BLOCK_E, BLOCK_M): loaded transposed, which costs nothing but the addresses.
        q_t = tl.load(query_base + first_row * stride_ql + tile_rows[None, :] * stride_ql + dims[:, None],
                      mask=row_ok[None, :] & (dims[:, None] < HEAD_DIM), other=0.0)
        do = tl.load(grad_output_base + first_row * stride_dol + tile_rows[:, None] * stride_dol
                     + value_dims[None, :], mask=row_ok[:, None] & (value_dims[None, :] < VALUE_DIM), other=0.0)
        lse = tl.load(lse_base + rows, mask=row_ok, other=float("inf"))
        # A row with no allowed key (lse = -inf) counts as lse = +inf: all its weights are 0.
        lse_log2 = tl.where(lse == float("-inf"), float("inf"), lse * LOG2_E)
        row_term = tl.load(delta_base + rows, mask=row_ok, other=0.0)
        mask_ptrs = (mask_base + first_row * stride_ml
                     + tile_rows[None, :] * stride_ml + tile_cols[:, None] * stride_ms)

        # S^T = scale * K Q^T (in base 2) and dP^T = V dO^T, keys by queries.
        scores = tl.dot(k, q_t, input_precision="ieee") * scale_log2
        grad_weights = tl.dot(v, tl.trans(do), input_precision="ieee")
        weights, grad_scores = _tile_gradients(
            scores, grad_weights, lse_log2[None, :], row_term[None, :], rows[None, :], cols[:, None],
            mask_ptrs, keys_visible, query_len, causal_offset, softcap_log2, window_left, window_right,
            IS_CAUSAL, MASK_KIND, SOFTCAP, WINDOW, CHECK_EDGES,
        )
        # dV_j += sum_i P_ij dO_i, i.e. P^T dO; the weights are rounded to the
        # input dtype so that the product runs on tensor cores, summed in fp32.
        grad_v += tl.dot(weights.to(do.dtype), do, input_precision="ieee")
        # dK_j += sum_i dS_ij Q_i, i.e. dS^T Q (times scale, once, at the end).
        grad_k += tl.dot(grad_scores.to(q_t.dtype), tl.trans(q_t), input_precision="ieee")
    return grad_k, grad_v


@triton.jit
def attention_backward_key_value_kernel(
    query, key, value, grad_output, log_sum_exp, delta, grad_key, grad_value, mask, key_lengths,
    stride_qb, stride_qh, stride_ql,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_dob, stride_doh, stride_dol,
    stride_dkb, stride_dkh, stride_dks,
    stride_dvb, stride_dvh, stride_dvs,
    stride_mb, stride_mh, stride_ml, stride_ms,
    kv_heads, group_size, query_len, key_len, causal_offset, scale_log2, softcap_log2,
    window_left, window_right,
    HEAD_DIM: tl.constexpr, VALUE_DIM: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr,
    IS_CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr, HAS_KEY_LENGTHS: tl.constexpr,
    SOFTCAP: tl.constexpr, WINDOW: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """``dK = scale * dS^T Q`` and ``dV = P^T dO`` for one block of ``BLOCK_N`` keys.

    Grid: ``(cdiv(S, BLOCK_N), B * Hkv)``. Shapes as in the forward kernel,
    plus ``grad_output (B, Hq, L, Ev)``, ``grad_key (B, Hkv, S, E)``,
    ``grad_value (B, Hkv, S, Ev)`` (contiguous last dimensions) and
    ``log_sum_exp``, ``delta``: ``B * Hq * L`` fp32 values, contiguous. The
    ``G = group_size`` query heads that share this key/value head are
    visited in turn and their gradients summed here, in registers: no copy
    of K or V per query head, and no two programs write the same gradient.
    """
    block = tl.program_id(0)
    batch_kv_head = tl.program_id(1)
    batch = (batch_kv_head // kv_heads).to(tl.int64)
    kv_head = (batch_kv_head % kv_heads).to(tl.int64)
    key_start = block * BLOCK_N
    first_key = key_start.to(tl.int64)
    tile_cols = tl.arange(0, BLOCK_N)  # a key's place in the block
    cols = key_start + tile_cols
    dims = tl.arange(0, BLOCK_E)
    value_dims = tl.arange(0, BLOCK_EV)

    # Keys some query may see: none past the key length, and none right of
    # the last query's reach, j <= L - 1 + causal_offset (+ window_right).
    keys_visible = key_len
    if HAS_KEY_LENGTHS:
        keys_visible = tl.minimum(keys_visible, tl.load(key_lengths + batch))
    if IS_CAUSAL:
        keys_visible = tl.minimum(keys_visible, tl.maximum(query_len + causal_offset, 0))
    if WINDOW:
        keys_visible = tl.minimum(keys_visible, tl.maximum(query_len + causal_offset + window_right, 0))

    # The block's keys and values, loaded once for all its query tiles; keys
    # no query sees read as 0 (and their gradients come out 0).
    key_ok = (cols[:, None] < keys_visible) & (dims[None, :] < HEAD_DIM)
    value_ok = (cols[:, None] < keys_visible) & (value_dims[None, :] < VALUE_DIM)
    k_block = key + batch * stride_kb + kv_head * stride_kh + first_key * stride_ks
    v_block = value + batch * stride_vb + kv_head * stride_vh + first_key * stride_vs
    k = tl.load(k_block + tile_cols[:, None] * stride_ks + dims[None, :], mask=key_ok, other=0.0)
    v = tl.load(v_block + tile_cols[:, None] * stride_vs + value_dims[None, :], mask=value_ok, other=0.0)

    # Which query tiles see the block. Query i sees key j iff i >= j -
    # causal_offset (causal) and j - causal_offset - window_right <= i <=
    # j - causal_offset + window_left (window): tiles above the block's
    # first key's reach are skipped, not masked ...
    first_tile = 0
    if IS_CAUSAL:
        first_tile = (tl.maximum(key_start - causal_offset, 0) // BLOCK_M) * BLOCK_M
    if WINDOW:
        first_tile = tl.maximum(
            first_tile, (tl.maximum(key_start - causal_offset - window_right, 0) // BLOCK_M) * BLOCK_M)
    # ... from the first tile whose first row sees the block's last key on,
    # every row sees every key of the block: no masks there ...
    last_key = key_start + BLOCK_N - 1
    full_tiles_begin = first_tile
    if IS_CAUSAL:
        full_tiles_begin = tl.cdiv(tl.maximum(last_key - causal_offset, 0), BLOCK_M) * BLOCK_M
    if WINDOW:
        full_tiles_begin = tl.maximum(
            full_tiles_begin, tl.cdiv(tl.maximum(last_key - causal_offset - window_right, 0), BLOCK_M) * BLOCK_M)
    # ... up to the last tile whose last row still sees the block's first key
    # (window), and tiles below the block's last key's reach are skipped.
    full_tiles_end = query_len
    rows_end = query_len
    if WINDOW:
        full_tiles_end = (tl.maximum(key_start - causal_offset + window_left + 1, 0) // BLOCK_M) * BLOCK_M
        rows_end = tl.minimum(tl.maximum(last_key - causal_offset + window_left + 1, 0), query_len)
    # A block that reaches past the visible keys is checked on every tile,
    # and one with no visible key visits none.
    full_tiles_begin = tl.where(key_start + BLOCK_N <= keys_visible, full_tiles_begin, rows_end)
    first_tile = tl.minimum(tl.where(key_start < keys_visible, first_tile, rows_end), rows_end)
    full_tiles_begin = tl.minimum(tl.maximum(full_tiles_begin, first_tile), rows_end)
    full_tiles_end = tl.minimum(tl.maximum(full_tiles_end, full_tiles_begin), rows_end)

    # dK and dV of the block, summed over the group's heads and their query tiles, in fp32.
    grad_k = tl.zeros([BLOCK_N, BLOCK_E], dtype=tl.float32)
    grad_v = tl.zeros([BLOCK_N, BLOCK_EV], dtype=tl.float32)
    for member in range(0, group_size):
        # GQA/MQA: query head kv_head * G + member reads this key/value head.
        head = kv_head * group_size + member
        batch_head = batch * (kv_heads * group_size) + head
        query_base = query + batch * stride_qb + head * stride_qh
        grad_output_base = grad_output + batch * stride_dob + head * stride_doh
        lse_base = log_sum_exp + batch_head * query_len
        delta_base = delta + batch_head * query_len
        mask_base = mask + batch * stride_mb + head * stride_mh + first_key * stride_ms
        grad_k, grad_v = _key_block_gradients(
            grad_k, grad_v, k, v, query_base, grad_output_base, lse_base, delta_base, mask_base,
            key_start, first_tile, full_tiles_begin, keys_visible, query_len, causal_offset, scale_log2,
            softcap_log2, window_left, window_right, stride_ql, stride_dol, stride_ml, stride_ms,
            HEAD_DIM, VALUE_DIM, BLOCK_E, BLOCK_EV, BLOCK_M, BLOCK_N, IS_CAUSAL, MASK_KIND, SOFTCAP, WINDOW,
            CHECK_EDGES=True,
        )
        grad_k, grad_v = _key_block_gradients(
            grad_k, grad_v, k, v, query_base, grad_output_base, lse_base, delta_base, mask_base,
            key_start, full_tiles_begin, full_tiles_end, keys_visible, query_len, causal_offset, scale_log2,
            softcap_log2, window_left, window_right, stride_ql, stride_dol, stride_ml, stride_ms,
            HEAD_DIM, VALUE_DIM, BLOCK_E, BLOCK_EV, BLOCK_M, BLOCK_N, IS_CAUSAL, MASK_KIND, SOFTCAP, WINDOW,
            CHECK_EDGES=False,
        )
        if WINDOW:  # tiles whose rows the window's left edge cuts off from some of the block's keys
            grad_k, grad_v = _key_block_gradients(
                grad_k, grad_v, k, v, query_base, grad_output_base, lse_base, delta_base, mask_base,
                key_start, full_tiles_end, rows_end, keys_visible, query_len, causal_offset, scale_log2,
                softcap_log2, window_left, window_right, stride_ql, stride_dol, stride_ml, stride_ms,
                HEAD_DIM, VALUE_DIM, BLOCK_E, BLOCK_EV, BLOCK_M, BLOCK_N, IS_CAUSAL, MASK_KIND, SOFTCAP, WINDOW,
                CHECK_EDGES=True,
            )

    # dK = scale * dS^T Q: the scale of s = scale * q.k, applied once. Keys
    # past S are not stored; hidden keys store their gradient, 0.
    grad_k = grad_k * (scale_log2 * LN_2)
    in_keys = cols[:, None] < key_len
    dk_block = grad_key + batch * stride_dkb + kv_head * stride_dkh + first_key * stride_dks
    tl.store(dk_block + tile_cols[:, None] * stride_dks + dims[None, :], grad_k.to(grad_key.dtype.element_ty),
             mask=in_keys & (dims[None, :] < HEAD_DIM))
    dv_block = grad_value + batch * stride_dvb + kv_head * stride_dvh + first_key * stride_dvs
    tl.store(dv_block + tile_cols[:, None] * stride_dvs + value_dims[None, :],
             grad_v.to(grad_value.dtype.element_ty), mask=in_keys & (value_dims[None, :] < VALUE_DIM))


@triton.jit
def _query_block_gradient(
    grad_q, q, do, lse_log2, row_term,
    key_base, value_base, mask_base,
    rows, tile_begin, tile_end, keys_visible, query_len, causal_offset, scale_log2, softcap_log2,
    window_left, window_right, stride_ks, stride_vs, stride_ml, stride_ms,
    HEAD_DIM: tl.constexpr, VALUE_DIM: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr,
    SOFTCAP: tl.constexpr, WINDOW: tl.constexpr, CHECK_EDGES: tl.constexpr,
):
    """Add to ``grad_q`` of one query block the key tiles in ``[tile_begin, tile_end)``.

    ``key_base``, ``value_base`` point at the (batch, head)'s first key and
    value, ``mask_base`` at the mask row of the block's first query. The
    tiles lie queries by keys, ``(BLOCK_M, BLOCK_N)``, as in the forward.
    """
    dims = tl.arange(0, BLOCK_E)
    value_dims = tl.arange(0, BLOCK_EV)
    tile_rows = tl.arange(0, BLOCK_M)
    tile_cols = tl.arange(0, BLOCK_N)
    for tile_start in range(tile_begin, tile_end, BLOCK_N):
        cols = tile_start + tile_cols
        first_key = tl.cast(tile_start, tl.int64)  # the tile's first key, in 64 bits
        # Keys past the last visible one and the padded widths read as 0, as in the forward.
        key_ok = dims[None, :] < HEAD_DIM
        value_ok = value_dims[None, :] < VALUE_DIM
        if CHECK_EDGES:
            key_ok = key_ok & (cols[:, None] < keys_visible)
            value_ok = value_ok & (cols[:, None] < keys_visible)
        k = tl.load(key_base + first_key * stride_ks + tile_cols[:, None] * stride_ks + dims[None, :],
                    mask=key_ok, other=0.0)
        v = tl.load(value_base + first_key * stride_vs + tile_cols[:, None] * stride_vs + value_dims[None, :],
                    mask=value_ok, other=0.0)
        mask_ptrs = (mask_base + first_key * stride_ms
                     + tile_rows[:, None] * stride_ml + tile_cols[None, :] * stride_ms)

        # S = scale * Q K^T (in base 2) and dP = dO V^T, queries by keys.
        scores = tl.dot(q, tl.trans(k), input_precision="ieee") * scale_log2
        grad_weights = tl.dot(do, tl.trans(v), input_precision="ieee")
        weights, grad_scores = _tile_gradients(
            scores, grad_weights, lse_log2[:, None], row_term[:, None], rows[:, None], cols[None, :],
            mask_ptrs, keys_visible, query_len, causal_offset, softcap_log2, window_left, window_right,
            IS_CAUSAL, MASK_KIND, SOFTCAP, WINDOW, CHECK_EDGES,
        )
        if CHECK_EDGES or MASK_KIND != NO_MASK:
            # Zero the keys to which no row of the block gives weight (hidden
            # ones among them): a NaN stored there (padding) times dS = 0 would still be NaN.
            k = tl.where(tl.max(weights, axis=0)[:, None] > 0, k, 0.0)
        # dQ_i += sum_j dS_ij K_j, i.e. dS K (times scale, once, at the end).
        grad_q += tl.dot(grad_scores.to(k.dtype), k, input_precision="ieee")
    return grad_q


@triton.jit
def attention_backward_query_kernel(
    query, key, value, grad_output, log_sum_exp, delta, grad_query, mask, key_lengths,
    stride_qb, stride_qh, stride_ql,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_dob, stride_doh, stride_dol,
    stride_dqb, stride_dqh, stride_dql,
    stride_mb, stride_mh, stride_ml, stride_ms,
    query_heads, group_size, query_len, key_len, causal_offset, scale_log2, softcap_log2,
    window_left, window_right,
    HEAD_DIM: tl.constexpr, VALUE_DIM: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr,
    IS_CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr, HAS_KEY_LENGTHS: tl.constexpr,
    SOFTCAP: tl.constexpr, WINDOW: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """``dQ = scale * dS K`` for one block of ``BLOCK_M`` query rows.

    Grid: ``(cdiv(L, BLOCK_M), B * Hq)``. Shapes as in
    :func:`attention_backward_key_value_kernel`, plus ``grad_query (B, Hq, L, E)``.
    The block visits the same key tiles as in the forward kernel.
    """
    block = tl.program_id(0)
    batch_head = tl.program_id(1)
    batch = (batch_head // query_heads).to(tl.int64)
    head = (batch_head % query_heads).to(tl.int64)
    kv_head = head // group_size  # GQA/MQA: a shared K/V head, no copy
    block_start = block * BLOCK_M
    first_row = block_start.to(tl.int64)
    tile_rows = tl.arange(0, BLOCK_M)
    rows = block_start + tile_rows
    dims = tl.arange(0, BLOCK_E)
    value_dims = tl.arange(0, BLOCK_EV)
    row_ok = rows < query_len

    # The block's rows: Q, dO, lse (base 2; +inf for a row with no allowed
    # key, so that its weights are 0) and D.
    q_block = query + batch * stride_qb + head * stride_qh + first_row * stride_ql
    q = tl.load(q_block + tile_rows[:, None] * stride_ql + dims[None, :],
                mask=row_ok[:, None] & (dims[None, :] < HEAD_DIM), other=0.0)
    do_block = grad_output + batch * stride_dob + head * stride_doh + first_row * stride_dol
    do = tl.load(do_block + tile_rows[:, None] * stride_dol + value_dims[None, :],
                 mask=row_ok[:, None] & (value_dims[None, :] < VALUE_DIM), other=0.0)
    row_offset = batch_head.to(tl.int64) * query_len
    lse = tl.load(log_sum_exp + row_offset + rows, mask=row_ok, other=float("inf"))
    lse_log2 = tl.where(lse == float("-inf"), float("inf"), lse * LOG2_E)
    row_term = tl.load(delta + row_offset + rows, mask=row_ok, other=0.0)

    # Which keys the block visits: those of the forward kernel.
    first_tile, full_tiles_begin, full_tiles_end, keys_visible = _key_tiles_of_query_block(
        block_start, batch, key_lengths, query_len, key_len, causal_offset, window_left, window_right,
        BLOCK_M, BLOCK_N, IS_CAUSAL, HAS_KEY_LENGTHS, WINDOW,
    )

    key_base = key + batch * stride_kb + kv_head * stride_kh
    value_base = value + batch * stride_vb + kv_head * stride_vh
    mask_base = mask + batch * stride_mb + head * stride_mh + first_row * stride_ml
    grad_q = tl.zeros([BLOCK_M, BLOCK_E], dtype=tl.float32)
    grad_q = _query_block_gradient(
        grad_q, q, do, lse_log2, row_term, key_base, value_base, mask_base,
        rows, full_tiles_begin, full_tiles_end, keys_visible, query_len, causal_offset, scale_log2,
        softcap_log2, window_left, window_right, stride_ks, stride_vs, stride_ml, stride_ms,
        HEAD_DIM, VALUE_DIM, BLOCK_E, BLOCK_EV, BLOCK_M, BLOCK_N, IS_CAUSAL, MASK_KIND, SOFTCAP, WINDOW,
        CHECK_EDGES=False,
    )
    grad_q = _query_block_gradient(
        grad_q, q, do, lse_log2, row_term, key_base, value_base, mask_base,
        rows, full_tiles_end, keys_visible, keys_visible, query_len, causal_offset, scale_log2,
        softcap_log2, window_left, window_right, stride_ks, stride_vs, stride_ml, stride_ms,
        HEAD_DIM, VALUE_DIM, BLOCK_E, BLOCK_EV, BLOCK_M, BLOCK_N, IS_CAUSAL, MASK_KIND, SOFTCAP, WINDOW,
        CHECK_EDGES=True,
    )
    if WINDOW:  # the tiles that the window's left edge cuts (the order of tiles is free)
        grad_q = _query_block_gradient(
            grad_q, q, do, lse_log2, row_term, key_base, value_base, mask_base,
            rows, first_tile, full_tiles_begin, keys_visible, query_len, causal_offset, scale_log2,
            softcap_log2, window_left, window_right, stride_ks, stride_vs, stride_ml, stride_ms,
            HEAD_DIM, VALUE_DIM, BLOCK_E, BLOCK_EV, BLOCK_M, BLOCK_N, IS_CAUSAL, MASK_KIND, SOFTCAP, WINDOW,
            CHECK_EDGES=True,
        )

    # dQ = scale * dS K: the scale of s = scale * q.k, applied once.
    grad_q = grad_q * (scale_log2 * LN_2)
    dq_block = grad_query + batch * stride_dqb + head * stride_dqh + first_row * stride_dql
    tl.store(dq_block + tile_rows[:, None] * stride_dql + dims[None, :], grad_q.to(grad_query.dtype.element_ty),
             mask=row_ok[:, None] & (dims[None, :] < HEAD_DIM))
