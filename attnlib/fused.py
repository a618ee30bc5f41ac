"""The fused path: attnlib's Triton kernel (FlashAttention-2's forward) behind the contract.

The kernel is in :mod:`attnlib.fused_kernel`; this module says what it can
take, lays the tensors out for it, picks its tile sizes and launches it.

- On CUDA it runs natively, with autotuned tile sizes, and ``backend="auto"``
  picks it first. fp16 and bf16 use tensor cores from sm_80 on; fp32 inputs
  are multiplied in full fp32, on the ordinary FMA units.
- On the CPU it runs in Triton's interpreter (NumPy; slow; no bfloat16), for
  validation: ``backend="fused"`` runs it, ``backend="auto"`` never does.
- ``import attnlib`` never imports Triton; without Triton this backend says so.

Triton fixes, when it is first imported, whether this process compiles
kernels or interprets them: ``TRITON_INTERPRET=1`` at that moment makes its
own library (``tl.sum``, ``tl.max``, ...) interpreted, and compiled and
interpreted functions cannot call each other. So the environment variable
must be set before anything imports Triton, and one process runs the kernel
either on the GPU or in the interpreter, never both.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
import math
import os
import pathlib
import sys
from typing import NamedTuple

import torch

from .problem import AttentionProblem, check_problem

NAME = "fused"
#: The kernel caps scores with ``softcap`` (attnlib.dispatch.OPT_IN_FEATURES).
SUPPORTS_SOFTCAP = True
HEAD_DIMS = (16, 256)  # smallest and largest E and Ev the kernel takes
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INTERPRETER_DTYPES = (torch.float16, torch.float32)  # NumPy has no bfloat16
#: Batch x heads is the launch grid's second axis, which CUDA limits to 2**16 - 1
#: programs; a larger batch is launched in slices of whole sequences.
MAX_BATCH_HEADS = 65535
#: The largest tile side, BLOCK_M or BLOCK_N. The kernel computes the offset
#: of a tile's first row in 64 bits and offsets inside a tile in 32 bits, so
#: MAX_BLOCK rows of any input must span fewer than 2**31 elements.
MAX_BLOCK = 256
INT32_MAX = 2**31 - 1
#: Fused multiply-add in the kernel, stated because Triton 3.9 warns that its default will change.
COMPILE_OPTIONS = {"enable_fp_fusion": True}


class TileConfig(NamedTuple):
    """Tile sizes and launch shape of one kernel configuration."""

    block_m: int  # query rows per program
    block_n: int  # keys per loop iteration
    num_warps: int
    num_stages: int  # loads in flight (software pipelining; sm_80 and newer)


#: Every configuration the GPU autotuner may pick; the first of each list is
#: the default. None spills registers at E = 64 or 128 in fp16 or bf16
#: (tests/test_fused_compile.py).
AUTOTUNE_CONFIGS = {
    # fp16/bf16 on sm_80 and newer: tl.dot runs on tensor cores (mma.sync;
    # wgmma on sm_90). The last configuration, unpipelined, is the one that
    # still fits the shared memory of any of these GPUs at E = 256.
    "tensor_cores": (TileConfig(128, 64, 8, 3), TileConfig(64, 64, 4, 3), TileConfig(64, 32, 4, 3),
                     TileConfig(64, 32, 4, 1)),
    # Below sm_80 (Colab's T4 is sm_75) Triton >= 3.3 computes tl.dot with FMA
    # instructions, not tensor cores, and pipelines no loads. fp32 inputs,
    # multiplied in IEEE fp32 (no TF32), take FMA instructions on every GPU.
    # Small tiles keep the fp32 products in registers.
    "fma": (TileConfig(64, 16, 8, 1), TileConfig(32, 32, 8, 1)),
}
#: Queries up to this many (decoding, short prompts) are tuned on their own,
#: without query blocks taller than themselves.
SHORT_QUERY_ROWS = 64
ON_THE_CPU = ("on the CPU the kernel runs only in Triton's interpreter, slowly, for validation: with "
              "TRITON_INTERPRET=1 set before Triton is first imported, backend='fused' runs it")
#: (BLOCK_M, BLOCK_N) in the interpreter: small, so that small tests cross many tiles.
INTERPRETER_BLOCKS = (32, 32)


def autotune_configs(capability: tuple[int, int], query_len: int,
                     dtype: torch.dtype) -> tuple[str, tuple[TileConfig, ...]]:
    """The configurations the autotuner picks from on a GPU of ``capability``, and their list's name."""
    if capability < (8, 0) or dtype == torch.float32:
        return "fma", AUTOTUNE_CONFIGS["fma"]
    if query_len <= SHORT_QUERY_ROWS:
        short = tuple(c for c in AUTOTUNE_CONFIGS["tensor_cores"] if c.block_m <= SHORT_QUERY_ROWS)
        return "tensor_cores, short queries", short
    return "tensor_cores", AUTOTUNE_CONFIGS["tensor_cores"]


