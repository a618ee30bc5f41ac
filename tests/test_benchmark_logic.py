"""The logic of benchmarks/fused_gpu.py and fused_backward_gpu.py, on the CPU: flops, shapes, the gradient
check, and what they keep when a run is cut short or the CUDA context is lost.

Nothing here times anything on a GPU; the scripts' dry runs (--dry-run) run
in Triton's interpreter, in child processes, which choose it before importing Triton.
"""
import json
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


#: fused_gpu.py --dry-run in a child, with a sticky CUDA error emulated: the fused forward raises
#: what torch raises after an illegal memory access, and from then on the context is lost.
STICKY_ERROR = """
import sys
import fused_gpu

lost = []
fused_call = fused_gpu.method_call


def method_call(method, causal, **kwargs):
    if method != "fused":
        return fused_call(method, causal, **kwargs)

    def illegal_memory_access(*args):
        lost.append("CUDA error: an illegal memory access was encountered")
        raise RuntimeError(lost[0])

    return illegal_memory_access


fused_gpu.method_call = method_call
fused_gpu.context_lost = lambda device: lost[0] if lost else None
fused_gpu.main(sys.argv[1:])
"""


def dry_run(tmp_path, *arguments, code=None):
    output = tmp_path / "out.json"
    command = ["-c", code, "--dry-run"] if code else [str(BENCHMARKS / "fused_gpu.py"), "--dry-run"]
    result = subprocess.run([sys.executable, *command, "--output", str(output), *arguments], capture_output=True,
                            text=True, timeout=300, cwd=BENCHMARKS,
                            env=dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(BENCHMARKS.parent)))
    return result, json.loads(output.read_text()) if output.exists() else None


def test_a_spent_budget_starts_no_point_and_lists_them_all(tmp_path):
    result, written = dry_run(tmp_path, "--budget", "0")
    assert result.returncode == 0, result.stderr[-2000:]
    assert written["points"] == [] and written["decode_points"] == []
    # decoding first: a run cut short keeps the split-key decoding it measured
    kinds = [entry["kind"] for entry in written["not_measured"]]
    assert kinds == ["decode"] * 2 + ["forward"] * 2
    assert "budget of 0 s spent" in result.stdout


def test_a_lost_cuda_context_is_recorded_and_what_was_measured_is_kept(tmp_path):
    result, written = dry_run(tmp_path, "--lengths", "32", code=STICKY_ERROR)
    assert result.returncode == 3, result.stderr[-2000:]
    first = written["decode_points"][0]
    # the decode method ran before the broken one; the broken one is recorded with its error
    assert first["fused_decode_GBps"] > 0
    assert first["fused_GBps"] is None and "illegal memory access" in first["fused_error"]
    assert written["context_lost"].startswith("CUDA error: an illegal memory access")
    assert len(written["not_measured"]) == 3 and "CUDA context was lost" in result.stdout


#: fused_gpu.py --dry-run in a child killed by an exception it does not catch, at its second forward point.
CRASH = """
import sys
import fused_gpu

measure = fused_gpu.measure
calls = []


def measure_then_crash(*args, **kwargs):
    calls.append(args)
    if len(calls) == 2:
        raise KeyboardInterrupt  # what timeout -s INT delivers mid-point
    return measure(*args, **kwargs)


fused_gpu.measure = measure_then_crash
fused_gpu.main(sys.argv[1:])
"""


def test_a_run_killed_mid_sweep_keeps_every_point_measured_before(tmp_path):
    result, written = dry_run(tmp_path, "--lengths", "32", code=CRASH)
    assert result.returncode != 0 and "KeyboardInterrupt" in result.stderr
    assert len(written["decode_points"]) == 2 and len(written["points"]) == 1


def test_decoding_gives_torch_the_grouped_cache_where_a_backend_takes_it():
    """On the CPU, torch's math backend takes enable_gqa=True; cuDNN has no CPU kernel, so it gets
    the repeated K and V (and then fails when timed, which the sweep records)."""
    import fused_gpu

    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 1, 16, generator=generator)
    k, v = (torch.randn(1, 2, 10, 16, generator=generator) for _ in range(2))
    k_repeated, v_repeated = (x.repeat_interleave(2, dim=1) for x in (k, v))
    call, arguments, grouped = fused_gpu.torch_decode_call("math", q, k, v, k_repeated, v_repeated)
    assert grouped and arguments[1] is k
    expected = torch.nn.functional.scaled_dot_product_attention(q, k_repeated, v_repeated)
    torch.testing.assert_close(call(*arguments), expected)
    _, arguments, grouped = fused_gpu.torch_decode_call("cudnn", q, k, v, k_repeated, v_repeated)
    assert not grouped and arguments[1] is k_repeated
