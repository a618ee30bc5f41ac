"""Decoding shapes: attnlib's naive and tiled paths and what ``backend="auto"`` picks, against torch.

    python benchmarks/decode_dispatch.py           # the full grid (a few minutes on 2 cores); stored
    python benchmarks/decode_dispatch.py --quick   # L = 1, S = 4096 and 32768 only; not stored
    python benchmarks/decode_dispatch.py --threads 1   # one thread, timed by its CPU time; stored

A decoding step asks attention for few queries (L = 1 to 16: one new token, or a
few drafted ones) against a long KV cache (S up to 32k), with grouped-query heads
(32 query heads over 8 key/value heads, as Llama 3 8B) or multi-query heads (32
over 1), for one sequence without a mask or for a batch of 4 with a bool padding
mask ``(B, 1, 1, S)`` (the sequences have different lengths). float32, head width
64, no causal mask (the last L keys' band hardly changes the work).

For each case the naive path, the tiled path (``backend=`` forced) and torch's
``scaled_dot_product_attention`` (``enable_gqa=True``) run in one process on the
same inputs, under ``torch.no_grad``, taking turns call after call (the order
rotates each round) so that a busy spell of a shared machine falls on all three;
each reports the median of its calls, and the ratio ``attnlib seconds / torch
seconds`` (lower is better; 1.0 is parity) is taken within the same run. It
also prints what ``backend="auto"`` picks for the case and that path's ratio.
The full run writes ``attnlib/book/results/decode_dispatch.json`` with the machine,
the versions, the commit and the date; ``attnlib.tiled.auto_declines`` follows it.

With ``--threads 1`` every method runs on one thread and is timed by that
thread's CPU time (``time.thread_time``), which other processes on a busy
shared machine inflate far less than wall time; otherwise by wall time.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import attnlib
from attnlib.book import stored_results
from measure import machine

RESULTS = stored_results.RESULTS / "decode_dispatch.json"
QUERY_HEADS, WIDTH = 32, 64
KV_HEADS = {"GQA 32:8": 8, "MQA 32:1": 1}
QUERY_LENGTHS = (1, 4, 16)
KEY_LENGTHS = (1024, 4096, 16384, 32768)
#: label -> (batch, with a padding mask)
BATCHES = {"B=1": (1, False), "B=4 + padding": (4, True)}
METHODS = ("naive", "tiled", "torch")


def inputs(batch: int, padded: bool, query_len: int, key_len: int, kv_heads: int):
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(batch, QUERY_HEADS, query_len, WIDTH, generator=generator)
    key, value = (torch.randn(batch, kv_heads, key_len, WIDTH, generator=generator) for _ in range(2))
    mask = None
    if padded:  # sequence b holds the last (1 - b/8) of the keys: left padding
        lengths = torch.tensor([key_len - b * key_len // 8 for b in range(batch)])
        mask = torch.arange(key_len)[None, :] >= (key_len - lengths)[:, None]
        mask = mask[:, None, None, :]
    return query, key, value, mask


def call(method: str, query, key, value, mask):
    if method == "torch":
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=True)
    return attnlib.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=True,
                                                backend=method)


def time_case(arguments, rounds: int, clock) -> dict[str, float]:
    """Median seconds of each method, the methods taking turns (after one warm-up round)."""
    times = {method: [] for method in METHODS}
    for round_ in range(rounds + 1):
        order = METHODS[round_ % 3:] + METHODS[:round_ % 3]
        for method in order:
            start = clock()
            call(method, *arguments)
            if round_:
                times[method].append(clock() - start)
    return {method: statistics.median(values) for method, values in times.items()}


def commit() -> str:
    root = pathlib.Path(__file__).resolve().parents[1]
    def git(*args):
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD")
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def run(query_lengths, key_lengths, rounds: int, clock) -> list[dict]:
    rows = []
    print(f"{'case':<30} {'torch ms':>9} {'naive':>7} {'tiled':>7}  auto", flush=True)
    for label, (batch, padded) in BATCHES.items():
        for heads_label, kv_heads in KV_HEADS.items():
            for query_len in query_lengths:
                for key_len in key_lengths:
                    arguments = inputs(batch, padded, query_len, key_len, kv_heads)
                    with torch.no_grad():
                        seconds = time_case(arguments, rounds, clock)
                        query, key, value, mask = arguments
                        auto = attnlib.explain(query, key, value, mask, enable_gqa=True)
                    ratios = {m: seconds[m] / seconds["torch"] for m in ("naive", "tiled")}
                    row = dict(batch=label, heads=heads_label, L=query_len, S=key_len,
                               seconds=seconds, ratio_to_torch=ratios, auto=auto.backend,
                               auto_ratio=ratios[auto.backend])
                    rows.append(row)
                    case = f"{label}, {heads_label}, L={query_len}, S={key_len}"
                    print(f"{case:<30} {seconds['torch'] * 1e3:9.2f} {ratios['naive']:6.2f}x "
                          f"{ratios['tiled']:6.2f}x  {auto.backend} {ratios[auto.backend]:.2f}x", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="L = 1, S = 4096 and 32768; not stored")
    parser.add_argument("--rounds", type=int, default=7, help="timed calls of each method per case")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (1: timed by CPU time)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
    about = machine()
    about["clock"] = clock.__name__
    print(f"{about['cpu']}, {about['torch_threads']} threads, torch {about['torch']}, "
          f"load average {about['load_average_1min']}", flush=True)
    if args.quick:
        run((1,), (4096, 32768), args.rounds, clock)
        return
    rows = run(QUERY_LENGTHS, KEY_LENGTHS, args.rounds, clock)
    about["load_average_1min_after"] = round(__import__("os").getloadavg()[0], 2)
    about["commit"] = commit()
    RESULTS.write_text(json.dumps({"machine": about, "query_heads": QUERY_HEADS, "head_dim": WIDTH,
                                   "dtype": "float32", "rounds": args.rounds, "rows": rows}, indent=1) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    main()
