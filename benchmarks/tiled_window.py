"""The tiled path's time against the sliding window's width W, at a fixed sequence length.

    python benchmarks/tiled_window.py                      # about 3 min on 2 busy cores
    python benchmarks/tiled_window.py --seq-len 8192 --windows 256,1024,S
    python benchmarks/tiled_window.py --block-q 64 --block-k 128 --output /tmp/small_tiles.json

Times the forward pass of ``attnlib.tiled.attention`` (default blocks unless
``--block-q``/``--block-k`` say otherwise, ``torch.no_grad``) on causal self-attention, ``L = S``, float32, batch 1,
with ``window=(W - 1, 0)`` (transformers' ``sliding_window = W``: each query
sees itself and the ``W - 1`` keys before it) for each ``W``, and ``W = S``
meaning the whole causal triangle. In the same run, round after round, it
times the tiled path without a window (plain ``is_causal``, the reference
of the ratios) and torch's ``scaled_dot_product_attention`` with the same
pattern given as a dense ``(S, S)`` bool mask. Each time is the median of
``--rounds`` calls; the calls take turns so that a busy spell of a shared
machine does not fall on one case only. Beside the times it prints the key
tiles the tiled loop visits (counted with the loop's own ``key_blocks``)
relative to the causal triangle's: the work the window leaves. A tile is the
unit skipped, so below ``W`` of about one key block that count stops falling.

Before timing, every case's tiled output is checked against torch's. Writes
``attnlib/book/results/tiled_window.json`` (or ``--output``) with the machine,
the versions, the commit and the date.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time

import torch
import torch.nn.functional as F

from attnlib import tiled, window_mask
from attnlib.book import stored_results
from attnlib.problem import check_problem
from measure import machine
from training_sweep import commit

RESULTS = stored_results.RESULTS / "tiled_window.json"
DEFAULT_WINDOWS = "64,128,256,512,1024,2048,S"
#: float32 outputs of the tiled path and torch's SDPA agree within this on these inputs
AGREEMENT = 1e-4


def window_sizes(text: str, seq_len: int) -> list[int]:
    """``"64,128,S"`` -> ``[64, 128, seq_len]``: widths W in ``1..seq_len``, ``S`` for all of it."""
    sizes = []
    for item in text.split(","):
        item = item.strip()
        if item == "S":
            sizes.append(seq_len)
            continue
        if not item.isdigit() or not 1 <= int(item) <= seq_len:
            raise ValueError(f"--windows must list widths W with 1 <= W <= --seq-len = {seq_len} "
                             f"(or S), separated by commas, got {item!r} in {text!r}")
        sizes.append(int(item))
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"--windows must not repeat a width, got {text!r}")
    return sizes


def window_of(width: int) -> tuple[int, int]:
    """attnlib's ``window`` for a causal sliding window of ``width`` keys: ``(width - 1, 0)``."""
    return width - 1, 0


def dense_mask(seq_len: int, width: int) -> torch.Tensor:
    """The ``(S, S)`` bool mask torch's SDPA gets: causal, and at most ``width - 1`` keys back."""
    return window_mask(seq_len, seq_len, (width - 1, 0))


def tiles_visited(seq_len: int, width: int | None, block_q: int, block_k: int) -> int:
    """Key tiles the tiled forward loop visits, over all query blocks."""
    empty = torch.empty(1, 1, seq_len, 1)
    window = None if width is None else window_of(width)
    tiles = tiled._Tiles(check_problem(empty, empty, empty, is_causal=True, window=window),
                         empty, empty, empty)
    return sum(1 for i0 in range(0, seq_len, block_q)
               for _ in tiles.key_blocks(i0, min(i0 + block_q, seq_len), block_k))


