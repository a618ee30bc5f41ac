"""The backward pass: launching the backward kernels, and the autograd node that runs them.

:class:`FusedAttentionFunction` runs the forward kernel and saves ``Q``,
``K``, ``V``, the output ``O`` and the log-sum-exp ``lse`` (never the
weights); its backward launches the three kernels of
:mod:`attnlib.fused.backward_kernel`: ``D = rowsum(dO * O)``, then ``dK``
and ``dV`` per key block, then ``dQ`` per query block. The sinks' gradient
is a sum over rows of what those leave behind, ``lse`` and ``D``, in torch.
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch

from ..problem import AttentionProblem
from ..vmap_rules import batch_first, vmapped_problem
from .forward import launch
from .kernels import kernel_module
from .layout import as_4d, batch_slices, cdiv, contiguous_rows, kernel_arguments
from .support import INT32_MAX, tile_reach
from .tiles import COMPILE_OPTIONS, TileConfig

PREPROCESS_KERNEL = "attention_backward_preprocess_kernel"
KEY_VALUE_KERNEL = "attention_backward_key_value_kernel"
QUERY_KERNEL = "attention_backward_query_kernel"
BACKWARD_KERNELS = (PREPROCESS_KERNEL, KEY_VALUE_KERNEL, QUERY_KERNEL)

#: Tile sizes of the three kernels on a GPU, by kind of product as in
#: ``AUTOTUNE_CONFIGS`` and by head width (see ``WIDE_HEADS``). For the
#: key/value kernel ``block_n`` is its block of keys and ``block_m`` the
#: query tile it loops over; for the query kernel they are as in the
#: forward; the preprocess kernel has only ``block_m`` (``block_n = 0``).
#: The key/value kernel holds two fp32 accumulators, ``dK`` and ``dV``, for
#: its whole block, besides its ``K`` and ``V``: its blocks are smaller than
#: the forward's. Compiled with Triton 3.9 for sm_80 and sm_90 (fp16, bf16,
#: fp32; causal, bool and float masks), none spills at E = 64, 128 and
#: 256, but the "fma, wide heads" key/value kernel at E = 128 on sm_80
#: (8 bytes). On sm_75 (fp16 through FMA) E = 128 and 256 spill with every
#: configuration tried (8 and 840 bytes here). Fixed, not autotuned.
BACKWARD_CONFIGS = {
    "tensor_cores": {
        PREPROCESS_KERNEL: TileConfig(128, 0, 4, 1),
        KEY_VALUE_KERNEL: TileConfig(64, 32, 8, 2),
        QUERY_KERNEL: TileConfig(64, 32, 4, 2),
    },
    "tensor_cores, wide heads": {
        PREPROCESS_KERNEL: TileConfig(128, 0, 4, 1),
        KEY_VALUE_KERNEL: TileConfig(32, 32, 8, 1),
        QUERY_KERNEL: TileConfig(32, 32, 8, 1),
    },
    "fma": {
        PREPROCESS_KERNEL: TileConfig(64, 0, 4, 1),
        KEY_VALUE_KERNEL: TileConfig(32, 32, 8, 1),
        QUERY_KERNEL: TileConfig(32, 32, 8, 1),
    },
    "fma, wide heads": {
        PREPROCESS_KERNEL: TileConfig(64, 0, 4, 1),
        KEY_VALUE_KERNEL: TileConfig(16, 16, 8, 1),
        QUERY_KERNEL: TileConfig(16, 16, 8, 1),
    },
}
#: Head widths (the wider of E and Ev) above these take the "wide heads" configurations.
WIDE_HEADS = {"tensor_cores": 128, "fma": 64}
#: (BLOCK_M, BLOCK_N) in the interpreter, for both kernels: small and unequal,
#: so that small tests cross many tiles and a swapped block size shows.
INTERPRETER_BACKWARD_BLOCKS = (16, 32)


def backward_config(capability: tuple[int, int], dtype: torch.dtype, head_dim: int) -> dict[str, TileConfig]:
    """Each backward kernel's tile configuration on a GPU of ``capability``, by kernel name.

    ``head_dim`` is the wider of ``E`` and ``Ev``.
    """
    kind = "fma" if capability < (8, 0) or dtype == torch.float32 else "tensor_cores"
    return BACKWARD_CONFIGS[f"{kind}, wide heads" if head_dim > WIDE_HEADS[kind] else kind]


def backward_arguments(problem: AttentionProblem, output: torch.Tensor, lse: torch.Tensor,
                       grad_output: torch.Tensor, delta: torch.Tensor, grad_query: torch.Tensor,
                       grad_key: torch.Tensor, grad_value: torch.Tensor) -> dict[str, dict]:
    """Every argument of each backward kernel but the tile sizes, by kernel name, then by argument name.

    ``output``, ``grad_output`` are ``(..., Hq, L, Ev)``; ``lse`` and
    ``delta`` hold ``B * Hq * L`` fp32 values, contiguous (``delta`` is
    written by the preprocess kernel); ``grad_query (B, Hq, L, E)``,
    ``grad_key (B, Hkv, S, E)`` and ``grad_value (B, Hkv, S, Ev)`` are
    written by the others, contiguous.
    """
    batch = grad_query.shape[0]
    everything = kernel_arguments(problem, contiguous_rows(as_4d(output)), lse.view(batch, -1))
    grad_output = contiguous_rows(as_4d(grad_output))
    if tile_reach(grad_output.stride(-2), 1) > INT32_MAX:
        # The gradient arrives with whatever strides autograd gives it, unchecked by the forward's
        # unaddressable_reason; in a copy its rows are Ev elements apart.
        grad_output = grad_output.contiguous()
    everything.update(
        grad_output=grad_output, delta=delta.view(batch, -1),
        grad_query=grad_query, grad_key=grad_key, grad_value=grad_value,
        stride_dob=grad_output.stride(0), stride_doh=grad_output.stride(1), stride_dol=grad_output.stride(2),
        stride_dqb=grad_query.stride(0), stride_dqh=grad_query.stride(1), stride_dql=grad_query.stride(2),
        stride_dkb=grad_key.stride(0), stride_dkh=grad_key.stride(1), stride_dks=grad_key.stride(2),
        stride_dvb=grad_value.stride(0), stride_dvh=grad_value.stride(1), stride_dvs=grad_value.stride(2),
        kv_heads=problem.kv_heads,
    )
    module = kernel_module("backward_kernel")
    return {name: {arg: everything[arg] for arg in getattr(module, name).arg_names if arg in everything}
            for name in BACKWARD_KERNELS}


def sinks_gradient(problem: AttentionProblem, lse: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """``dL/ds_h = -sum_i p_sink,i (D_i - dlse_i)``, summed over the batch and the rows of head ``h``.

    A sink is a key of value 0, so the softmax's backward gives it the
    score gradient ``p_sink (0 - D)``, and ``lse`` moves with it by
    ``p_sink``; ``p_sink = exp(s_h - lse)`` since the saved ``lse``
    includes the sink. ``delta`` is ``D - dlse`` as the kernels read it,
    shaped like ``lse`` (fp32).
    """
    heads, rows = problem.query_heads, problem.query_len
    lse, delta = lse.reshape(-1, heads, rows), delta.reshape(-1, heads, rows)
    sink_weights = torch.exp(problem.sinks[:, None] - lse)  # fp32 or wider: lse is fp32
    return (-(sink_weights * delta).sum(dim=(0, 2))).to(problem.sinks.dtype)


def gradients(problem: AttentionProblem, output: torch.Tensor, lse: torch.Tensor, grad_output: torch.Tensor,
              grad_lse: torch.Tensor | None = None, *,
              wanted: tuple[bool, ...] = (True, True, True, True), blocks: tuple[int, int] | None = None):
    """``(dQ, dK, dV, dsinks)`` of ``problem``, shaped like its query, key, value and sinks, in their dtype.

    ``output (..., Hq, L, Ev)`` and ``lse (..., Hq, L)`` (fp32) are what
    :func:`attnlib.fused.launch` returned for ``problem``, ``grad_output``
    (any strides) and ``grad_lse`` (None: 0) the gradients arriving at
    them; ``dlse`` enters as ``D = rowsum(dO * O) - dlse``. A gradient not
    ``wanted`` (``dsinks``: none without sinks; ``wanted`` may stop after
    ``dV``) is not computed and returned as None. ``blocks = (BLOCK_M,
    BLOCK_N)`` fixes the tile sizes of both kernels (default:
    ``backward_config`` on a GPU, ``INTERPRETER_BACKWARD_BLOCKS`` on the CPU).
    """
    query, key, value = problem.query, problem.key, problem.value
    device = query.device
    want_sinks = problem.sinks is not None and len(wanted) > 3 and wanted[3]
    wanted = tuple(wanted[:3])
    runs = problem.key_len > 0 and query.numel() > 0 and (any(wanted) or want_sinks)
    # The kernels write every gradient they compute, zeros included; without them all are 0.
    allocate = torch.empty if runs else torch.zeros
    grad_query, grad_key, grad_value = (allocate(as_4d(x).shape, dtype=x.dtype, device=device)
                                        for x in (query, key, value))
    results = (grad_query, grad_key, grad_value)
    if runs:
        delta = torch.empty(lse.shape, dtype=torch.float32, device=device)
        arguments = backward_arguments(problem, output, lse, grad_output, delta, grad_query, grad_key,
                                       grad_value)
        _launch(problem, arguments, blocks, wanted, grad_lse, delta)
    elif want_sinks:  # no key or no query: the output is 0 (or empty), and so is D
        delta = -grad_lse.to(torch.float32) if grad_lse is not None else torch.zeros_like(lse)
    grad_sinks = sinks_gradient(problem, lse, delta) if want_sinks else None
    return (*(gradient.reshape(x.shape) if want else None
              for gradient, x, want in zip(results, (query, key, value), wanted)), grad_sinks)


def _launch(problem, arguments, blocks, wanted, grad_lse, delta) -> None:
    """Run the three kernels (the ones ``wanted`` needs) on ``arguments``, batch slice by batch slice."""
    module = kernel_module("backward_kernel")
    device = problem.query.device
    if device.type == "cpu":
        block_m, block_n = blocks or INTERPRETER_BACKWARD_BLOCKS
        configs = {name: TileConfig(block_m, block_n, 4, 1) for name in BACKWARD_KERNELS}
        options = {}
    else:
        configs = backward_config(torch.cuda.get_device_capability(device), problem.query.dtype,
                                  max(problem.head_dim, problem.value_dim))
        if blocks is not None:
            configs = {name: c._replace(block_m=blocks[0], block_n=blocks[1]) for name, c in configs.items()}
        options = COMPILE_OPTIONS

    def run(name: str, grid, part: dict) -> None:
        config = configs[name]
        tiles = {"BLOCK_M": config.block_m}
        if name != PREPROCESS_KERNEL:
            tiles["BLOCK_N"] = config.block_n
        if options:
            tiles.update(num_warps=config.num_warps, num_stages=config.num_stages, **options)
        getattr(module, name)[grid](**part, **tiles)

    heads, kv_heads = problem.query_heads, problem.kv_heads
    query_len, key_len = problem.query_len, problem.key_len
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        for part in batch_slices(arguments[PREPROCESS_KERNEL], heads):
            batch = part["output"].shape[0]
            run(PREPROCESS_KERNEL, (cdiv(query_len, configs[PREPROCESS_KERNEL].block_m), batch * heads), part)
        if grad_lse is not None:
            # D = rowsum(dO * O) - dlse: lse_i moves with every score of row i by P_ij.
            delta.sub_(grad_lse.reshape(delta.shape))
        if wanted[1] or wanted[2]:
            for part in batch_slices(arguments[KEY_VALUE_KERNEL], heads):
                batch = part["query"].shape[0]
                key_blocks = cdiv(key_len, configs[KEY_VALUE_KERNEL].block_n)
                run(KEY_VALUE_KERNEL, (key_blocks, batch * kv_heads), part)
        if wanted[0]:
            for part in batch_slices(arguments[QUERY_KERNEL], heads):
                batch = part["query"].shape[0]
                run(QUERY_KERNEL, (cdiv(query_len, configs[QUERY_KERNEL].block_m), batch * heads), part)


class FusedAttentionFunction(torch.autograd.Function):
    """The fused kernels as one autograd node that saves ``Q, K, V, O`` and ``lse``, never the weights.

    ``apply(query, key, value, sinks, problem, blocks)`` returns the output
    ``(..., Hq, L, Ev)`` in the input dtype and the log-sum-exp
    ``(..., Hq, L)`` in fp32, both differentiable; ``problem`` is the
    checked call on these tensors (``sinks``: its sinks, or None), ``blocks``
    the forward's tile sizes (None: autotuned on a GPU). It has
    ``setup_context`` and vmap rules (the vmapped axis becomes a batch axis;
    ``attn_mask`` and ``sinks`` unmapped), so torch.func's ``grad``, ``vmap``
    and ``jacrev`` work on it.
    """

    @staticmethod
    def forward(query, key, value, sinks, problem, blocks):
        return launch(_on(problem, query, key, value, sinks), blocks)

    @staticmethod
    def setup_context(ctx, inputs, outputs):
        query, key, value, sinks, problem, _ = inputs
        ctx.save_for_backward(query, key, value, sinks, *outputs)
        ctx.problem = problem

    @staticmethod
    def backward(ctx, grad_output, grad_lse):
        # Unpacking checks that no input was modified in place since the forward.
        query, key, value, sinks, output, lse = ctx.saved_tensors
        wanted = tuple(ctx.needs_input_grad[:4])
        grads = FusedGradientsFunction.apply(query, key, value, sinks, output, lse, grad_output, grad_lse,
                                             ctx.problem, wanted)
        return (*grads, None, None)

    @staticmethod
    def vmap(info, in_dims, query, key, value, sinks, problem, blocks):
        batched = _vmapped(problem, info, in_dims[:4], query, key, value)
        output, lse = FusedAttentionFunction.apply(batched.query, batched.key, batched.value, sinks, batched,
                                                   blocks)
        size = info.batch_size
        return (output.reshape(size, *problem.output_shape), lse.reshape(size, *problem.query.shape[:-1])), (0, 0)


class FusedGradientsFunction(torch.autograd.Function):
    """The backward kernels, ``(dQ, dK, dV, dsinks)``, as a node of its own with a vmap rule, so
    that ``torch.func.jacrev`` (vmap over the backward) works; no second derivatives."""

    @staticmethod
    def forward(query, key, value, sinks, output, lse, grad_output, grad_lse, problem, wanted):
        return gradients(_on(problem, query, key, value, sinks), output, lse, grad_output, grad_lse,
                         wanted=wanted)

    @staticmethod
    def setup_context(ctx, inputs, outputs):
        pass

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("the fused kernels have no second derivatives; use backend='naive' for them")

    @staticmethod
    def vmap(info, in_dims, query, key, value, sinks, output, lse, grad_output, grad_lse, problem, wanted):
        if len(wanted) > 3 and wanted[3]:
            raise ValueError("vmap over the fused backward cannot give each element its sinks' gradient "
                             "(the kernels sum it over the batch); use backend='tiled'")
        batched = _vmapped(problem, info, in_dims[:4], query, key, value)
        ndim = batched.query.ndim - 1
        output, grad_output = (batch_first(x, d, info.batch_size, ndim)
                               for x, d in ((output, in_dims[4]), (grad_output, in_dims[6])))
        lse, grad_lse = (batch_first(x, d, info.batch_size, ndim - 1)
                         for x, d in ((lse, in_dims[5]), (grad_lse, in_dims[7])))
        # The kernels read lse and D as contiguous rows: an unmapped tensor expanded over
        # the vmapped axis (stride 0) is copied.
        output, lse, grad_output, grad_lse = (None if x is None else x.contiguous()
                                              for x in (output, lse, grad_output, grad_lse))
        grads = FusedGradientsFunction.apply(batched.query, batched.key, batched.value, sinks, output, lse,
                                             grad_output, grad_lse, batched, wanted)
        logical = (problem.query, problem.key, problem.value)
        grads = tuple(None if g is None else g.reshape(info.batch_size, *x.shape) for g, x in zip(grads, logical))
        return (*grads, None), (*(None if g is None else 0 for g in grads), None)


def _on(problem: AttentionProblem, query, key, value, sinks) -> AttentionProblem:
    """``problem`` with these tensors (torch.func hands the functions unwrapped ones)."""
    return dataclasses.replace(problem, query=query, key=key, value=value, sinks=sinks)


def _vmapped(problem: AttentionProblem, info, in_dims, query, key, value) -> AttentionProblem:
    mask = problem.attn_mask
    if mask is not None and torch._C._functorch.is_batchedtensor(mask):
        raise ValueError("vmap over attn_mask is not supported on the fused path; use backend='tiled'")
    return vmapped_problem(problem, info, (*in_dims, None), query, key, value, mask)
