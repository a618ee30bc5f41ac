"""Checkers for the exercises of Chapter 14, Trained models.

Most of them measure a trained checkpoint: they load it (``attnlib.checkpoints``), run it
on the chapter's reference text and keep what they measured for the next answer, so
that the first check takes seconds and later ones none. Without the checkpoint packages
they say what to install instead of grading.
"""
from __future__ import annotations

import functools

import torch

from ... import checkpoints, heads
from .. import trained
from . import as_count, as_number, as_parts, checker

SINK_TOKENS, VARIANCE_TOKENS = 256, 128


@functools.lru_cache(maxsize=None)
def _recorded(name: str, count: int) -> tuple:
    """Every layer's call of ``name`` on the first ``count`` tokens of the reference text."""
    from ...integrations import probes

    model, tokenizer = checkpoints.load(name)
    with torch.no_grad(), probes.probe(model) as calls:
        model(input_ids=trained.reference_tokens(tokenizer, count))
    return tuple(calls)


def _read_layer_and_head(answer, name: str, value_name: str):
    layer, head, value = as_parts(answer, ("layer", "head", value_name))
    layer, head = as_count(*layer), as_count(*head)
    value = as_number(*value)
    if checkpoints.missing(name):
        return None, None, None, checkpoints.skipped(name, "checking")
    calls = _recorded(name, SINK_TOKENS if name == "smollm2" else VARIANCE_TOKENS)
    if layer >= len(calls):
        return None, None, None, f"layer should be 0 to {len(calls) - 1}, got {layer}"
    if head >= calls[layer].query.shape[1]:
        return None, None, None, f"head should be 0 to {calls[layer].query.shape[1] - 1}, got {head}"
    return layer, head, value, None


@checker("ex-14-sink-share",
         "a tuple (layer, head, share): a layer (0-29) and a query head (0-8) of SmolLM2, and the "
         "mean weight that head's queries after the first put on the first token, on the first "
         "256 tokens of the chapter's reference text")
def _sink_share_checker(answer):
    layer, head, share, problem = _read_layer_and_head(answer, "smollm2", "share")
    if problem:
        return False, problem
    calls = _recorded("smollm2", SINK_TOKENS)

    def share_of(layer, head, first_query=1):
        call = calls[layer]
        w = trained.weights(call.query, call.key, call.scale, causal=True)
        return float(w[0, head, first_query:, 0].mean())

    if abs(share - share_of(layer, head)) <= 1e-4:
        return True, "the head's share of the first token matches."
    if abs(share - share_of(layer, head, first_query=0)) <= 1e-4:
        return False, ("the first query can see only the first token, so its weight there is 1: "
                       "leave it out of the mean.")
    if layer + 1 < len(calls) and abs(share - share_of(layer + 1, head)) <= 1e-4 or \
            layer > 0 and abs(share - share_of(layer - 1, head)) <= 1e-4:
        return False, "that is the same head of a neighbouring layer: layers are counted from 0."
    if any(abs(share - share_of(layer, other)) <= 1e-4 for other in range(calls[layer].query.shape[1])):
        return False, "that is another head of this layer: heads are counted from 0."
    return False, "the share does not match; recheck which key is the first and which queries count."


@checker("ex-14-score-variance",
         "a tuple (layer, head, ratio): a layer (0-5) and a head (0-11) of MiniLM, and that head's "
         "Var(q.k)/d_k over all query-key pairs, on the first 128 tokens of "
         "the chapter's reference text (special tokens included)")
