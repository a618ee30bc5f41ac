"""Compiling the fused kernels for GPUs this machine does not have.

Triton compiles for a named target, ``GPUTarget("cuda", capability, 32)``,
without a GPU: down to PTX, and to a cubin with the ``ptxas`` in its wheel.
``ptxas -v`` on that PTX reports registers and spills; Triton's metadata the
shared memory. The kernel's arguments are specialised as a launch would
specialise them (integers divisible by 16 or equal to 1, aligned pointers),
from a problem with the layout of a real call, so what compiles here is what
a GPU would run.

It uses Triton's compiler API (``ASTSource``, ``GPUTarget``, and the
launcher's argument specialisation, ``native_specialize_impl``, which
Triton has from 3.6 on; tested with 3.6 and 3.9). Compiling needs
Triton in compiling mode, so a process that interprets (see
:mod:`attnlib.fused.support`) runs ``python -m attnlib.fused.compile_report``, which prints
the reports of :func:`compile_cases`, :func:`decode_cases`,
:func:`backward_cases` and :func:`window_cases` as JSON.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import torch

from ..problem import check_problem
from . import backward
from .decode import decode_arguments as decode_kernel_arguments, decode_config
from .kernels import kernel_module
from .layout import as_4d, kernel_arguments
from .support import triton_installed, triton_interprets, triton_version
from .tiles import COMPILE_OPTIONS, TileConfig, autotune_configs

#: Colab's T4, the A100, the H100/H200, with the dtypes their tensor cores take.
GPU_TARGETS = {75: ("float16",), 80: ("float16", "bfloat16"), 90: ("float16", "bfloat16")}
#: What tensor-core code looks like in PTX; Triton >= 3.3 has none below sm_80.
TENSOR_CORE_INSTRUCTIONS = ("wgmma.mma_async", "mma.sync.aligned")
#: Shared memory one block may use (the opt-in maximum), bytes.
SHARED_MEMORY_LIMITS = {75: 64 * 1024, 80: 163 * 1024, 90: 227 * 1024}
CHECKED_HEAD_DIMS = (64, 128)
#: The oldest Triton whose compiler internals this module reads.
OLDEST_TRITON = (3, 6)


def unavailable_reason() -> str | None:
    """None when this Triton can compile the reports, else a one-line reason."""
    if not triton_installed():
        return "Triton is not installed"
    if triton_version() < OLDEST_TRITON:
        return (f"attnlib.fused.compile_report reads compiler internals of Triton >= "
                f"{'.'.join(map(str, OLDEST_TRITON))}, this is Triton {importlib.metadata.version('triton')}")
    return None


#: The kernels a case can compile: ``attention_<kernel>_kernel`` of its module, or the decoding kernel.
KERNELS = {"forward": "forward_kernel", "decode": "decode_kernel",
           "backward_preprocess": "backward_kernel", "backward_key_value": "backward_kernel",
           "backward_query": "backward_kernel"}
BACKWARD_KERNELS = ("backward_preprocess", "backward_key_value", "backward_query")


def function_name(kernel: str) -> str:
    """The function of ``kernel`` (a name of KERNELS) in its module."""
    return "decode_split_kernel" if kernel == "decode" else f"attention_{kernel}_kernel"


@dataclass(frozen=True)
class CompileCase:
    """One compilation: a target, a dtype, a head width, a tile configuration, causal or not,
    of the forward kernel, of the decoding kernel (one query, GQA 32:8, keys split) or of one
    of the three backward kernels (``BACKWARD_KERNELS``)."""

    capability: int
    dtype: str
    head_dim: int
    config: TileConfig
    is_causal: bool = False
    kernel: str = "forward"  # or a name of KERNELS
    window: bool = False  # with a sliding window (and sinks, which only the forward kernel reads)

    @property
    def function_name(self) -> str:
        return function_name(self.kernel)

    @property
    def arch(self) -> str:
        return f"sm_{self.capability}"

    def __str__(self) -> str:
        c = self.config
        causal = "-causal" if self.is_causal else ""
        kernel = "" if self.kernel == "forward" else f"-{self.kernel}"
        window = "-window-sinks" if self.window else ""
        return (f"{self.arch}-{self.dtype}-d{self.head_dim}-{c.block_m}x{c.block_n}-w{c.num_warps}"
                f"-s{c.num_stages}{causal}{window}{kernel}")


@dataclass(frozen=True)
class CompileReport:
    """What the compiler says about one :class:`CompileCase`."""

    case: CompileCase
    registers: int  # per thread
    spill_stores: int  # bytes
    spill_loads: int  # bytes
    shared_memory: int  # bytes per block
    tensor_core_instruction: str | None  # the first of TENSOR_CORE_INSTRUCTIONS in the PTX
    tensor_core_lines: tuple[str, ...]  # a few PTX lines that issue it
    exp2_instructions: int  # PTX lines computing 2**x in hardware (ex2.approx)
    async_copies: int = 0  # PTX lines copying global to shared memory asynchronously (cp.async, sm_80 on)
    tma_copies: int = 0  # of which through the Tensor Memory Accelerator (cp.async.bulk.tensor, sm_90)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CompileReport":
        case = dict(data["case"], config=TileConfig(*data["case"]["config"]))
        return cls(**dict(data, case=CompileCase(**case), tensor_core_lines=tuple(data["tensor_core_lines"])))


def compile_cases() -> list[CompileCase]:
    """Every configuration the autotuner may pick, on every target and dtype, at E = 64 and 128,
    and the default configuration with a causal mask at E = 128."""
    cases = []
    for capability, dtypes in GPU_TARGETS.items():
        for dtype in dtypes:
            _, configs = autotune_configs(divmod(capability, 10), 1024, getattr(torch, dtype))
            cases += [CompileCase(capability, dtype, d, c) for d in CHECKED_HEAD_DIMS for c in configs]
            cases.append(CompileCase(capability, dtype, max(CHECKED_HEAD_DIMS), configs[0], is_causal=True))
    return cases


#: Configurations for Hopper at d = 128 beyond the autotuner's: 128 x 128 tiles and deeper
#: pipelines. Compiled for the table's evidence (registers, spills, shared memory) before a GPU
#: times them; not yet in AUTOTUNE_CONFIGS.
CANDIDATE_CONFIGS = (TileConfig(128, 128, 8, 2), TileConfig(128, 128, 8, 3),
                     TileConfig(128, 128, 8, 4), TileConfig(128, 64, 8, 4),
                     TileConfig(128, 128, 4, 2))


def candidate_cases() -> list[CompileCase]:
    """Each of CANDIDATE_CONFIGS for sm_90 in bf16 at E = 128, causal and not."""
    return [CompileCase(90, "bfloat16", 128, config, is_causal)
            for config in CANDIDATE_CONFIGS for is_causal in (False, True)]


def decode_cases() -> list[CompileCase]:
    """The decoding kernel's launch configuration on every target and dtype, at E = 128."""
    return [CompileCase(capability, dtype, 128, decode_config(divmod(capability, 10), getattr(torch, dtype)),
                        kernel="decode")
            for capability, dtypes in GPU_TARGETS.items() for dtype in dtypes]


