"""The tiled path: attention by online softmax over blocks, in plain torch.

This is the FlashAttention algorithm written out with torch operations, one
query block times one key block at a time. It never holds the ``L x S``
score matrix: the largest intermediate is one tile of scores,
``(batch*Hkv, G*block_q, block_k)``, and besides the output it keeps only
the running state (maximum, sum, accumulator) of one query block (and, for
inputs in another dtype than the compute dtype or with a mask, one copy of
the keys and values in the compute dtype, which every query block reads).
Chapter 8 (``08_online_softmax``) derives every step; the comments below give the
numbers its equations have in the book:

    (eq. 8.2)   m_new = max(m, rowmax(S_tile))
    (eq. 8.3)   l_new = l * exp(m - m_new) + rowsum(exp(S_tile - m_new))
    (eq. 8.4)   acc_new = acc * exp(m - m_new) + exp(S_tile - m_new) V_tile
    (eq. 8.5)   O = acc / l
    (eq. 8.6)   lse = m + log(l)   (-inf for a row with no allowed key)

The backward pass (:class:`TiledAttentionFunction`) recomputes each tile of
weights from the saved log-sum-exp, ``P = exp(S - lse)``, so training does
not store ``L x S`` either. With logit soft-capping a tile's scores are
``c * tanh(s / c)`` before the mask, and the backward pass multiplies the
score gradients by the cap's slope ``1 - tanh^2(s / c)``. The fused Triton kernel follows these steps one
by one.

A sliding window (``window=(left, right)``) and the causal mask are one band
of allowed keys around each query's position: whole key blocks outside every
row's band are never loaded, in either pass, so the work grows with ``L * W``
rather than ``L * S``; tiles the band's edge crosses are masked. A sink
(``sinks=``, one logit ``s`` per query head) is a key of score ``s`` and value
0 that every row sees: the running state starts as if it had been read,
``m = s, l = 1, acc = 0``, so the lse includes it, and its gradient
``dL/ds = -sum_i p_sink(i) D_i`` with ``p_sink = exp(s - lse)`` needs only the
saved ``lse`` and the rows' ``D`` (see :func:`sink_gradient`).

In bfloat16 the forward pass computes everything in float32, so that
its output is off by one final rounding only, as Chapter 5 states. The
backward pass's three products whose first factor is a tile of weights or
of score gradients (``P^T dO``, ``dS^T Q``, ``dS K``) multiply bfloat16
numbers where the hardware has bfloat16 matrix instructions
(:func:`product_dtype`): ``P`` and ``dS`` are rounded to bfloat16 first, as
FlashAttention does on a GPU and torch's own CPU kernel does, and each
tile's product comes back in bfloat16 before it is added to its float32
sum, one rounding more per tile.

Grouped-query attention never copies keys or values per query head: the
``G = Hq / Hkv`` query heads that share a key/value head are stacked as
extra rows of one matrix, ``(Hkv, G*block_q, E)``, which multiplies that
head's key block once.
"""
from __future__ import annotations

import copy
import math
import numbers
from concurrent.futures import ThreadPoolExecutor

import torch

from .masks import window_mask
from .problem import AttentionProblem, check_problem

NAME = "tiled"
SUPPORTS_SOFTCAP = True
SUPPORTS_WINDOW = True
SUPPORTS_SINKS = True
#: Query rows per tile (per query head). With ``DEFAULT_BLOCK_K`` this pair
#: is within a few percent of the fastest on a 2-core CPU in
#: ``benchmarks/tiled_block_sizes.py`` (2 MiB of fp32 scores for 8 heads), and
#: it gives the cores more query blocks to share than 256 rows would: a causal
#: mask makes the blocks unequal, and grouped-query heads stack ``G`` times
#: as many rows into each tile.
DEFAULT_BLOCK_Q = 128
#: Keys per tile.
DEFAULT_BLOCK_K = 512
#: ``backend="auto"`` leaves problems with fewer scores per head than this
#: (a 512 x 512 score matrix) to the naive path: from there on the tiled path
#: is faster by a wide margin, with and without a causal mask; below it the
#: margins are small and vary from run to run
#: (``benchmarks/tiled_vs_torch.py`` times both, from 64 x 64 to 1024 x 1024).
AUTO_MIN_SCORES_PER_HEAD = 512 * 512
#: log2(e), so that e^x = 2^(x log2 e) (see _exp_)
LOG2_E = math.log2(math.e)


