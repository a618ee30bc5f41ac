"""How many kernels each test step of gpu_session.sh compiles on an sm_90 GPU, counted without one.

    python -O benchmarks/gpu_compiles.py [--jobs 8]
    python benchmarks/gpu_compiles.py --compile-times

The review's method (../shared/reviews/2026-12-01-gpu-readiness.md): every
test of ``tests/test_fused_gpu.py`` is replayed on the CPU, in Triton's
interpreter, with each kernel launch recorded instead of run, and each launch
is counted as the GPU would compile it. The library builds the same kernel
arguments on the CPU as on the GPU (``attnlib.fused.layout``); only the tiles
differ, so each launch takes the tiles the GPU would: the autotuner's
configurations for sm_90 (``autotune_configs``; all of them the first time an
autotuner meets an autotune key, the first one afterwards, standing in for
its pick), ``backward_config`` and ``decode_config``. A compilation is one
distinct (kernel, specialisation of every argument as Triton's launcher makes
it, constexprs, tiles). Triton keeps compiled kernels on disk, so a step
compiles only what no earlier step did; autotuning lives in each process, so
a step's count of autotune runs is per process (with pytest-xdist, each
worker tunes what it meets: a lower bound).

Run with ``python -O`` (the tests' asserts are stripped, so every launch of a
test happens, whatever the unrun kernels left in their outputs) from the
repository root. The 2**31 tests need 20 GB buffers and are counted by hand in
``OFFSETS_STEP``; the tests that build CUDA tensors themselves are replayed
where a CPU tensor serves and listed where not. Prints per step: tests
replayed, compilations by kernel, autotune runs, and the step's estimated time.

``--compile-times`` measures the seconds per compilation it uses
(``SECONDS_PER_COMPILE``): each kernel of the GPU tests' kinds compiled for
sm_90, ptxas included, as ``attnlib.fused.compile_report`` compiles them
(the forward's four configurations at E = 64 and 128 in fp16 and bf16, the
decode and backward cases), in a child process where Triton compiles; it
prints min, median and max per kernel. A minute or two on one core.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode

from attnlib.fused import backward, support, tiles
from attnlib.fused.decode import decode_config

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: The GPU the session runs on.
CAPABILITY = (9, 0)
#: The selections of gpu_session.sh, by test name (the -k expressions there).
OFFSETS = "offsets_past_2_to_the_31"
#: The 2**31 step, counted by hand: the forward autotunes its (1048576, 1048576) bucket at E = 128
#: in fp16 (4 configurations), the backward test reuses that forward and adds its three kernels.
OFFSETS_STEP = Counter({"attention_forward_kernel": 4, "attention_backward_preprocess_kernel": 1,
                        "attention_backward_key_value_kernel": 1, "attention_backward_query_kernel": 1})
#: Median compile seconds per kernel for sm_90, measured here with --compile-times (Triton 3.9, a
#: shared 2-core machine at load 4-7; at a lower load the medians were a third lower).
SECONDS_PER_COMPILE = {"attention_forward_kernel": 1.07, "decode_split_kernel": 1.09,
                       "attention_backward_preprocess_kernel": 0.39, "attention_backward_key_value_kernel": 1.24,
                       "attention_backward_query_kernel": 1.16}
#: One autotune benchmark of a configuration (do_bench, warmup 25 ms, rep 100 ms, and more).
SECONDS_PER_AUTOTUNE_RUN = 0.15
#: A pytest-xdist worker's start: Python, torch, CUDA, collection.
SECONDS_PER_WORKER_START = 10


def step_of(test_name: str) -> str:
    """Which step of gpu_session.sh runs a test, by its name as -k matches it."""
    if OFFSETS in test_name:
        return "tests_offsets"
    if "grad" in test_name or "backward" in test_name:
        return "tests_backward"
    return "tests_rest"


def constexpr_names(kernel) -> set[str]:
    return {name for name, parameter in inspect.signature(kernel.fn).parameters.items()
            if "constexpr" in str(parameter.annotation)}


def specialisation(kernel, arguments: dict) -> tuple:
    """What Triton's launcher keys a compiled kernel on: each argument's type and specialisation, constexprs' values."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    constexprs = constexpr_names(kernel)
    key = []
    for name in kernel.arg_names:
        if name in ("BLOCK_M", "BLOCK_N"):
            continue  # the GPU's tiles are added by the caller
        value = arguments[name]
        key.append((name, value) if name in constexprs else native_specialize_impl(BaseBackend, value, False, True,
                                                                                     True))
    return tuple(key)