def backward_cases() -> list[CompileCase]:
    """The three backward kernels with their ``backward_config`` on every target and dtype, at
    E = 64 and 128, and the two that take a causal mask with it at E = 128 in bf16, the dtype
    of training."""
    cases = []
    for capability, dtypes in GPU_TARGETS.items():
        for dtype in dtypes:
            for head_dim in CHECKED_HEAD_DIMS:
                configs = backward.backward_config(divmod(capability, 10), getattr(torch, dtype), head_dim)
                for kernel in BACKWARD_KERNELS:
                    config = configs[function_name(kernel)]
                    cases.append(CompileCase(capability, dtype, head_dim, config, kernel=kernel))
                    if (kernel != "backward_preprocess" and head_dim == max(CHECKED_HEAD_DIMS)
                            and dtype == "bfloat16"):
                        cases.append(CompileCase(capability, dtype, head_dim, config, True, kernel))
    return cases


#: The window of the window cases: transformers' ``sliding_window=4096`` on a causal layer (Mistral).
EXAMPLE_WINDOW = (4095, 0)


def window_cases() -> list[CompileCase]:
    """The kernels that take a window, each with its GPU configuration at E = 128 on every target and
    dtype, causal, with ``EXAMPLE_WINDOW`` and sinks: the forward's default configuration for a
    window and the backward's key/value and query kernels."""
    cases = []
    for capability, dtypes in GPU_TARGETS.items():
        for dtype in dtypes:
            _, configs = autotune_configs(divmod(capability, 10), 1024, getattr(torch, dtype), window=True)
            cases.append(CompileCase(capability, dtype, 128, configs[0], is_causal=True, window=True))
            backward_configs = backward.backward_config(divmod(capability, 10), getattr(torch, dtype), 128)
            cases += [CompileCase(capability, dtype, 128, backward_configs[function_name(kernel)], True, kernel,
                                  window=True) for kernel in ("backward_key_value", "backward_query")]
    return cases


