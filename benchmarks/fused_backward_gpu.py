"""Forward plus backward throughput of attnlib's fused path against torch's flash and cuDNN, on a CUDA GPU.

    python benchmarks/fused_backward_gpu.py [--dtypes bfloat16 float16] [--head-dims 64 128 256]
        [--lengths 1024 2048 4096 8192 16384] [--budget SECONDS] [--output PATH] [--dry-run]

One training step of attention: the forward pass on inputs that require
grad, then ``.backward(grad_output)``, for

- ``fused``: ``attnlib.scaled_dot_product_attention(..., backend="fused")``
  (the Triton forward and backward kernels),
- ``flash``: ``torch.nn.functional.scaled_dot_product_attention`` restricted
  to its FlashAttention backend,
- ``cudnn``: the same restricted to its cuDNN backend,

measured in the same run, on the shapes of ``fused_gpu.py`` (16384 tokens and
a model width of 2048: batch = 16384 / n, heads = 2048 / d), causal and not,
with ``triton.testing.do_bench`` called as ``fused_gpu.py`` calls it (warmup
25 ms, rep 100 ms), the gradients set to None before each timed step. TFLOP/s
count the backward as 2.5 times the forward's flops (five n x n x d products
against two), so a step is 3.5 x 4 n^2 d flops per head, halved when causal:
FlashAttention's convention and that of the reference measurements
(``peers_nvidia_h200.json``), whatever a kernel recomputes.
d = 256 runs only where flash takes it (the sweep says when it does not).

Before timing, each point checks the fused output and gradients: the heads
``CHECKED_HEADS`` are recomputed by torch's math backend in float32, and the
fused error (the largest deviation divided by the reference's largest
entry) must be within ``ERROR_FACTOR`` times flash's own error plus
``ERROR_FLOOR`` (cuDNN's where flash cannot run). A point whose fused path
fails the check, or raises, is reported and not timed; its peers are timed.

It prints TFLOP/s with the fused/flash and fused/cudnn ratios, and writes
JSON (default ``attnlib/book/results/fused_backward_gpu_<gpu>.json``) after each
point, so a run cut short keeps what it measured; ``--budget`` starts no
point after that many seconds. After an error that leaves the CUDA context
unusable, the points left are listed as not measured and it exits with
status 3, as ``fused_gpu.py`` does. Without CUDA it exits with a message;
``--dry-run`` rehearses the sweep on the CPU as ``fused_gpu.py --dry-run`` does.
"""
from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attnlib
from attnlib import fused
from fused_gpu import (CONTEXT_LOST, GPU, Scale, context_lost, default_output, describe, dtype_name,
                       dtypes_this_device_takes, first_line, forward_flops, machine, method_call,
                       milliseconds, ready, release_memory, sweep_arguments, write_json)

METHODS = ("fused", "flash", "cudnn")
HEAD_DIMS = (64, 128, 256)
#: Head widths above this are measured only where torch's flash backend takes them.
FLASH_ALWAYS_TAKES = 128
#: A backward pass counts as five n x n x d products (S again, dP, dV, dQ, dK) to the forward's
#: two, FlashAttention's convention. attnlib's kernels compute S and dP in both the key/value
#: and the query kernel, seven products, but are credited with five, like their peers.
BACKWARD_TO_FORWARD_FLOPS = 2.5
#: The heads recomputed in float32 for the check: the last two heads of the last sequence,
#: where an error in the batch or head offsets shows.
CHECKED_HEADS = (slice(-1, None), slice(-2, None))
#: The fused error may be this many times the peer's (flash, else cudnn), plus ERROR_FLOOR.
ERROR_FACTOR, ERROR_FLOOR = 2.0, 1e-3
CHECKED = ("output", "grad_query", "grad_key", "grad_value")


def training_flops(batch: int, heads: int, n: int, d: int, causal: bool) -> float:
    """Flops of a forward plus a backward pass: (1 + 2.5) x the forward's (half of it if causal)."""
    return (1 + BACKWARD_TO_FORWARD_FLOPS) * forward_flops(batch, heads, n, d, causal)


def problem_shape(n: int, d: int, scale: Scale = GPU) -> tuple[int, int]:
    """(batch, heads) keeping ``scale``'s tokens and model width (TOKENS and MODEL_WIDTH), as fused_gpu.py does."""
    return scale.tokens // n, scale.model_width // d


def attention_call(method: str, causal: bool):
    """``(q, k, v) -> output`` of ``method``, differentiable."""
    if method == "fused":
        return lambda q, k, v: attnlib.scaled_dot_product_attention(q, k, v, is_causal=causal, backend="fused")
    return method_call(method, causal)


def training_step(call, q, k, v, grad_output) -> None:
    call(q, k, v).backward(grad_output)