class Recorder:
    """Every launch, as the compilations and autotune runs it costs on the GPU."""

    def __init__(self):
        self.compiled: dict[tuple, str] = {}  # compile key -> the step that compiled it first
        self.autotuned: set[tuple] = set()  # (step, bucket, autotune key) tuned in a step
        self.step = None
        self.per_step = {}

    def launch(self, kernel, arguments: dict) -> None:
        """Count what launching ``kernel`` (an interpreted one) with ``arguments`` by name compiles on the GPU."""
        name = kernel.fn.__name__
        spec = specialisation(kernel, arguments)
        counts = self.per_step.setdefault(self.step, {"compiles": Counter(), "autotune_runs": 0})
        if name == "attention_forward_kernel":
            dtype = arguments["query"].dtype
            window = arguments["WINDOW"]
            _, configs = tiles.autotune_configs(CAPABILITY, arguments["query_len"], dtype, window)
            bucket = tiles.autotune_bucket(CAPABILITY, arguments["query_len"], arguments["key_len"], dtype, window)
            autotune_key = (bucket, tuple(arguments[k] for k in tiles.AUTOTUNE_KEY),
                            tuple(str(v.dtype) for v in arguments.values() if isinstance(v, torch.Tensor)))
            if (self.step, autotune_key) not in self.autotuned:
                self.autotuned.add((self.step, autotune_key))
                counts["autotune_runs"] += len(configs)
                tried = configs
            else:
                tried = configs[:1]
        elif name == "decode_split_kernel":
            tried = [decode_config(CAPABILITY, arguments["query"].dtype)]
        else:
            # the preprocess kernel has no HEAD_DIM; its tiles do not depend on the width
            head_dim = max(arguments.get("HEAD_DIM", 0), arguments["VALUE_DIM"])
            dtype = arguments["output" if name == backward.PREPROCESS_KERNEL else "query"].dtype
            tried = [backward.backward_config(CAPABILITY, dtype, head_dim)[name]]
        for config in tried:
            key = (name, spec, tuple(config))
            if key not in self.compiled:
                self.compiled[key] = self.step
                counts["compiles"][name] += 1


class OnTheCPU(TorchFunctionMode):
    """Tensors and generators the tests ask for on CUDA, made on the CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if str(kwargs.get("device", "")).startswith("cuda"):
            kwargs["device"] = "cpu"
        return func(*args, **kwargs)


class CPUGenerator(torch.Generator):
    """A generator the tests ask for on CUDA, made on the CPU."""

    def __new__(cls, device="cpu"):
        return torch.Generator.__mro__[1](device="cpu")


#: Tests a GPU refuses before any launch, which the CPU would launch.
REFUSED_ON_THE_GPU = {"test_more_query_heads_than_the_grid_allows_are_refused_by_name"}


def parametrisations(test) -> list[tuple[str, dict]]:
    """``(id, keyword arguments)`` of each case of ``test``, from its ``pytest.mark.parametrize`` marks."""
    cases = [("", {})]
    for mark in reversed(getattr(test, "pytestmark", [])):
        if mark.name != "parametrize":
            continue
        names, values = mark.args[0], mark.args[1]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        ids = mark.kwargs.get("ids")
        expanded = []
        for case_id, kwargs in cases:
            for index, value in enumerate(values):
                value_id = ids(value) if callable(ids) else str(value)
                bound = dict(zip(names, value if len(names) > 1 else [value]))
                expanded.append((f"{case_id}-{value_id}" if case_id else value_id, dict(kwargs, **bound)))
        cases = expanded
    return cases


def replay(recorder: Recorder) -> tuple[Counter, list[str]]:
    """Run every GPU test but the 2**31 ones on the CPU, launches recorded; returns tests per step and failures."""
    from triton.runtime.interpreter import InterpretedFunction

    sys.path.insert(0, str(ROOT / "tests"))
    import test_fused_gpu as gpu_tests

    # CPU tensors where the tests ask for CUDA ones; no reference computed (the kernels did not run).
    gpu_tests.make_inputs.__defaults__ = (0, "cpu")
    gpu_tests.randn.__kwdefaults__ = {"device": "cpu"}
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.Generator = CPUGenerator
    support.INTERPRETER_DTYPES = support.KERNEL_DTYPES  # bf16 too: the kernels are not run
    for helper in ("assert_within_tolerance", "assert_gradients_within_tolerance"):
        setattr(gpu_tests, helper, lambda *args, **kwargs: None)
    InterpretedFunction.run = lambda kernel, *args, grid, warmup, **kwargs: recorder.launch(kernel, kwargs)

    tests, failures = Counter(), []
    for name, test in vars(gpu_tests).items():
        if (not name.startswith("test_") or not callable(test) or name in REFUSED_ON_THE_GPU
                or name == "test_the_suite_in_a_process_that_compiles"):
            continue
        for case_id, kwargs in parametrisations(test):
            full_name = f"{name}[{case_id}]" if case_id else name
            recorder.step = step_of(full_name)
            if recorder.step == "tests_offsets":
                continue
            tests[recorder.step] += 1
            try:
                with OnTheCPU():
                    test(**kwargs)
            except Exception as error:  # a test that builds CUDA tensors itself, or expects a refusal
                failures.append(f"{full_name}: {type(error).__name__}: {str(error).splitlines()[0][:100]}")
    return tests, failures


def compile_seconds() -> dict[str, list[float]]:
    """Seconds to compile each case of the GPU tests' kernels for sm_90, by kernel (Triton must compile here)."""
    import triton
    from triton.backends.compiler import GPUTarget

    from attnlib.fused import compile_report

    cases = [compile_report.CompileCase(90, dtype, d, config) for dtype in ("float16", "bfloat16")
             for d in compile_report.CHECKED_HEAD_DIMS for config in tiles.AUTOTUNE_CONFIGS["tensor_cores"]]
    cases += [c for c in compile_report.decode_cases() + compile_report.backward_cases() if c.capability == 90]
    seconds = {}
    for case in cases:
        start = time.perf_counter()
        triton.compile(compile_report._specialised_source(case), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": case.config.num_warps, "num_stages": case.config.num_stages,
                                **tiles.COMPILE_OPTIONS})
        seconds.setdefault(compile_report.function_name(case.kernel), []).append(time.perf_counter() - start)
    return seconds