@functools.lru_cache(maxsize=None)
def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def interpreter_requested() -> bool:
    """True when ``TRITON_INTERPRET`` holds a true value, as Triton reads it."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on", "y")


def triton_interprets() -> bool:
    """Whether Triton runs kernels in its interpreter in this process.

    Before Triton is imported, that is what ``TRITON_INTERPRET`` says now;
    afterwards, what it said at the import, read off Triton's own ``tl.sum``.
    """
    if "triton" not in sys.modules:
        return interpreter_requested()
    from triton.language.standard import sum as triton_sum
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(triton_sum, InterpretedFunction)


def _row_strides(problem: AttentionProblem) -> dict[str, tuple[int, int]]:
    """Each input's (row stride, element stride) as the kernel will read it (see ``kernel_arguments``)."""
    strides = {}
    for name, x in (("query", problem.query), ("key", problem.key), ("value", problem.value)):
        # A tensor whose rows are not contiguous is copied into a contiguous one.
        strides[name] = (x.stride(-2), 1) if x.stride(-1) == 1 else (x.shape[-1], 1)
    mask = problem.attn_mask
    if mask is not None:
        # An axis of size 1 is broadcast: stride 0.
        row = mask.stride(-2) if mask.ndim >= 2 and mask.shape[-2] > 1 else 0
        strides["attn_mask"] = (row, mask.stride(-1) if mask.shape[-1] > 1 else 0)
    return strides


def unaddressable_reason(problem: AttentionProblem) -> str | None:
    """None when the kernel's 32-bit offsets inside a tile reach every element of ``problem``, else why not."""
    for name, length in (("query", problem.query_len), ("key", problem.key_len)):
        if length > INT32_MAX - MAX_BLOCK:
            return (f"{name} has {length} rows; the kernel counts rows in 32 bits, "
                    f"up to {INT32_MAX - MAX_BLOCK}")
    for name, (row_stride, element_stride) in _row_strides(problem).items():
        # Inside a tile, row and column are below MAX_BLOCK (a head width is at most 256 too).
        reach = (MAX_BLOCK - 1) * (row_stride + element_stride)
        if reach > INT32_MAX:
            return (f"{name} has row stride {row_stride}: offsets inside a tile of {MAX_BLOCK} rows "
                    f"reach {reach}, past the 2**31 - 1 of the kernel's 32-bit offsets; a contiguous "
                    f"{name} has a smaller stride")
    return None