def outputs_and_gradients(call, q, k, v, grad_output) -> dict[str, torch.Tensor]:
    """One step of ``call``: its output and the three gradients (the inputs' .grad left None)."""
    for x in (q, k, v):
        x.grad = None
    output = call(q, k, v)
    output.backward(grad_output)
    tensors = dict(zip(CHECKED, (output.detach(), q.grad, k.grad, v.grad)))
    for x in (q, k, v):
        x.grad = None
    return tensors


def reference(q, k, v, grad_output, causal: bool) -> dict[str, torch.Tensor]:
    """Output and gradients of CHECKED_HEADS, by torch's math backend in float32."""
    inputs = [x.detach()[CHECKED_HEADS].float().requires_grad_() for x in (q, k, v)]

    def math_float32(q, k, v):
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return outputs_and_gradients(math_float32, *inputs, grad_output[CHECKED_HEADS].float())


def relative_errors(tensors: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per tensor of CHECKED, max |x - expected| / max |expected|, on CHECKED_HEADS of ``x``."""
    errors = {}
    for name in CHECKED:
        want = expected[name]
        deviation = (tensors[name][CHECKED_HEADS].float() - want).abs().max()
        errors[name] = float(deviation / want.abs().max().clamp_min(torch.finfo(torch.float32).tiny))
    return errors


def verdict(errors: dict[str, dict[str, float]]) -> dict:
    """Whether the fused errors are within ERROR_FACTOR x the peer's + ERROR_FLOOR, tensor by tensor.

    ``errors``: per method that ran, its :func:`relative_errors`. The peer is
    flash, else cudnn; with neither, there is nothing to compare with.
    Returns ``{"peer", "passed", "failures"}`` (``passed`` None without a peer
    or without a fused result).
    """
    peer = next((m for m in ("flash", "cudnn") if m in errors), None)
    if peer is None or "fused" not in errors:
        return {"peer": peer, "passed": None, "failures": []}
    failures = [f"{name}: fused {errors['fused'][name]:.2e} > {ERROR_FACTOR:g} x {peer} "
                f"{errors[peer][name]:.2e} + {ERROR_FLOOR:g}"
                for name in CHECKED if errors["fused"][name] > ERROR_FACTOR * errors[peer][name] + ERROR_FLOOR]
    return {"peer": peer, "passed": not failures, "failures": failures}


def measure(dtype: torch.dtype, d: int, causal: bool, n: int, scale: Scale = GPU) -> dict:
    """The check's errors and verdict, and TFLOP/s of each method (None where it cannot run or fails, with why)."""
    device = scale.device
    batch, heads = problem_shape(n, d, scale)
    generator = torch.Generator(device=device).manual_seed(0)

    def randn(requires_grad=True):
        return torch.randn(batch, heads, n, d, device=device, dtype=dtype, generator=generator,
                           requires_grad=requires_grad)

    q, k, v = randn(), randn(), randn()
    grad_output = randn(requires_grad=False)
    point = {"dtype": dtype_name(dtype), "d": d, "causal": causal, "n": n, "batch": batch, "heads": heads}
    calls, errors = {}, {}
    try:
        expected = reference(q, k, v, grad_output, causal)
    except RuntimeError as error:  # out of memory on a small GPU
        expected = None
        point["check_error"] = first_line(error)
        release_memory(device)
    for method in METHODS:
        call = attention_call(method, causal)
        try:
            tensors = outputs_and_gradients(call, q, k, v, grad_output)
        except Exception as error:  # no such kernel here or for this d, out of resources, ...: recorded
            point[method], point[f"{method}_error"] = None, first_line(error)
            release_memory(device)
            continue
        calls[method] = call
        if expected is not None:
            errors[method] = relative_errors(tensors, expected)
        del tensors
    point["errors"] = errors
    point["check"] = verdict(errors)
    if point["check"]["passed"] is False:
        del calls["fused"]
        point["fused"], point["fused_error"] = None, "check failed: " + "; ".join(point["check"]["failures"])
    for method, call in calls.items():
        try:
            time_ms = milliseconds(lambda: training_step(call, q, k, v, grad_output), device, grad_to_none=[q, k, v])
        except Exception as error:  # it ran once above; a failure now is recorded all the same
            point[method], point[f"{method}_error"] = None, first_line(error)
            release_memory(device)
            continue
        point[method] = training_flops(batch, heads, n, d, causal) / (time_ms * 1e-3) / 1e12
    return point


def flash_refusal(d: int, dtype: torch.dtype, device: str = "cuda") -> str | None:
    """None when torch's flash backend runs a forward and backward at head width ``d``, else its error."""
    q, k, v = (torch.randn(1, 1, 128, d, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    try:
        training_step(method_call("flash", False), q, k, v, torch.ones_like(q))
    except RuntimeError as error:
        return first_line(error)
    return None


def ratio(point: dict, peer: str) -> float | None:
    return point["fused"] / point[peer] if point.get("fused") and point.get(peer) else None


def row(point: dict) -> str:
    cells = " ".join(f"{point[m]:7.1f}" if point.get(m) is not None else f"{'-':>7}" for m in METHODS)
    ratios = "  ".join(f"{r:11.2f}" if r else f"{'-':>11}" for r in (ratio(point, "flash"), ratio(point, "cudnn")))
    check = point["check"]
    if check["passed"] is None:
        verdict_text = "unchecked" + (f" ({point['check_error']})" if "check_error" in point else "")
    else:
        worst = max(CHECKED, key=lambda name: point["errors"]["fused"][name])
        verdict_text = (f"{'ok' if check['passed'] else 'FAILED'} (worst {worst} "
                        f"{point['errors']['fused'][worst]:.1e}, {check['peer']} "
                        f"{point['errors'][check['peer']][worst]:.1e})")
    return (f"{point['dtype']:>8} {point['d']:4d} {str(point['causal']):>6} {point['n']:6d} {cells}  "
            f"{ratios}  {verdict_text}")


def arguments(argv=None) -> argparse.Namespace:
    return sweep_arguments(__doc__.split("\n\n")[0], dataclasses.replace(GPU, head_dims=HEAD_DIMS),
                           "fused_backward_gpu", argv)


def main(argv=None) -> None:
    options = arguments(argv)
    ready(options, "fused_backward_gpu.py")
    start = time.monotonic()
    scale = options.scale
    info = machine(scale.device)
    path = options.output or default_output(info, "fused_backward_gpu", options.dry_run)
    print(describe(info))
    dtypes = dtypes_this_device_takes(scale)
    on_gpu = scale.device == "cuda"
    skipped_head_dims = {}
    for d in scale.head_dims:
        refusal = flash_refusal(d, dtypes[0], scale.device) if d > FLASH_ALWAYS_TAKES and dtypes else None
        if refusal is not None:
            skipped_head_dims[d] = f"torch's flash backend does not take d = {d} here: {refusal}"
            print(skipped_head_dims[d])
    # in the order the options list them, head width first: a run cut short by --budget has
    # measured the first widths in every dtype
    sweep = [(dtype, d, causal, n) for d in scale.head_dims if d not in skipped_head_dims for dtype in dtypes
             for causal in (False, True) for n in scale.lengths]
    print(f"{'dtype':>8} {'d':>4} {'causal':>6} {'n':>6} " + " ".join(f"{m:>7}" for m in METHODS)
          + "  fused/flash  fused/cudnn  check (TFLOP/s, fwd+bwd = 3.5x forward flops)")
    points, not_measured, lost = [], [], None
    for index, (dtype, d, causal, n) in enumerate(sweep):
        if lost or (options.budget is not None and time.monotonic() - start > options.budget):
            not_measured = [{"dtype": dtype_name(t), "d": e, "causal": c, "n": m} for t, e, c, m in sweep[index:]]
            print(f"the CUDA context was lost ({lost})" if lost else f"budget of {options.budget:g} s spent",
                  f": {len(not_measured)} points not measured")
            break
        points.append(measure(dtype, d, causal, n, scale))
        if on_gpu:  # the backward's tiles are fixed per GPU, dtype and width (the forward's are autotuned)
            tiles = fused.backward_config(torch.cuda.get_device_capability(), dtype, d)
            points[-1]["fused_backward_tiles"] = {name: list(config) for name, config in tiles.items()}
        print(row(points[-1]), flush=True)
        lost = context_lost(scale.device)
        write(path, info, points, not_measured, skipped_head_dims, lost)
    write(path, info, points, not_measured, skipped_head_dims, lost)
    print(f"wrote {path}")
    if lost:
        sys.exit(CONTEXT_LOST)
    failed = [p for p in points if p["check"]["passed"] is False]
    if failed:
        raise SystemExit(f"the fused output or gradients failed the check at {len(failed)} points "
                         "(fused_error in the JSON)")


def write(path: pathlib.Path, info: dict, points: list, not_measured: list, skipped_head_dims: dict,
          lost: str | None) -> None:
    """The results so far, as JSON, replacing ``path`` in one step."""
    write_json(path, {
        "what": "forward + backward TFLOP/s: attnlib.scaled_dot_product_attention(backend='fused') vs torch "
                "SDPA's flash and cudnn backends; 3.5 x 4 n^2 d flops per head (backward = 2.5x forward), "
                "halved when causal; batch = tokens / n, heads = model width / d (16384 and 2048 on a GPU); "
                "errors: max |x - ref| / max |ref| "
                "on the last two heads of the last sequence, ref = torch's math backend in float32; "
                f"check: fused <= {ERROR_FACTOR:g} x peer + {ERROR_FLOOR:g} for the output and each gradient",
        "machine": info,
        "points": points,
        "not_measured": not_measured,
        "skipped_head_dims": skipped_head_dims,
        "context_lost": lost,
        "picked_configurations": [dict(p, picked=list(p["picked"])) for p in fused.picked_configurations()],
    })


if __name__ == "__main__":
    main()
