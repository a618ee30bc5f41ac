"""Tile sizes: the configurations the GPU autotuner picks from, and the autotuners themselves."""
from __future__ import annotations

from typing import NamedTuple

import torch

from .kernels import kernel_module
from .layout import next_power_of_2

#: Fused multiply-add in the kernel, stated because Triton 3.9 warns that its default will change.
COMPILE_OPTIONS = {"enable_fp_fusion": True}


class TileConfig(NamedTuple):
    """Tile sizes and launch shape of one kernel configuration."""

    block_m: int  # query rows per program
    block_n: int  # keys per loop iteration
    num_warps: int
    num_stages: int  # loads in flight (software pipelining; sm_80 and newer)


#: Every configuration the GPU autotuner may pick; the first of each list is
#: the default. None spills registers at E = 64 or 128 in fp16 or bf16
#: (tests/test_fused_compile.py).
AUTOTUNE_CONFIGS = {
    # fp16/bf16 on sm_80 and newer: tl.dot runs on tensor cores (mma.sync;
    # wgmma on sm_90). The last configuration, unpipelined, is the one that
    # still fits the shared memory of any of these GPUs at E = 256.
    "tensor_cores": (TileConfig(128, 64, 8, 3), TileConfig(64, 64, 4, 3), TileConfig(64, 32, 4, 3),
                     TileConfig(64, 32, 4, 1)),
    # Below sm_80 (Colab's T4 is sm_75) Triton >= 3.3 computes tl.dot with FMA
    # instructions, not tensor cores, and pipelines no loads. fp32 inputs,
    # multiplied in IEEE fp32 (no TF32), take FMA instructions on every GPU.
    # Small tiles keep the fp32 products in registers.
    "fma": (TileConfig(64, 16, 8, 1), TileConfig(32, 32, 8, 1)),
}
#: With a window the forward kernel has a third tile loop and more masks, and these tiles,
#: the default before sm_90, spill registers at E = 128 on sm_80 (24 bytes stored, 56 loaded,
#: Triton 3.9; none on sm_90, none at E = 64): a call with a window on sm_80 ... sm_89 tunes
#: over the other configurations (tests/test_fused_compile.py compiles its default).
SPILLS_WITH_A_WINDOW_BEFORE_SM_90 = TileConfig(128, 64, 8, 3)
#: Queries up to this many (decoding, short prompts) are tuned on their own,
#: without query blocks taller than themselves.
SHORT_QUERY_ROWS = 64
#: (BLOCK_M, BLOCK_N) in the interpreter: small, so that small tests cross many tiles.
INTERPRETER_BLOCKS = (32, 32)


def autotune_configs(capability: tuple[int, int], query_len: int, dtype: torch.dtype,
                     window: bool = False) -> tuple[str, tuple[TileConfig, ...]]:
    """The configurations the autotuner picks from on a GPU of ``capability``, and their list's name.

    ``window``: whether the call has a window (see ``SPILLS_WITH_A_WINDOW_BEFORE_SM_90``).
    """
    if capability < (8, 0) or dtype == torch.float32:
        return "fma", AUTOTUNE_CONFIGS["fma"]
    name, configs = "tensor_cores", AUTOTUNE_CONFIGS["tensor_cores"]
    if window and capability < (9, 0):
        name, configs = f"{name}, window", tuple(c for c in configs if c != SPILLS_WITH_A_WINDOW_BEFORE_SM_90)
    if query_len <= SHORT_QUERY_ROWS:
        name, configs = f"{name}, short queries", tuple(c for c in configs if c.block_m <= SHORT_QUERY_ROWS)
    return name, configs


def length_bucket(length: int) -> int:
    """The autotuner's bucket for a query or key length: the next power of two, at least 16."""
    return max(16, next_power_of_2(length))


def autotune_bucket(capability: tuple[int, int], query_len: int, key_len: int,
                    dtype: torch.dtype, window: bool = False) -> tuple[str, int, int]:
    """Which autotuner a call goes to: (configuration list's name, query bucket, key bucket)."""
    name, _ = autotune_configs(capability, query_len, dtype, window)
    return name, length_bucket(query_len), length_bucket(key_len)


#: Triton's autotuners, one per ``autotune_bucket``.
_autotuned: dict[tuple[str, int, int], object] = {}
AUTOTUNE_KEY = ["HEAD_DIM", "VALUE_DIM", "IS_CAUSAL", "MASK_KIND", "HAS_KEY_LENGTHS", "WINDOW"]


def autotuned_kernel(capability: tuple[int, int], query_len: int, key_len: int, dtype: torch.dtype,
                     window: bool = False):
    """The compiled kernel under Triton's autotuner, for the lengths' buckets.

    The best tiles depend on the lengths (short queries, long keys), but a
    key of exact lengths would tune again for every new length. So each
    bucket of lengths (``length_bucket``) has an autotuner of its own, which
    tunes at its first call and keeps its pick; within a bucket it tunes
    again when a head width, the causal flag, the kind of mask or the window flag changes,
    and Triton adds the tensors' dtypes to that key. Compiled kernels are
    shared by all autotuners.
    """
    bucket = autotune_bucket(capability, query_len, key_len, dtype, window)
    if bucket not in _autotuned:
        import triton

        _, configs = autotune_configs(capability, query_len, dtype, window)
        _autotuned[bucket] = triton.autotune(
            configs=[triton_config(c) for c in configs], key=AUTOTUNE_KEY,
        )(kernel_module().attention_forward_kernel)
    return _autotuned[bucket]


def picked_configurations() -> list[dict]:
    """What the GPU autotuners picked in this process, one entry per bucket and key.

    Each entry: ``configs`` (the list it picked from), ``query_bucket`` and
    ``key_bucket`` (``length_bucket`` of L and S), ``key`` (the autotune
    key's values by name) and ``picked`` (a :class:`TileConfig`).
    """
    picks = []
    for (name, query_bucket, key_bucket), autotuner in _autotuned.items():
        for key, config in autotuner.cache.items():
            picks.append({
                "configs": name, "query_bucket": query_bucket, "key_bucket": key_bucket,
                "key": dict(zip(AUTOTUNE_KEY, key)),
                "picked": TileConfig(config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"],
                                     config.num_warps, config.num_stages),
            })
    return picks


def triton_config(config: TileConfig):
    """``config`` as the ``triton.Config`` the autotuner takes."""
    import triton

    return triton.Config({"BLOCK_M": config.block_m, "BLOCK_N": config.block_n},
                         num_warps=config.num_warps, num_stages=config.num_stages)