def _requires_grad(problem: AttentionProblem) -> bool:
    tensors = (problem.query, problem.key, problem.value, problem.attn_mask)
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def unsupported_reason(problem: AttentionProblem) -> str | None:
    """None when the kernel can take ``problem``, else a sentence saying why not."""
    if not triton_installed():
        return "Triton is not installed (pip install 'triton>=3.2'; CUDA builds of PyTorch bring it)"
    if problem.dropout_p > 0:
        return f"the fused kernel has no dropout, got dropout_p={problem.dropout_p}"
    if _requires_grad(problem):
        return ("the fused kernel is forward-only so far: an input requires grad and there is "
                "no backward pass yet (under torch.no_grad() it runs)")
    dtype = problem.query.dtype
    if dtype not in KERNEL_DTYPES:
        return f"the fused kernel takes float16, bfloat16 and float32, got {dtype}"
    low, high = HEAD_DIMS
    if not (low <= problem.head_dim <= high and low <= problem.value_dim <= high):
        return (f"the fused kernel takes head widths E and Ev from {low} to {high}, "
                f"got E={problem.head_dim}, Ev={problem.value_dim}")
    unaddressable = unaddressable_reason(problem)
    if unaddressable is not None:
        return unaddressable
    device = problem.query.device
    if device.type == "cuda":
        if triton_interprets():
            return ("Triton interprets kernels in this process (TRITON_INTERPRET=1 was set when it "
                    "was imported), so it cannot compile the kernel for the GPU")
        capability = torch.cuda.get_device_capability(device)
        if dtype == torch.bfloat16 and capability < (8, 0):
            return f"bfloat16 needs compute capability 8.0 or newer, this GPU has {capability[0]}.{capability[1]}"
        if problem.query_heads > MAX_BATCH_HEADS:
            return f"query heads must be at most {MAX_BATCH_HEADS}, got {problem.query_heads}"
        return None
    if device.type == "cpu":
        if dtype not in INTERPRETER_DTYPES:
            return f"on the CPU the kernel runs in Triton's interpreter, which computes in NumPy and has no {dtype}"
        if not triton_interprets():
            return ON_THE_CPU
        return None
    return f"the fused kernel runs on CUDA (or on the CPU in Triton's interpreter), got device {device}"


def auto_declines(problem: AttentionProblem) -> str | None:
    """Why ``backend="auto"`` leaves a call the kernel could run to another path.

    On the CPU auto gives the same reason whether or not the interpreter is
    on, so what a chapter prints does not depend on the environment.
    """
    return ON_THE_CPU if problem.query.device.type == "cpu" else None


def triton_version() -> tuple[int, int]:
    """(major, minor) of the installed Triton, read without importing it."""
    major, minor = importlib.metadata.version("triton").split(".")[:2]
    return int(major), int(minor)


def _let_the_interpreter_take_scalar_loop_bounds() -> None:
    """Make Triton < 3.8's interpreter run ``range(start, end, step)`` over scalars with NumPy >= 2.4.

    The interpreter holds a scalar as a NumPy array of shape (1,), and
    before Triton 3.8 it turns a loop bound into an index with ``int()`` on
    that array, which NumPy 2.4 refuses ("only 0-dimensional arrays can be
    converted to Python scalars"). Triton 3.8 squeezes the array first; this
    gives older interpreters the same ``__index__``. It only changes how the
    interpreter converts a scalar, never what a compiled kernel does.
    """
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor
    if getattr(patch_tensor, "squeezes_loop_bounds", False):
        return

    def index(self):
        return int(self.handle.data.squeeze())

    def patch_tensor_squeezing(tensor, *scope):
        patch_tensor(tensor, *scope)
        if scope:  # from Triton 3.6 on, the patches go through a scope that undoes them after a launch
            scope[0].set_attr(tensor, "__index__", index)
        else:
            tensor.__index__ = index

    patch_tensor_squeezing.squeezes_loop_bounds = True
    interpreter._patch_lang_tensor = patch_tensor_squeezing


def kernel_source(name: str) -> str:
    """The source of function ``name`` of :mod:`attnlib.fused_kernel`, decorator included.

    Read from the file, so that it is shown where Triton is not installed.
    """
    path = pathlib.Path(__file__).with_name("fused_kernel.py")
    text = path.read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            return "\n".join(text.splitlines()[first - 1:node.end_lineno]) + "\n"
    raise ValueError(f"name must be a function of attnlib/fused_kernel.py, got {name!r}")


