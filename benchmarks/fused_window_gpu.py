"""Sliding windows on a CUDA GPU: the fused kernels' time against the window W at a fixed length S.

    python benchmarks/fused_window_gpu.py [--length 16384] [--windows 256 1024 4096 16384]
        [--dtype bfloat16] [--head-dim 128] [--heads 16] [--no-flex] [--budget SECONDS]
        [--output PATH] [--dry-run]

Causal self-attention of one sequence of S tokens, each query seeing itself and
the W - 1 keys before it (``window=(W - 1, 0)``, transformers'
``sliding_window=W``); W = S is plain causal attention. For each W it times,
with ``triton.testing.do_bench``, the forward pass and the forward and
backward passes together of

- ``fused``: ``attnlib.fused.attention`` with ``window=`` (tiles outside the
  window skipped: the work is about ``S x W``, not ``S x S / 2``),
- ``sdpa_mask``: torch's ``scaled_dot_product_attention`` with the same
  window as a dense boolean ``(S, S)`` mask (whatever backend torch picks for
  a mask; the whole mask is read, so its time does not shrink with W),
- ``flex``: FlexAttention (``torch.nn.attention.flex_attention``, compiled)
  with the window as a block mask, where this torch has it (``--no-flex``: not
  tried; its first call compiles, outside the timing),

and reports each time, the fused time relative to its own at W = S (the
work's share is about ``(W + tile) / (S / 2)``), and the ratios fused/sdpa_mask
and fused/flex. Each fused output is checked against sdpa_mask's first. Writes
JSON (default ``attnlib/book/results/fused_window_gpu_<gpu>.json``) after every
point, as ``benchmarks/fused_gpu.py`` does, whose helpers it uses; ``--budget``
starts no point after that many seconds. ``--dry-run`` runs the same sweep on
the CPU, the kernels in Triton's interpreter, on tiny shapes, timed with a
clock (benchmarks/gpu_session.sh's rehearsal).
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import torch
import torch.nn.functional as F

from attnlib import fused
from fused_gpu import (CONTEXT_LOST, context_lost, default_output, describe, first_line, machine, milliseconds,
                       ready, release_memory, write_json)

METHODS = ("fused", "sdpa_mask", "flex")
#: (S, windows, heads, head width, dtype) of the GPU sweep and of the dry run in the interpreter.
GPU_SWEEP = (16384, (256, 1024, 4096, 16384), 16, 128, "bfloat16")
DRY_SWEEP = (64, (8, 64), 2, 16, "float16")


def window_allowed(length: int, window: int, device: str) -> torch.Tensor:
    """``(S, S)`` bool: query i sees key j iff i - window < j <= i."""
    i = torch.arange(length, device=device)[:, None]
    j = torch.arange(length, device=device)[None, :]
    return (j <= i) & (j > i - window)


_compiled_flex = []  # torch.compile(flex_attention), compiled once for every window


def flex_call(length: int, window: int, device: str):
    """FlexAttention with the window as a block mask, compiled; raises where this torch has none."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    reach = torch.tensor(window, device=device)  # a tensor, not a constant: no recompilation per window

    def sliding_window(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (kv_idx > q_idx - reach)

    block_mask = create_block_mask(sliding_window, None, None, length, length, device=device)
    if not _compiled_flex:
        _compiled_flex.append(torch.compile(flex_attention))
    return lambda q, k, v: _compiled_flex[0](q, k, v, block_mask=block_mask)


def method_calls(length: int, window: int, device: str, flex: bool) -> dict:
    """Each method as a function of (q, k, v); a method that cannot be built holds its error instead."""
    allowed = window_allowed(length, window, device)
    calls = {
        "fused": lambda q, k, v: fused.attention(q, k, v, is_causal=True, window=(window - 1, 0)),
        "sdpa_mask": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=allowed),
    }
    if flex and device == "cuda":
        try:
            calls["flex"] = flex_call(length, window, device)
        except Exception as error:  # no FlexAttention in this torch, or it cannot build the mask: recorded
            calls["flex"] = first_line(error)
    else:
        calls["flex"] = "not tried (--no-flex, or a dry run)"
    return calls


def measure(length: int, window: int, heads: int, head_dim: int, dtype: torch.dtype, device: str,
            flex: bool) -> dict:
    """Milliseconds of each method's forward (``<method>_ms``) and forward + backward (``<method>_train_ms``)."""
    generator = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(1, heads, length, head_dim, device=device, dtype=dtype, generator=generator)
               for _ in range(3))
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    grad_output = torch.randn_like(q)
    point = {"S": length, "W": window, "heads": heads, "d": head_dim}
    outputs = {}
    for method, call in method_calls(length, window, device, flex).items():
        if isinstance(call, str):
            point[f"{method}_ms"] = point[f"{method}_train_ms"] = None
            point[f"{method}_error"] = call
            continue
        try:
            outputs[method] = call(q, k, v)  # compiles (and autotunes) outside the timing
            point[f"{method}_ms"] = milliseconds(lambda: call(q, k, v), device)

            def train_step():
                torch.autograd.backward(call(*leaves), grad_output)

            train_step()
            point[f"{method}_train_ms"] = milliseconds(train_step, device, grad_to_none=leaves)
        except Exception as error:  # out of memory, no backend for the mask, a compile error: recorded
            point.setdefault(f"{method}_ms", None)
            point[f"{method}_train_ms"], point[f"{method}_error"] = None, first_line(error)
            release_memory(device)
    if "fused" in outputs and "sdpa_mask" in outputs:
        point["fused_max_abs_diff"] = float((outputs["fused"].float() - outputs["sdpa_mask"].float()).abs().max())
    return point


