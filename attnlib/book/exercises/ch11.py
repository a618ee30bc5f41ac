"""Checkers for the exercises of Chapter 11, Beyond one device."""
import numpy as np
import torch

from .. import stored_results
from . import as_array, as_number, checker


def _close(got: float, expected: float, relative: float) -> bool:
    return abs(got - expected) <= relative * abs(expected)


@checker("ex-11-causal-work",
         "a pair (contiguous, zigzag) of four ints each: the causal (query, key) pairs that ranks "
         "0 to 3 compute over the whole ring, n = 32, W = 4")
def _causal_work(answer):
    contiguous, zigzag = answer
    got = {"contiguous": as_array(contiguous, "contiguous", (4,)),
           "zigzag": as_array(zigzag, "zigzag", (4,))}
    # the book's n = 32, W = 4 only: a chunk of 4 (zigzag) or 8 positions starting at a
    # sees a * size earlier keys in full and its own triangle size (size + 1) / 2
    def pairs(index, size):
        return index * size * size + size * (size + 1) // 2

    expected_counts = {"contiguous": [pairs(r, 8) for r in range(4)],
                       "zigzag": [pairs(r, 4) + pairs(7 - r, 4) for r in range(4)]}
    for name, counts in got.items():
        expected = expected_counts[name]
        if list(counts) == expected:
            continue
        if counts.sum() == 32 * 32:
            return False, (f"your {name} counts add up to all n^2 pairs; under a causal mask only "
                           "the pairs with j <= i are computed.")
        if counts.sum() != sum(expected):
            return False, (f"your {name} counts add up to {counts.sum():g}, but over all ranks "
                           "the ring computes every pair j <= i exactly once: n (n + 1) / 2.")
        hint = ("rank r holds chunks r and 2W - 1 - r of n / 2W positions"
                if name == "zigzag" else "rank r holds positions r n/W to (r + 1) n/W - 1")
        return False, f"the total is right but the {name} split is not; {hint}."
    return True, ("contiguous slices load the last rank about seven times as much as the first; "
                  "zigzag slices give every rank the same count.")


@checker("ex-11-infiniband",
         "a number: the block length L_b (tokens per GPU) above which a ring step is compute-bound, "
         "32 query heads, 8 key/value heads, bfloat16, fused forward, InfiniBand NDR (50 GB/s)")
def _infiniband(answer):
    got = as_number(answer, "block_length")
    heads_ratio, bytes_per_number, bandwidth = 8 / 32, 2, 50e9
    peers = stored_results.load("peers_nvidia_h200.json")
    row = next(r for r in peers["rows"] if r.get("d") == 128 and r.get("n") == 16384
               and r["dtype"] == "bfloat16" and not r["causal"])
    expected = heads_ratio * bytes_per_number * row["fused"] * 1e12 / (2 * bandwidth)
    if _close(got, expected, 0.02):
        return True, "a step with a longer block computes longer than its block takes to arrive."
    hints = [(expected / heads_ratio, "the block holds 8 key/value heads, not 32"),
             (expected / 2, "the block holds K and V, 2 bytes a number, and the link moves "
                            "50 GB/s each way"),
             (expected / 8, "50 GB/s is 400 Gb/s: bytes, not bits"),
             (expected * 2, "a block's forward pass costs 4 H L_b^2 d operations: two "
                            "products of 2 L_b^2 d each per head")]
    hint = next((text for value, text in hints if _close(got, value, 0.02)),
                "write a ring step's compute time and its transfer time as functions of L_b, then find where "
                "they are equal")
    return False, f"{got:.4g} tokens is not the crossover; {hint}."


@checker("ex-11-backward-bytes",
         "a number: bytes the backward pass of ring_attention sends per step, as a multiple "
         "of the forward pass's, for bfloat16 inputs",
         self_check=True)
def _backward_bytes(answer):
    got = as_number(answer, "ratio")
    if _close(got, 3.0, 1e-6):
        return True, "keys and values in bfloat16 plus two float32 accumulators: three times the bytes."
    if _close(got, 2.0, 1e-6):
        return False, "dK and dV travel in the compute dtype, float32, not in bfloat16."
    if _close(got, 1.5, 1e-6):
        return False, "the key and value blocks travel again in the backward pass, besides dK and dV."
    return False, f"{got:.4g} is not the ratio; count the bytes per element of K, V, dK and dV."


@checker("ex-11-merge-by-hand",
         "a pair (output, lse): the (3, 4) merged output and the (3,) log-sum-exp of the exercise's "
         "q, k, v (seed 0, float64), keys split into the first 4 and the last 6")
def _merge_by_hand(answer):
    output, lse = answer
    got_output, got_lse = as_array(output, "output", (3, 4)), as_array(lse, "lse", (3,))
    # the exercise's q, k, v: float64, drawn in that order from one generator of seed 0
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n, width, generator=generator, dtype=torch.float64)
               for n, width in ((3, 8), (10, 8), (10, 4)))
    scores = q @ k.T / np.sqrt(8)
    whole_lse = torch.logsumexp(scores, dim=-1).numpy()
    whole_output = (torch.softmax(scores, dim=-1) @ v).numpy()
    blocks = [slice(0, 4), slice(4, 10)]
    block_lse = [torch.logsumexp(scores[:, b], dim=-1).numpy() for b in blocks]
    block_output = [(torch.softmax(scores[:, b], dim=-1) @ v[b]).numpy() for b in blocks]
    if not np.allclose(got_lse, whole_lse, rtol=0, atol=1e-9):
        if np.allclose(got_lse, np.maximum(*block_lse), rtol=0, atol=1e-9):
            return False, ("lse is the larger of the two blocks' log-sum-exps; the union's is "
                           "log(exp(lse_A) + exp(lse_B)).")
        return False, "lse differs from the log-sum-exp of the scores over all ten keys."
    if np.allclose(got_output, whole_output, rtol=0, atol=1e-9):
        return True, "each block's output weighed by its share of the softmax mass: exactly one call."
    if np.allclose(got_output, (block_output[0] + block_output[1]) / 2, rtol=0, atol=1e-9):
        return False, ("the plain average gives each block half the weight; weigh each by "
                       "exp(lse_block - lse).")
    return False, "output differs from attention over all ten keys; weigh each block by exp(lse_block - lse)."