def kernel_module():
    """:mod:`attnlib.fused_kernel`, imported in the mode Triton runs in (see the module docstring)."""
    if "attnlib.fused_kernel" not in sys.modules:
        interprets = triton_interprets()
        if interprets and triton_version() < (3, 8):
            _let_the_interpreter_take_scalar_loop_bounds()
        saved = os.environ.get("TRITON_INTERPRET")
        # @triton.jit reads the variable when it decorates; keep it in step with Triton's own library.
        os.environ["TRITON_INTERPRET"] = "1" if interprets else "0"
        try:
            importlib.import_module("attnlib.fused_kernel")
        finally:
            if saved is None:
                del os.environ["TRITON_INTERPRET"]
            else:
                os.environ["TRITON_INTERPRET"] = saved
    return sys.modules["attnlib.fused_kernel"]


def length_bucket(length: int) -> int:
    """The autotuner's bucket for a query or key length: the next power of two, at least 16."""
    return max(16, _next_power_of_2(length))


def autotune_bucket(capability: tuple[int, int], query_len: int, key_len: int,
                    dtype: torch.dtype) -> tuple[str, int, int]:
    """Which autotuner a call goes to: (configuration list's name, query bucket, key bucket)."""
    name, _ = autotune_configs(capability, query_len, dtype)
    return name, length_bucket(query_len), length_bucket(key_len)


#: Triton's autotuners, one per ``autotune_bucket``.
_autotuned: dict[tuple[str, int, int], object] = {}
AUTOTUNE_KEY = ["HEAD_DIM", "VALUE_DIM", "IS_CAUSAL", "MASK_KIND", "HAS_KEY_LENGTHS"]


def _autotuned_kernel(capability: tuple[int, int], query_len: int, key_len: int, dtype: torch.dtype):
    """The compiled kernel under Triton's autotuner, for the lengths' buckets.

    The best tiles depend on the lengths (short queries, long keys), but a
    key of exact lengths would tune again for every new length. So each
    bucket of lengths (``length_bucket``) has an autotuner of its own, which
    tunes at its first call and keeps its pick; within a bucket it tunes
    again when a head width, the causal flag or the kind of mask changes,
    and Triton adds the tensors' dtypes to that key. Compiled kernels are
    shared by all autotuners.
    """
    bucket = autotune_bucket(capability, query_len, key_len, dtype)
    if bucket not in _autotuned:
        import triton

        _, configs = autotune_configs(capability, query_len, dtype)
        _autotuned[bucket] = triton.autotune(
            configs=[triton_config(c) for c in configs], key=AUTOTUNE_KEY,
        )(kernel_module().attention_forward_kernel)
    return _autotuned[bucket]


def picked_configurations() -> list[dict]:
    """What the GPU autotuners picked in this process, one entry per bucket and key.

    Each entry: ``configs`` (the list it picked from), ``query_bucket`` and
    ``key_bucket`` (``length_bucket`` of L and S), ``key`` (the autotune
    key's values by name) and ``picked`` (a :class:`TileConfig`).
    """
    picks = []
    for (name, query_bucket, key_bucket), autotuner in _autotuned.items():
        for key, config in autotuner.cache.items():
            picks.append({
                "configs": name, "query_bucket": query_bucket, "key_bucket": key_bucket,
                "key": dict(zip(AUTOTUNE_KEY, key)),
                "picked": TileConfig(config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"],
                                     config.num_warps, config.num_stages),
            })
    return picks


def triton_config(config: TileConfig):
    """``config`` as the ``triton.Config`` the autotuner takes."""
    import triton

    return triton.Config({"BLOCK_M": config.block_m, "BLOCK_N": config.block_n},
                         num_warps=config.num_warps, num_stages=config.num_stages)


def _as_4d(x: torch.Tensor) -> torch.Tensor:
    """``(..., H, N, W)`` as ``(B, H, N, W)``; a view when the strides allow it."""
    if x.ndim == 2:
        return x[None, None]
    if x.ndim == 3:
        return x[None]
    # B spelled out: -1 is ambiguous when a dimension is 0.
    return x.reshape(math.prod(x.shape[:-3]), *x.shape[-3:])


def _contiguous_rows(x: torch.Tensor) -> torch.Tensor:
    """The kernel reads each row (the last dimension) as contiguous memory."""
    return x if x.stride(-1) == 1 else x.contiguous()


