"""SmolLM2-135M's prefill with attnlib as its attention, against transformers' sdpa and eager.

    python benchmarks/smollm2_prefill.py                  # 512, 1024, 2048 tokens (about 3 min on 2 quiet cores)
    python benchmarks/smollm2_prefill.py --lengths 1024   # a part; not stored

One process loads the checkpoint once per attention implementation (from the
cache that ``attnlib.checkpoints`` keeps) and times a forward pass over the
first ``n`` tokens of the book's reference text (``attnlib.book.trained``), under
``torch.no_grad``. The three implementations take turns call after call, the
order alternating, so that a busy spell of a shared machine falls on all of
them; each prints the median of its calls and attnlib's throughput as a
fraction of sdpa's (``sdpa seconds / attnlib seconds``; 1.0 is parity), with
the CPU, the thread count and the load average. attnlib runs ``backend="auto"``,
which takes the tiled path at these lengths (the dispatch is printed).
Writes ``attnlib/book/results/smollm2_prefill.json``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import attnlib
from attnlib import checkpoints
from attnlib.book import stored_results, trained
from attnlib.integrations import transformers as hf_backend
from measure import machine

RESULTS = stored_results.RESULTS / "smollm2_prefill.json"
LENGTHS = [512, 1024, 2048]
IMPLEMENTATIONS = ("attnlib", "sdpa", "eager")
#: issue 36's goal: attnlib/sdpa throughput inside SmolLM2's prefill
GOAL = 0.9


def _seconds(model, tokens: torch.Tensor) -> float:
    start = time.perf_counter()
    with torch.no_grad():
        model(tokens)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=LENGTHS,
                        help="prompt lengths in tokens; results are stored only for the default")
    parser.add_argument("--calls", type=int, default=3, help="calls per implementation and length")
    args = parser.parse_args()
    hf_backend.register()
    models, tokenizer = {}, None
    for name in IMPLEMENTATIONS:
        models[name], tokenizer = checkpoints.load("smollm2", attn_implementation=name)
    at_start = machine()
    print(f"cpu: {at_start['cpu']}, {at_start['cores']} cores, torch {at_start['torch']} with "
          f"{at_start['torch_threads']} threads; load average {at_start['load_average_1min']}")
    rows = []
    for n in args.lengths:
        tokens = trained.reference_tokens(tokenizer, n)
        for model in models.values():  # warm up
            _seconds(model, tokens)
        print(f"  n={n}: attnlib ran {attnlib.last_dispatch().backend}")
        times = {name: [] for name in IMPLEMENTATIONS}
        for call in range(args.calls):
            order = IMPLEMENTATIONS if call % 2 == 0 else IMPLEMENTATIONS[::-1]
            for name in order:
                times[name].append(_seconds(models[name], tokens))
        medians = {name: statistics.median(values) for name, values in times.items()}
        row = {"tokens": n, "calls": args.calls, "seconds": medians,
               "attnlib_over_sdpa": medians["sdpa"] / medians["attnlib"],
               "load_average_1min": machine()["load_average_1min"]}
        rows.append(row)
        print(f"  n={n:<5} attnlib {medians['attnlib']:6.2f} s  sdpa {medians['sdpa']:6.2f} s  "
              f"eager {medians['eager']:6.2f} s  attnlib/sdpa {row['attnlib_over_sdpa']:.2f} "
              f"({'met' if row['attnlib_over_sdpa'] >= GOAL else 'below'} {GOAL})  "
              f"load {row['load_average_1min']}", flush=True)
    if args.lengths == LENGTHS:
        RESULTS.write_text(json.dumps({
            "machine": at_start, "model": "SmolLM2-135M-Instruct (Q4_1 GGUF dequantised to fp32)",
            "time": "median seconds of one no-grad forward pass, the three taking turns in one process",
            "goal": GOAL, "rows": rows}, indent=1) + "\n")
        print(f"wrote {RESULTS.name}")


if __name__ == "__main__":
    main()
