"""Ring attention: one attention call over a sequence sharded across ranks.

Each of the ``W`` ranks of a ``torch.distributed`` group holds a shard of
the sequence (see :mod:`attnlib.distributed.sharding`) for the queries,
keys and values. The key/value shards travel around the ring: at step
``t`` rank ``r`` holds the keys and values of rank ``(r - t) mod W``,
computes its queries against them while it already sends them on to rank
``r + 1`` and receives the next block from rank ``r - 1``. After ``W``
steps every query has met every key.

Each step yields a partial result over one block of keys: the output
``o_b`` normalised over that block and its log-sum-exp ``lse_b``. Chapter 8's
merge of online-softmax states (eq. 8.7), written for normalised outputs
(``o = acc / l`` and ``lse = m + log l``), is

    lse = log(exp(lse_a) + exp(lse_b))
    o   = o_a exp(lse_a - lse) + o_b exp(lse_b - lse)

exact and independent of the order of the blocks, so the ring gives the
single-device result up to rounding.

The backward pass sends the blocks around once more. Each rank recomputes
its tiles against the visiting block with the final ``lse`` (the tiled
backward, eq. 8.9), keeps ``dQ`` and adds ``dK`` and ``dV`` to an
accumulator that travels with the block and arrives home after ``W`` steps.

The causal mask and a sliding window are one band of allowed keys around
each query's position. A pair of (query chunk, key chunk) wholly outside it
is skipped; a pair it cuts is narrowed to the queries and keys that see
something and handed to the local call as ``window=`` (or ``is_causal``), so
no pair needs a dense mask of its own. Sinks join the result once, after the
last block, as one more partial: output 0 and ``lse = s``.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .. import dispatch, fused, naive, tiled
from ..masks import allowed_positions
from ..problem import FLOAT_DTYPES, check_problem
from .sharding import Chunk, check_sharding, pieces_per_rank, shard_chunks, unshard

BACKENDS = ("auto", "tiled", "fused", "naive")
_MAX_DIMS = 8
_MESSAGE_BYTES = 400


def merge_partials(out_a, lse_a, out_b, lse_b):
    """Merge two partial results over disjoint key sets (eq. 8.7 in log-sum-exp form).

    ``out (..., L, Ev)`` normalised over its own keys, ``lse (..., L)``;
    returns the output and log-sum-exp over the union of the keys. A row
    that saw no key on either side (``lse = -inf`` on both) stays 0.
    """
    lse = torch.logaddexp(lse_a, lse_b)
    shift = torch.where(lse == float("-inf"), torch.zeros((), dtype=lse.dtype, device=lse.device), lse)
    weight_a, weight_b = torch.exp(lse_a - shift), torch.exp(lse_b - shift)
    return out_a * weight_a[..., None] + out_b * weight_b[..., None], lse


@dataclass(frozen=True)
class _Ring:
    """What every rank agrees on for one call: the group, the layout and the attention settings."""

    group: object
    rank: int
    world_size: int
    sharding: str
    scale: float
    is_causal: bool
    causal_alignment: str
    enable_gqa: bool
    backend: str
    query_len: int  # of the whole sequence
    key_len: int
    window: tuple[int | None, int | None] | None = None

    def chunks(self, length: int, rank: int) -> list[Chunk]:
        return shard_chunks(length, rank % self.world_size, self.world_size, self.sharding)

    @property
    def causal_offset(self) -> int:
        """Query ``i`` may see key ``j`` iff ``j <= i + offset``, in positions of the whole sequence."""
        return self.key_len - self.query_len if self.causal_alignment == "bottom_right" else 0

    @property
    def band(self) -> tuple[int | None, int | None]:
        """``(left, right)``: query ``i`` sees keys ``p - left <= j <= p + right``, ``p = i + offset``.

        The intersection of the causal mask (``right = 0``) and the window; None: unbounded.
        """
        left, right = self.window if self.window is not None else (None, None)
        return left, 0 if self.is_causal else right


def _global_rank(group, rank: int) -> int:
    """The global rank of ``rank`` in ``group`` (P2POp takes global ranks)."""
    if group is None or group is dist.group.WORLD:
        return rank
    return dist.get_global_rank(group, rank)


class _Exchange:
    """Send ``tensors`` to the next rank of ``group`` and receive same-shaped ones from the previous.

    The transfers run in the background (``batch_isend_irecv``) until
    :meth:`wait`, which returns the received tensors.
    """

    def __init__(self, group, tensors: list[torch.Tensor]):
        self.requests = []
        rank, world_size = dist.get_rank(group), dist.get_world_size(group)
        if world_size == 1:  # a ring of one passes the blocks to itself
            self.received = list(tensors)
            return
        following = _global_rank(group, (rank + 1) % world_size)
        preceding = _global_rank(group, (rank - 1) % world_size)
        self.sent = [t.contiguous() for t in tensors]  # alive until the transfer is done
        self.received = [torch.empty_like(t) for t in self.sent]
        operations = [dist.P2POp(dist.isend, t, following, group) for t in self.sent]
        operations += [dist.P2POp(dist.irecv, t, preceding, group) for t in self.received]
        self.requests = dist.batch_isend_irecv(operations)

    def wait(self) -> list[torch.Tensor]:
        for request in self.requests:
            request.wait()
        return self.received


def pass_around(tensors, group=None) -> _Exchange:
    """Start sending ``tensors`` to the next rank of ``group`` and receiving the previous rank's.

    Returns a handle whose ``wait()`` gives the received tensors (same shapes
    and dtypes); the ring's one transport step, exposed for measurement.
    """
    _check_group(group)
    return _Exchange(group, list(tensors))


# --- which keys of a visiting block a chunk of queries may see ---------------

def _pair_call(ring: _Ring, queries: Chunk, keys: Chunk, mask: torch.Tensor | None):
    """How query chunk ``queries`` attends to key chunk ``keys``: None if it sees none of them,
    else the chunks narrowed to the queries that see some key and the keys some query sees,
    and ``(attn_mask, is_causal, causal_alignment, window)`` for the local call on them.

    Query ``i`` of the chunk sees key ``j`` of the chunk iff
    ``lowest <= j - i <= highest``, the band shifted by
    ``delta = queries.start + offset - keys.start``. Once narrowed, the band
    always contains ``j - i = 0``, so it is a local window ``(left, right)``
    in the top-left alignment, with ``left, right >= 0``. ``mask`` is the
    visiting shard's key-padding mask ``(..., 1, S_shard)`` or None.
    """
    if queries.length == 0 or keys.length == 0:
        return None
    left, right = ring.band
    delta = queries.start + ring.causal_offset - keys.start
    lowest = None if left is None else delta - left
    highest = None if right is None else delta + right
    if (lowest is not None and lowest > keys.length - 1) or (
            highest is not None and highest < 1 - queries.length):
        return None
    first_query = 0 if highest is None else max(0, -highest)
    query_stop = queries.length if lowest is None else min(queries.length, keys.length - lowest)
    first_key = 0 if lowest is None else max(0, lowest)
    key_stop = keys.length if highest is None else min(keys.length, queries.length + highest)
    queries = Chunk(queries.start + first_query, queries.local_start + first_query, query_stop - first_query)
    keys = Chunk(keys.start + first_key, keys.local_start + first_key, key_stop - first_key)
    shift = first_query - first_key  # j - i of the narrowed chunks is the old j - i plus this
    window_left = None if lowest is None or shift + lowest <= 1 - queries.length else -(shift + lowest)
    window_right = None if highest is None or shift + highest >= keys.length - 1 else shift + highest
    padding = None if mask is None else mask[..., keys.local]
    if window_left is None and window_right is None:
        return queries, keys, (padding, False, "top_left", None)
    if window_left is None and padding is None:  # a causal diagonal: the flag every backend takes
        alignments = {0: "top_left", keys.length - queries.length: "bottom_right"}
        if window_right in alignments:
            return queries, keys, (None, True, alignments[window_right], None)
    return queries, keys, (padding, False, "top_left", (window_left, window_right))


def _visible_pairs(ring: _Ring, source: int, mask):
    """The (query chunk, key chunk, local-call settings) pairs of one ring step.

    ``source`` is the rank whose keys are visiting, with ``mask``, their
    key-padding mask ``(..., 1, S_shard)`` or None.
    """
    for queries in ring.chunks(ring.query_len, ring.rank):
        for keys in ring.chunks(ring.key_len, source):
            pair = _pair_call(ring, queries, keys, mask)
            if pair is not None:
                yield pair


# --- one block of work -----------------------------------------------------

def _local_backend(ring: _Ring, problem) -> str:
    if ring.backend != "auto":
        return ring.backend
    on_gpu = problem.query.device.type == "cuda"
    return "fused" if on_gpu and dispatch.unsupported_reason(fused, problem) is None else "tiled"


def _attend(ring: _Ring, query, key, value, settings):
    """Queries against one key chunk: output ``(..., Hq, Lc, Ev)`` and lse ``(..., Hq, Lc)``,
    both in the compute dtype."""
    attn_mask, is_causal, alignment, window = settings
    problem = check_problem(query, key, value, attn_mask, 0.0, is_causal, ring.scale,
                            ring.enable_gqa, alignment, window=window)
    backend = _local_backend(ring, problem)
    arguments = dict(attn_mask=attn_mask, is_causal=is_causal, scale=ring.scale,
                     enable_gqa=ring.enable_gqa, causal_alignment=alignment, return_lse=True)
    if window is not None:  # only then: a path without windows need not know the keyword
        arguments["window"] = window
    if backend == "tiled":
        output, lse = tiled.attention(query, key, value, **arguments)
    elif backend == "fused":
        why_not = dispatch.unsupported_reason(fused, problem)
        if why_not is not None:
            raise ValueError(f"backend='fused' cannot run this ring's blocks: {why_not}")
        output, lse = fused.attention(query, key, value, **arguments)
    else:  # the reference: the four steps, and the log of step 3's denominator
        output = naive.forward(problem)
        lse = torch.logsumexp(naive.masked_scaled_scores(problem, allowed_positions(problem)), dim=-1)
    return output.to(problem.compute_dtype), lse.to(problem.compute_dtype)


def _block_gradients(ring: _Ring, query, key, value, settings, output, lse, grad_output, grad_lse):
    """``dQ``, ``dK``, ``dV`` of one (query chunk, key chunk) pair, in the compute dtype.

    The tiled backward recomputes the pair's weights as ``P = exp(S - lse)``
    from the *final* log-sum-exp of the whole ring, so they are the weights
    the queries really gave these keys; ``D = rowsum(dO * O) - dlse`` uses
    the final output as well.
    """
    attn_mask, is_causal, alignment, window = settings
    problem = check_problem(query, key, value, attn_mask, 0.0, is_causal, ring.scale,
                            ring.enable_gqa, alignment, window=window)
    return tiled.gradients_from_lse(problem, output, lse, grad_output, grad_lse)


def _visiting_blocks(ring: _Ring, key, value, mask):
    """``(source rank, key, value, mask)`` of the block visiting at each of the ring's steps.

    Each block is sent on to the next rank before it is handed out, so that the
    transfer hides behind the work done with it; the next block is waited for
    only when the caller asks for it.
    """
    visiting = [key, value, *_as_bytes(mask)]
    for step in range(ring.world_size):
        last = step == ring.world_size - 1
        exchange = None if last else _Exchange(ring.group, visiting)
        yield ring.rank - step, visiting[0], visiting[1], _from_bytes(visiting, mask is not None)
        if exchange is not None:
            visiting = exchange.wait()


def _as_bytes(mask):
    return [] if mask is None else [mask.view(torch.uint8)]


def _from_bytes(received, has_mask):
    return received[2].view(torch.bool) if has_mask else None


class RingAttentionFunction(torch.autograd.Function):
    """Ring attention as one autograd node that saves only this rank's shards, ``O`` and ``lse``.

    ``apply(query, key, value, mask, sinks, ring)`` returns the output
    ``(..., Hq, L_shard, Ev)`` in the input dtype and the log-sum-exp
    ``(..., Hq, L_shard)`` in the compute dtype; both are differentiable.
    ``sinks`` (``(Hq,)`` or None) gets this rank's share of its gradient.
    """

    @staticmethod
    def forward(ctx, query, key, value, mask, sinks, ring: _Ring):
        dtype = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
        output = torch.zeros((*query.shape[:-1], value.shape[-1]), dtype=dtype, device=query.device)
        lse = torch.full(query.shape[:-1], float("-inf"), dtype=dtype, device=query.device)
        for source, block_key, block_value, block_mask in _visiting_blocks(ring, key, value, mask):
            for queries, keys, settings in _visible_pairs(ring, source, block_mask):
                rows = (..., queries.local, slice(None))
                part, part_lse = _attend(ring, query[rows], block_key[..., keys.local, :],
                                         block_value[..., keys.local, :], settings)
                output[rows], lse[..., queries.local] = merge_partials(
                    output[rows], lse[..., queries.local], part, part_lse)
        if sinks is not None:  # once, not once per block: a partial of output 0 and lse s
            sink_lse = sinks.to(dtype)[:, None].expand_as(lse)
            output, lse = merge_partials(output, lse, torch.zeros_like(output), sink_lse)
        ctx.save_for_backward(query, key, value, output, lse, sinks)
        ctx.mask, ctx.ring = mask, ring
        return output.to(query.dtype), lse

    @staticmethod
    def backward(ctx, grad_result, grad_lse):
        query, key, value, output, lse, sinks = ctx.saved_tensors
        ring, mask = ctx.ring, ctx.mask
        dtype = output.dtype
        grad_output = grad_result.to(dtype)
        grad_query = torch.zeros(query.shape, dtype=dtype, device=query.device)
        grads_home = None  # the accumulator of the block visiting now, on its way from the previous rank
        for source, block_key, block_value, block_mask in _visiting_blocks(ring, key, value, mask):
            grad_key = torch.zeros(key.shape, dtype=dtype, device=key.device)
            grad_value = torch.zeros(value.shape, dtype=dtype, device=value.device)
            for queries, keys, settings in _visible_pairs(ring, source, block_mask):
                rows = (..., queries.local, slice(None))
                columns = (..., keys.local, slice(None))
                dq, dk, dv = _block_gradients(
                    ring, query[rows], block_key[columns], block_value[columns], settings,
                    output[rows], lse[..., queries.local], grad_output[rows],
                    grad_lse[..., queries.local])
                grad_query[rows] += dq
                grad_key[columns] += dk
                grad_value[columns] += dv
            if grads_home is not None:  # what the ranks before this one added to this block
                earlier_key, earlier_value = grads_home.wait()
                grad_key += earlier_key
                grad_value += earlier_value
            grads_home = _Exchange(ring.group, [grad_key, grad_value])
        # after W steps each block's accumulator has visited every rank and is back with its owner
        grad_key, grad_value = grads_home.wait()
        grad_sinks = None
        if ctx.needs_input_grad[4]:  # this rank's rows' share; the ranks' shares add up
            grad_sinks = tiled.sink_gradient(sinks, output, lse, grad_output, grad_lse)
        return (grad_query.to(query.dtype), grad_key.to(key.dtype), grad_value.to(value.dtype),
                None, grad_sinks, None)


# --- checking the call on every rank at once ----------------------------------

def _check_group(group) -> None:
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "group: ring_attention needs an initialised process group "
            "(torch.distributed.init_process_group), got none")
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"group must be a torch.distributed ProcessGroup or None, got {type(group).__name__}")
    if dist.get_rank(group) < 0:
        raise ValueError("group must contain this process; its rank in the group is -1")


def _check_local(query, key, value, attn_mask, is_causal, scale, enable_gqa,
                 causal_alignment, window, sinks, sharding, backend):
    """This rank's checks, the same as a single-device call's where they apply; returns the
    checked problem of the shards (its scale, window and sinks are the call's)."""
    check_sharding(sharding)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    problem = check_problem(query, key, value, None, 0.0, is_causal, scale, enable_gqa, causal_alignment,
                            window=window, sinks=sinks)
    if query.ndim < 3 or query.ndim > _MAX_DIMS:
        raise ValueError(f"query must have a head axis and at most {_MAX_DIMS} dimensions, "
                         f"(..., H, L, E), got shape {tuple(query.shape)}")
    pieces = pieces_per_rank(sharding)
    for name, x in (("query", query), ("key", key)):
        if x.shape[-2] % pieces:
            raise ValueError(f"{name} shard length must be even under zigzag sharding (two equal "
                             f"chunks per rank), got {x.shape[-2]}")
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor) or attn_mask.dtype != torch.bool:
            got = attn_mask.dtype if isinstance(attn_mask, torch.Tensor) else type(attn_mask).__name__
            raise TypeError(f"attn_mask must be a bool key-padding mask (True = may attend) or None, "
                            f"got {got}")
        target = (*query.shape[:-2], 1, key.shape[-2])
        try:
            fits = torch.broadcast_shapes(attn_mask.shape, target) == target
        except RuntimeError:
            fits = False
        if not fits or attn_mask.ndim > query.ndim:
            raise ValueError(f"attn_mask must be a key-padding mask of this rank's keys, "
                             f"broadcastable to (..., Hq, 1, S_shard) = {target}, "
                             f"got shape {tuple(attn_mask.shape)}")
        if attn_mask.device != query.device:
            raise ValueError(f"attn_mask must be on the query's device {query.device}, "
                             f"got {attn_mask.device}")
    return problem


