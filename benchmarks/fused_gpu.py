"""Forward throughput of attnlib's fused kernel against torch's SDPA, on a CUDA GPU.

    python benchmarks/fused_gpu.py

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
checked against the flash (else math) output first. Then decoding: one
query per sequence against a cache of S keys, grouped-query heads 32:8,
d = 128, bf16, in GB/s of the cache's own bytes (K and V once); torch's
backends get K and V repeated to 32 heads, as they need them. It prints
tables with the fused/flash and fused/cudnn ratios and writes
``attnlib/results/fused_gpu_<gpu>.json`` with the GPU's name, the driver,
the versions, the attnlib commit (``git``, else ``ATTNLIB_COMMIT``), the
date and the tiles the autotuner picked. A few minutes on an A100 or H100;
the first call of each shape includes the autotuning.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnlib import fused, stored_results

TOKENS, MODEL_WIDTH = 16384, 2048
LENGTHS = (1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128)
DTYPES = (torch.float16, torch.bfloat16)
METHODS = ("fused", "flash", "cudnn", "math")
#: Decoding: (batch, cache length) pairs; 32 query heads share 8 key/value heads of width 128.
DECODE_SHAPES = ((1, 8192), (1, 32768), (1, 131072), (8, 32768))
DECODE_HEADS, DECODE_KV_HEADS, DECODE_WIDTH = 32, 8, 128
RESULTS = stored_results.RESULTS


def forward_flops(batch: int, heads: int, n: int, d: int, causal: bool) -> float:
    """Two n x n x d matrix products per head (QK^T and PV), 2 flops per multiply-add; half if causal."""
    return 4.0 * batch * heads * n * n * d * (0.5 if causal else 1.0)


def method_call(method: str, causal: bool, **fused_kwargs):
    if method == "fused":
        return lambda q, k, v: fused.attention(q, k, v, is_causal=causal, **fused_kwargs)
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
               "math": SDPBackend.MATH}[method]

    def torch_sdpa(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return torch_sdpa


def commit() -> str:
    """The attnlib commit measured: git's, else ATTNLIB_COMMIT (a copy without .git), else unknown."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("ATTNLIB_COMMIT", "unknown")


def machine() -> dict:
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, check=True).stdout.splitlines()[0].strip()
    except (OSError, subprocess.CalledProcessError, IndexError):
        driver = "unknown (no nvidia-smi)"
    import triton

    major, minor = torch.cuda.get_device_capability()
    return {
        "gpu": torch.cuda.get_device_name(),
        "capability": f"{major}.{minor}",
        "driver": driver,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "commit": commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def measure(dtype: torch.dtype, d: int, causal: bool, n: int) -> dict:
    """TFLOP/s of each method (None where it cannot run, with the reason) and the fused output's error."""
    from triton.testing import do_bench

    batch, heads = TOKENS // n, MODEL_WIDTH // d
    generator = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(batch, heads, n, d, device="cuda", dtype=dtype, generator=generator) for _ in range(3))
    point = {"dtype": str(dtype).removeprefix("torch."), "d": d, "causal": causal, "n": n,
             "batch": batch, "heads": heads}
    outputs = {}
    for method in METHODS:
        call = method_call(method, causal)
        try:
            outputs[method] = call(q, k, v)
            milliseconds = do_bench(lambda: call(q, k, v), warmup=25, rep=100)
        except (RuntimeError, ValueError) as error:  # no flash kernel on this GPU, out of memory, ...
            point[method] = None
            point[f"{method}_error"] = str(error).splitlines()[0][:200]
            torch.cuda.empty_cache()
            continue
        point[method] = forward_flops(batch, heads, n, d, causal) / (milliseconds * 1e-3) / 1e12
    reference = outputs.get("flash", outputs.get("math"))
    if "fused" in outputs and reference is not None:
        point["fused_max_abs_diff"] = float((outputs["fused"].float() - reference.float()).abs().max())
    return point


