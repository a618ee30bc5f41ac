"""SmolLM2's perplexity against the attention scale, the temperature and StreamingLLM's caches.

    python benchmarks/trained_models.py                 # the scale sweep
    python benchmarks/trained_models.py streaming       # StreamingLLM's caches
    python benchmarks/trained_models.py streaming --stream-tokens 2048 --cache 256 --late 1280

Runs SmolLM2-135M-Instruct (``attnlib.checkpoints.load("smollm2")``, dequantised to fp32)
on the Python Language Reference excerpt that ships with attnlib
(``attnlib.trained.reference_text()``), with attnlib as every layer's attention
(``attnlib.integrations.probes``), and measures:

- perplexity on the first 128 tokens at 0.8 times the scale: the point the chapter
  recomputes live;
- perplexity on the first ``--tokens`` tokens with every layer's scale multiplied by each
  factor of ``--factors`` (the checkpoint's scale is factor 1), and by the factors of the
  two classic mistakes: no scale at all (``sqrt(d_k)``, 8) and dividing by
  ``sqrt(d_model)`` instead of ``sqrt(d_k)`` (``sqrt(d_k / d_model)``, 1/3);
- from the factor-1 logits, perplexity with the logits divided by each temperature;
- on the first ``--stream-tokens`` tokens, perplexity with dense causal attention, with a
  sliding window of ``--cache`` keys, and with windows of the same size that keep 1, 2 or 4
  keys for good and the newest others (StreamingLLM's setting): the first keys; as controls,
  four keys from early in the text but not the first (4-7) and four from its middle
  (488-491 of 1024); and the first four keys after the text's first four tokens are replaced by
  "\n" (the paper's Table 1 control). Each cache is an explicit bool mask through attnlib.
  The loss is reported over the tokens past the first ``cache`` (where the windows differ
  from dense attention) and over those from ``--late`` on (where every kept key, the
  middle ones included, is older than the window).

Writes ``attnlib/book/results/trained_models.json`` (the scale sweep) and
``trained_streaming.json`` (the caches), each with the machine, the versions, the commit
and the date. The machine is a shared 2-core one, loaded by other work: the sizes are
modest (512 and 1024 tokens) but answer the questions.

    python benchmarks/trained_models.py windows         # a few minutes

measures Section 14.2's tables on ``WINDOWS`` disjoint windows of the reference text (128
tokens for MiniLM, 256 for SmolLM2; window 0 is the one the page measures live): per
layer, the medians over its heads of the pooled ``Var(q.k)/d_k``, its within-row and
between-row parts, the independent model's two terms, the coordinates' squared means and
variances; for SmolLM2 the same before the rotary positions; for MiniLM the length of the
queries' and keys' shared constant ``W beta + b`` against their mean. Writes
``attnlib/book/results/trained_windows.json``.
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
NEWLINE = "\n"


def losses(model, ids, **probe_arguments) -> torch.Tensor:
    """The cross-entropy of each next token, ``(L - 1,)``, in float64."""
    with torch.no_grad(), probes.probe(model, record=False, **probe_arguments):
        logits = model(input_ids=ids).logits
    return torch.nn.functional.cross_entropy(logits[0, :-1].double(), ids[0, 1:], reduction="none"), logits


WINDOWS, WINDOW_TOKENS = 4, {"minilm": 128, "smollm2": 256}
CAUSAL = {"minilm": False, "smollm2": True}


def layer_medians(query, key, causal: bool) -> dict:
    """One layer's medians over its heads of the statistics of Section 14.2."""
    split = trained.score_variance_split(query, key, causal)
    model = trained.independent_split(query, key)
    q, k = trained.coordinate_statistics(query), trained.coordinate_statistics(key)
    pooled = split["within"] + split["between"]
    values = {"pooled": pooled, "within": split["within"], "between_share": split["between"] / pooled,
              "independent_within": model["within"], "independent_between": model["between"],
              "q_mean_squared": q["mean_squared"], "q_variance": q["variance"],
              "k_mean_squared": k["mean_squared"], "k_variance": k["variance"]}
    return {name: round(value.median().item(), 4) for name, value in values.items()}


def windows() -> None:
    """Section 14.2's statistics on disjoint windows of the reference text."""
    from attnlib.integrations import probes

    started = time.monotonic()
    result = {"machine": {**machine(), "commit": commit(),
                          "transformers": importlib.metadata.version("transformers")},
              "windows": WINDOWS, "tokens": WINDOW_TOKENS, "models": {}}
    for name, count in WINDOW_TOKENS.items():
        model, tokenizer = checkpoints.load(name)
        per_window = []
        for ids in trained.reference_windows(tokenizer, count, WINDOWS):
            with torch.no_grad(), probes.probe(model) as calls:
                model(input_ids=ids[None])
            layers = [layer_medians(c.query, c.key, CAUSAL[name]) for c in calls]
            if name == "smollm2":
                for layer, (query, key) in zip(layers, trained.before_rotation(model, ids[None])):
                    layer.update({f"unrotated_{part}": value
                                  for part, value in layer_medians(query, key, True).items()})
            else:
                for number, (layer, c) in enumerate(zip(layers, calls)):
                    constants = trained.layernorm_constants(model, number)
                    for part, x, constant in (("q", c.query, constants[0]), ("k", c.key, constants[1])):
                        against = trained.mean_against_constant(x, constant)
                        layer[f"{part}_constant_length"] = round(against["length"].median().item(), 4)
                        layer[f"{part}_constant_cosine"] = round(against["cosine"].median().item(), 4)
            per_window.append(layers)
            print(f"{name}: window {len(per_window)} of {WINDOWS}", flush=True)
        result["models"][name] = per_window
    result["wall_seconds"] = round(time.monotonic() - started)
    output = stored_results.RESULTS / "trained_windows.json"
    output.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {output} in {result['wall_seconds']} s")