def cases(seq_len: int, widths: list[int], blocks: dict) -> dict:
    """Name -> call on ``(q, k, v)``: the tiled path without a window, then per W tiled and torch.

    ``blocks``: ``block_q`` and ``block_k`` of the tiled calls.
    """
    calls = {"tiled causal": lambda q, k, v: tiled.attention(q, k, v, is_causal=True, **blocks)}
    for width in widths:
        mask = dense_mask(seq_len, width)
        calls[f"tiled W={width}"] = (
            lambda q, k, v, w=window_of(width): tiled.attention(q, k, v, is_causal=True, window=w,
                                                                **blocks))
        calls[f"torch W={width}"] = (
            lambda q, k, v, m=mask: F.scaled_dot_product_attention(q, k, v, attn_mask=m))
    return calls


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-len", type=int, default=4096, help="L = S (default 4096)")
    parser.add_argument("--windows", default=DEFAULT_WINDOWS, help=f"widths W (default {DEFAULT_WINDOWS})")
    parser.add_argument("--heads", type=int, default=4, help="heads (default 4)")
    parser.add_argument("--head-dim", type=int, default=64, help="width of a head (default 64)")
    parser.add_argument("--rounds", type=int, default=7, help="calls per case, median taken (default 7)")
    parser.add_argument("--block-q", type=int, default=tiled.DEFAULT_BLOCK_Q,
                        help=f"query rows per tile (default {tiled.DEFAULT_BLOCK_Q})")
    parser.add_argument("--block-k", type=int, default=tiled.DEFAULT_BLOCK_K,
                        help=f"keys per tile (default {tiled.DEFAULT_BLOCK_K})")
    parser.add_argument("--output", type=pathlib.Path, default=RESULTS, help="where the JSON goes")
    arguments = parser.parse_args(argv)
    for name in ("seq_len", "heads", "head_dim", "rounds", "block_q", "block_k"):
        if getattr(arguments, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(arguments, name)}")
    try:
        arguments.widths = window_sizes(arguments.windows, arguments.seq_len)
    except ValueError as error:
        parser.error(str(error))
    return arguments


def main(argv=None) -> dict:
    arguments = parse(argv)
    at_start = {**machine(), "commit": commit()}
    seq_len, widths = arguments.seq_len, arguments.widths
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, arguments.heads, seq_len, arguments.head_dim) for _ in range(3))
    blocks = {"block_q": arguments.block_q, "block_k": arguments.block_k}
    calls = cases(seq_len, widths, blocks)
    times = {name: [] for name in calls}
    with torch.no_grad():
        for width in widths:  # every case computes the same thing as its torch twin, and warms up
            error = (calls[f"tiled W={width}"](q, k, v) - calls[f"torch W={width}"](q, k, v)).abs().max()
            if not error <= AGREEMENT:
                raise AssertionError(f"tiled and torch differ by {float(error):.2e} at W={width}")
        calls["tiled causal"](q, k, v)
        for _ in range(arguments.rounds):
            for name, call in calls.items():
                start = time.perf_counter()
                call(q, k, v)
                times[name].append(time.perf_counter() - start)
    seconds = {name: statistics.median(t) for name, t in times.items()}
    full_tiles = tiles_visited(seq_len, None, **blocks)
    rows = [{"window": width,
             "tiled_seconds": seconds[f"tiled W={width}"],
             "torch_masked_seconds": seconds[f"torch W={width}"],
             "tiled_over_tiled_causal": seconds[f"tiled W={width}"] / seconds["tiled causal"],
             "tiled_over_torch_masked": seconds[f"tiled W={width}"] / seconds[f"torch W={width}"],
             "tiles_over_causal_tiles": tiles_visited(seq_len, width, **blocks) / full_tiles}
            for width in widths]
    print(f"S = {seq_len}, {arguments.heads} heads of {arguments.head_dim}, float32, causal, forward, "
          f"tiles {arguments.block_q} x {arguments.block_k}; median of {arguments.rounds}; "
          f"tiled causal without a window: {seconds['tiled causal']:.3f} s")
    print(f"{'W':>6} {'tiled s':>8} {'torch+mask s':>13} {'/ tiled causal':>15} {'/ torch':>8} "
          f"{'tiles / causal':>15}")
    for row in rows:
        print(f"{row['window']:>6} {row['tiled_seconds']:>8.3f} {row['torch_masked_seconds']:>13.3f} "
              f"{row['tiled_over_tiled_causal']:>15.3f} {row['tiled_over_torch_masked']:>8.2f} "
              f"{row['tiles_over_causal_tiles']:>15.3f}")
    result = {"machine": at_start, "load_average_1min_at_end": machine()["load_average_1min"],
              "seq_len": seq_len, "heads": arguments.heads, "head_dim": arguments.head_dim,
              "dtype": "float32", "causal": True, "pass": "forward", "rounds": arguments.rounds,
              "block_q": arguments.block_q, "block_k": arguments.block_k,
              "tiled_causal_seconds": seconds["tiled causal"], "rows": rows}
    arguments.output.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {arguments.output}")
    return result


if __name__ == "__main__":
    main()