def ratio(a, b):
    return a / b if a and b else None


def row(point: dict, full: dict | None) -> str:
    def cell(x, width=8, digits=2):
        return f"{x:{width}.{digits}f}" if x is not None else f"{'-':>{width}}"

    cells = "".join(cell(point[f"{m}_ms"], 12) + cell(point[f"{m}_train_ms"], 9) for m in METHODS)
    own = ratio(point["fused_ms"], full["fused_ms"]) if full else None
    return (f"{point['W']:6d}{cells}   {cell(own, 11)}  {cell(ratio(point['fused_ms'], point['sdpa_mask_ms']), 15)}"
            f"  {cell(ratio(point['fused_ms'], point['flex_ms']), 10)}")


def arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, help=f"S (default {GPU_SWEEP[0]}; the dry run: {DRY_SWEEP[0]})")
    parser.add_argument("--windows", nargs="+", type=int,
                        help=f"W (default {' '.join(map(str, GPU_SWEEP[1]))}; the dry run: "
                             f"{' '.join(map(str, DRY_SWEEP[1]))})")
    parser.add_argument("--heads", type=int)
    parser.add_argument("--head-dim", type=int)
    parser.add_argument("--dtype", choices=["float16", "bfloat16", "float32"])
    parser.add_argument("--no-flex", action="store_true", help="do not try FlexAttention")
    parser.add_argument("--budget", type=float, default=None,
                        help="start no point after this many seconds (the points already measured are kept)")
    parser.add_argument("--output", type=pathlib.Path, default=None,
                        help="where to write the JSON (default: attnlib/book/results/fused_window_gpu_<gpu>.json)")
    parser.add_argument("--dry-run", action="store_true",
                        help="on the CPU, the kernels in Triton's interpreter, tiny shapes, timed with a clock")
    options = parser.parse_args(argv)
    length, windows, heads, head_dim, dtype = DRY_SWEEP if options.dry_run else GPU_SWEEP
    options.length = options.length or length
    options.windows = tuple(options.windows or windows)
    options.heads, options.head_dim = options.heads or heads, options.head_dim or head_dim
    options.dtype = getattr(torch, options.dtype or dtype)
    for window in options.windows:
        if not 1 <= window <= options.length:
            parser.error(f"--windows must lie in [1, S = {options.length}], got {window}")
    if options.budget is not None and options.budget < 0:
        parser.error(f"--budget must be a number of seconds >= 0, got {options.budget:g}")
    return options


def main(argv=None) -> None:
    options = arguments(argv)
    ready(options, "fused_window_gpu.py")
    start = time.monotonic()
    device = "cpu" if options.dry_run else "cuda"
    info = machine(device)
    path = options.output or default_output(info, "fused_window_gpu", options.dry_run)
    print(describe(info))
    # W = S first: the fused time the others are compared with, and the one a cut-short run needs most.
    windows = sorted(options.windows, key=lambda w: (w != options.length, w))
    results = {
        "what": f"causal self-attention, one sequence of S = {options.length}, {options.heads} heads, "
                f"d = {options.head_dim}, {str(options.dtype).removeprefix('torch.')}; each query sees the "
                "W - 1 keys before it and itself; milliseconds, forward (_ms) and forward + backward "
                "(_train_ms): fused.attention(window=(W - 1, 0)), SDPA with the window as a dense bool mask, "
                "FlexAttention (compiled) with it as a block mask",
        "machine": info, "points": [], "not_measured": [],
    }
    print(f"{'W':>6}" + "".join(f"{m + ' ms':>12}{'+ bwd':>9}" for m in METHODS)
          + "   fused/(W=S)  fused/sdpa_mask  fused/flex  (forward)")
    lost = None
    for index, window in enumerate(windows):
        if (options.budget is not None and time.monotonic() - start > options.budget) or lost:
            results["not_measured"] = list(windows[index:])
            print(f"the CUDA context was lost ({lost})" if lost else f"budget of {options.budget:g} s spent",
                  f": W = {results['not_measured']} not measured")
            break
        point = measure(options.length, window, options.heads, options.head_dim, options.dtype, device,
                        flex=not options.no_flex)
        results["points"].append(point)
        full = next((p for p in results["points"] if p["W"] == options.length), None)
        print(row(point, full), flush=True)
        lost = context_lost(device)
        results["context_lost"] = lost
        write_json(path, results)
    write_json(path, results)
    print(f"wrote {path}")
    if lost:
        sys.exit(CONTEXT_LOST)


if __name__ == "__main__":
    main()
