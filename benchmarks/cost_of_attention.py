"""The cost of attention on this machine: naive, tiled and torch's SDPA.

    python benchmarks/cost_of_attention.py            # full run (a few minutes on 2 cores)
    python benchmarks/cost_of_attention.py --quick    # small sizes, to try it out

Sweep 1 (chapters 7 and 8): n = 512 ... 8192 with d = 64, 8 heads, float32.
Sweep 2 (chapter 7): d = 16 ... 256 with n = 2048. Each point is measured in
a fresh process (see ``measure.py``): time per call (median and best of the
repeats) and peak extra memory. The methods take turns at each size so that
a busy spell on a shared machine does not fall on one of them only. Prints
the table with tiled's ratios to torch and naive and writes
``attnlib/book/results/cost_of_attention.json`` with the machine and date.
"""
from __future__ import annotations

import argparse
import json
import pathlib

from measure import METHODS, machine, measure

from attnlib.book import stored_results

RESULTS = stored_results.RESULTS / "cost_of_attention.json"
HEADS = 8
TARGETS = {"tiled/torch throughput at n=4096": 0.6, "tiled speed-up over naive at n=4096": 2.5,
           "naive/tiled peak memory at n=8192": 8.0}


def sweep(sizes, key: str, fixed: dict, methods=METHODS) -> list[dict]:
    rows = []
    for size in sizes:
        for method in methods:
            row = measure(method, **{key: size, **fixed}, heads=HEADS)
            rows.append(row)
            print(f"  {method:>6} {key}={size:<5} best {row['best_seconds']:8.4f} s  "
                  f"median {row['seconds']:8.4f} s  peak +{row['peak_extra_bytes'] / 2**20:9.1f} MiB",
                  flush=True)
    return rows


def by(rows, method, key, size):
    return next(r for r in rows if r["method"] == method and r[key] == size)


def ratio_table(rows) -> list[str]:
    lines = [f"{'n':>5} | {'naive s':>8} {'tiled s':>8} {'torch s':>8} | {'tiled/torch thr':>15} "
             f"{'tiled vs naive':>14} | {'naive MiB':>9} {'tiled MiB':>9} {'torch MiB':>9} {'naive/tiled mem':>15}"]
    for n in sorted({r["n"] for r in rows}):
        naive, tiled, torch_ = (by(rows, m, "n", n) for m in METHODS)
        lines.append(
            f"{n:>5} | {naive['best_seconds']:8.3f} {tiled['best_seconds']:8.3f} {torch_['best_seconds']:8.3f} | "
            f"{torch_['best_seconds'] / tiled['best_seconds']:15.2f} "
            f"{naive['best_seconds'] / tiled['best_seconds']:14.2f} | "
            f"{naive['peak_extra_bytes'] / 2**20:9.1f} {tiled['peak_extra_bytes'] / 2**20:9.1f} "
            f"{torch_['peak_extra_bytes'] / 2**20:9.1f} "
            f"{naive['peak_extra_bytes'] / tiled['peak_extra_bytes']:15.1f}")
    return lines


def targets(rows) -> dict[str, float]:
    reached = {}
    if any(r["n"] == 4096 for r in rows):
        naive, tiled, torch_ = (by(rows, m, "n", 4096) for m in METHODS)
        reached["tiled/torch throughput at n=4096"] = torch_["best_seconds"] / tiled["best_seconds"]
        reached["tiled speed-up over naive at n=4096"] = naive["best_seconds"] / tiled["best_seconds"]
    if any(r["n"] == 8192 for r in rows):
        reached["naive/tiled peak memory at n=8192"] = (
            by(rows, "naive", "n", 8192)["peak_extra_bytes"] / by(rows, "tiled", "n", 8192)["peak_extra_bytes"])
    return reached


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes; results are not stored")
    args = parser.parse_args()
    lengths = [256, 512, 1024] if args.quick else [512, 1024, 2048, 4096, 8192]
    widths = [16, 64] if args.quick else [16, 32, 64, 128, 256]
    at_start = machine()
    print("machine:", at_start)
    print("sweep over n (d = 64):")
    n_rows = sweep(lengths, "n", {"d": 64})
    print("sweep over d (n = 2048):" if not args.quick else "sweep over d (n = 512):")
    d_rows = sweep(widths, "d", {"n": 512 if args.quick else 2048})
    print("\n".join(ratio_table(n_rows)))
    reached = targets(n_rows)
    for name, value in reached.items():
        verdict = "met" if value >= TARGETS[name] else "MISSED"
        print(f"{name}: {value:.2f} (target >= {TARGETS[name]}) {verdict}")
    if not args.quick:
        RESULTS.write_text(json.dumps({
            "machine": at_start, "load_average_1min_at_end": machine()["load_average_1min"], "heads": HEADS, "dtype": "float32", "batch": 1,
            "time": "seconds per forward call under torch.no_grad (median and best of the repeats)",
            "memory": "peak resident memory above what the process held before the call, in bytes",
            "n_sweep": n_rows, "d_sweep": d_rows, "targets": TARGETS, "reached": reached,
        }, indent=1) + "\n")
        print(f"wrote {RESULTS.relative_to(pathlib.Path.cwd()) if RESULTS.is_relative_to(pathlib.Path.cwd()) else RESULTS}")


if __name__ == "__main__":
    main()
