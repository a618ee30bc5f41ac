"""Forward throughput of attnlib's fused kernel against torch's SDPA, on a CUDA GPU.

    python benchmarks/fused_gpu.py [--dtypes float16 bfloat16] [--head-dims 64 128]
        [--lengths 1024 2048 4096 8192 16384] [--budget SECONDS] [--output PATH] [--dry-run]

For fp16 and bf16, head widths 64 and 128, causal and not, and sequence
lengths n = 1024 ... 16384, it times the forward pass of

- ``fused``: ``attnlib.fused.attention`` (the Triton kernel, autotuned),
- ``flash``: ``torch.nn.functional.scaled_dot_product_attention`` restricted
  to its FlashAttention backend (where the GPU has one),
- ``cudnn``: the same restricted to its cuDNN backend (where there is one),
- ``math``: the same restricted to its unfused math backend,

with ``triton.testing.do_bench`` (its default: the mean of repeated runs), and reports
TFLOP/s = 4 n^2 d (batch x heads) / time, halved for causal (the masked half
is skipped, not computed). The problem keeps 16384 tokens and a model width
of 2048 fixed: batch = 16384 / n, heads = 2048 / d. Each fused output is
checked against the flash (else math) output first. Before them, decoding: one
query per sequence against a cache of S keys, grouped-query heads 32:8,
d = 128, bf16, in GB/s of the cache's own bytes (K and V once), by
``fused.decode`` (the keys split over programs, Flash-Decoding) and by
``fused.attention`` at L = 1 (one program per query head), beside torch's
backends, each given the grouped cache with ``enable_gqa=True`` where it
accepts that (``<backend>_gqa`` True in the JSON), else K and V repeated to
32 heads (``<backend>_gqa`` False), which it then reads four times over.

It prints tables with the fused/flash and fused/cudnn ratios and writes
JSON (default ``attnlib/book/results/fused_gpu_<gpu>.json``) with the GPU's name,
the driver, the versions, the attnlib commit (``ATTNLIB_COMMIT``
where set, else ``git``'s), the date and the tiles the autotuner picked, after
every point, so a run cut short keeps what it measured; ``--budget`` starts
no point after that many seconds. A method that raises is recorded with its
error and the others still run; after an error that leaves the CUDA context
unusable (an illegal memory access), nothing more can run in this process:
the points left are listed as not measured and the script exits with status 3.
A few minutes on an A100 or H100; the first call of each shape includes the
autotuning. ``--dry-run`` runs the same sweep on the CPU, the kernels in
Triton's interpreter, on tiny shapes, timed with a clock (the session
script's rehearsal, benchmarks/gpu_session.sh).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnlib import fused
from attnlib.book import stored_results

TOKENS, MODEL_WIDTH = 16384, 2048
LENGTHS = (1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128)
DTYPES = (torch.float16, torch.bfloat16)
METHODS = ("fused", "flash", "cudnn", "math")
#: Decoding: (batch, cache length) pairs; 32 query heads share 8 key/value heads of width 128.
DECODE_SHAPES = ((1, 8192), (1, 32768), (1, 131072), (8, 32768))
DECODE_HEADS, DECODE_KV_HEADS, DECODE_WIDTH = 32, 8, 128
#: Decoding's methods: split keys (fused.decode), one program per query head (fused.attention at
#: L = 1), torch's backends.
DECODE_METHODS = ("fused_decode", "fused", "flash", "cudnn")
RESULTS = stored_results.RESULTS
#: Exit status when the CUDA context was lost: the points measured are written, the rest are not.
CONTEXT_LOST = 3


@dataclasses.dataclass(frozen=True)
class Scale:
    """Where and on what sizes a sweep runs: the GPU's, or the dry run's on the CPU."""

    device: str
    tokens: int
    model_width: int
    lengths: tuple[int, ...]
    head_dims: tuple[int, ...]
    dtypes: tuple[torch.dtype, ...]
    decode_shapes: tuple[tuple[int, int], ...]
    decode_heads: tuple[int, int, int]  # query heads, key/value heads, width


GPU = Scale("cuda", TOKENS, MODEL_WIDTH, LENGTHS, HEAD_DIMS, DTYPES, DECODE_SHAPES,
            (DECODE_HEADS, DECODE_KV_HEADS, DECODE_WIDTH))
#: The dry run: Triton's interpreter computes in NumPy (no bf16) and takes seconds per call.
DRY_RUN = Scale("cpu", 64, 32, (32,), (16,), (torch.float16,), ((1, 64), (2, 300)), (4, 2, 16))


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def forward_flops(batch: int, heads: int, n: int, d: int, causal: bool) -> float:
    """Two n x n x d matrix products per head (QK^T and PV), 2 flops per multiply-add; half if causal."""
    return 4.0 * batch * heads * n * n * d * (0.5 if causal else 1.0)


def method_call(method: str, causal: bool, **kwargs):
    """``call(q, k, v)`` of ``method``; ``kwargs`` go to fused.attention or to torch's SDPA (``enable_gqa``)."""
    if method == "fused":
        return lambda q, k, v: fused.attention(q, k, v, is_causal=causal, **kwargs)
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
               "math": SDPBackend.MATH}[method]

    def torch_sdpa(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **kwargs)

    return torch_sdpa


