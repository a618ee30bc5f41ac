"""The compile table of the fused kernel: what it costs on each GPU the book targets.

    python benchmarks/compile_table.py

compiles every case of ``attnlib.fused.compile_report.compile_cases()`` (each
autotune configuration for sm_75, sm_80 and sm_90, fp16 and bf16, head widths
64 and 128), of ``candidate_cases()`` (larger tiles and deeper pipelines
for sm_90) and of ``decode_cases()`` (the split decoding kernel) without a GPU, prints arch, dtype, d, block sizes, warps,
stages, registers, spills, shared memory, the tensor-core instruction and the number of
hardware exp2 instructions (``ex2.approx``), asynchronous copies (``cp.async``)
and TMA copies (``cp.async.bulk.tensor``) in the PTX,
and writes ``attnlib/results/compile_table.json`` (with the Triton,
PyTorch and Python versions and the date) and a PTX excerpt for Chapter 9.
About a minute on one core.
"""
from __future__ import annotations

import datetime
import json
import platform

import torch
import triton

from attnlib import fused
from attnlib.fused import compile_report as fused_compile, stored_results

RESULTS = stored_results.RESULTS / "compile_table.json"
COLUMNS = ("arch", "dtype", "d", "causal", "BLOCK_M", "BLOCK_N", "warps", "stages", "registers",
           "spill stores", "spill loads", "shared KiB", "tensor cores", "ex2", "cp.async", "TMA")


def row(report: fused_compile.CompileReport) -> dict:
    case, config = report.case, report.case.config
    return dict(zip(COLUMNS, (
        case.arch, case.dtype, case.head_dim, case.is_causal, config.block_m, config.block_n,
        config.num_warps, config.num_stages, report.registers, report.spill_stores, report.spill_loads,
        report.shared_memory / 1024, report.tensor_core_instruction or "none (FMA)", report.exp2_instructions,
        report.async_copies, report.tma_copies,
    )))


def main() -> None:
    if fused_compile.unavailable_reason() is not None:
        raise SystemExit(fused_compile.unavailable_reason())
    if fused.triton_interprets():
        raise SystemExit("unset TRITON_INTERPRET: the table needs Triton in compiling mode")
    reports = [fused_compile.compile_report(case) for case in fused_compile.compile_cases()]
    rows = [row(r) for r in reports]
    candidates = [row(fused_compile.compile_report(case)) for case in fused_compile.candidate_cases()]
    decode = [row(fused_compile.compile_report(case)) for case in fused_compile.decode_cases()]
    for title, table in (("the autotuner's configurations", rows), ("candidates for sm_90", candidates),
                         ("the decoding kernel (GQA 32:8, 8192 keys in 32 parts)", decode)):
        widths = {c: max(len(c), *(len(str(r[c])) for r in table)) for c in COLUMNS}
        print(title)
        print("  ".join(c.rjust(widths[c]) for c in COLUMNS))
        for r in table:
            print("  ".join(str(r[c]).rjust(widths[c]) for c in COLUMNS))
    excerpts = {}
    for r in reports:
        if r.tensor_core_lines and r.case.arch not in excerpts:
            excerpts[r.case.arch] = {"case": str(r.case), "lines": list(r.tensor_core_lines)}
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({
        "what": "attnlib.fused kernel compiled with triton.compile for GPUTarget('cuda', capability, 32); "
                "registers and spills from ptxas -v (Triton's wheel), shared memory from Triton's metadata",
        "machine": {
            "gpu": "none (compiled for named targets)",
            "triton": triton.__version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        },
        "columns": list(COLUMNS),
        "rows": rows,
        "candidates": candidates,
        "decode": decode,
        "ptx_excerpts": excerpts,
    }, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(RESULTS.parents[2])}")


if __name__ == "__main__":
    main()
