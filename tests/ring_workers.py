"""Workers that test_distributed.py runs on a ring of local gloo processes.

They live in a module (not in the test file) so that the processes of
``run_on_local_ring`` can import them. The reference is plain torch on the
whole sequence, written here without attnlib: scores, mask, log-sum-exp,
weights, output, and autograd for the gradients.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from attnlib.distributed import ring_attention, shard


def plain_attention(q, k, v, allowed, scale, sinks=None):
    """``softmax(scale q k^T)`` over ``allowed`` keys, times ``v``; rows with no key give 0.

    ``q (B, Hq, L, E)``, ``k (B, Hkv, S, E)``, ``v (B, Hkv, S, Ev)``, ``allowed``
    broadcastable to ``(B, Hq, L, S)``; ``sinks (Hq,)``, one more score per row
    with no value. Returns the output and the log-sum-exp.
    """
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-2, -1)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    with_sink = scores
    if sinks is not None:
        with_sink = torch.cat([scores, sinks[:, None, None].expand(*scores.shape[:-1], 1)], dim=-1)
    lse = torch.logsumexp(with_sink, dim=-1, keepdim=True)
    weights = torch.exp(scores - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse))
    return weights @ v, lse.squeeze(-1)


def key_padding(case, key_len):
    """``(B, 1, 1, S)`` bool: key ``j`` of sequence ``b`` exists iff ``j < key_lengths[b]``."""
    lengths = torch.tensor(case.get("key_lengths", [key_len] * case["shape"][0]))
    return (torch.arange(key_len)[None, :] < lengths[:, None])[:, None, None, :]


def allowed_keys(case, query_len, key_len):
    """The (B, 1, L, S) bool pattern of ``case``: causal in its alignment, a window, and key padding.

    The window ``(left, right)`` lets query ``i`` at ``p = i + offset`` see keys
    ``p - left <= j <= p + right`` (None: unbounded), the offset that of
    ``case["alignment"]`` (or of ``case["causal"]``).
    """
    allowed = key_padding(case, key_len).expand(-1, -1, query_len, -1)
    alignment = case.get("causal") or case.get("alignment", "top_left")
    offset = key_len - query_len if alignment == "bottom_right" else 0
    if case.get("causal"):
        allowed = allowed & torch.ones(query_len, key_len, dtype=torch.bool).tril(offset)
    if case.get("window"):
        left, right = case["window"]
        distance = torch.arange(key_len)[None, :] - torch.arange(query_len)[:, None] - offset  # j - p
        if left is not None:
            allowed = allowed & (distance >= -left)
        if right is not None:
            allowed = allowed & (distance <= right)
    return allowed


def whole_problem(case, dtype):
    """The seeded whole-sequence inputs of ``case``, and the upstream gradients for O and lse."""
    batch, q_heads, kv_heads, query_len, key_len, width = case["shape"]
    generator = torch.Generator().manual_seed(case["seed"])

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    q, k, v = draw(batch, q_heads, query_len, width), draw(batch, kv_heads, key_len, width), \
        draw(batch, kv_heads, key_len, width + 1)
    grad_out, grad_lse = draw(batch, q_heads, query_len, width + 1), draw(batch, q_heads, query_len)
    return [x.to(dtype) for x in (q, k, v, grad_out, grad_lse)]


def error(got, want):
    diff = (got.double() - want.double()).detach().abs()
    return float("inf") if torch.isnan(diff).any() else float(diff.max())


def compare_cases(rank, world_size, cases):
    """Each case on the ring and in one process: the largest errors of this rank's shards.

    For float32 the single-process float32 error is returned alongside, so that
    the test can hold the ring to the tolerance of the kernel projects.
    """
    report = []
    for case in cases:
        dtype = getattr(torch, case["dtype"])
        sharding, use_lse = case["sharding"], case.get("lse", False)
        whole = whole_problem(case, dtype)
        query_len, key_len = whole[0].shape[-2], whole[1].shape[-2]
        allowed = allowed_keys(case, query_len, key_len)
        scale = case.get("scale", whole[0].shape[-1] ** -0.5)
        sink_values = case.get("sinks")

        def one_process(inputs):
            q, k, v = (x.detach().clone().requires_grad_() for x in inputs[:3])
            sinks = None if sink_values is None else torch.tensor(
                sink_values, dtype=inputs[0].dtype, requires_grad=True)
            output, lse = plain_attention(q, k, v, allowed, scale, sinks)
            loss = (output * inputs[3]).sum() + ((lse * inputs[4]).sum() if use_lse else 0)
            loss.backward()
            return [output, lse, q.grad, k.grad, v.grad] + ([] if sinks is None else [sinks.grad])

        reference = one_process([x.double() for x in whole])
        same_dtype = one_process(whole)
        q, k, v = (shard(x, rank, world_size, sharding).requires_grad_() for x in whole[:3])
        key_mask = None
        if "key_lengths" in case and not case.get("withhold_mask_from_ring"):
            key_mask = shard(key_padding(case, key_len), rank, world_size, sharding, dim=-1)
            if case.get("nan_in_padding"):  # what no query may see must not reach the results
                hidden = ~key_mask[:, 0, 0, :, None]
                with torch.no_grad():
                    k.masked_fill_(hidden[:, None], float("nan"))
                    v.masked_fill_(hidden[:, None], float("nan"))
        sinks = None if sink_values is None else torch.tensor(sink_values, dtype=dtype,
                                                               requires_grad=True)
        output, lse = ring_attention(
            q, k, v, key_mask, is_causal=bool(case.get("causal")), scale=case.get("scale"),
            enable_gqa=q.shape[1] != k.shape[1],
            causal_alignment=case.get("causal") or case.get("alignment", "top_left"),
            window=case.get("window"), sinks=sinks, sharding=sharding,
            backend=case.get("backend", "auto"), return_lse=True)
        grad_out = shard(whole[3], rank, world_size, sharding)
        grad_lse = shard(whole[4], rank, world_size, sharding, dim=-1)
        loss = (output * grad_out).sum() + ((lse * grad_lse).sum() if use_lse else 0)
        loss.backward()
        ring = [output, lse, q.grad, k.grad, v.grad]
        names = ["output", "lse", "dQ", "dK", "dV"]
        sequence_dims = [-2, -1, -2, -2, -2]
        row = {}
        if sinks is not None:  # each rank holds its rows' share of the sinks' gradient
            total = sinks.grad.clone()
            dist.all_reduce(total)
            ring.append(total)
            names.append("dsinks")
            sequence_dims.append(None)
        for name, got, want, single, dim in zip(names, ring, reference, same_dtype, sequence_dims):
            if dim is not None:
                want, single = (shard(x, rank, world_size, sharding, dim=dim) for x in (want, single))
            finite = torch.isfinite(want)  # lse is -inf, exactly, where a row sees no key
            row[name] = error(got[finite], want[finite])
            row[name + " one process"] = error(single[finite], want[finite])
            row[name + " matches -inf"] = bool((got[~finite] == want[~finite]).all())
        report.append(row)
    return report


def bad_calls(rank, world_size):
    """Calls that every rank must reject together; then a good call, to show the ring still works."""
    def shards(length=8, dtype=torch.float64):
        return [torch.ones(1, 2, length, 4, dtype=dtype) for _ in range(3)]

    calls = {
        "unequal shard shapes": lambda: ring_attention(*shards(8 if rank == 0 else 6)),
        "mismatched dtypes": lambda: ring_attention(
            *shards(dtype=torch.float64 if rank == 0 else torch.float32)),
        "odd shard under zigzag": lambda: ring_attention(*shards(7), sharding="zigzag"),
        "float mask on one rank": lambda: ring_attention(
            *shards(), torch.zeros(1, 1, 1, 8) if rank == 1 else torch.ones(1, 1, 1, 8, dtype=bool)),
        "mask with a query axis": lambda: ring_attention(*shards(), torch.ones(1, 1, 8, 8, dtype=bool)),
        "different causal settings": lambda: ring_attention(*shards(), is_causal=rank == 0),
        "different windows": lambda: ring_attention(*shards(), window=(2 + rank, 0)),
        "different sinks": lambda: ring_attention(
            *shards(), sinks=torch.tensor([0.0, float(rank)], dtype=torch.float64)),
        "sinks of the wrong shape": lambda: ring_attention(
            *shards(), sinks=torch.zeros(3, dtype=torch.float64)),
        "a window right of the causal diagonal": lambda: ring_attention(
            *shards(), is_causal=True, window=(2, 1)),
    }
    raised = {}
    for name, call in calls.items():
        start = time.monotonic()
        try:
            call()
            raised[name] = None
        except (TypeError, ValueError) as exc:
            raised[name] = (type(exc).__name__, str(exc), time.monotonic() - start)
    dist.barrier()
    raised["then a good call"] = ring_attention(*shards()).shape
    return raised


def raises(rank, world_size):
    if rank == 1:
        raise ValueError("a worker's own error")
    return rank


def sleeps(rank, world_size, seconds):
    time.sleep(seconds)
    return rank


def ring_on_subgroups(rank, world_size):
    """Ranks {0, 2} and {1, 3} each run a ring of two on their own group.

    Inside a group the ranks are 0 and 1 but their global ranks are not,
    so the transfers must address peers by global rank. Returns the largest
    error of this rank's output shard against plain torch on the whole
    sequence.
    """
    groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    group = groups[rank % 2]
    case = dict(shape=(1, 2, 2, 16, 16, 4), seed=20 + rank % 2, causal="top_left")
    q, k, v, _, _ = whole_problem(case, torch.float64)
    member = dist.get_rank(group)
    output = ring_attention(*(shard(x, member, 2, "zigzag") for x in (q, k, v)), is_causal=True,
                            sharding="zigzag", group=group)
    expected, _ = plain_attention(q, k, v, allowed_keys(case, 16, 16), 4 ** -0.5)
    return error(output, shard(expected, member, 2, "zigzag"))


def writes_to_descriptor_1(rank: int, world_size: int) -> int:
    """Writes a line to file descriptor 1 as C++ code does, after the group has started."""
    import os

    os.write(1, f"rank {rank} of {world_size} writes to descriptor 1\n".encode())
    return rank