def torch_decode_call(method: str, q, k, v, k_repeated, v_repeated) -> tuple:
    """``(call, arguments, grouped)`` for torch's backend ``method`` on a grouped cache: the 8 key/value
    heads themselves with ``enable_gqa=True`` where the backend accepts that (``grouped`` True), else
    K and V repeated to the query heads. Which backends accept it depends on the torch version."""
    grouped_call = method_call(method, False, enable_gqa=True)
    try:
        grouped_call(q, k, v)
    except RuntimeError:  # "No available kernel" for this backend with grouped heads
        return method_call(method, False), (q, k_repeated, v_repeated), False
    return grouped_call, (q, k, v), True


def milliseconds(call, device: str, grad_to_none=None) -> float:
    """Time of one ``call()``: ``do_bench``'s on a GPU (warmup 25 ms, rep 100 ms), the median of 3 on the CPU.

    ``grad_to_none``: tensors whose ``.grad`` is reset before each call, outside the timing.
    """
    if device == "cuda":
        from triton.testing import do_bench

        return do_bench(call, warmup=25, rep=100, grad_to_none=grad_to_none)
    times = []
    for _ in range(3):
        for x in grad_to_none or ():
            x.grad = None
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def first_line(error: BaseException) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0][:200]


def context_lost(device: str) -> str | None:
    """None while the device still runs work; after a sticky CUDA error (it fails every later call), the error."""
    if device != "cuda":
        return None
    try:
        torch.cuda.synchronize()
    except Exception as error:  # whatever torch raises for it, nothing more can run here
        return first_line(error)
    return None


def release_memory(device: str) -> None:
    """Give cached blocks back after a failure, unless the context itself is gone (then this raises too)."""
    if device == "cuda" and context_lost(device) is None:
        torch.cuda.empty_cache()


def commit() -> str:
    """The attnlib commit measured: ATTNLIB_COMMIT where set (a copy without .git), else git's, else unknown."""
    if os.environ.get("ATTNLIB_COMMIT"):
        return os.environ["ATTNLIB_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine(device: str = "cuda") -> dict:
    """The GPU, driver and versions (on the CPU, for a dry run: the processor)."""
    import triton

    info = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "commit": commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    if device != "cuda":
        return {"gpu": f"none: a dry run on the CPU ({platform.machine()}), Triton's interpreter",
                "capability": "none", "sms": 0, "driver": "none", "cuda": None, **info}
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, check=True).stdout.splitlines()[0].strip()
    except (OSError, subprocess.CalledProcessError, IndexError):
        driver = "unknown (no nvidia-smi)"
    major, minor = torch.cuda.get_device_capability()
    return {
        "gpu": torch.cuda.get_device_name(),
        "capability": f"{major}.{minor}",
        "sms": torch.cuda.get_device_properties(0).multi_processor_count,
        "driver": driver,
        "cuda": torch.version.cuda,
        **info,
    }


