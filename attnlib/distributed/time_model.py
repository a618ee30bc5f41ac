"""How long one ring step takes: computing with a block against moving it on.

At every step a rank multiplies its ``L_b`` queries by a visiting block of
``L_b`` keys and values (``L_b = n / W``, ``H`` query heads of width ``d``,
``H_kv`` key/value heads) while it sends that block to the next rank. The
forward pass of one block costs, like Chapter 9's count,

    compute(L_b) = 4 B H L_b^2 d / F              (F: FLOP/s the kernel reaches)

and the block it passes on holds ``K`` and ``V``, ``2 B H_kv L_b d`` numbers
of ``s`` bytes each:

    transfer(L_b) = alpha + 2 B H_kv L_b d s / beta   (beta: bytes/s one way, alpha: latency)

With the two overlapped a step takes ``max(compute, transfer)``. Compute
grows with ``L_b^2`` and transfer with ``L_b``, so above a crossover length
the transfer hides completely behind the work. Without latency,

    L_b* = (H_kv / H) * s * F / (2 beta) ,

independent of batch and head width. A causal call with zigzag shards
computes half a block per step, which doubles ``L_b*``.
"""
from __future__ import annotations

import math

#: NVLink 4 (H100, H200): 900 GB/s per GPU, both directions together, so
#: 450 GB/s each way; through NVSwitch every GPU of an 8-GPU node reaches
#: any other at that rate (NVIDIA's NVLink page and H200 datasheet).
NVLINK4_BYTES_PER_SECOND = 450e9
#: InfiniBand NDR: 400 Gb/s per port, each way, i.e. 50 GB/s (NVIDIA ConnectX-7).
INFINIBAND_NDR_BYTES_PER_SECOND = 50e9


def block_flops(block_len: int, heads: int, width: int, batch: int = 1, causal_half: bool = False) -> float:
    """Forward FLOPs of ``L_b`` queries against ``L_b`` keys: ``4 B H L_b^2 d`` (halved: half a block)."""
    flops = 4.0 * batch * heads * block_len**2 * width
    return flops / 2 if causal_half else flops


def block_bytes(block_len: int, kv_heads: int, width: int, bytes_per_number: int, batch: int = 1) -> float:
    """Bytes of one visiting key/value block: ``2 B H_kv L_b d s``."""
    return 2.0 * batch * kv_heads * block_len * width * bytes_per_number


def step_seconds(block_len, heads, kv_heads, width, bytes_per_number, flops_per_second,
                 bytes_per_second, latency=0.0, batch=1, causal_half=False) -> dict:
    """Compute, transfer and the overlapped step ``max(compute, transfer)``, in seconds."""
    compute = block_flops(block_len, heads, width, batch, causal_half) / flops_per_second
    transfer = latency + block_bytes(block_len, kv_heads, width, bytes_per_number, batch) / bytes_per_second
    return {"compute": compute, "transfer": transfer, "step": max(compute, transfer)}


def compute_bound_block(heads, kv_heads, bytes_per_number, flops_per_second, bytes_per_second,
                        latency=0.0, width=128, batch=1, causal_half=False) -> float:
    """The block length ``L_b*`` above which computing a block takes longer than moving it.

    Solves ``a L^2 = alpha + b L`` with ``a = 4 B H d / F`` (halved for half a
    block) and ``b = 2 B H_kv d s / beta``; without latency the width and
    the batch cancel and ``L_b* = (H_kv / H) s F / (2 beta)`` (doubled for half a block).
    """
    for name, value in (("flops_per_second", flops_per_second), ("bytes_per_second", bytes_per_second)):
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    if not latency >= 0:
        raise ValueError(f"latency must be at least 0 seconds, got {latency!r}")
    a = block_flops(1, heads, width, batch, causal_half) / flops_per_second
    b = block_bytes(1, kv_heads, width, bytes_per_number, batch) / bytes_per_second
    return (b + math.sqrt(b * b + 4 * a * latency)) / (2 * a)