def stamp() -> dict:
    return {**machine(), "commit": commit(), "transformers": importlib.metadata.version("transformers"),
            "gguf": importlib.metadata.version("gguf")}


def scale_sweep(args, model, tokenizer) -> dict:
    """The perplexity against the attention scale and the output temperature."""
    started, at_start = time.monotonic(), stamp()
    # one point the chapter recomputes live, on fewer tokens
    check_ids = trained.reference_tokens(tokenizer, CHECK_TOKENS)
    check = {"tokens": CHECK_TOKENS, "factor": CHECK_FACTOR,
             "perplexity": math.exp(losses(model, check_ids, scale_factor=CHECK_FACTOR)[0].mean().item())}
    ids = trained.reference_tokens(tokenizer, args.tokens)
    c = model.config
    d_k = c.hidden_size // c.num_attention_heads
    mistakes = {math.sqrt(d_k): "no scale", math.sqrt(d_k / c.hidden_size): "divided by sqrt(d_model)"}
    factors = sorted({*map(float, args.factors.split(",")), *mistakes})
    scale_rows, factor_one_logits = [], None
    for factor in factors:
        loss, logits = losses(model, ids, scale_factor=factor)
        scale_rows.append({"factor": factor, "label": mistakes.get(factor, ""),
                           "perplexity": math.exp(loss.mean().item())})
        if factor == 1.0:
            factor_one_logits = logits
        print(f"scale x {factor:5.2f}: perplexity {scale_rows[-1]['perplexity']:9.3f}", flush=True)
    temperature_rows = [{"temperature": t, "perplexity": trained.perplexity(factor_one_logits / t, ids)}
                        for t in TEMPERATURES]
    return {"machine": at_start, "wall_seconds": round(time.monotonic() - started),
            "model": "smollm2", "text": "attnlib.book.trained.reference_text()",
            "check": check, "d_k": d_k, "d_model": c.hidden_size, "tokens": args.tokens,
            "scale": scale_rows, "temperature": temperature_rows}


def streaming(args, model, tokenizer) -> dict:
    """StreamingLLM's caches and their controls."""
    started, at_start = time.monotonic(), stamp()
    stream = trained.reference_tokens(tokenizer, args.stream_tokens)
    length = stream.shape[1]
    newline = tokenizer(NEWLINE, add_special_tokens=False)["input_ids"]
    if len(newline) != 1:
        raise ValueError(f"the tokenizer splits {NEWLINE!r} into {newline}, not one token")
    with_newlines = stream.clone()
    with_newlines[0, :4] = newline[0]
    middle = length // 2 - 24
    # (name, kept positions, tokens): every cache but dense holds ``args.cache`` keys
    settings = [("dense", None, stream),
                ("sliding window", (), stream),
                ("first 1 kept", (0,), stream),
                ("first 2 kept", (0, 1), stream),
                ("first 4 kept", (0, 1, 2, 3), stream),
                ("tokens 4-7 kept", (4, 5, 6, 7), stream),
                (f"tokens {middle}-{middle + 3} kept", tuple(range(middle, middle + 4)), stream),
                ("first 4 kept, made \\n", (0, 1, 2, 3), with_newlines)]
    stream_rows = []
    for name, kept, tokens in settings:
        allowed = None if kept is None else trained.window_keeping(length, args.cache, kept)
        loss, _ = losses(model, tokens, allowed=allowed)
        stream_rows.append({"setting": name, "kept": None if kept is None else list(kept),
                            "perplexity": math.exp(loss.mean().item()),
                            "perplexity_past_cache": math.exp(loss[args.cache:].mean().item()),
                            "perplexity_late": math.exp(loss[args.late:].mean().item())})
        print(f"{name:>24}: perplexity {stream_rows[-1]['perplexity']:9.3f}, past the cache "
              f"{stream_rows[-1]['perplexity_past_cache']:9.3f}, late "
              f"{stream_rows[-1]['perplexity_late']:9.3f}", flush=True)
    return {"machine": at_start, "wall_seconds": round(time.monotonic() - started),
            "model": "smollm2", "text": "attnlib.book.trained.reference_text()",
            "stream_tokens": length, "cache": args.cache, "late": args.late, "stream": stream_rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", nargs="?", choices=("perplexity", "streaming", "windows"), default="perplexity")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--stream-tokens", type=int, default=1024)
    parser.add_argument("--cache", type=int, default=128)
    parser.add_argument("--late", type=int, default=640,
                        help="the first token of the late span (past every kept key's window)")
    parser.add_argument("--factors", default=",".join(map(str, FACTORS)))
    args = parser.parse_args()
    if args.part == "windows":
        return windows()
    model, tokenizer = checkpoints.load("smollm2")
    run, name = {"perplexity": (scale_sweep, "trained_models.json"),
                 "streaming": (streaming, "trained_streaming.json")}[args.part]
    result = run(args, model, tokenizer)
    output = stored_results.RESULTS / name
    output.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {output} in {result['wall_seconds']} s")


if __name__ == "__main__":
    main()