def describe(info: dict) -> str:
    return (f"{info['gpu']} (capability {info['capability']}), driver {info['driver']}, CUDA {info['cuda']}, "
            f"torch {info['torch']}, triton {info['triton']}, attnlib {info['commit']}, {info['date']}")


def measure(dtype: torch.dtype, d: int, causal: bool, n: int, scale: Scale = GPU) -> dict:
    """TFLOP/s of each method (None where it cannot run, with the reason) and the fused output's error."""
    batch, heads = scale.tokens // n, scale.model_width // d
    generator = torch.Generator(device=scale.device).manual_seed(0)
    q, k, v = (torch.randn(batch, heads, n, d, device=scale.device, dtype=dtype, generator=generator)
               for _ in range(3))
    point = {"dtype": dtype_name(dtype), "d": d, "causal": causal, "n": n, "batch": batch, "heads": heads}
    outputs = {}
    for method in METHODS:
        call = method_call(method, causal)
        try:
            outputs[method] = call(q, k, v)
            time_ms = milliseconds(lambda: call(q, k, v), scale.device)
        except Exception as error:  # no flash kernel here, out of memory, a compile error, a CUDA error: recorded
            point[method], point[f"{method}_error"] = None, first_line(error)
            release_memory(scale.device)
            continue
        point[method] = forward_flops(batch, heads, n, d, causal) / (time_ms * 1e-3) / 1e12
    reference = outputs.get("flash", outputs.get("math"))
    if "fused" in outputs and reference is not None:
        point["fused_max_abs_diff"] = float((outputs["fused"].float() - reference.float()).abs().max())
    return point