def _next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _cdiv(n: int, d: int) -> int:
    return -(-n // d)


def key_lengths(mask: torch.Tensor) -> torch.Tensor | None:
    """``(B,)`` int32 key lengths when a bool ``(B, H, L, S)`` mask is pure key padding, else None.

    Pure key padding: one row for every head and query (broadcast, stride 0
    or size 1), ``True`` on a prefix ``j < length`` and ``False`` after it,
    as :func:`attnlib.padding_mask` builds. The kernel then stops at
    ``length`` instead of loading the mask. The check costs one pass over ``(B, S)``.
    """
    for axis in (1, 2):
        if mask.shape[axis] != 1 and mask.stride(axis) != 0:
            return None
    rows = mask[:, 0, 0, :]
    lengths = rows.sum(dim=-1)
    prefix = torch.arange(mask.shape[-1], device=mask.device)[None, :] < lengths[:, None]
    return lengths.to(torch.int32) if torch.equal(rows, prefix) else None


def kernel_arguments(problem: AttentionProblem, output: torch.Tensor, log_sum_exp: torch.Tensor) -> dict:
    """Every argument of ``attention_forward_kernel`` but the tile sizes, by name.

    ``output`` is ``(B, Hq, L, Ev)`` and ``log_sum_exp`` holds ``B * Hq * L``
    fp32 values; both contiguous.
    """
    module = kernel_module()
    query, key, value = (_contiguous_rows(_as_4d(x)) for x in (problem.query, problem.key, problem.value))
    mask_kind, mask, lengths = module.NO_MASK.value, None, None
    if problem.attn_mask is not None:
        full_mask = _as_4d(problem.attn_mask.expand(*problem.query.shape[:-1], problem.key_len))
        if full_mask.dtype == torch.bool:
            lengths = key_lengths(full_mask)
            if lengths is None:
                mask_kind, mask = module.BOOL_MASK.value, full_mask.view(torch.uint8)
        else:
            mask_kind, mask = module.FLOAT_MASK.value, full_mask
    mask_strides = mask.stride() if mask is not None else (0, 0, 0, 0)
    return dict(
        query=query, key=key, value=value, output=output, log_sum_exp=log_sum_exp,
        # A pointer the flags leave unread still needs a tensor behind it.
        mask=mask if mask is not None else query,
        key_lengths=lengths if lengths is not None else query,
        stride_qb=query.stride(0), stride_qh=query.stride(1), stride_ql=query.stride(2),
        stride_kb=key.stride(0), stride_kh=key.stride(1), stride_ks=key.stride(2),
        stride_vb=value.stride(0), stride_vh=value.stride(1), stride_vs=value.stride(2),
        stride_ob=output.stride(0), stride_oh=output.stride(1), stride_ol=output.stride(2),
        stride_mb=mask_strides[0], stride_mh=mask_strides[1], stride_ml=mask_strides[2], stride_ms=mask_strides[3],
        query_heads=problem.query_heads, group_size=problem.group_size,
        query_len=problem.query_len, key_len=problem.key_len, causal_offset=problem.causal_offset,
        scale_log2=problem.scale * math.log2(math.e),
        # unread without a cap, but a launch needs a number
        softcap_log2=(problem.softcap or 1.0) * math.log2(math.e),
        HEAD_DIM=problem.head_dim, VALUE_DIM=problem.value_dim,
        BLOCK_E=max(16, _next_power_of_2(problem.head_dim)),
        BLOCK_EV=max(16, _next_power_of_2(problem.value_dim)),
        IS_CAUSAL=problem.is_causal, MASK_KIND=mask_kind, HAS_KEY_LENGTHS=lengths is not None,
        SOFTCAP=problem.softcap is not None,
    )


def _launch(problem: AttentionProblem, blocks: tuple[int, int] | None):
    """Output ``(..., Hq, L, Ev)`` in the input dtype and log-sum-exp ``(..., Hq, L)`` in fp32."""
    why_not = unsupported_reason(problem)
    if why_not is not None:
        raise ValueError(f"backend='fused' cannot run this call: {why_not}")
    device = problem.query.device
    if problem.key_len == 0:  # no key at all: every row is a row with no allowed key
        return (torch.zeros(problem.output_shape, dtype=problem.query.dtype, device=device),
                torch.full(problem.query.shape[:-1], float("-inf"), dtype=torch.float32, device=device))
    output = torch.empty(problem.output_shape, dtype=problem.query.dtype, device=device)
    log_sum_exp = torch.empty(problem.query.shape[:-1], dtype=torch.float32, device=device)
    if output.numel() == 0:
        return output, log_sum_exp
    arguments = kernel_arguments(problem, _as_4d(output), log_sum_exp)
    kernel = kernel_module().attention_forward_kernel
    if device.type == "cpu":
        arguments.update(zip(("BLOCK_M", "BLOCK_N"), blocks or INTERPRETER_BLOCKS))
    elif blocks is None:
        kernel = _autotuned_kernel(torch.cuda.get_device_capability(device), problem.query_len,
                                   problem.key_len, problem.query.dtype)
        arguments.update(COMPILE_OPTIONS)
    else:
        arguments.update(BLOCK_M=blocks[0], BLOCK_N=blocks[1], **COMPILE_OPTIONS)
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        for part in _batch_slices(arguments, problem.query_heads):
            batch_heads = part["query"].shape[0] * problem.query_heads
            kernel[lambda meta: (_cdiv(problem.query_len, meta["BLOCK_M"]), batch_heads)](**part)
    return output, log_sum_exp


def _batch_slices(arguments: dict, query_heads: int):
    """``arguments`` for consecutive slices of the batch of at most ``MAX_BATCH_HEADS`` (batch, head) pairs.

    Each slice is a view; the kernel finds its batch and head from its
    program id within the slice.
    """
    batch = arguments["query"].shape[0]
    step = MAX_BATCH_HEADS // query_heads
    log_sum_exp = arguments["log_sum_exp"].view(batch, -1)  # (B, Hq * L), contiguous
    for start in range(0, batch, step):
        part = dict(arguments, log_sum_exp=log_sum_exp[start:start + step])
        for name in ("query", "key", "value", "output", "mask", "key_lengths"):
            part[name] = arguments[name][start:start + step]
        yield part


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    causal_alignment: str = "top_left",
    softcap: float | None = None,
    blocks: tuple[int, int] | None = None,
    return_lse: bool = False,
):
    """The fused kernel's ``softmax(scale * Q K^T + mask) V``, forward only.

    Same arguments and contract as :func:`attnlib.scaled_dot_product_attention`
    (no dropout; ``softcap`` caps the scores to ``softcap * tanh(s / softcap)``
    before the mask). Shapes ``query (..., Hq, L, E)``, ``key (..., Hkv, S, E)``,
    ``value (..., Hkv, S, Ev)`` -> output ``(..., Hq, L, Ev)``. ``blocks =
    (BLOCK_M, BLOCK_N)`` fixes the tile sizes (default: autotuned on a GPU,
    ``INTERPRETER_BLOCKS`` on the CPU). With ``return_lse=True`` also returns
    ``lse (..., Hq, L)`` in fp32, ``lse_i = log sum_j exp(s_ij)`` over the
    allowed keys, ``-inf`` for a row with none.
    """
    if blocks is not None and not (
        isinstance(blocks, tuple) and len(blocks) == 2
        and all(isinstance(b, int) and not isinstance(b, bool) and 16 <= b <= MAX_BLOCK and b & (b - 1) == 0
                for b in blocks)
    ):
        raise ValueError(f"blocks must be None or a pair of powers of two from 16 to {MAX_BLOCK} "
                         f"(BLOCK_M, BLOCK_N), got {blocks!r}")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__} {return_lse!r}")
    problem = check_problem(query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa,
                            causal_alignment, softcap)
    output, lse = _launch(problem, blocks)
    return (output, lse) if return_lse else output


