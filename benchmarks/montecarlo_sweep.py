"""Runtime and peak memory of Chapter 3's Monte Carlo sweep of Var(q.k)/d_k.

    python benchmarks/montecarlo_sweep.py

Runs attnlib.book.montecarlo.sweep with CHAPTER_SWEEP (4 distributions, d_k = 1 ... 1024,
20 000 pairs each), as the chapter does. Measures the wall-clock and CPU time, the
peak of the memory tracemalloc traces during the sweep (NumPy's arrays, which
are the estimator's working memory, and Python objects, including modules
imported on first use) and the process's peak resident memory (interpreter and
libraries included). Prints them with the largest relative deviation of
Var/d_k from 1 and its 95% interval, and writes attnlib/book/results/montecarlo_sweep.json
with the machine and date.
"""
from __future__ import annotations

import json
import os
import pathlib
import resource
import time
import tracemalloc

from measure import machine

from attnlib.book import montecarlo, stored_results

RESULTS = stored_results.RESULTS / "montecarlo_sweep.json"


def main() -> None:
    tracemalloc.start()
    wall, cpu = time.perf_counter(), time.process_time()
    results = montecarlo.sweep(**montecarlo.CHAPTER_SWEEP)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    traced_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    worst, (deviation, low, high) = montecarlo.largest_relative_deviation(results)
    summary = {
        "machine": machine(),
        "load_average_1min_before": os.getloadavg()[0],
        "sweep": {key: list(value) if isinstance(value, tuple) else value
                  for key, value in montecarlo.CHAPTER_SWEEP.items()},
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2),
        "traced_peak_bytes": traced_peak,
        "process_peak_rss_bytes": rss_peak,
        "largest_relative_deviation": {"distribution": worst.label, "d": worst.d, "value": deviation,
                                       "ci_low": low, "ci_high": high},
        "cells": [{"distribution": e.label, "d": e.d, "variance_over_d": e.variance / e.d,
                   "ci_low_over_d": e.ci_low / e.d, "ci_high_over_d": e.ci_high / e.d} for e in results],
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"sweep of {len(results)} cells: {wall:.1f} s wall, {cpu:.1f} s CPU")
    print(f"peak memory: {traced_peak / 2**20:.1f} MiB traced (NumPy arrays and Python objects), "
          f"{rss_peak / 2**20:.0f} MiB resident (process)")
    print(f"largest |Var/d_k - 1|: {deviation:+.4f} (95% CI {low:+.4f} to {high:+.4f}) "
          f"for {worst.label} at d_k={worst.d}")
    print(f"wrote {RESULTS.relative_to(pathlib.Path.cwd()) if RESULTS.is_relative_to(pathlib.Path.cwd()) else RESULTS}")


if __name__ == "__main__":
    main()