def _score_variance_checker(answer):
    layer, head, ratio, problem = _read_layer_and_head(answer, "minilm", "ratio")
    if problem:
        return False, problem
    call = _recorded("minilm", VARIANCE_TOKENS)[layer]
    expected = float(trained.score_variance_ratio(call.query, call.key, causal=False)[head])
    d_k = call.query.shape[-1]
    # the variance over 16,384 pairs: dividing by n or by n - 1 differs by 6e-5 of it
    if abs(ratio / expected - 1) <= 1e-3:
        return True, "the head's Var(q.k)/d_k matches."
    if abs(ratio / (d_k * expected) - 1) <= 1e-3:
        return False, "that is Var(q.k) itself: divide by d_k, the head's width."
    if abs(ratio / (expected / d_k) - 1) <= 1e-3:
        return False, "that is divided by d_k twice: the scaled scores already carry one 1/d_k."
    return False, "the ratio does not match; recheck the pairs (every query with every key)."


_LAYERS, _KV_HEADS, _QUERY_HEADS, _HEAD_DIM, _TOKENS = 30, 3, 9, 64, 4096


@checker("ex-14-kv-cache",
         "a tuple (gqa, mqa): SmolLM2's KV cache in MiB at 4096 tokens in bf16 as trained (GQA), "
         "and with one key/value head (MQA)")
def _kv_cache_checker(answer):
    gqa, mqa = (as_number(*part) for part in as_parts(answer, ("gqa", "mqa")))

    def mib(kv_heads, dtype=torch.bfloat16, keys_and_values=2):
        whole = heads.kv_cache_bytes(_LAYERS, kv_heads, _HEAD_DIM, _TOKENS, dtype=dtype)
        return whole / 2 * keys_and_values / 2**20

    if abs(gqa - mib(_KV_HEADS)) <= 0.01 and abs(mqa - mib(1)) <= 0.01:
        return True, "GQA's cache is three times MQA's, and a third of full multi-head attention's."
    if abs(gqa - mib(_QUERY_HEADS)) <= 0.01:
        return False, "that counts the query heads; the cache holds keys and values of the key/value heads."
    if abs(gqa - mib(_KV_HEADS, keys_and_values=1)) <= 0.01:
        return False, "the cache holds keys and values: two tensors per layer."
    if abs(gqa - mib(_KV_HEADS, dtype=torch.float32)) <= 0.01:
        return False, "bf16 takes 2 bytes a number, not 4."
    if abs(gqa - mib(_KV_HEADS)) <= 0.01:
        return False, "the GQA cache matches; recheck MQA's, which keeps one key/value head."
    return False, "the GQA cache does not match; count layers, key/value heads, width, tokens."


@checker("ex-14-row-split",
         "a tuple (layer, head, within, between): a layer (0-5) and a head (0-11) of MiniLM, and the "
         "within-row and between-row parts of that head's Var(q.k)/d_k over all query-key pairs, on "
         "the first 128 tokens of the chapter's reference text")
def _row_split_checker(answer):
    layer, head, within, between = as_parts(answer, ("layer", "head", "within", "between"))
    layer, head = as_count(*layer), as_count(*head)
    within, between = as_number(*within), as_number(*between)
    if checkpoints.missing("minilm"):
        return False, checkpoints.skipped("minilm", "checking")
    calls = _recorded("minilm", VARIANCE_TOKENS)
    if layer >= len(calls) or head >= calls[0].query.shape[1]:
        return False, f"layer should be 0 to {len(calls) - 1} and head 0 to {calls[0].query.shape[1] - 1}"
    split = trained.score_variance_split(calls[layer].query, calls[layer].key, causal=False)
    expected_within, expected_between = float(split["within"][head]), float(split["between"][head])

    def close(got, expected):  # dividing by n or n - 1 (128 keys a row) differs by under 1 %
        return abs(got / expected - 1) <= 1e-2

    if close(within, expected_within) and close(between, expected_between):
        return True, "both parts match; their sum is the pooled Var(q.k)/d_k."
    if close(within, expected_between) and close(between, expected_within):
        return False, "the two parts are swapped: within-row is the spread of each row about its own mean."
    if close(within, expected_within + expected_between):
        return False, "that within-row part is the pooled variance: subtract each row's own mean first."
    d_k = calls[layer].query.shape[-1]
    if close(within, expected_within * d_k) or close(between, expected_between * d_k):
        return False, "divide both parts by d_k, the head's width."
    if close(within, expected_within) or close(between, expected_between):
        return False, "one part matches; recheck the other."
    return False, "neither part matches; recheck which scores form a row (one query, every key)."


