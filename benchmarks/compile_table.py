"""The compile table of the fused kernels: what they cost on each GPU the book targets.

    python benchmarks/compile_table.py [--sections rows candidates decode backward]

compiles, without a GPU, every case of ``attnlib.fused.compile_report``'s
``compile_cases()`` (section ``rows``: each autotune configuration of the
forward kernel for sm_75, sm_80 and sm_90, fp16 and bf16, head widths 64 and
128), ``candidate_cases()`` (``candidates``: larger tiles and deeper
pipelines for sm_90), ``decode_cases()`` (``decode``: the split decoding
kernel) and ``backward_cases()`` (``backward``: the three backward kernels
with their configurations, a ``kernel`` column first). It prints arch, dtype,
d, block sizes, warps, stages, registers, spills, shared memory, the
tensor-core instruction and the number of hardware exp2 instructions
(``ex2.approx``), asynchronous copies (``cp.async``) and TMA copies
(``cp.async.bulk.tensor``) in the PTX, and writes
``attnlib/book/results/compile_table.json`` with the Triton, PyTorch and Python
versions, the date of each section (``dates``; ``machine.date`` is that of
``rows``) and a PTX excerpt for Chapter 9.

``--sections`` compiles only the sections named and keeps the others from
the stored table, which must have been compiled with the same Triton and
PyTorch; the default compiles them all. A few minutes on one core.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform

import torch
import triton

from attnlib import fused
from attnlib.book import stored_results
from attnlib.fused import compile_report as fused_compile

RESULTS = stored_results.RESULTS / "compile_table.json"
COLUMNS = ("arch", "dtype", "d", "causal", "BLOCK_M", "BLOCK_N", "warps", "stages", "registers",
           "spill stores", "spill loads", "shared KiB", "tensor cores", "ex2", "cp.async", "TMA")
SECTIONS = {
    "rows": ("the autotuner's configurations", fused_compile.compile_cases),
    "candidates": ("candidates for sm_90", fused_compile.candidate_cases),
    "decode": ("the decoding kernel (GQA 32:8, 8192 keys in 32 parts)", fused_compile.decode_cases),
    "backward": ("the backward kernels, with their configuration for the target, dtype and d",
                 fused_compile.backward_cases),
}


def row(report: fused_compile.CompileReport) -> dict:
    """The report as a table row; a backward kernel's row starts with its ``kernel``, and the
    preprocess kernel, which has rows only, has no BLOCK_N."""
    case, config = report.case, report.case.config
    block_n = None if case.kernel == "backward_preprocess" else config.block_n
    cells = dict(zip(COLUMNS, (
        case.arch, case.dtype, case.head_dim, case.is_causal, config.block_m, block_n,
        config.num_warps, config.num_stages, report.registers, report.spill_stores, report.spill_loads,
        report.shared_memory / 1024, report.tensor_core_instruction or "none (FMA)", report.exp2_instructions,
        report.async_copies, report.tma_copies,
    )))
    return {"kernel": case.kernel, **cells} if case.kernel in fused_compile.BACKWARD_KERNELS else cells


def print_table(title: str, table: list[dict]) -> None:
    columns = list(table[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in table)) for c in columns}
    print(title)
    print("  ".join(c.rjust(widths[c]) for c in columns))
    for r in table:
        print("  ".join(str(r[c]).rjust(widths[c]) for c in columns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", nargs="+", choices=list(SECTIONS), default=list(SECTIONS),
                        help="compile these sections only and keep the others from the stored table")
    sections = parser.parse_args().sections
    if fused_compile.unavailable_reason() is not None:
        raise SystemExit(fused_compile.unavailable_reason())
    if fused.triton_interprets():
        raise SystemExit("unset TRITON_INTERPRET: the table needs Triton in compiling mode")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    versions = {"triton": triton.__version__, "torch": torch.__version__, "python": platform.python_version()}
    table = {}
    if set(sections) != set(SECTIONS):
        table = json.loads(RESULTS.read_text())
        stored = {name: table["machine"].get(name) for name in ("triton", "torch")}
        if stored != {name: versions[name] for name in stored}:
            raise SystemExit(f"--sections keeps sections compiled with {stored}, this is {versions}: "
                             "compile them all (no --sections)")
        table.setdefault("dates", {name: table["machine"]["date"] for name in SECTIONS if name in table})
    table.update({
        "what": "attnlib.fused kernels compiled with triton.compile for GPUTarget('cuda', capability, 32); "
                "registers and spills from ptxas -v (Triton's wheel), shared memory from Triton's metadata",
        "columns": list(COLUMNS),
    })
    table.setdefault("dates", {})
    reports = {}
    for name in sections:
        title, cases = SECTIONS[name]
        reports[name] = [fused_compile.compile_report(case) for case in cases()]
        table[name] = [row(r) for r in reports[name]]
        table["dates"][name] = now
        print_table(title, table[name])
    table["machine"] = {"gpu": "none (compiled for named targets)", **versions, "date": table["dates"]["rows"]}
    if "rows" in reports:
        excerpts = {}
        for r in reports["rows"]:
            if r.tensor_core_lines and r.case.arch not in excerpts:
                excerpts[r.case.arch] = {"case": str(r.case), "lines": list(r.tensor_core_lines)}
        table["ptx_excerpts"] = excerpts
    order = ("what", "machine", "dates", "columns", *SECTIONS, "ptx_excerpts")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({key: table[key] for key in order}, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(RESULTS.parents[2])}")


if __name__ == "__main__":
    main()
