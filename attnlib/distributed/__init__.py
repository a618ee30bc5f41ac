"""Attention across processes and devices: ring attention on ``torch.distributed``.

``ring_attention`` is one attention call over a sequence whose shards live
on the ranks of a process group (gloo on CPUs, nccl on GPUs); ``shard``,
``unshard`` and ``gather_sequence`` cut and rejoin sequences in the
contiguous or the load-balanced zigzag layout; ``run_on_local_ring`` runs a
function on a ring of local CPU processes.
"""
from .local import run_on_local_ring
from .ring import RingAttentionFunction, gather_sequence, merge_partials, pass_around, ring_attention
from .sharding import SHARDINGS, Chunk, shard, shard_chunks, shard_positions, unshard

__all__ = [
    "SHARDINGS",
    "Chunk",
    "RingAttentionFunction",
    "gather_sequence",
    "merge_partials",
    "pass_around",
    "ring_attention",
    "run_on_local_ring",
    "shard",
    "shard_chunks",
    "shard_positions",
    "unshard",
]