def measure_decode(batch: int, cache_len: int, scale: Scale = GPU) -> dict:
    """GB/s over the cache's own bytes (K and V once) of one decoding step, each of DECODE_METHODS."""
    heads, kv_heads, width = scale.decode_heads
    dtype = torch.bfloat16 if scale.device == "cuda" else torch.float16
    generator = torch.Generator(device=scale.device).manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, device=scale.device, dtype=dtype, generator=generator)

    q = randn(batch, heads, 1, width)
    k, v = (randn(batch, kv_heads, cache_len, width) for _ in range(2))
    k_repeated, v_repeated = (x.repeat_interleave(heads // kv_heads, dim=1) for x in (k, v))
    cache_bytes = 2 * k.numel() * k.element_size()
    point = {"B": batch, "S": cache_len, "cache_bytes": cache_bytes}
    calls = {
        "fused_decode": (lambda q, k, v: fused.decode(q, k, v, enable_gqa=True), (q, k, v)),
        "fused": (method_call("fused", True, causal_alignment="bottom_right", enable_gqa=True), (q, k, v)),
    }
    for method in DECODE_METHODS:
        if method not in calls:  # torch's backends: the grouped cache where they take it
            call, arguments, point[f"{method}_gqa"] = torch_decode_call(method, q, k, v, k_repeated, v_repeated)
            calls[method] = (call, arguments)
        call, arguments = calls[method]
        try:
            call(*arguments)
            time_ms = milliseconds(lambda: call(*arguments), scale.device)
        except Exception as error:  # as in measure: recorded, the other methods still run
            point[f"{method}_GBps"], point[f"{method}_error"] = None, first_line(error)
            release_memory(scale.device)
            continue
        point[f"{method}_GBps"] = cache_bytes / (time_ms * 1e-3) / 1e9
    return point


def forward_row(point: dict) -> str:
    cells = " ".join(f"{point[m]:7.1f}" if point[m] is not None else f"{'-':>7}" for m in METHODS)
    ratios = [point["fused"] / point[peer] if point["fused"] and point[peer] else None for peer in ("flash", "cudnn")]
    return (f"{point['dtype']:>8} {point['d']:4d} {str(point['causal']):>6} {point['n']:6d} {cells}  "
            + "  ".join(f"{r:11.2f}" if r else f"{'-':>11}" for r in ratios))


def decode_row(point: dict) -> str:
    cells = "  ".join(f"{m} {point[f'{m}_GBps']:7.0f}" if point[f"{m}_GBps"] else f"{m} -" for m in DECODE_METHODS)
    return f"B = {point['B']}, S = {point['S']:6d}: {cells}"


def sweep_arguments(description: str, gpu: Scale, output_name: str, argv=None) -> argparse.Namespace:
    """The options both GPU benchmarks take; ``gpu`` is the sweep without options, ``output_name``
    the stem of its JSON. ``parsed.scale`` is the sweep the options ask for."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--dtypes", nargs="+", choices=[dtype_name(t) for t in DTYPES],
                        help=f"default: {' '.join(map(dtype_name, gpu.dtypes))} "
                             f"(the dry run: {' '.join(map(dtype_name, DRY_RUN.dtypes))})")
    parser.add_argument("--head-dims", nargs="+", type=int,
                        help=f"default: {' '.join(map(str, gpu.head_dims))} "
                             f"(the dry run: {' '.join(map(str, DRY_RUN.head_dims))})")
    parser.add_argument("--lengths", nargs="+", type=int,
                        help=f"default: {gpu.lengths[0]} ... {gpu.lengths[-1]} "
                             f"(the dry run: {' '.join(map(str, DRY_RUN.lengths))})")
    parser.add_argument("--budget", type=float, default=None,
                        help="start no point after this many seconds (the points already measured are kept)")
    parser.add_argument("--output", type=pathlib.Path, default=None,
                        help=f"where to write the JSON (default: attnlib/book/results/{output_name}_<gpu>.json)")
    parser.add_argument("--dry-run", action="store_true",
                        help="on the CPU, the kernels in Triton's interpreter, tiny shapes, timed with a clock")
    parsed = parser.parse_args(argv)
    base = DRY_RUN if parsed.dry_run else gpu
    parsed.scale = dataclasses.replace(
        base, dtypes=tuple(getattr(torch, t) for t in parsed.dtypes) if parsed.dtypes else base.dtypes,
        head_dims=tuple(parsed.head_dims or base.head_dims), lengths=tuple(parsed.lengths or base.lengths))
    for d in parsed.scale.head_dims:
        if d > base.model_width or base.model_width % d:
            parser.error(f"--head-dims must divide the model width {base.model_width}, got {d}")
    for n in parsed.scale.lengths:
        if n > base.tokens or base.tokens % n:
            parser.error(f"--lengths must divide the {base.tokens} tokens, got {n}")
    if parsed.budget is not None and parsed.budget < 0:
        parser.error(f"--budget must be a number of seconds >= 0, got {parsed.budget:g}")
    return parsed


def arguments(argv=None) -> argparse.Namespace:
    return sweep_arguments(__doc__.split("\n\n")[0], GPU, "fused_gpu", argv)


def ready(options: argparse.Namespace, script: str) -> None:
    """Exit with a message unless this process can run the sweep: a CUDA GPU, or the interpreter for a dry run."""
    if options.dry_run:
        if "triton" not in sys.modules:
            os.environ["TRITON_INTERPRET"] = "1"  # read once, when Triton is first imported
        if not fused.triton_interprets():
            raise SystemExit(f"{script} --dry-run needs Triton's interpreter, but Triton was imported "
                             "compiling; set TRITON_INTERPRET=1")
    elif not torch.cuda.is_available():
        raise SystemExit(f"{script} needs a CUDA GPU: torch.cuda.is_available() is False "
                         f"(torch {torch.__version__}); nothing was measured (--dry-run rehearses on the CPU)")


def write_json(path: pathlib.Path, results: dict) -> None:
    """``results`` as JSON at ``path``, replacing it in one step (a run killed mid-write leaves the last one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(results, indent=1) + "\n")
    partial.replace(path)


def default_output(info: dict, name: str, dry_run: bool) -> pathlib.Path:
    slug = "dry_run" if dry_run else re.sub(r"[^a-z0-9]+", "_", info["gpu"].lower()).strip("_")
    return RESULTS / f"{name}_{slug}.json"


def dtypes_this_device_takes(scale: Scale) -> tuple[torch.dtype, ...]:
    """The sweep's dtypes less bfloat16 on a GPU older than sm_80, which has no bf16 tensor cores."""
    if scale.device == "cuda" and torch.cuda.get_device_capability() < (8, 0):
        return tuple(t for t in scale.dtypes if t != torch.bfloat16)
    return scale.dtypes


def main(argv=None) -> None:
    options = arguments(argv)
    ready(options, "fused_gpu.py")
    start = time.monotonic()
    scale = options.scale
    info = machine(scale.device)
    path = options.output or default_output(info, "fused_gpu", options.dry_run)
    print(describe(info))
    dtypes = dtypes_this_device_takes(scale)
    # Decoding first: four short points, which a run cut short by --budget should still have.
    sweep = [("decode", shape) for shape in scale.decode_shapes]
    sweep += [("forward", (dtype, d, causal, n)) for dtype in dtypes for d in scale.head_dims
              for causal in (False, True) for n in scale.lengths]
    results = {
        "what": "forward TFLOP/s: attnlib.fused.attention vs torch SDPA (flash, cudnn, math backends); "
                f"4 n^2 d flops per head, halved when causal; batch = {scale.tokens} / n, "
                f"heads = {scale.model_width} / d",
        "machine": info,
        "points": [],
        "decode_what": f"one query per sequence, {scale.decode_heads[0]} query heads on {scale.decode_heads[1]} "
                       f"key/value heads, d = {scale.decode_heads[2]}, bf16 (fp16 in a dry run); "
                       "GB/s = the cache's bytes (K and V once) / time; fused_decode: fused.decode (keys split "
                       "over programs), fused: fused.attention at L = 1; torch's backends read the grouped cache "
                       "with enable_gqa=True where they accept it (<backend>_gqa True), else K and V repeated "
                       "to every query head (<backend>_gqa False)",
        "decode_points": [],
        "not_measured": [],
        "picked_configurations": [],
    }
    lost = None
    for index, (kind, shape) in enumerate(sweep):
        over_budget = options.budget is not None and time.monotonic() - start > options.budget
        if over_budget or lost:
            results["not_measured"] = [{"kind": k, "shape": [dtype_name(x) if isinstance(x, torch.dtype) else x
                                                             for x in s]} for k, s in sweep[index:]]
            print(f"the CUDA context was lost ({lost})" if lost else f"budget of {options.budget:g} s spent",
                  f": {len(sweep) - index} points not measured")
            break
        if kind == "decode" and not results["decode_points"]:
            heads, kv_heads, width = scale.decode_heads
            print(f"decoding, GQA {heads}:{kv_heads}, d = {width}: GB/s of the cache's own bytes "
                  f"(torch reads {heads // kv_heads}x them)")
        if kind == "forward" and not results["points"]:
            print(f"{'dtype':>8} {'d':>4} {'causal':>6} {'n':>6} " + " ".join(f"{m:>7}" for m in METHODS)
                  + "  fused/flash  fused/cudnn  (TFLOP/s)")
        if kind == "forward":
            results["points"].append(measure(*shape, scale=scale))
            print(forward_row(results["points"][-1]), flush=True)
        else:
            results["decode_points"].append(measure_decode(*shape, scale=scale))
            print(decode_row(results["decode_points"][-1]), flush=True)
        lost = context_lost(scale.device)
        results["context_lost"] = lost
        results["picked_configurations"] = [dict(p, picked=list(p["picked"])) for p in fused.picked_configurations()]
        write_json(path, results)
    write_json(path, results)
    print(f"wrote {path}")
    if lost:
        sys.exit(CONTEXT_LOST)


if __name__ == "__main__":
    main()
