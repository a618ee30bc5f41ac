"""The tiles the fused kernels visit with a sliding window, counted in Triton's interpreter.

    python benchmarks/fused_window_tiles.py [--length 1024] [--windows 32 64 128 256 512]

Causal self-attention of one sequence of S tokens (one head, d = 16) with
``window=(W - 1, 0)``, forward and backward, in the interpreter's tiles. Each
kernel's tile loop is replaced by a recorder of the bounds the kernel passes
to it (:func:`record_tile_loops`), so the count is the kernel's own; beside it,
the count a window rule alone asks for (:func:`tiles_needed`: the tile pairs
holding an allowed (query, key)), from ``attnlib.window_mask``. Prints, for
each W and plain causal attention (W = S), the forward's, the query kernel's
and the key/value kernel's tiles and the forward's share of causal's: the work
grows with S x W, not S x S. About a minute on one core at S = 1024.
tests/test_fused_window_and_sinks.py checks the counts against its own rule.
"""
from __future__ import annotations

import argparse
import os

import torch


def tiles_needed(allowed: torch.Tensor, rows_per_tile: int, keys_per_tile: int) -> int:
    """How many (query tile, key tile) pairs of ``allowed`` (..., L, S) hold at least one True."""
    L, S = allowed.shape[-2:]
    pad = (0, -S % keys_per_tile, 0, -L % rows_per_tile)
    padded = torch.nn.functional.pad(allowed.to(torch.int32), pad)
    tiles = padded.unflatten(-1, (-1, keys_per_tile)).unflatten(-3, (-1, rows_per_tile))
    return int(tiles.amax(dim=(-3, -1)).gt(0).sum())


def record_tile_loops(monkeypatch, module_name: str, loop_name: str, step_name: str) -> list[int]:
    """Replace a kernel module's tile loop by one that records how many tiles each call visits.

    ``monkeypatch``: pytest's (``setattr`` undone afterwards). The interpreter
    runs the kernels as Python with their module's globals, so the kernel
    calls the recorder with the very bounds it computed. Returns the list
    the counts are appended to.
    """
    from attnlib import fused

    module = fused.kernel_module(module_name)
    loop = getattr(module, loop_name)
    visited = []

    def as_int(x):
        return int(x.handle.data.item()) if hasattr(x, "handle") else int(getattr(x, "value", x))

    def recording_loop(*args, **kwargs):
        bound = dict(zip(loop.arg_names, args), **kwargs)
        visited.append(len(range(as_int(bound["tile_begin"]), as_int(bound["tile_end"]), as_int(bound[step_name]))))
        return loop(*args, **kwargs)

    monkeypatch.setattr(module, loop_name, recording_loop)
    return visited


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=1024, help="S = L (default 1024)")
    parser.add_argument("--windows", nargs="+", type=int, default=[32, 64, 128, 256, 512])
    options = parser.parse_args(argv)
    os.environ["TRITON_INTERPRET"] = "1"  # before anything imports Triton
    import pytest

    import attnlib
    from attnlib import fused

    length = options.length
    with pytest.MonkeyPatch.context() as patch:
        forward = record_tile_loops(patch, "forward_kernel", "_attend_to_key_tiles", "BLOCK_N")
        key_value = record_tile_loops(patch, "backward_kernel", "_key_block_gradients", "BLOCK_M")
        query = record_tile_loops(patch, "backward_kernel", "_query_block_gradient", "BLOCK_N")
        print(f"L = S = {length}, causal, window = (W - 1, 0); tiles: forward {fused.INTERPRETER_BLOCKS}, "
              f"backward {fused.INTERPRETER_BACKWARD_BLOCKS} (BLOCK_M, BLOCK_N)")
        print(f"{'W':>6} {'forward':>8} {'rule':>6} {'dQ':>6} {'dK, dV':>7} {'rule':>6}  forward / causal")
        causal_tiles = None
        for window in [length] + [w for w in options.windows if w != length]:
            for counts in (forward, key_value, query):
                counts.clear()
            q = torch.randn(1, 1, length, 16, generator=torch.Generator().manual_seed(0), requires_grad=True)
            reach = None if window == length else (window - 1, 0)  # W = S: plain causal, no window
            fused.attention(q, q, q, is_causal=True, window=reach).sum().backward()
            allowed = attnlib.window_mask(length, length, (window - 1, 0))
            causal_tiles = causal_tiles or sum(forward)
            needed = [tiles_needed(allowed, *blocks)
                      for blocks in (fused.INTERPRETER_BLOCKS, fused.INTERPRETER_BACKWARD_BLOCKS)]
            print(f"{window:6d} {sum(forward):8d} {needed[0]:6d} {sum(query):6d} {sum(key_value):7d} "
                  f"{needed[1]:6d}  {sum(forward) / causal_tiles:.3f}", flush=True)


if __name__ == "__main__":
    main()