def _shape_field(x) -> list[int]:
    shape = list(x.shape) if isinstance(x, torch.Tensor) and x.ndim <= _MAX_DIMS else []
    return [len(shape)] + shape + [-1] * (_MAX_DIMS - len(shape))


def _dtype_code(x) -> int:
    return FLOAT_DTYPES.index(x.dtype) if isinstance(x, torch.Tensor) and x.dtype in FLOAT_DTYPES else -1


_DEVICE_TYPES = ("cpu", "cuda")


def _window_field(window) -> list[int]:
    """``[1, left, right]`` of a checked window (-1: unbounded), ``[0, 0, 0]`` for None."""
    if window is None:
        return [0, 0, 0]
    return [1, *(-1 if reach is None else reach for reach in window)]


def _values_digest(sinks) -> int:
    """A 56-bit digest of the sinks' values (-2 for None), so that ranks can compare them."""
    if sinks is None:
        return -2
    # struct, not Tensor.numpy(): the library runs without NumPy
    values = struct.pack(f"<{sinks.numel()}d", *sinks.detach().to("cpu", torch.float64).flatten().tolist())
    return int.from_bytes(hashlib.blake2b(values, digest_size=7).digest(), "little")


def _describe(query, key, value, attn_mask, is_causal, scale, causal_alignment, sharding,
              enable_gqa, backend, window=None, sinks=None):
    """The fields every rank must agree on, as named lists of ints (``window`` and ``sinks``
    checked ones, or None)."""
    device = query.device.type if isinstance(query, torch.Tensor) else None
    scale_bits = struct.unpack("<q", struct.pack("<d", float(scale)))[0] if isinstance(
        scale, (int, float)) else -1
    return {
        "query dtype": [_dtype_code(query)],
        "key dtype": [_dtype_code(key)],
        "value dtype": [_dtype_code(value)],
        "device type": [_DEVICE_TYPES.index(device) if device in _DEVICE_TYPES else -1],
        "query shape": _shape_field(query),
        "key shape": _shape_field(key),
        "value shape": _shape_field(value),
        "attn_mask shape": _shape_field(attn_mask) if attn_mask is not None else [-2] * (_MAX_DIMS + 1),
        "is_causal": [int(is_causal) if isinstance(is_causal, bool) else -1],
        "causal_alignment": [_choice_code(causal_alignment, ("top_left", "bottom_right"))],
        "sharding": [_choice_code(sharding, ("contiguous", "zigzag"))],
        "enable_gqa": [int(enable_gqa) if isinstance(enable_gqa, bool) else -1],
        "backend": [_choice_code(backend, BACKENDS)],
        "scale": [scale_bits],
        "window": _window_field(window),
        "sinks": [_values_digest(sinks)],
    }