def example_problem(dtype: torch.dtype, head_dim: int, is_causal: bool = False, seq_len: int = 1024, heads: int = 2,
                    window: bool = False):
    """A ``(1, heads, seq_len, head_dim)`` self-attention problem on the CPU, for its layout only;
    with ``window``, also ``EXAMPLE_WINDOW`` and sinks."""
    q = torch.zeros(1, heads, seq_len, head_dim, dtype=dtype)
    extras = dict(window=EXAMPLE_WINDOW, sinks=torch.zeros(heads, dtype=dtype)) if window else {}
    return check_problem(q, q.clone(), q.clone(), is_causal=is_causal, **extras)


def forward_arguments(case: CompileCase) -> dict:
    """The forward kernel's arguments for ``case``, on a 1024-token self-attention problem."""
    problem = example_problem(getattr(torch, case.dtype), case.head_dim, case.is_causal, window=case.window)
    output = torch.empty(problem.output_shape, dtype=problem.query.dtype)
    log_sum_exp = torch.empty(problem.query.shape[:-1], dtype=torch.float32)
    arguments = kernel_arguments(problem, as_4d(output), log_sum_exp)
    arguments.update(BLOCK_M=case.config.block_m, BLOCK_N=case.config.block_n)
    return arguments


def decode_arguments(case: CompileCase) -> dict:
    """The decoding kernel's arguments for ``case``: one query of 32 heads on 8 K/V heads, 8192 keys."""
    dtype = getattr(torch, case.dtype)
    query = torch.zeros(1, 32, 1, case.head_dim, dtype=dtype)
    cache = torch.zeros(1, 8, 8192, case.head_dim, dtype=dtype)
    problem = check_problem(query, cache, cache.clone(), enable_gqa=True)
    splits, keys_per_split = 32, 256
    partial_m = torch.empty(1, 8, splits, problem.group_size)
    partial_acc = torch.empty(*partial_m.shape, case.head_dim)
    return decode_kernel_arguments(problem, partial_acc, partial_m, partial_m.clone(), None, keys_per_split,
                                  case.config.block_n)


def backward_arguments(case: CompileCase) -> dict:
    """The backward kernel's arguments for ``case``, on a 1024-token self-attention problem."""
    problem = example_problem(getattr(torch, case.dtype), case.head_dim, case.is_causal, window=case.window)
    output = torch.empty(problem.output_shape, dtype=problem.query.dtype)
    lse = torch.empty(problem.query.shape[:-1], dtype=torch.float32)
    grad_query, grad_key, grad_value = (torch.empty_like(x) for x in (problem.query, problem.key, problem.value))
    arguments = backward.backward_arguments(problem, output, lse, torch.empty_like(output), torch.empty_like(lse),
                                            grad_query, grad_key, grad_value)[case.function_name]
    arguments["BLOCK_M"] = case.config.block_m
    if case.kernel != "backward_preprocess":  # the preprocess kernel has rows only
        arguments["BLOCK_N"] = case.config.block_n
    return arguments


