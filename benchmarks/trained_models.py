"""SmolLM2's perplexity against the attention scale, the temperature and StreamingLLM's caches.

    python benchmarks/trained_models.py                 # about 10 min on 2 busy cores
    python benchmarks/trained_models.py --tokens 1024 --stream-tokens 2048 --cache 256

Runs SmolLM2-135M-Instruct (``attnlib.checkpoints.load("smollm2")``, dequantised to fp32)
on the Python Language Reference excerpt that ships with attnlib
(``attnlib.book.trained.reference_text()``), with attnlib as every layer's attention
(``attnlib.integrations.probes``), and measures:

- perplexity on the first 128 tokens at 0.8 times the scale: the point the chapter
  recomputes live;
- perplexity on the first ``--tokens`` tokens with every layer's scale multiplied by each
  factor of ``--factors`` (the checkpoint's scale is factor 1);
- from the factor-1 logits, perplexity with the logits divided by each temperature;
- on the first ``--stream-tokens`` tokens, perplexity with dense causal attention, with a
  sliding window of ``--cache`` keys, and with a window that keeps the first ``--sinks``
  keys and the ``cache - sinks`` newest (StreamingLLM's setting, the same cache size), each
  as an explicit bool mask through attnlib; the loss over the tokens past the first
  ``cache`` is reported as well, where the windows differ from dense attention.

Writes ``attnlib/book/results/trained_models.json`` (or ``--output``) with the machine, the
versions, the commit and the date. The machine is a shared 2-core one: the sizes are
modest (1024 and 2048 tokens) but answer the questions.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import pathlib
import time

import torch

from attnlib import checkpoints
from attnlib.book import stored_results, trained
from attnlib.integrations import probes
from measure import machine
from training_sweep import commit

FACTORS = (0.25, 0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 4.0)
TEMPERATURES = (0.5, 0.8, 1.0, 1.25, 2.0)
CHECK_TOKENS, CHECK_FACTOR = 128, 0.8


def losses(model, ids, **probe_arguments) -> torch.Tensor:
    """The cross-entropy of each next token, ``(L - 1,)``, in float64."""
    with torch.no_grad(), probes.probe(model, record=False, **probe_arguments):
        logits = model(input_ids=ids).logits
    return torch.nn.functional.cross_entropy(logits[0, :-1].double(), ids[0, 1:], reduction="none"), logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--stream-tokens", type=int, default=2048)
    parser.add_argument("--cache", type=int, default=256)
    parser.add_argument("--sinks", type=int, default=4)
    parser.add_argument("--factors", default=",".join(map(str, FACTORS)))
    parser.add_argument("--output", type=pathlib.Path, default=stored_results.RESULTS / "trained_models.json")
    args = parser.parse_args()
    started = time.monotonic()
    at_start = {**machine(), "commit": commit(),
                "transformers": importlib.metadata.version("transformers"),
                "gguf": importlib.metadata.version("gguf")}
    model, tokenizer = checkpoints.load("smollm2")

    # one point the chapter recomputes live, on fewer tokens
    check_ids = trained.reference_tokens(tokenizer, CHECK_TOKENS)
    check = {"tokens": CHECK_TOKENS, "factor": CHECK_FACTOR,
             "perplexity": math.exp(losses(model, check_ids, scale_factor=CHECK_FACTOR)[0].mean().item())}
    ids = trained.reference_tokens(tokenizer, args.tokens)
    scale_rows, factor_one_logits = [], None
    for factor in map(float, args.factors.split(",")):
        loss, logits = losses(model, ids, scale_factor=factor)
        scale_rows.append({"factor": factor, "perplexity": math.exp(loss.mean().item())})
        if factor == 1.0:
            factor_one_logits = logits
        print(f"scale x {factor:5.2f}: perplexity {scale_rows[-1]['perplexity']:9.3f}", flush=True)
    temperature_rows = [{"temperature": t, "perplexity": trained.perplexity(factor_one_logits / t, ids)}
                        for t in TEMPERATURES]

    stream = trained.reference_tokens(tokenizer, args.stream_tokens)
    length = stream.shape[1]
    settings = {"dense": None,
                "sliding window": trained.sliding_window(length, args.cache),
                f"window + first {args.sinks}": trained.sliding_window(length, args.cache, args.sinks)}
    stream_rows = []
    for name, allowed in settings.items():
        loss, _ = losses(model, stream, allowed=allowed)
        stream_rows.append({"setting": name, "perplexity": math.exp(loss.mean().item()),
                            "perplexity_past_cache": math.exp(loss[args.cache:].mean().item())})
        print(f"{name:>18}: perplexity {stream_rows[-1]['perplexity']:9.3f}, past the cache "
              f"{stream_rows[-1]['perplexity_past_cache']:9.3f}", flush=True)

    result = {"machine": at_start, "wall_seconds": round(time.monotonic() - started),
              "model": "smollm2", "text": "attnlib.book.trained.reference_text()",
              "check": check, "tokens": args.tokens, "scale": scale_rows, "temperature": temperature_rows,
              "stream_tokens": length, "cache": args.cache, "sinks": args.sinks, "stream": stream_rows}
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.output} in {result['wall_seconds']} s")


if __name__ == "__main__":
    main()