def print_compile_seconds() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    # a cache of its own, so that every kernel is compiled, not read back
    env["TRITON_CACHE_DIR"] = str(pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"gpu_compiles_{os.getpid()}")
    result = subprocess.run([sys.executable, __file__, "--compile-times-worker"], capture_output=True, text=True,
                            env=env, check=True, timeout=1800)
    print(f"{'kernel':<40} {'cases':>5} {'min s':>6} {'median s':>8} {'max s':>6}  (sm_90)")
    for kernel, times in json.loads(result.stdout).items():
        print(f"{kernel:<40} {len(times):5d} {min(times):6.2f} {statistics.median(times):8.2f} {max(times):6.2f}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=8, help="pytest-xdist workers of the parallel steps")
    parser.add_argument("--compile-times", action="store_true", help="measure SECONDS_PER_COMPILE instead")
    parser.add_argument("--compile-times-worker", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.compile_times_worker:
        print(json.dumps(compile_seconds()))
        return
    if options.compile_times:
        print_compile_seconds()
        return
    if __debug__:
        raise SystemExit("run it as python -O benchmarks/gpu_compiles.py: the tests' asserts must not run")
    if "triton" in sys.modules:
        raise SystemExit("Triton was imported before TRITON_INTERPRET=1 could be set")
    os.environ["TRITON_INTERPRET"] = "1"  # the kernels' launches are recorded, on the CPU
    recorder = Recorder()
    tests, failures = replay(recorder)
    recorder.per_step["tests_offsets"] = {"compiles": OFFSETS_STEP, "autotune_runs": 4}
    tests["tests_offsets"] = 2
    print(f"{'step':<15} {'tests':>5} {'compiles':>8} {'autotune':>8} {'serial s':>8} {'jobs':>4} {'estimate s':>10}"
          "  compiles by kernel")
    for step in ("tests_offsets", "tests_backward", "tests_rest"):
        counts = recorder.per_step.get(step, {"compiles": Counter(), "autotune_runs": 0})
        serial = (sum(SECONDS_PER_COMPILE[k] * n for k, n in counts["compiles"].items())
                  + SECONDS_PER_AUTOTUNE_RUN * counts["autotune_runs"])
        jobs = 1 if step == "tests_offsets" else options.jobs
        estimate = serial / jobs + SECONDS_PER_WORKER_START
        kernels = ", ".join(f"{k.removeprefix('attention_').removesuffix('_kernel')} {n}"
                            for k, n in sorted(counts["compiles"].items()))
        print(f"{step:<15} {tests[step]:5d} {sum(counts['compiles'].values()):8d} {counts['autotune_runs']:8d} "
              f"{serial:8.0f} {jobs:4d} {estimate:10.0f}  {kernels}")
    print("tests_offsets: counted by hand (OFFSETS_STEP); its run time is the kernels' and references' on 600000 rows")
    print(f"{len(failures)} test cases raised (the launches before are counted; a check after the last launch "
          "fails on unrun kernels' outputs):")
    for failure in failures:
        print("   ", failure)


if __name__ == "__main__":
    main()
