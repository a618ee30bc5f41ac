"""Time and peak memory of one attention call, each measured in a fresh process.

``measure(method, n, d, heads)`` starts ``python measure.py --worker ...``:
the worker builds float32 inputs ``(1, heads, n, d)``, warms the method up
on a small input, resets the kernel's
high-water mark of its resident memory (``/proc/self/clear_refs``), makes one
call and reports how far the high-water mark rose above the memory held
before the call (the inputs, the interpreter). That is the call's peak extra
memory, whatever allocated it. It then times further calls and reports the
median and the best. A fresh process per measurement keeps one method's freed memory
from hiding the next one's peak. Linux only (``/proc``).
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

METHODS = ("naive", "tiled", "torch")


def _kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def machine() -> dict:
    """Where and when the measurement ran."""
    import torch

    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                  if line.startswith("model name")), platform.processor())
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        # other work on a shared machine slows the many small operations of the tiled path most
        "load_average_1min": round(os.getloadavg()[0], 2),
    }


def _call(method: str, block_q: int | None, block_k: int | None):
    import torch.nn.functional as F

    import attnlib
    from attnlib import tiled

    if method == "naive":
        return lambda q, k, v: attnlib.scaled_dot_product_attention(q, k, v, backend="naive")
    if method == "tiled":
        blocks = {"block_q": block_q or tiled.DEFAULT_BLOCK_Q, "block_k": block_k or tiled.DEFAULT_BLOCK_K}
        return lambda q, k, v: tiled.attention(q, k, v, **blocks)
    if method == "torch":
        return F.scaled_dot_product_attention
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def _worker(method: str, n: int, d: int, heads: int, min_seconds: float, block_q, block_k) -> dict:
    import torch

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, d) for _ in range(3))
    fn = _call(method, block_q, block_k)
    with torch.no_grad():
        fn(*(torch.randn(1, heads, 64, d) for _ in range(3)))  # load the code paths before measuring
        before = _kib("VmRSS")
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # reset VmHWM to the current resident size
        start = time.perf_counter()
        out = fn(q, k, v)
        first = time.perf_counter() - start
        peak_extra = (_kib("VmHWM") - before) * 1024
        del out
        times = []
        while len(times) < 2 or (sum(times) < min_seconds and len(times) < 10):
            start = time.perf_counter()
            fn(q, k, v)
            times.append(time.perf_counter() - start)
    return {"method": method, "n": n, "d": d, "heads": heads, "seconds": statistics.median(times),
            "best_seconds": min(times), "first_call_seconds": first, "repeats": len(times), "peak_extra_bytes": peak_extra,
            "block_q": block_q, "block_k": block_k, "load_average_1min": round(os.getloadavg()[0], 2)}


def measure(method: str, n: int, d: int = 64, heads: int = 8, min_seconds: float = 1.0,
            block_q: int | None = None, block_k: int | None = None) -> dict:
    """Median seconds per call and peak extra bytes of ``method`` on ``(1, heads, n, d)`` float32 inputs."""
    args = [sys.executable, __file__, "--worker", json.dumps(
        [method, n, d, heads, min_seconds, block_q, block_k])]
    done = subprocess.run(args, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    print(json.dumps(_worker(*json.loads(sys.argv[2]))))
