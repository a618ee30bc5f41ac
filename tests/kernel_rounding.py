"""The fused backward's rounding copied into torch on the CPU, to try the GPU tests' tolerances without a GPU.

A check in ``tests/test_fused_gpu.py`` must pass a correct kernel and fail
a wrong one, and it meets a kernel only where a GPU is lent. So the
kernels' arithmetic is emulated here: products of input-dtype operands
summed in fp32 (tensor cores and FMA alike), the weights ``P`` rounded to the
input dtype before ``P V`` and ``P^T dO``, the score gradients ``dS``
before ``dS K`` and ``dS^T Q``, the output and each gradient rounded once
when stored. What it leaves out (the order of the fp32 sums, the forward's
running maximum) moves the errors by far less than the roundings it keeps.

    python tests/kernel_rounding.py [--seeds 20]

prints, for each backward case of the GPU tests, the worst ratio over the
seeds of each check's error to its bound: the yardstick's own check, and the
emulated kernel's error against the bound ``2 x err(yardstick) + 1e-5``.
Both must stay below 1 for the GPU tests to pass a correct kernel.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from attnlib import naive  # noqa: E402
from attnlib.masks import allowed_positions, score_bias  # noqa: E402
from attnlib.problem import check_problem  # noqa: E402


def emulated_fused_gradients(query, key, value, grad_output, attn_mask=None, softcap=None, **kwargs):
    """``(dQ, dK, dV)`` as the fused kernels round them, shaped and typed like ``query``, ``key``, ``value``.

    Arguments as :func:`attnlib.scaled_dot_product_attention` takes them
    (``softcap`` included), fp16 or bf16 or fp32 on the CPU.
    """
    dtype = query.dtype

    def rounded(x):
        return x.to(dtype).float()

    if attn_mask is not None and attn_mask.dtype != torch.bool:
        attn_mask = attn_mask.float()
    q, k, v, do = (x.float() for x in (query, key, value, grad_output))
    problem = check_problem(q, k, v, attn_mask, softcap=softcap, **kwargs)
    allowed = allowed_positions(problem)
    if allowed is None:
        allowed = torch.ones(problem.query_len, problem.key_len, dtype=torch.bool)
    allowed = allowed.expand(*q.shape[:-1], problem.key_len)
    scores = naive.masked_scaled_scores(problem, allowed)  # fp32 sums of exact products of the inputs
    sees_a_key = allowed.any(dim=-1, keepdim=True)
    row_max = torch.where(sees_a_key, scores.amax(dim=-1, keepdim=True), 0.0)
    unnormalised = torch.exp(scores - row_max)
    row_sum = unnormalised.sum(dim=-1, keepdim=True)
    group = problem.group_size
    k, v = (x.repeat_interleave(group, dim=-3) for x in (k, v))
    output = torch.where(sees_a_key, (rounded(unnormalised) @ v) / row_sum.clamp_min(1e-30), 0.0)
    output = rounded(output)  # stored in the input dtype, read back by the preprocess kernel
    lse = row_max + torch.log(row_sum.clamp_min(1e-30))

    weights = torch.where(allowed, torch.exp(scores - lse), 0.0)
    row_term = (do * output).sum(dim=-1, keepdim=True)  # D = rowsum(dO * O)
    grad_scores = weights * (do @ v.transpose(-2, -1) - row_term)
    if softcap is not None:
        bias = score_bias(problem)
        capped = scores - bias if bias is not None else scores
        grad_scores = grad_scores * (1 - (capped / softcap) ** 2)
    grad_scores = torch.where(allowed, grad_scores, 0.0)
    scale = problem.scale
    grad_query = rounded(grad_scores) @ k * scale
    grad_key = rounded(grad_scores).transpose(-2, -1) @ q * scale
    grad_value = rounded(weights).transpose(-2, -1) @ do

    def per_kv_head(x):  # the key/value kernel sums a group's query heads in fp32
        return x.unflatten(-3, (x.shape[-3] // group, group)).sum(dim=-3)

    return grad_query.to(dtype), per_kv_head(grad_key).to(dtype), per_kv_head(grad_value).to(dtype)


def worst_ratios(case, seeds: range, **extra) -> dict[str, float]:
    """Over ``seeds``: the largest yardstick error / its bound and emulated-kernel error / its bound.

    ``extra``: arguments the GPU test adds to ``make_inputs``' (``softcap``).
    """
    import test_fused_gpu as gpu_tests

    worst = {"yardstick": 0.0, "kernel": 0.0}
    for seed in seeds:
        query, key, value, kwargs = gpu_tests.make_inputs(case, seed, device="cpu")
        kwargs.update(extra)
        grad_output = gpu_tests.randn(*query.shape, dtype=case.dtype, seed=seed + 4, device="cpu")
        gradients = emulated_fused_gradients(query, key, value, grad_output, **kwargs)
        for checked in gpu_tests.gradient_checks(gradients, query, key, value, grad_output, **kwargs):
            worst["yardstick"] = max(worst["yardstick"], checked.yardstick_error / checked.yardstick_bound)
            worst["kernel"] = max(worst["kernel"], checked.error / checked.bound)
    return worst


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds per case (default 20)")
    seeds = range(parser.parse_args(argv).seeds)
    import test_fused_gpu as gpu_tests

    print(f"{'case':<52} {'yardstick':>9} {'kernel':>7}   worst error / bound over {len(seeds)} seeds")
    cases = [(case, {}) for case in gpu_tests.BACKWARD_CASES]
    cases += [(case, {"softcap": gpu_tests.SOFTCAP}) for case in gpu_tests.SOFTCAP_CASES]
    for case, extra in cases:
        worst = worst_ratios(case, seeds, **extra)
        name = f"{case}{'-softcap' if extra else ''}"
        print(f"{name:<52} {worst['yardstick']:9.2f} {worst['kernel']:7.2f}", flush=True)


if __name__ == "__main__":
    main()
