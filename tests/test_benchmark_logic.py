"""The pure logic of benchmarks/fused_backward_gpu.py, on the CPU: flops, shapes and the gradient check.

Nothing here times anything; the script's measurements need a CUDA GPU.
"""
import os
import pathlib
import subprocess
import sys

import pytest
import torch

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import fused_backward_gpu as bench  # noqa: E402  (benchmarks/ is not a package)


def test_a_training_step_counts_three_and_a_half_forwards():
    # forward: QK^T and PV, 2 x (n x n x d) multiply-adds = 4 n^2 d flops per head; backward 2.5x that
    assert bench.training_flops(2, 3, 8, 16, causal=False) == 3.5 * 4 * 2 * 3 * 8 * 8 * 16
    assert bench.training_flops(2, 3, 8, 16, causal=True) == 3.5 * 4 * 2 * 3 * 8 * 8 * 16 / 2


@pytest.mark.parametrize("n", (1024, 2048, 4096, 8192, 16384))
@pytest.mark.parametrize("d", (64, 128, 256))
def test_every_point_holds_16384_tokens_of_width_2048(n, d):
    batch, heads = bench.problem_shape(n, d)
    assert (batch * n, heads * d) == (16384, 2048)


def errors_of(fused, flash=None, cudnn=None):
    def each(value):
        return dict.fromkeys(bench.CHECKED, value)
    errors = {"fused": each(fused) if isinstance(fused, float) else fused}
    for name, value in (("flash", flash), ("cudnn", cudnn)):
        if value is not None:
            errors[name] = each(value)
    return errors


def test_the_check_passes_within_twice_the_peer_error_and_fails_beyond():
    assert bench.verdict(errors_of(0.02, flash=0.01)) == {"peer": "flash", "passed": True, "failures": []}
    wrong_key = dict.fromkeys(bench.CHECKED, 0.01) | {"grad_key": 0.5}
    verdict = bench.verdict(errors_of(wrong_key, flash=0.01))
    assert verdict["passed"] is False
    assert len(verdict["failures"]) == 1 and verdict["failures"][0].startswith("grad_key")


def test_the_check_takes_cudnn_without_flash_and_says_when_nothing_compares():
    assert bench.verdict(errors_of(0.02, cudnn=0.001))["peer"] == "cudnn"
    assert bench.verdict(errors_of(0.02, cudnn=0.001))["passed"] is False
    assert bench.verdict(errors_of(0.02)) == {"peer": None, "passed": None, "failures": []}
    assert bench.verdict({"flash": errors_of(0.01)["fused"]})["passed"] is None


def test_the_reference_gradients_judge_a_wrong_gradient():
    """On CPU tensors: torch's SDPA in bf16 passes against itself; a dK with one row negated fails."""
    generator = torch.Generator().manual_seed(0)
    q, k, v, grad_output = (torch.randn(2, 3, 32, 16, generator=generator, dtype=torch.bfloat16)
                            for _ in range(4))
    for x in (q, k, v):
        x.requires_grad_()
    expected = bench.reference(q, k, v, grad_output, causal=True)
    peer = bench.outputs_and_gradients(bench.method_call("math", True), q, k, v, grad_output)
    wrong = dict(peer, grad_key=peer["grad_key"].clone())
    wrong["grad_key"][-1, -1, 5] *= -1  # inside the checked heads: the last heads of the last sequence
    good = bench.verdict({"fused": bench.relative_errors(peer, expected),
                          "flash": bench.relative_errors(peer, expected)})
    bad = bench.verdict({"fused": bench.relative_errors(wrong, expected),
                         "flash": bench.relative_errors(peer, expected)})
    assert good["passed"] is True
    assert bad["passed"] is False and [f.split(":")[0] for f in bad["failures"]] == ["grad_key"]


def test_without_cuda_the_script_says_so_and_measures_nothing(tmp_path):
    result = subprocess.run([sys.executable, str(BENCHMARKS / "fused_backward_gpu.py"), "--output",
                             str(tmp_path / "out.json")], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert result.returncode != 0
    assert "needs a CUDA GPU" in result.stderr
    assert not (tmp_path / "out.json").exists()
