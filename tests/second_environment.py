"""The second numeric environment in which ``make test`` re-executes the chapters.

A stored output that depends on the CPU (its SIMD level, its thread count)
must fail on the author's machine, not first on a reader's. So the chapters
run a second time with NumPy's dispatch held to its compiled baseline (every
optional feature this CPU has is named in ``NPY_DISABLE_CPU_FEATURES``, the
AVX-512 groups included on x86-64), ATen's vector code at its ``default``
level, torch's BLAS (MKL, oneDNN) held to SSE4 on x86-64, and one thread. Printed as ``NAME=value`` lines for ``env``:

    env $(python tests/second_environment.py) python -m pytest chapters
"""
from __future__ import annotations

import platform

import numpy as np


def numpy_features_above_baseline() -> list[str]:
    """The optional (dispatched) NumPy CPU features this machine has."""
    try:
        umath = np._core._multiarray_umath
    except AttributeError:  # NumPy 1.x
        umath = np.core._multiarray_umath
    have = umath.__cpu_features__
    return [name for name in umath.__cpu_dispatch__ if have.get(name)]


def variables() -> dict[str, str]:
    env = {"ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1"}
    features = numpy_features_above_baseline()
    if features:
        env["NPY_DISABLE_CPU_FEATURES"] = ",".join(features)
    if platform.machine().lower() in ("x86_64", "amd64"):
        # torch's matrix products go to MKL and oneDNN, which pick their own
        # vector code; hold both to SSE4 too (names as in their documentation)
        env["MKL_ENABLE_INSTRUCTIONS"] = "SSE4_2"
        env["ONEDNN_MAX_CPU_ISA"] = "SSE41"
    return env


if __name__ == "__main__":
    for name, value in variables().items():
        print(f"{name}={value}")