def forward(problem: AttentionProblem) -> torch.Tensor:
    """The dispatcher's entry: the kernel's output, with autotuned tiles on a GPU."""
    return _launch(problem, None)[0]


#: Fewest keys one part of a split decoding step takes: below that, merging costs more than it saves.
MIN_KEYS_PER_SPLIT = 256
#: The decoding kernel's launch on a GPU, by kind of product as in AUTOTUNE_CONFIGS; its
#: BLOCK_M is the group of query heads, padded to 16. Neither spills at E = 128
#: (tests/test_fused_compile.py).
DECODE_CONFIGS = {"tensor_cores": TileConfig(16, 64, 4, 3), "fma": TileConfig(16, 32, 8, 1)}


def decode_config(capability: tuple[int, int], dtype: torch.dtype) -> TileConfig:
    """The decoding kernel's configuration on a GPU of ``capability``."""
    fma = capability < (8, 0) or dtype == torch.float32
    return DECODE_CONFIGS["fma" if fma else "tensor_cores"]


def decode_arguments(problem: AttentionProblem, partial_acc: torch.Tensor, partial_m: torch.Tensor,
                     partial_l: torch.Tensor, lengths: torch.Tensor | None, keys_per_split: int,
                     block_n: int) -> dict:
    """Every argument of ``decode_split_kernel`` by name, for ``problem`` with one query per row."""
    q, k, v = (_contiguous_rows(_as_4d(x)) for x in (problem.query, problem.key, problem.value))
    return dict(
        query=q, key=k, value=v, partial_acc=partial_acc, partial_m=partial_m, partial_l=partial_l,
        key_lengths=lengths if lengths is not None else q,
        stride_qb=q.stride(0), stride_qh=q.stride(1),
        stride_kb=k.stride(0), stride_kh=k.stride(1), stride_ks=k.stride(2),
        stride_vb=v.stride(0), stride_vh=v.stride(1), stride_vs=v.stride(2),
        kv_heads=problem.kv_heads, group_size=problem.group_size, key_len=problem.key_len,
        keys_per_split=keys_per_split, scale_log2=problem.scale * math.log2(math.e),
        HEAD_DIM=problem.head_dim, VALUE_DIM=problem.value_dim,
        BLOCK_E=max(16, _next_power_of_2(problem.head_dim)),
        BLOCK_EV=max(16, _next_power_of_2(problem.value_dim)),
        HAS_KEY_LENGTHS=lengths is not None, BLOCK_M=max(16, _next_power_of_2(problem.group_size)),
        BLOCK_N=block_n,
    )