def product_dtype(input_dtype: torch.dtype, compute_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype of the backward pass's products ``P^T dO``, ``dS^T Q`` and ``dS K``.

    bfloat16 for bfloat16 inputs where the hardware multiplies bfloat16
    matrices natively: a GPU, or a CPU with AVX512-BF16 or AMX. On other
    CPUs torch's bfloat16 matrix product is emulated and can take many times
    as long as a float32 one, so there, as for every other input dtype, the
    products are in the compute dtype.
    """
    if input_dtype != torch.bfloat16:
        return compute_dtype
    if device.type != "cpu":
        return torch.bfloat16
    native = (getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()
              or getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())
    return torch.bfloat16 if native else compute_dtype


def unsupported_reason(problem: AttentionProblem) -> str | None:
    """Why the tiled path cannot take ``problem`` (None when it can)."""
    if problem.dropout_p > 0.0:
        return (
            f"tiled does not implement dropout (dropout_p={problem.dropout_p}); "
            "the naive path does"
        )
    mask = problem.attn_mask
    if mask is not None and mask.dtype != torch.bool and mask.requires_grad:
        return "tiled computes no gradient for a float attn_mask that requires grad; naive does"
    return None


def auto_declines(problem: AttentionProblem) -> str | None:
    """Why ``backend="auto"`` should not pick tiled although it could (None: pick it)."""
    scores = problem.query_len * problem.key_len
    if scores < AUTO_MIN_SCORES_PER_HEAD:
        return (
            f"L x S = {scores} scores per head is below {AUTO_MIN_SCORES_PER_HEAD}; "
            "auto leaves small problems to naive"
        )
    return None


def _check_block(name: str, block) -> int:
    if isinstance(block, bool) or not isinstance(block, numbers.Integral):
        raise TypeError(f"{name} must be a positive int, got {type(block).__name__} {block!r}")
    if block < 1:
        raise ValueError(f"{name} must be a positive int, got {block!r}")
    return int(block)


class _Tiles:
    """The problem laid out for tiling: rows grouped by key/value head.

    ``query`` is ``(N, G, L, E)`` with ``N = batch * Hkv``, a view of the
    caller's tensor; ``key`` and ``value`` are ``(N, S, E)`` and
    ``(N, S, Ev)`` in the compute dtype (no per-query-head copy; views of the
    caller's tensors when they are in that dtype and there is no mask). The
    methods hand out one block at a time and apply the mask to a tile of scores.
    """

    def __init__(self, problem: AttentionProblem, query, key, value):
        if query.ndim == 2:  # no head axis: one head
            query, key, value = query[None], key[None], value[None]
        self.problem = problem
        self.dtype = problem.compute_dtype
        self.product_dtype = product_dtype(query.dtype, self.dtype, query.device)
        self.scale = problem.scale
        self.group = problem.group_size
        self.batch_shape = query.shape[:-3]
        self.query_heads, kv_heads = query.shape[-3], key.shape[-3]
        self.rows = math.prod(self.batch_shape) * kv_heads  # N
        self.query = query.reshape(self.rows, self.group, *query.shape[-2:])
        self.key = key.reshape(self.rows, *key.shape[-2:])
        self.value = value.reshape(self.rows, *value.shape[-2:])
        self.query_len, self.key_len = query.shape[-2], key.shape[-2]
        self.offset = problem.causal_offset
        self.band = _band(problem)
        self.softcap = problem.softcap
        self.sinks = None  # (N, G, 1, 1): the sink of each query head of a group
        if problem.sinks is not None:
            self.sinks = problem.sinks.to(self.dtype).reshape(kv_heads, self.group, 1, 1).repeat(
                self.rows // kv_heads, 1, 1, 1)
        mask = problem.attn_mask
        self.mask = None  # (*batch, Hkv, G, L, S), a broadcast view
        self.key_seen = None  # (N, S, 1) bool: may some query of the group see key j?
        if mask is not None:
            full = (*query.shape[:-1], self.key_len)
            self.mask = mask.expand(full).unflatten(-3, (kv_heads, self.group))
            allowed = mask if mask.dtype == torch.bool else mask != float("-inf")
            allowed = allowed[(None,) * (len(full) - allowed.ndim)]  # a (S,) mask has no query axis yet
            if problem.window is not None and allowed.shape[-2] > 1:
                # a key the mask shows one query and the window another is seen by none
                allowed = allowed & window_mask(self.query_len, self.key_len, problem.window,
                                                problem.causal_alignment, allowed.device)
            seen = allowed.any(dim=-2, keepdim=True).expand(*full[:-2], 1, self.key_len)
            seen = seen.unflatten(-3, (kv_heads, self.group)).any(dim=-3)
            self.key_seen = seen.reshape(self.rows, self.key_len, 1)
        # Cast (and zero) once, not once per tile: every query block reads every key block.
        self.key, self.value = self._compute_copy(self.key), self._compute_copy(self.value)
        self.row_slice = slice(None)  # these rows of N (all; fewer in a part from heads())
        # No key block outside every row's band (causal, window) is ever loaded (key_blocks).

    def _compute_copy(self, x: torch.Tensor) -> torch.Tensor:
        """``x (N, S, width)`` in the compute dtype, rows no query may see zeroed so NaN padding stays out.

        The caller's tensor itself (no copy) when it is already in the compute
        dtype and there is no mask.
        """
        x = x.to(self.dtype)
        if self.key_seen is None:
            return x
        return torch.where(self.key_seen, x, torch.zeros((), dtype=self.dtype, device=x.device))

    def heads(self, r0: int, r1: int) -> "_Tiles":
        """The same tiles for rows ``r0:r1`` of ``N`` only, key/value heads that share no gradient."""
        part = copy.copy(self)
        part.rows, part.row_slice = r1 - r0, slice(r0, r1)
        part.query, part.key, part.value = self.query[r0:r1], self.key[r0:r1], self.value[r0:r1]
        if self.sinks is not None:
            part.sinks = self.sinks[r0:r1]
        if self.key_seen is not None:
            part.key_seen = self.key_seen[r0:r1]
        return part

    def query_block(self, i0: int, i1: int) -> torch.Tensor:
        """``scale * Q`` rows ``i0:i1``, the heads of a group stacked.

        Shape ``(N, G*bq, E)``.
        """
        block = self.query[:, :, i0:i1].to(self.dtype) * self.scale
        return block.reshape(self.rows, -1, block.shape[-1])

    def query_rows(self, i0: int, i1: int) -> torch.Tensor:
        """``Q`` rows ``i0:i1`` (not scaled) in the product dtype, stacked like :meth:`query_block`."""
        block = self.query[:, :, i0:i1].to(self.product_dtype)
        return block.reshape(self.rows, -1, block.shape[-1])

    def key_value_block(self, j0: int, j1: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values ``j0:j1``, ``(N, bk, E)`` and ``(N, bk, Ev)``, in the compute dtype."""
        return self.key[:, j0:j1], self.value[:, j0:j1]

    def key_blocks(self, i0: int, i1: int, block_k: int):
        """Start and end of each key block that query rows ``i0:i1`` may see.

        Blocks of the grid ``0, block_k, 2 block_k, ...`` that lie wholly
        outside the rows' band are skipped: their weights are all 0, so they
        would change nothing. The last block ends at the last key the rows
        reach (:meth:`keys_seen`).
        """
        first, stop = self.keys_seen(i0, i1)
        if first >= stop:  # no row of the block sees any key
            return
        for j0 in range(first - first % block_k, stop, block_k):
            yield j0, min(j0 + block_k, stop)

    def keys_seen(self, i0: int, i1: int) -> tuple[int, int]:
        """``(first, stop)``: query rows ``i0:i1`` may see keys ``first <= j < stop`` only.

        Row ``i`` sits at key position ``i + offset`` and its band reaches
        ``left`` keys back and ``right`` keys ahead (None: to the end); the
        rows' bands together cover one run of keys. Empty: ``first >= stop``.
        """
        left, right = self.band
        first = 0 if left is None else min(self.key_len, max(0, i0 + self.offset - left))
        stop = self.key_len if right is None else min(self.key_len, max(0, i1 + self.offset + right))
        return first, stop

    def query_blocks_seeing(self, j0: int, j1: int, block_q: int):
        """Start and end of each query block that visits key block ``j0:j1``, and where its tile ends.

        The mirror of :meth:`key_blocks`: it visits the same tiles, from the
        side of the key block (``j0`` on the grid of ``block_k``).
        """
        for i0 in range(0, self.query_len, block_q):
            i1 = min(i0 + block_q, self.query_len)
            first, stop = self.keys_seen(i0, i1)
            if first < j1 and j0 < stop:
                yield i0, i1, min(j1, stop)

    def cap_scores(self, scores: torch.Tensor) -> torch.Tensor:
        """Soft-cap a tile of scores in place, ``s -> c * tanh(s / c)``; unchanged without a cap."""
        if self.softcap is None:
            return scores
        return scores.div_(self.softcap).tanh_().mul_(self.softcap)

    def mask_scores(self, scores: torch.Tensor, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
        """Add the float mask and set forbidden scores to ``-inf``, in place; ``scores (N, G*bq, bk)``."""
        if self.mask is not None:
            tile = self.mask[..., i0:i1, j0:j1].reshape(-1, *scores.shape[1:])[self.row_slice]
            if tile.dtype == torch.bool:
                scores.masked_fill_(~tile, float("-inf"))
            else:
                scores.add_(tile.to(self.dtype))
                scores.masked_fill_(tile == float("-inf"), float("-inf"))
        left, right = self.band
        # the tile is cut where the first row's band ends or the last row's begins
        past_right = right is not None and j1 - 1 > i0 + self.offset + right
        before_left = left is not None and j0 < i1 - 1 + self.offset - left
        if past_right or before_left:
            position = torch.arange(i0, i1, device=scores.device).repeat(self.group)[:, None] + self.offset
            columns = torch.arange(j0, j1, device=scores.device)[None, :]
            outside = torch.zeros((), dtype=torch.bool, device=scores.device)
            if past_right:
                outside = outside | (columns > position + right)
            if before_left:
                outside = outside | (columns < position - left)
            scores.masked_fill_(outside, float("-inf"))
        return scores

    def starting_state(self, i0: int, i1: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Running maximum and sum ``(N, G*bq, 1)`` of rows ``i0:i1`` before any key is read.

        ``m = -inf, l = 0``; with sinks, the state after reading the sink, a
        key of score ``s`` and value 0: ``m = s, l = 1``.
        """
        shape = (self.rows, self.group * (i1 - i0), 1)
        device = self.key.device
        if self.sinks is None:
            return (torch.full(shape, float("-inf"), dtype=self.dtype, device=device),
                    torch.zeros(shape, dtype=self.dtype, device=device))
        sinks = self.sinks.expand(-1, -1, i1 - i0, 1).reshape(shape)
        return sinks, torch.ones(shape, dtype=self.dtype, device=device)

    def unstack(self, x: torch.Tensor, width: int | None) -> torch.Tensor:
        """``(N, G, L[, width])`` back to the caller's ``(..., Hq, L[, width])``."""
        tail = (self.query_len,) if width is None else (self.query_len, width)
        x = x.reshape(*self.batch_shape, self.query_heads, *tail)
        return x[0] if self.problem.query.ndim == 2 else x


def _band(problem: AttentionProblem) -> tuple[int | None, int | None]:
    """``(left, right)``: row ``i`` may see keys ``p - left <= j <= p + right``, ``p = i + offset``.

    The intersection of the causal mask (``right = 0``) and the window;
    None on a side: unbounded.
    """
    left, right = problem.window if problem.window is not None else (None, None)
    if problem.is_causal:  # check_problem refuses a window reaching right of a causal diagonal
        right = 0
    return left, right


def _zero_where_nothing_seen(m: torch.Tensor) -> torch.Tensor:
    """The running maximum, with ``-inf`` (no allowed key yet) replaced by 0.

    Subtracting it then gives ``exp(-inf - 0) = 0`` for the row's masked
    scores instead of ``exp(-inf + inf) = NaN``.
    """
    return torch.where(m == float("-inf"), torch.zeros((), dtype=m.dtype, device=m.device), m)


def _exp_(x: torch.Tensor) -> torch.Tensor:
    """``e^x`` in place, computed as ``2^(x log2 e)``.

    The same number up to the rounding of ``x log2 e`` (relative error about
    ``|x|`` units in the last place), but torch's ``exp2`` on a CPU is several
    times faster than its ``exp`` (``benchmarks/tiled_vs_torch.py --profile``
    times both), and the exponential touches every score of every tile.
    """
    return x.mul_(LOG2_E).exp2_()


def _product(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``a @ b`` with both factors in ``dtype`` (see :func:`product_dtype`)."""
    return a.to(dtype) @ b.to(dtype)


def _add_product_(total: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``total += a @ b`` in place, the factors in ``dtype`` and the sum in ``total``'s dtype."""
    if dtype == total.dtype:
        return total.baddbmm_(a, b)
    return total.add_(_product(a, b, dtype))


class _TileMemory:
    """Buffers that every tile of one unit of work (a query block; a part of the heads) writes into.

    A tile of scores is a megabyte or more. Given a fresh tensor for every
    tile, the C allocator hands each freed block back to the operating
    system and the next tile faults it in again, page by page: on this
    book's 2-core machine that doubled the time of the product that fills
    it (Chapter 8 measures it). Allocated once and reused, the memory stays
    mapped and, for a small enough tile, in the core's cache.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.buffers: dict[str, torch.Tensor] = {}

    def take(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A tensor of ``shape`` and ``dtype`` in buffer ``name``, which grows to the largest asked for."""
        count = math.prod(shape)
        buffer = self.buffers.get(name)
        if buffer is None or buffer.numel() < count or buffer.dtype != dtype:
            buffer = self.buffers[name] = torch.empty(shape, dtype=dtype, device=self.device)
        return buffer.view(-1)[:count].view(shape)


def _attend_query_block(tiles: _Tiles, i0: int, i1: int, block_k: int):
    """Query rows ``i0:i1`` against all their key blocks.

    Returns the output ``(N, G*bq, Ev)`` and the lse ``(N, G*bq, 1)``.
    """
    n, value_dim = tiles.rows, tiles.value.shape[-1]
    dtype, device = tiles.dtype, tiles.key.device
    query = tiles.query_block(i0, i1)  # (N, G*bq, E), already times scale
    rows = query.shape[1]
    # Before any key: m = -inf, l = 0, acc = 0 (with a sink: m = s, l = 1).
    m, l = tiles.starting_state(i0, i1)
    acc = torch.zeros((n, rows, value_dim), dtype=dtype, device=device)
    memory = _TileMemory(device)
    for j0, j1 in tiles.key_blocks(i0, i1, block_k):
        key, value = tiles.key_value_block(j0, j1)
        scores = memory.take("scores", (n, rows, j1 - j0), dtype)  # (N, G*bq, bk)
        scores = tiles.cap_scores(torch.bmm(query, key.mT, out=scores))
        scores = tiles.mask_scores(scores, i0, i1, j0, j1)
        # (eq. 8.2): the running maximum
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
        shift = _zero_where_nothing_seen(m_new)
        correction = torch.exp(m - shift)  # how much the old state shrinks
        weights = _exp_(scores.sub_(shift))  # in place of the scores
        l = l * correction + weights.sum(dim=-1, keepdim=True)  # (eq. 8.3)
        # (eq. 8.4): acc = acc * correction + weights @ value
        acc = acc.mul_(correction).baddbmm_(weights, value)
        m = m_new
    # (eq. 8.5); a row that saw no allowed key has acc = 0 and l = 0
    # (or 1 with a sink), and its output stays 0.
    output = acc / torch.where(l > 0, l, torch.ones_like(l))
    return output, m + torch.log(l)  # (eq. 8.6)


def _for_each_block(work, starts: range, device: torch.device) -> None:
    """Call ``work(start)`` for every block start in ``starts``; the calls must be independent.

    The forward pass's query blocks never read each other's state (nor do
    the backward pass's parts of the heads), so they may run at
    the same time, as a GPU runs each one as its own program. On a CPU with
    several cores, each core takes whole blocks in a thread of its own while
    torch runs every operation on one core: the cores then never wait for
    each other inside the many small operations of a tile (on a machine busy
    with other work, such waits stall every operation). torch's thread count is
    process-wide, so it is 1 during the call and restored afterwards. With
    one core or one block, on other devices, or while a torch dispatch mode
    watches the operations (modes are per thread; see
    :mod:`attnlib.book.intermediates`), the blocks run in order in this thread.
    """
    cores = torch.get_num_threads()
    watched = torch._C._len_torch_dispatch_stack() > 0
    if device.type != "cpu" or cores == 1 or len(starts) <= 1 or watched:
        for i0 in starts:
            work(i0)
        return

    def work_without_grad(i0):  # grad mode is per thread too
        with torch.no_grad():
            work(i0)

    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(max_workers=min(cores, len(starts))) as pool:
            list(pool.map(work_without_grad, starts))
    finally:
        torch.set_num_threads(cores)


def _forward(tiles: _Tiles, block_q: int, block_k: int):
    """Outputs ``(N, G, L, Ev)`` and log-sum-exp ``(N, G, L)``.

    Both are in the compute dtype.
    """
    n, group, length = tiles.rows, tiles.group, tiles.query_len
    value_dim = tiles.value.shape[-1]
    dtype, device = tiles.dtype, tiles.key.device
    output = torch.empty(n, group, length, value_dim, dtype=dtype,
                         device=device)
    lse = torch.empty(n, group, length, dtype=dtype, device=device)

    def attend(i0: int) -> None:
        i1 = min(i0 + block_q, length)
        block_output, block_lse = _attend_query_block(tiles, i0, i1, block_k)
        output[:, :, i0:i1] = block_output.view(n, group, i1 - i0, value_dim)
        lse[:, :, i0:i1] = block_lse.view(n, group, i1 - i0)

    _for_each_block(attend, range(0, length, block_q), device)
    return output, lse


def _tile_gradients(tiles: _Tiles, rows: tuple, i0: int, i1: int, j0: int,
                    j1: int, memory: _TileMemory):
    """Recompute tile ``(i, j)``: key block, weights ``P``, gradients ``dS``.

    ``P`` and ``dS`` are ``(N, G*bq, bk)``, in ``memory``; ``rows`` holds
    query block ``i``'s ``scale * Q``, ``Q``, ``dO``, ``lse`` and ``D``.
    """
    query, _, grad_out, block_lse, block_row_term = rows
    key, value = tiles.key_value_block(j0, j1)
    shape = (tiles.rows, query.shape[1], j1 - j0)
    scores = memory.take("scores", shape, tiles.dtype)
    scores = tiles.cap_scores(torch.bmm(query, key.mT, out=scores))
    # d/ds c tanh(s / c) = 1 - tanh^2(s / c), tanh(s / c) = capped score / c
    cap_slope = None
    if tiles.softcap is not None:
        cap_slope = 1 - (scores / tiles.softcap).square()
    scores = tiles.mask_scores(scores, i0, i1, j0, j1)
    # P = exp(S - lse), the forward's weights (eq. 8.8)
    weights = _exp_(scores.sub_(block_lse))
    # dS = P * (dP - D), dP = dO V^T
    grad_scores = memory.take("score gradients", shape, tiles.dtype)
    grad_scores = torch.bmm(grad_out, value.mT, out=grad_scores)
    grad_scores = grad_scores.sub_(block_row_term).mul_(weights)
    if cap_slope is not None:  # through the cap, to the uncapped scores
        grad_scores = grad_scores.mul_(cap_slope)
    return key, weights, grad_scores


def _row_terms(output, grad_output, grad_lse) -> torch.Tensor:
    """``D = rowsum(dO * O) - dlse`` of every row, in the dtype of ``output`` (the compute dtype)."""
    return (grad_output.to(output.dtype) * output).sum(dim=-1) - grad_lse.to(output.dtype)


def sink_gradient(sinks, output, lse, grad_output, grad_lse) -> torch.Tensor:
    """``dL/ds_h = -sum_i p_sink(i) D_i`` over the batch and the rows of head ``h``, shaped like ``sinks``.

    ``output (..., Hq, L, Ev)`` and ``lse (..., Hq, L)`` are the forward
    pass's, their lse including the sink; ``grad_output`` and ``grad_lse``
    the gradients arriving at them. The sink takes the share
    ``p_sink = exp(s - lse)`` of each row's softmax and carries no value, so
    ``dL/ds = p_sink (0 - dO . O + dlse) = -p_sink D``.
    """
    heads = sinks.shape[0]
    lse = lse.reshape(-1, heads, lse.shape[-1])
    share = torch.exp(sinks.to(lse.dtype)[:, None] - lse)
    row_terms = _row_terms(output, grad_output, grad_lse).reshape(lse.shape)
    return -(share * row_terms).sum(dim=(0, 2)).to(sinks.dtype)


def _backward(tiles: _Tiles, output, lse, grad_output, grad_lse, block_q: int,
              block_k: int):
    """Gradients ``dQ (N, G, L, E)``, ``dK (N, S, E)``, ``dV (N, S, Ev)``.

    They come from the saved ``lse``. Per tile (eq. 8.9): ``P = exp(S - lse)``, ``dP = dO V^T``,
    ``dS = P * (dP - D)`` with ``D = rowsum(dO * O) - dlse``, then
    ``dV_j += P^T dO_i``, ``dK_j += scale * dS^T Q_i`` and
    ``dQ_i += scale * dS K_j``. One sweep over the key blocks does it all:
    each key block visits the query blocks that see it, sums its own ``dK``
    and ``dV``, and adds each tile's share to ``dQ`` in place, so every
    tile's weights are recomputed once. Key blocks add to the same rows of
    ``dQ``, so they take turns; key/value heads share no gradient, so parts
    of the heads run side by side. The rows of a group sum into their shared
    ``dK`` and ``dV`` through the matrix products.
    """
    dtype, device, factors = tiles.dtype, tiles.key.device, tiles.product_dtype
    grad_query = torch.zeros(tiles.query.shape, dtype=dtype, device=device)
    grad_key = torch.empty(tiles.key.shape, dtype=dtype, device=device)
    grad_value = torch.empty(tiles.value.shape, dtype=dtype, device=device)
    # A row with no allowed key has lse = -inf; +inf makes each weight
    # exp(S - inf) = 0.
    lse = torch.where(lse == float("-inf"), float("inf"), lse)
    row_term = _row_terms(output, grad_output, grad_lse)  # D, (N, G, L)

    def gradients_of_heads(h0: int) -> None:
        heads = tiles.heads(h0, min(h0 + heads_per_part, tiles.rows))
        n, rows = heads.rows, heads.row_slice
        memory = _TileMemory(device)

        def rows_of(i0: int, i1: int) -> tuple:
            """``scale * Q``, ``Q``, ``dO``, ``lse`` and ``D`` of query block i."""
            stacked = (n, -1, 1)
            grad_out = grad_output[rows, :, i0:i1].to(dtype)
            return (heads.query_block(i0, i1), heads.query_rows(i0, i1),
                    grad_out.reshape(n, -1, grad_output.shape[-1]),
                    lse[rows, :, i0:i1].reshape(stacked),
                    row_term[rows, :, i0:i1].reshape(stacked))

        for j0 in range(0, tiles.key_len, block_k):
            j1 = min(j0 + block_k, tiles.key_len)
            dk = torch.zeros((n, j1 - j0, tiles.key.shape[-1]), dtype=dtype,
                             device=device)
            dv = torch.zeros((n, j1 - j0, tiles.value.shape[-1]),
                             dtype=dtype, device=device)
            # the forward pass's tiles, from the side of key block j
            for i0, i1, end in heads.query_blocks_seeing(j0, j1, block_q):
                _, query, grad_out, *_ = block = rows_of(i0, i1)
                key, weights, grad_scores = _tile_gradients(
                    heads, block, i0, i1, j0, end, memory)
                seen = slice(0, end - j0)
                _add_product_(dv[:, seen], weights.mT, grad_out, factors)  # P^T dO
                _add_product_(dk[:, seen], grad_scores.mT, query, factors)  # dS^T Q
                grad_query[rows, :, i0:i1] += _product(
                    grad_scores, key, factors).view(n, tiles.group, i1 - i0, -1)
            grad_key[rows, j0:j1] = dk.mul_(tiles.scale)
            grad_value[rows, j0:j1] = dv

    heads_per_part = -(-tiles.rows // torch.get_num_threads())  # one per core
    parts = range(0, tiles.rows, heads_per_part)
    _for_each_block(gradients_of_heads, parts, device)
    return grad_query.mul_(tiles.scale), grad_key, grad_value


def gradients_from_lse(problem: AttentionProblem, output, lse, grad_output, grad_lse,
                       block_q: int = DEFAULT_BLOCK_Q, block_k: int = DEFAULT_BLOCK_K):
    """``(dQ, dK, dV)`` of ``problem``, shaped like its query, key and value, in the compute dtype.

    ``output (..., Hq, L, Ev)`` and ``lse (..., Hq, L)`` are a forward pass's
    results, ``grad_output`` and ``grad_lse`` the gradients arriving at
    them. They need not come from this problem's own forward: ring attention
    (Chapter 11) passes those of the whole sequence, so that each block's
    weights are recomputed as ``P = exp(S - lse)``, the weights its queries
    really gave its keys (eq. 8.8).
    """
    tiles = _Tiles(problem, problem.query, problem.key, problem.value)
    stacked = (tiles.rows, tiles.group, tiles.query_len)
    gradients = _backward(tiles, output.reshape(*stacked, -1), lse.reshape(stacked),
                          grad_output.reshape(*stacked, -1), grad_lse.reshape(stacked),
                          block_q, block_k)
    inputs = (problem.query, problem.key, problem.value)
    return tuple(gradient.reshape(x.shape) for gradient, x in zip(gradients, inputs))


class TiledAttentionFunction(torch.autograd.Function):
    """Tiled attention as one autograd node that saves only ``O`` and ``lse``.

    ``apply(query, key, value, sinks, problem, block_q, block_k)`` returns the
    output ``(..., Hq, L, Ev)`` in the input dtype and the log-sum-exp
    ``(..., Hq, L)`` in the compute dtype; both are differentiable.
    ``sinks`` is ``problem.sinks`` (or None), an input of its own so that it
    gets a gradient.
    """

    @staticmethod
    def forward(ctx, query, key, value, sinks, problem, block_q, block_k):
        tiles = _Tiles(problem, query, key, value)
        output, lse = _forward(tiles, block_q, block_k)
        ctx.save_for_backward(query, key, value, output, lse)
        ctx.problem, ctx.blocks = problem, (block_q, block_k)
        result = tiles.unstack(output, output.shape[-1]).to(query.dtype)
        return result, tiles.unstack(lse, None)

    @staticmethod
    def backward(ctx, grad_result, grad_lse):
        query, key, value, output, lse = ctx.saved_tensors
        tiles = _Tiles(ctx.problem, query, key, value)
        grad_output = grad_result.reshape(output.shape)
        grad_lse = grad_lse.reshape(lse.shape)
        grad_query, grad_key, grad_value = _backward(
            tiles, output, lse, grad_output, grad_lse, *ctx.blocks
        )
        grad_sinks = None
        if ctx.needs_input_grad[3]:
            grad_sinks = sink_gradient(ctx.problem.sinks, output, lse, grad_output, grad_lse)
        return (
            grad_query.reshape(query.shape).to(query.dtype),
            grad_key.reshape(key.shape).to(key.dtype),
            grad_value.reshape(value.shape).to(value.dtype),
            grad_sinks,
            None,
            None,
            None,
        )


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
    block_q: int = DEFAULT_BLOCK_Q,
    block_k: int = DEFAULT_BLOCK_K,
    return_lse: bool = False,
):
    """Tiled ``softmax(cap(scale * Q K^T) + mask) V`` with chosen block sizes.

    Same arguments and contract as :func:`attnlib.scaled_dot_product_attention`
    (no dropout; ``softcap``, ``window`` and ``sinks`` as there). Shapes
    ``query (..., Hq, L, E)``, ``key (..., Hkv, S, E)``,
    ``value (..., Hkv, S, Ev)`` -> output ``(..., Hq, L, Ev)``. With
    ``return_lse=True`` also returns ``lse (..., Hq, L)``,
    ``lse_i = log sum_j exp(s_ij)`` over allowed keys (plus ``exp(s_h)`` with
    sinks), in the compute dtype (float32 for fp16/bf16), ``-inf`` for a row
    with no allowed key and no sink.
    """
    block_q, block_k = _check_block("block_q", block_q), _check_block("block_k", block_k)
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__} {return_lse!r}")
    problem = check_problem(
        query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa, causal_alignment,
        softcap, window, sinks,
    )
    why_not = unsupported_reason(problem)
    if why_not is not None:
        raise ValueError(f"attn_mask: {why_not}")
    output, lse = TiledAttentionFunction.apply(query, key, value, problem.sinks, problem, block_q, block_k)
    return (output, lse) if return_lse else output


def forward(problem: AttentionProblem) -> torch.Tensor:
    """The dispatcher's entry: the tiled output with the default block sizes."""
    output, _ = TiledAttentionFunction.apply(
        problem.query, problem.key, problem.value, problem.sinks, problem, DEFAULT_BLOCK_Q,
        DEFAULT_BLOCK_K,
    )
    return output


