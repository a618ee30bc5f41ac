"""backend="auto" on decoding shapes: the rule in attnlib.tiled, against the stored measurements.

benchmarks/decode_dispatch.py times naive, tiled and torch on L = 1 to 16 queries against
up to 32k keys (GQA 32:8 and MQA 32:1, with and without a padding mask) and stores the
path auto took in each case; these tests hold the rule to what it was measured with, and
check that its reason reaches last_dispatch(). No timing happens here.
"""
import pytest
import torch

import attnlib
from attnlib import tiled
from attnlib.book import stored_results

RUN = stored_results.load("decode_dispatch.json")


def meta_inputs(row):
    batch = 4 if row["batch"].startswith("B=4") else 1
    kv_heads = 8 if row["heads"].startswith("GQA") else 1
    query = torch.empty(batch, RUN["query_heads"], row["L"], RUN["head_dim"], device="meta")
    key = torch.empty(batch, kv_heads, row["S"], RUN["head_dim"], device="meta")
    mask = torch.empty(batch, 1, 1, row["S"], dtype=torch.bool, device="meta") if batch == 4 else None
    return query, key, key, mask


@pytest.mark.parametrize("row", RUN["rows"], ids=lambda r: f"{r['batch']}-{r['heads']}-L{r['L']}-S{r['S']}")
def test_auto_picks_what_it_picked_in_the_stored_run(row):
    assert attnlib.explain(*meta_inputs(row), enable_gqa=True).backend == row["auto"]


def test_the_stored_run_backs_the_rule():
    """Where auto takes tiled below the size threshold, tiled was the faster of attnlib's paths
    in most measured cases, and at one query per head (L = 1) naive was, in most."""
    taken = [r for r in RUN["rows"] if r["auto"] == "tiled"]
    one_query = [r for r in RUN["rows"] if r["L"] == 1]
    faster = lambda r, path: r["ratio_to_torch"][path] <= min(r["ratio_to_torch"].values())  # noqa: E731
    assert taken and sum(faster(r, "tiled") for r in taken) >= 0.8 * len(taken)
    assert sum(faster(r, "naive") for r in one_query) >= 0.8 * len(one_query)
    assert {"cpu", "torch", "date", "commit", "load_average_1min"} <= set(RUN["machine"])


def test_last_dispatch_says_why_tiled_took_a_short_query():
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(1, 8, 16, 16, generator=generator)
    key = torch.randn(1, 2, tiled.DECODE_MIN_KEYS_STACKED, 16, generator=generator)
    attnlib.scaled_dot_product_attention(query, key, key, enable_gqa=True)
    dispatch = attnlib.last_dispatch()
    assert dispatch.backend == "tiled"
    assert dispatch.passed_over["naive"] == (
        "auto takes tiled for G x L >= 64 stacked query rows against S >= 4096 keys (L=16, S=4096, G=4): "
        "faster than naive in benchmarks/decode_dispatch.py")
    one = attnlib.explain(query[:, :, :1], key, key, enable_gqa=True)
    assert one.backend == "naive" and "auto leaves small problems to naive" in one.passed_over["tiled"]