def _choice_code(value, choices) -> int:
    return choices.index(value) if isinstance(value, str) and value in choices else -1


def _decode(field: str, values: list[int]):
    if field.endswith("dtype"):
        return str(FLOAT_DTYPES[values[0]]) if values[0] >= 0 else "not a float tensor"
    if field.endswith("shape"):
        return "none" if values[0] < 0 else tuple(values[1:1 + values[0]])
    if field == "device type":
        return _DEVICE_TYPES[values[0]] if values[0] >= 0 else "other"
    if field == "scale":
        return struct.unpack("<d", struct.pack("<q", values[0]))[0] if values[0] != -1 else None
    if field == "window":
        return tuple(None if reach == -1 else reach for reach in values[1:]) if values[0] else None
    if field == "sinks":
        return None if values[0] == -2 else f"values of digest {values[0]:014x}"
    return values[0]


_ERRORS = (None, ValueError, TypeError)


def _agree(group, fields: dict[str, list[int]], error: Exception | None) -> None:
    """One all_gather of every rank's fields and local error, then the same verdict on every rank.

    A rank whose own checks failed shares its message, so that every rank
    raises (instead of the others waiting for it at the first transfer).
    """
    message = b"" if error is None else str(error).encode()[:_MESSAGE_BYTES]
    kind = 0 if error is None else (2 if isinstance(error, TypeError) else 1)
    flat = [kind, len(message), *message.ljust(_MESSAGE_BYTES, b"\0")]
    for values in fields.values():
        flat += values
    backend = dist.get_backend(group)
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    mine = torch.tensor(flat, dtype=torch.int64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(everyone, mine, group=group)
    rows = [row.tolist() for row in everyone]
    for rank, row in enumerate(rows):
        if row[0]:
            text = bytes(row[2:2 + row[1]]).decode(errors="replace")
            raise _ERRORS[row[0]](text if rank == dist.get_rank(group) else f"rank {rank}: {text}")
    start = 2 + _MESSAGE_BYTES
    for field, values in fields.items():
        per_rank = [row[start:start + len(values)] for row in rows]
        if any(v != per_rank[0] for v in per_rank):
            shown = ", ".join(f"rank {r} {_decode(field, v)}" for r, v in enumerate(per_rank))
            kind = TypeError if field.endswith("dtype") else ValueError
            raise kind(f"{field} must be the same on every rank (shards of equal shape, one dtype, "
                       f"one kind of device, the same settings), got {shown}")
        start += len(values)


def ring_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    causal_alignment: str = "top_left",
    window: tuple[int | None, int | None] | None = None,
    sinks: torch.Tensor | None = None,
    sharding: str = "contiguous",
    backend: str = "auto",
    return_lse: bool = False,
    group=None,
):
    """``softmax(scale * Q K^T + mask) V`` over a sequence sharded across the ranks of ``group``.

    Every rank passes its shard: ``query (..., Hq, L/W, E)``, ``key
    (..., Hkv, S/W, E)``, ``value (..., Hkv, S/W, Ev)``, cut from the whole
    sequences with :func:`attnlib.distributed.shard` and the same
    ``sharding`` (``"contiguous"`` or ``"zigzag"``); it gets back its
    shard of the output, ``(..., Hq, L/W, Ev)``, equal to the same shard of
    the single-device result. ``attn_mask`` is a bool key-padding mask of
    the rank's keys, broadcastable to ``(..., Hq, 1, S/W)``; it travels with
    the keys. ``is_causal``, ``causal_alignment``, ``scale`` and
    ``enable_gqa`` mean what they mean for
    :func:`attnlib.scaled_dot_product_attention`, in positions of the whole
    sequences; so do ``window`` and ``sinks`` (the same on every rank): a
    pair of chunks wholly outside the window is skipped, and the sinks join
    each row's denominator once. Each rank's ``sinks.grad`` is the share of
    its own rows; sum it over the ranks (as for any parameter every rank
    holds) for the gradient of the whole sequence's loss. ``backend``
    computes each block: ``"tiled"``, ``"fused"`` (CUDA), ``"naive"`` (the
    reference), or ``"auto"`` (fused where it can run, else tiled). With ``return_lse=True`` also returns the shard's
    log-sum-exp ``(..., Hq, L/W)`` in the compute dtype. The partial results
    are merged in the compute dtype (float32 for fp16/bf16 inputs), each
    block's output rounded once to the input dtype by the local backend.

    Every rank must call it with the same settings and shard shapes; one
    ``all_gather`` of a few hundred integers checks that first, so a
    mismatch raises on every rank instead of hanging.
    """
    _check_group(group)
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__} {return_lse!r}")
    try:
        problem = _check_local(query, key, value, attn_mask, is_causal, scale, enable_gqa,
                               causal_alignment, window, sinks, sharding, backend)
        error = None
    except (TypeError, ValueError) as exc:
        problem, error = None, exc
    if problem is None:  # the fields travel only so that every rank raises the error together
        fields = _describe(query, key, value, attn_mask, is_causal, scale, causal_alignment,
                           sharding, enable_gqa, backend)
    else:
        fields = _describe(query, key, value, attn_mask, is_causal, problem.scale, causal_alignment,
                           sharding, enable_gqa, backend, problem.window, problem.sinks)
    _agree(group, fields, error)
    world_size = dist.get_world_size(group)
    ring = _Ring(group, dist.get_rank(group), world_size, sharding, problem.scale, is_causal,
                 causal_alignment, enable_gqa, backend, query.shape[-2] * world_size,
                 key.shape[-2] * world_size, problem.window)
    mask = None if attn_mask is None else attn_mask.contiguous()
    output, lse = RingAttentionFunction.apply(query, key, value, mask, problem.sinks, ring)
    return (output, lse) if return_lse else output


def gather_sequence(x: torch.Tensor, sharding: str = "contiguous", dim: int = -2, group=None) -> torch.Tensor:
    """The whole sequence on every rank: ``all_gather`` of each rank's shard, then :func:`unshard`."""
    _check_group(group)
    shards = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(shards, x.contiguous(), group=group)
    return unshard(shards, sharding, dim)
