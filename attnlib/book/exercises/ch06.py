"""Checkers for the exercises of Chapter 6, Heads and temperature."""
import math

import torch

from ...heads import MultiHeadAttention, kv_cache_bytes
from . import as_number, as_parts, checker

_GIB = 2**30


@checker("ex-06-twelve-heads", "a pair (d_k, t_eff): the head width and the temperature hidden by dividing "
                               "by sqrt(d_model), for d_model = 768 and 12 heads")
def _twelve_heads(answer):
    d_k, t_eff = (as_number(x, name) for x, name in as_parts(answer, ("d_k", "t_eff")))
    if d_k != 768 / 12:
        return False, f"d_k = {d_k:g} is not the head width: the 768 columns are cut into 12 equal heads."
    expected = math.sqrt(768 / d_k)
    if abs(t_eff - expected) <= 1e-5 * expected:  # float32's rounding of a square root, and no more
        return True, f"sqrt(d_model) = sqrt(d_k) * {expected:.4f}: every head's scores are flattened by that factor."
    if abs(t_eff - 768 / d_k) <= 0.01:
        return False, f"{t_eff:g} is the ratio of the widths; the denominators are their square roots."
    return False, (f"T_eff = {t_eff:.4f} is off: write the scale the model divides by and the one a head of its "
                   "width calls for, and compare them.")


@checker("ex-06-kv-cache", "a pair (gqa_gib, mha_gib): the KV cache in GiB with 8 key/value heads, and with 64")
def _kv_cache(answer):
    gqa, mha = (as_number(x, name) for x, name in as_parts(answer, ("gqa_gib", "mha_gib")))
    results = []
    for name, got, kv_heads in (("gqa_gib", gqa, 8), ("mha_gib", mha, 64)):
        expected = kv_cache_bytes(80, kv_heads, 128, 32768, dtype=torch.bfloat16) / _GIB
        if abs(got - expected) <= 1e-3 * expected:
            results.append(f"{name} = {got:g} GiB.")
            continue
        hints = {expected / 2: "count both the keys and the values", 2 * expected: "bfloat16 takes 2 bytes a number",
                 expected * _GIB / 1e9: "a GiB is 2**30 bytes, not 10**9"}
        hint = next((text for value, text in hints.items() if abs(got - value) <= 1e-3 * value),
                    "list what the cache stores for one token of one layer, then count it for every token and layer")
        return False, f"{name} = {got:g} GiB is off: {hint}."
    return True, " ".join(results) + " Only the key/value heads enter the cache."


def _hint_fold(hot: MultiHeadAttention, folded: MultiHeadAttention) -> str:
    temperature = hot.temperature
    with torch.no_grad():
        if torch.allclose(folded.q_proj.weight, hot.q_proj.weight * temperature):
            return "you multiplied the query projection by T; dividing the scores by T divides the queries."
        if folded.q_proj.bias is not None and torch.allclose(folded.q_proj.bias, hot.q_proj.bias):
            return "divide the query projection's bias by T as well as its weight."
    return "start from hot's state_dict and change only the query projection (weight and bias) of folded."


@checker("ex-06-fold-temperature", "a pair (hot, folded) of MultiHeadAttention modules: hot with temperature "
                                   "T != 1, folded with temperature 1 and hot's weights, query projection divided by T")
def _fold_temperature(answer):
    (hot, _), (folded, _) = as_parts(answer, ("hot", "folded"))
    for name, module in (("hot", hot), ("folded", folded)):
        if not isinstance(module, MultiHeadAttention):
            raise TypeError(f"{name} must be an attnlib MultiHeadAttention, got {type(module).__name__}")
    # a temperature within 10% of 1 changes the outputs by less than the float32 tolerance below: a copy
    # that folded nothing would pass
    if abs(hot.temperature - 1.0) < 0.1:
        return False, "hot must have a temperature clearly other than 1 (such as 2.5), or there is nothing to fold."
    if folded.temperature != 1.0:
        return False, f"folded must keep temperature 1 (it has {folded.temperature:g}): T goes into the weights."
    if (hot.d_model, hot.n_heads) != (folded.d_model, folded.n_heads):
        return False, "hot and folded must have the same d_model and n_heads."
    dtype = folded.q_proj.weight.dtype
    if hot.q_proj.weight.dtype != dtype:
        return False, f"hot and folded must have the same dtype, got {hot.q_proj.weight.dtype} and {dtype}."
    device = folded.q_proj.weight.device
    if hot.q_proj.weight.device != device:
        return False, f"hot and folded must be on the same device, got {hot.q_proj.weight.device} and {device}."
    # drawn on the CPU, so that every device sees the same input
    x = torch.randn(2, 5, hot.d_model, generator=torch.Generator().manual_seed(0), dtype=dtype).to(device)
    with torch.no_grad():
        gap = (hot(x) - folded(x)).abs().max().item()
    tolerance = 1e-10 if dtype == torch.float64 else 1e-4
    if gap <= tolerance:
        return True, (f"the outputs agree to {gap:.1e}: (q / T) . k = (q . k) / T, so the weights alone "
                      "cannot tell which denominator they were trained with.")
    return False, f"the outputs differ by up to {gap:.3g}; " + _hint_fold(hot, folded)