def _specialised_source(case: CompileCase):
    """``ASTSource`` of the case's kernel with every argument specialised as a launch would."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend
    from triton.compiler import ASTSource

    kernel = getattr(kernel_module(KERNELS[case.kernel]), case.function_name)
    if case.kernel == "decode":
        arguments = decode_arguments(case)
    elif case.kernel == "forward":
        arguments = forward_arguments(case)
    else:
        arguments = backward_arguments(case)
    signature, constexprs, attrs = {}, {}, {}
    for index, name in enumerate(kernel.arg_names):
        value = arguments[name]
        if index in kernel.constexprs:
            kind, spec = "constexpr", None
        else:
            kind, spec = native_specialize_impl(BaseBackend, value, False, True, True)
        signature[name] = kind
        if kind == "constexpr":
            constexprs[(index,)] = value if spec is None else spec
        else:
            attrs[(index,)] = BaseBackend.parse_attr(spec or "")
    return ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)


def _ptxas_verbose(ptx: str, capability: int) -> dict:
    """Registers and spill bytes, from ``ptxas -v`` (the one in Triton's wheel) on ``ptx``."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as tmp:
        with open(f"{tmp}/kernel.ptx", "w") as f:
            f.write(ptx)
        result = subprocess.run(
            [get_ptxas(capability).path, "-v", f"--gpu-name={sm_arch_from_capability(capability)}",
             f"{tmp}/kernel.ptx", "-o", f"{tmp}/kernel.cubin"],
            capture_output=True, text=True, check=True,
        )
    log = result.stdout + result.stderr
    registers = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if registers is None or spills is None:
        raise RuntimeError(f"ptxas -v printed no register or spill counts:\n{log}")
    return {"registers": int(registers.group(1)), "spill_stores": int(spills.group(1)),
            "spill_loads": int(spills.group(2))}


def compile_report(case: CompileCase) -> CompileReport:
    """Compile the kernel for ``case`` and report on the result."""
    import triton
    from triton.backends.compiler import GPUTarget

    config = case.config
    compiled = triton.compile(
        _specialised_source(case),
        target=GPUTarget("cuda", case.capability, 32),
        options={"num_warps": config.num_warps, "num_stages": config.num_stages, **COMPILE_OPTIONS},
    )
    ptx = compiled.asm["ptx"]
    instruction = next((i for i in TENSOR_CORE_INSTRUCTIONS if i in ptx), None)
    lines = tuple(line.strip() for line in ptx.splitlines() if instruction and instruction in line)
    return CompileReport(
        case=case,
        shared_memory=compiled.metadata.shared,
        tensor_core_instruction=instruction,
        tensor_core_lines=lines[:2],
        exp2_instructions=sum(line.lstrip().startswith("ex2.approx") for line in ptx.splitlines()),
        async_copies=sum(line.lstrip().startswith("cp.async") and "wait" not in line and "commit" not in line
                         for line in ptx.splitlines()),
        tma_copies=sum(line.lstrip().startswith("cp.async.bulk.tensor") for line in ptx.splitlines()),
        **_ptxas_verbose(ptx, case.capability),
    )


def reports_in_subprocess(timeout: float = 900) -> list[CompileReport]:
    """:func:`compile_cases`, :func:`decode_cases`, :func:`backward_cases` and :func:`window_cases`
    compiled in a fresh process with ``TRITON_INTERPRET`` unset."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-m", "attnlib.fused.compile_report"], capture_output=True, text=True,
                            env=env, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"python -m attnlib.fused.compile_report failed:\n{result.stderr[-4000:]}")
    return [CompileReport.from_dict(d) for d in json.loads(result.stdout)]


if __name__ == "__main__":
    if triton_interprets():
        sys.exit("unset TRITON_INTERPRET: compiling needs Triton in compiling mode")
    cases = compile_cases() + decode_cases() + backward_cases() + window_cases()
    print(json.dumps([compile_report(case).as_dict() for case in cases]))