def decode_splits(programs: int, key_len: int, multiprocessors: int) -> int:
    """Into how many parts :func:`decode` splits the keys.

    Enough parts that ``programs`` (batch x key/value heads) times the parts
    give every multiprocessor two programs, but no part shorter than
    ``MIN_KEYS_PER_SPLIT`` keys.
    """
    wanted = _cdiv(2 * multiprocessors, programs)
    return max(1, min(wanted, key_len // MIN_KEYS_PER_SPLIT))


def decode(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    splits: int | None = None,
    return_lse: bool = False,
):
    """One decoding step, ``softmax(scale * q K^T) V`` for a single query, with the keys split over programs.

    Flash-Decoding: ``query (..., Hq, 1, E)`` against a cache ``key (..., Hkv,
    S, E)``, ``value (..., Hkv, S, Ev)``. The cache is cut into ``splits``
    parts (default: :func:`decode_splits`), each folded into a partial state
    ``(m, l, acc)`` by its own program, which takes all query heads of one
    key/value head so that each cached byte is read once; the partial
    states are merged with Chapter 8's rule. ``attn_mask``: None or key
    padding as :func:`attnlib.padding_mask` builds it. Returns the output
    ``(..., Hq, 1, Ev)`` in the input dtype, and ``lse (..., Hq, 1)`` with
    ``return_lse=True``; a sequence with no key gives 0 and ``-inf``.
    """
    if splits is not None and (not isinstance(splits, int) or isinstance(splits, bool) or splits < 1):
        raise ValueError(f"splits must be None or a positive int, got {splits!r}")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__} {return_lse!r}")
    problem = check_problem(query, key, value, attn_mask, 0.0, False, scale, enable_gqa, "top_left")
    if problem.query_len != 1:
        raise ValueError(f"query must hold one query per sequence and head (L = 1) to decode, "
                         f"got L = {problem.query_len}")
    why_not = unsupported_reason(problem)
    if why_not is not None:
        raise ValueError(f"fused.decode cannot run this call: {why_not}")
    lengths = None
    if attn_mask is not None:
        full_mask = _as_4d(attn_mask.expand(*query.shape[:-1], problem.key_len))
        lengths = key_lengths(full_mask) if full_mask.dtype == torch.bool else None
        if lengths is None:
            raise ValueError("attn_mask must be None or key padding (True on a prefix of the keys, "
                             "the same for every head, as attnlib.padding_mask builds) to decode, "
                             f"got a {attn_mask.dtype} mask of shape {tuple(attn_mask.shape)}")
    device = problem.query.device
    if problem.key_len == 0 or problem.query.numel() == 0:
        output, lse = _launch(problem, None) if problem.key_len == 0 else (
            torch.empty(problem.output_shape, dtype=query.dtype, device=device),
            torch.empty(query.shape[:-1], dtype=torch.float32, device=device))
        return (output, lse) if return_lse else output
    batch, kv_heads, group = math.prod(key.shape[:-3]), problem.kv_heads, problem.group_size
    config = None if device.type == "cpu" else decode_config(torch.cuda.get_device_capability(device), query.dtype)
    block_n = INTERPRETER_BLOCKS[1] if config is None else config.block_n
    if splits is None:
        multiprocessors = (torch.cuda.get_device_properties(device).multi_processor_count
                           if device.type == "cuda" else os.cpu_count() or 1)
        splits = decode_splits(batch * kv_heads, problem.key_len, multiprocessors)
    keys_per_split = _cdiv(_cdiv(problem.key_len, splits), block_n) * block_n
    splits = _cdiv(problem.key_len, keys_per_split)  # no part left empty
    partial_m = torch.empty(batch * kv_heads, splits, group, dtype=torch.float32, device=device)
    partial_l = torch.empty_like(partial_m)
    partial_acc = torch.empty(*partial_m.shape, problem.value_dim, dtype=torch.float32, device=device)
    arguments = decode_arguments(problem, partial_acc, partial_m, partial_l, lengths, keys_per_split, block_n)
    if config is not None:
        arguments.update(num_warps=config.num_warps, num_stages=config.num_stages, **COMPILE_OPTIONS)
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        kernel_module().decode_split_kernel[(splits, batch * kv_heads)](**arguments)
    output, lse = merge_partial_states(partial_m, partial_l, partial_acc)
    output = output.reshape(problem.output_shape).to(query.dtype)
    lse = lse.reshape(query.shape[:-1])
    return (output, lse) if return_lse else output


def merge_partial_states(m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor):
    """Merge partial softmax states over dimension 1 (Chapter 8's rule), in base 2.

    ``m``, ``l`` ``(N, parts, R)``, ``acc`` ``(N, parts, R, Ev)``, with ``m``
    the running maximum of base-2 scores. Returns the normalised output
    ``(N, R, Ev)`` and the natural log-sum-exp ``(N, R)``: 0 and ``-inf`` for
    a row that saw no key in any part.
    """
    m_all = m.amax(dim=1, keepdim=True)
    # exp2(m_part - m_all) shrinks each part's sums to the common maximum; a part (or a row)
    # that saw no key has m = -inf and weighs 0, never exp2(-inf + inf) = NaN.
    weight = torch.where(m == float("-inf"), 0.0, torch.exp2(m - m_all.nan_to_num(neginf=0.0)))
    l_all = (weight * l).sum(dim=1)
    acc_all = (weight[..., None] * acc).sum(dim=1)
    has_keys = l_all > 0
    output = torch.where(has_keys[..., None], acc_all / torch.where(has_keys, l_all, 1.0)[..., None], 0.0)
    lse = torch.where(has_keys, (m_all.squeeze(1) + torch.log2(torch.where(has_keys, l_all, 1.0)))
                      * math.log(2.0), float("-inf"))
    return output, lse
