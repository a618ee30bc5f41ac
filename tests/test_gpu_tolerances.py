"""The GPU tests' gradient check, tried on the CPU against the fused kernels' rounding (tests/kernel_rounding.py).

A check that a correct kernel fails costs a device session; this one runs
without a GPU. The emulation is first checked against float64 gradients in
fp32, where it must agree closely, so that its bf16 figures mean something.
"""
import dataclasses

import pytest
import torch

import test_fused_gpu as gpu_tests
from kernel_rounding import emulated_fused_gradients

#: The bf16 cases whose yardstick failed the check it had (1e-2 x max |dX|) on most seeds
#: (../shared/reviews/2026-12-01-gpu-readiness.md, item 2).
BF16_CASES = [gpu_tests.Case(113, 211, 64, torch.bfloat16, mask="float", heads=(4, 1)),
              gpu_tests.Case(512, 256, 256, torch.bfloat16, mask="bool", heads=(4, 2))]


def inputs(case, seed):
    query, key, value, kwargs = gpu_tests.make_inputs(case, seed, device="cpu")
    grad_output = gpu_tests.randn(*query.shape, dtype=case.dtype, seed=seed + 4, device="cpu")
    return query, key, value, grad_output, kwargs


@pytest.mark.parametrize("case, softcap", [
    (gpu_tests.Case(40, 70, 32, torch.float32, mask="float", heads=(4, 2)), None),
    (gpu_tests.Case(60, 37, 16, torch.float32, causal="bottom_right", heads=(4, 1)), None),
    (gpu_tests.Case(33, 70, 40, torch.float32, mask="padding"), 2.0),
], ids=["float-mask-gqa", "bottom-right-mqa", "padding-softcap"])
def test_the_emulation_in_fp32_is_attention_s_gradient(case, softcap):
    query, key, value, grad_output, kwargs = inputs(case, seed=0)
    emulated = emulated_fused_gradients(query, key, value, grad_output, softcap=softcap, **kwargs)
    exact = gpu_tests.gradient_checks(emulated, query, key, value, grad_output, softcap=softcap, **kwargs)
    for check in exact:
        # Gradients of order 1, fp32 sums (usually 1e-6 off, 7e-5 seen once under load); a wrong
        # formula (a mask, a scale, a missing D) is off by 1e-2 or more.
        assert check.error < 1e-4, f"{check.name}: emulation off by {check.error:.2e} in fp32"


@pytest.mark.parametrize("case", BF16_CASES, ids=str)
@pytest.mark.parametrize("seed", range(3))
def test_a_correctly_rounded_bf16_backward_passes_the_gpu_check(case, seed):
    query, key, value, grad_output, kwargs = inputs(case, seed)
    gradients = emulated_fused_gradients(query, key, value, grad_output, **kwargs)
    gpu_tests.assert_gradients_within_tolerance(gradients, query, key, value, grad_output, **kwargs)


def test_a_bf16_backward_with_one_wrong_key_row_fails_the_gpu_check():
    query, key, value, grad_output, kwargs = inputs(BF16_CASES[0], seed=0)
    grad_query, grad_key, grad_value = emulated_fused_gradients(query, key, value, grad_output, **kwargs)
    wrong_key = grad_key.clone()
    wrong_key[1, 0, 7] *= 1.1  # 10 % off in one row: a tile offset or a mask a little wrong
    with pytest.raises(AssertionError, match="dK: fused error"):
        gpu_tests.assert_gradients_within_tolerance((grad_query, wrong_key, grad_value), query, key, value,
                                                    grad_output, **kwargs)


def test_a_yardstick_that_computes_another_function_fails_the_gpu_check(monkeypatch):
    """Without the yardstick's own check, a wrong yardstick would widen the bound for every kernel."""
    case = dataclasses.replace(BF16_CASES[0], mask=None)
    query, key, value, grad_output, kwargs = inputs(case, seed=0)
    gradients = emulated_fused_gradients(query, key, value, grad_output, **kwargs)
    yardstick = gpu_tests.input_dtype_attention
    monkeypatch.setattr(gpu_tests, "input_dtype_attention",
                        lambda query, *args, **kwargs: yardstick(query * 1.5, *args, **kwargs))
    with pytest.raises(AssertionError, match="reference off by"):
        gpu_tests.assert_gradients_within_tolerance(gradients, query, key, value, grad_output, **kwargs)

