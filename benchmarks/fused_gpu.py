"""Forward throughput of attnlib's fused kernel against torch's SDPA, on a CUDA GPU.

    python benchmarks/fused_gpu.py

For fp16 and bf16, head widths 64 and 128, causal and not, and sequence
lengths n = 1024 ... 16384, it times the forward pass of

- ``fused``: ``attnlib.fused.attention`` (the Triton kernel, autotuned),
- ``flash``: ``torch.nn.functional.scaled_dot_product_attention`` restricted
  to its FlashAttention backend (where the GPU has one),
- ``math``: the same restricted to its unfused math backend,

with ``triton.testing.do_bench`` (median of repeated runs), and reports
TFLOP/s = 4 n^2 d (batch x heads) / time, halved for causal (the masked half
is skipped, not computed). The problem keeps 16384 tokens and a model width
of 2048 fixed: batch = 16384 / n, heads = 2048 / d. Each fused output is
checked against the flash (else math) output first. It prints a table with
the fused/flash ratio and writes ``attnlib/results/fused_gpu_<gpu>.json``
with the GPU's name, the driver, the versions and the date. A few minutes on
an A100 or H100; the first call of each shape includes the autotuning.
"""
from __future__ import annotations

import datetime
import json
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
METHODS = ("fused", "flash", "math")
RESULTS = stored_results.RESULTS


def forward_flops(batch: int, heads: int, n: int, d: int, causal: bool) -> float:
    """Two n x n x d matrix products per head (QK^T and PV), 2 flops per multiply-add; half if causal."""
    return 4.0 * batch * heads * n * n * d * (0.5 if causal else 1.0)


def method_call(method: str, causal: bool):
    if method == "fused":
        return lambda q, k, v: fused.attention(q, k, v, is_causal=causal)
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH}[method]

    def torch_sdpa(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return torch_sdpa


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


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU (torch.cuda.is_available() is False)")
    info = machine()
    print(f"{info['gpu']} (sm_{info['capability'].replace('.', '')}), driver {info['driver']}, CUDA {info['cuda']}, "
          f"torch {info['torch']}, triton {info['triton']}, {info['date']}")
    header = f"{'dtype':>8} {'d':>4} {'causal':>6} {'n':>6} " + " ".join(f"{m:>7}" for m in METHODS)
    print(header + "  fused/flash  (TFLOP/s)")
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
                    ratio = point["fused"] / point["flash"] if point["fused"] and point["flash"] else None
                    print(f"{point['dtype']:>8} {d:4d} {str(causal):>6} {n:6d} {cells}  "
                          + (f"{ratio:11.2f}" if ratio else f"{'-':>11}"), flush=True)
    RESULTS.mkdir(exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "_", info["gpu"].lower()).strip("_")
    path = RESULTS / f"fused_gpu_{slug}.json"
    path.write_text(json.dumps({
        "what": "forward TFLOP/s: attnlib.fused.attention vs torch SDPA (flash backend, math backend); "
                "4 n^2 d flops per head, halved when causal; batch = 16384 / n, heads = 2048 / d",
        "machine": info,
        "points": points,
    }, indent=1) + "\n")
    print(f"wrote {path.relative_to(RESULTS.parents[1])}")


if __name__ == "__main__":
    main()