def measure_decode(batch: int, cache_len: int) -> dict:
    """GB/s over the cache's own bytes (K and V once) of one decoding step, each method."""
    from triton.testing import do_bench

    generator = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=generator)

    q = randn(batch, DECODE_HEADS, 1, DECODE_WIDTH)
    k, v = (randn(batch, DECODE_KV_HEADS, cache_len, DECODE_WIDTH) for _ in range(2))
    group = DECODE_HEADS // DECODE_KV_HEADS
    k_repeated, v_repeated = (x.repeat_interleave(group, dim=1) for x in (k, v))
    cache_bytes = 2 * k.numel() * k.element_size()
    point = {"B": batch, "S": cache_len, "cache_bytes": cache_bytes}
    for method in METHODS[:3]:
        if method == "fused":
            call = method_call("fused", True, causal_alignment="bottom_right", enable_gqa=True)
            arguments = (q, k, v)
        else:
            call, arguments = method_call(method, False), (q, k_repeated, v_repeated)
        try:
            call(*arguments)
            milliseconds = do_bench(lambda: call(*arguments), warmup=25, rep=100)
        except (RuntimeError, ValueError) as error:
            point[f"{method}_GBps"] = None
            point[f"{method}_error"] = str(error).splitlines()[0][:200]
            continue
        point[f"{method}_GBps"] = cache_bytes / (milliseconds * 1e-3) / 1e9
    return point


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU (torch.cuda.is_available() is False)")
    info = machine()
    print(f"{info['gpu']} (sm_{info['capability'].replace('.', '')}), driver {info['driver']}, CUDA {info['cuda']}, "
          f"torch {info['torch']}, triton {info['triton']}, {info['date']}")
    header = f"{'dtype':>8} {'d':>4} {'causal':>6} {'n':>6} " + " ".join(f"{m:>7}" for m in METHODS)
    print(header + "  fused/flash  fused/cudnn  (TFLOP/s)")
    points = []
    for dtype in DTYPES:
        if dtype == torch.bfloat16 and torch.cuda.get_device_capability() < (8, 0):
            continue
        for d in HEAD_DIMS:
            for causal in (False, True):
                for n in LENGTHS:
                    point = measure(dtype, d, causal, n)
                    points.append(point)
                    cells = " ".join(f"{point[m]:7.1f}" if point[m] is not None else f"{'-':>7}" for m in METHODS)
                    ratios = [point["fused"] / point[peer] if point["fused"] and point[peer] else None
                              for peer in ("flash", "cudnn")]
                    print(f"{point['dtype']:>8} {d:4d} {str(causal):>6} {n:6d} {cells}  "
                          + "  ".join(f"{r:11.2f}" if r else f"{'-':>11}" for r in ratios), flush=True)
    print("decoding, GQA 32:8, d = 128, bf16: GB/s of the cache's own bytes (torch reads 4x them)")
    decode_points = []
    for batch, cache_len in DECODE_SHAPES:
        point = measure_decode(batch, cache_len)
        decode_points.append(point)
        cells = "  ".join(f"{m} {point[f'{m}_GBps']:7.0f}" if point[f"{m}_GBps"] else f"{m} -"
                          for m in METHODS[:3])
        print(f"B = {batch}, S = {cache_len:6d}: {cells}", flush=True)
    RESULTS.mkdir(exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "_", info["gpu"].lower()).strip("_")
    path = RESULTS / f"fused_gpu_{slug}.json"
    path.write_text(json.dumps({
        "what": "forward TFLOP/s: attnlib.fused.attention vs torch SDPA (flash, cudnn, math backends); "
                "4 n^2 d flops per head, halved when causal; batch = 16384 / n, heads = 2048 / d",
        "machine": info,
        "points": points,
        "decode_what": "one query per sequence, 32 query heads on 8 key/value heads, d = 128, bf16; "
                       "GB/s = the cache's bytes (K and V once) / time; torch's backends read K and V "
                       "repeated to 32 heads",
        "decode_points": decode_points,
        "picked_configurations": [dict(p, picked=list(p["picked"])) for p in fused.picked_configurations()],
    }, indent=1) + "\n")
    print(f"wrote {path.relative_to(RESULTS.parents[1])}")


if __name__ == "__main__":
    main()