_STREAM_TOKENS, _STREAM_CACHE = 256, 64


@checker("ex-14-streaming",
         "a tuple (kept, perplexity): a number of kept first keys (0, 1, 2 or 4) and SmolLM2's "
         "perplexity on the first 256 tokens of the chapter's reference text with a cache of 64 keys "
         "that keeps that many first keys, over the tokens past the first 64")
def _streaming_checker(answer):
    kept, value = as_parts(answer, ("kept", "perplexity"))
    kept, value = as_count(*kept), as_number(*value)
    if kept not in (0, 1, 2, 4):
        return False, f"kept should be 0, 1, 2 or 4, got {kept}"
    if checkpoints.missing("smollm2"):
        return False, checkpoints.skipped("smollm2", "checking")
    from ...integrations import probes

    model, tokenizer = checkpoints.load("smollm2")
    tokens = trained.reference_tokens(tokenizer, _STREAM_TOKENS)

    def losses(cache):
        allowed = trained.sliding_window(_STREAM_TOKENS, cache, kept)
        with torch.no_grad(), probes.probe(model, record=False, allowed=allowed):
            logits = model(input_ids=tokens).logits
        return torch.nn.functional.cross_entropy(logits[0, :-1].double(), tokens[0, 1:], reduction="none")

    def close(part):
        return abs(value / float(torch.exp(part.mean())) - 1) <= 2e-3

    measured = losses(_STREAM_CACHE)
    if close(measured[_STREAM_CACHE:]):
        return True, "the perplexity matches."
    if close(measured):
        return False, ("that averages over every token; the caches differ from dense attention only "
                       "past the first 64, so average over those.")
    if kept and close(losses(_STREAM_CACHE + kept)[_STREAM_CACHE:]):
        return False, "the kept keys count in the cache: keep the newest 64 - kept besides them."
    return False, "the perplexity does not match; recheck the mask (causal, the window, the kept keys)."


_NO_SCALE_TOKENS = 128


@checker("ex-14-no-scale",
         "SmolLM2's perplexity on the first 128 tokens of the chapter's reference text with no "
         "attention scale at all: every layer's scores q . k unscaled")
def _no_scale_checker(answer):
    value = as_number(answer, "answer")
    if checkpoints.missing("smollm2"):
        return False, checkpoints.skipped("smollm2", "checking")
    from ...integrations import probes

    model, tokenizer = checkpoints.load("smollm2")
    tokens = trained.reference_tokens(tokenizer, _NO_SCALE_TOKENS)
    d_k = model.config.hidden_size // model.config.num_attention_heads
    # unscaled, the heads are near one-hot and the perplexity is ill-conditioned: fp32 sums in
    # another order (eager attention against attnlib's) move it by about 3 per cent
    tolerance = 0.05

    def matches(factor):
        with torch.no_grad(), probes.probe(model, record=False, scale_factor=factor):
            expected = trained.perplexity(model(input_ids=tokens).logits, tokens)
        return abs(value / expected - 1) <= tolerance

    if matches(d_k ** 0.5):
        return True, "the perplexity with unscaled scores matches (to 5 per cent: see the solution)."
    mistakes = {1 / d_k ** 0.5: "that divides by sqrt(d_k) twice: with no scale the factor on the "
                                "trained scale 1/sqrt(d_k) is sqrt(d_k).",
                1.0: "that is the trained scale: remove the 1/sqrt(d_k) from every layer.",
                float(d_k): "that multiplies by d_k: removing 1/sqrt(d_k) multiplies the scale by sqrt(d_k)."}
    for factor, message in mistakes.items():
        if matches(factor):
            return False, message
    return False, "the perplexity does not match; recheck the tokens (the first 128) and the scale."
