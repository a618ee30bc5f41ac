"""Chapter 14's checkers accept answers computed another way than they compute them (eager
attention's own weights, forward hooks on the projections, the formula by hand) and name
plausible mistakes."""
import pytest
import torch

from attnlib import checkpoints
from attnlib.book import exercises, trained

needs = {name: pytest.mark.skipif(not checkpoints.available(name),
                                  reason=checkpoints.skipped(name, "the test"))
         for name in checkpoints.CHECKPOINTS}


@pytest.fixture(scope="module")
def smollm2_weights():
    """Eager attention's weights, as transformers returns them: one (1, 9, 256, 256) a layer."""
    model, tokenizer = checkpoints.load("smollm2")
    with torch.no_grad():
        return model(input_ids=trained.reference_tokens(tokenizer, 256), output_attentions=True).attentions


@needs["smollm2"]
def test_sink_share_accepts_eager_weights_and_names_the_first_query_and_the_layer(smollm2_weights):
    layer, head = 14, 3
    share = smollm2_weights[layer][0, head, 1:, 0].mean().item()
    assert exercises.check("ex-14-sink-share", (layer, head, share))
    with_first = smollm2_weights[layer][0, head, :, 0].mean().item()
    feedback = exercises.check("ex-14-sink-share", (layer, head, with_first))
    assert not feedback and "leave it out" in feedback.message
    next_layer = smollm2_weights[layer + 1][0, head, 1:, 0].mean().item()
    feedback = exercises.check("ex-14-sink-share", (layer, head, next_layer))
    assert not feedback and "neighbouring layer" in feedback.message
    feedback = exercises.check("ex-14-sink-share", (30, 0, 0.5))
    assert not feedback and "layer should be 0 to 29, got 30" in feedback.message


def projections(layer: int, head: int):
    """MiniLM's query and key columns of one head, from forward hooks on its projections."""
    model, tokenizer = checkpoints.load("minilm")
    attention, captured = model.encoder.layer[layer].attention.self, {}
    hooks = [getattr(attention, part).register_forward_hook(
        lambda module, inputs, output, part=part: captured.update({part: output})) for part in ("query", "key")]
    with torch.no_grad():
        model(input_ids=trained.reference_tokens(tokenizer, 128))
    for hook in hooks:
        hook.remove()
    columns = slice(head * 32, (head + 1) * 32)
    return captured["query"][0, :, columns].double(), captured["key"][0, :, columns].double()


@needs["minilm"]
def test_score_variance_accepts_hooked_projections_and_names_the_missing_division():
    q, k = projections(2, 5)
    variance = (q @ k.T).var().item()
    assert exercises.check("ex-14-score-variance", (2, 5, variance / 32))
    feedback = exercises.check("ex-14-score-variance", (2, 5, variance))
    assert not feedback and "divide by d_k" in feedback.message
    assert not exercises.check("ex-14-score-variance", (2, 6, variance / 32))


def test_kv_cache_accepts_the_hand_count_and_names_the_query_heads():
    mib = 2**20
    assert exercises.check("ex-14-kv-cache", (2 * 30 * 4096 * 3 * 64 * 2 / mib, 2 * 30 * 4096 * 64 * 2 / mib))
    feedback = exercises.check("ex-14-kv-cache", (2 * 30 * 4096 * 9 * 64 * 2 / mib, 30.0))
    assert not feedback and "query heads" in feedback.message
    feedback = exercises.check("ex-14-kv-cache", (30 * 4096 * 3 * 64 * 2 / mib, 30.0))
    assert not feedback and "keys and values" in feedback.message


@needs["minilm"]
def test_row_split_accepts_the_split_from_hooked_projections_and_names_swapped_and_pooled_parts():
    q, k = projections(2, 5)
    scores = q @ k.T  # every query sees every key
    within = scores.var(dim=1, unbiased=False).mean().item() / 32
    between = scores.mean(dim=1).var(unbiased=False).item() / 32
    assert exercises.check("ex-14-row-split", (2, 5, within, between))
    feedback = exercises.check("ex-14-row-split", (2, 5, between, within))
    assert not feedback and "swapped" in feedback.message
    feedback = exercises.check("ex-14-row-split", (2, 5, scores.var().item() / 32, between))
    assert not feedback and "pooled" in feedback.message
    # a key bias moves every row by a constant: the within-row part, and softmax, ignore it
    shifted = q @ (k + torch.randn(32, dtype=torch.float64)).T
    assert torch.allclose(shifted.var(dim=1), scores.var(dim=1))
    assert torch.allclose(torch.softmax(shifted, -1), torch.softmax(scores, -1))


@needs["smollm2"]
def test_streaming_accepts_a_mask_built_by_hand_and_names_the_average_over_every_token():
    from attnlib.integrations import probes

    model, tokenizer = checkpoints.load("smollm2")
    tokens = trained.reference_tokens(tokenizer, 256)
    kept, cache = 4, 64
    allowed = torch.zeros(256, 256, dtype=torch.bool)
    for query in range(256):
        newest = range(max(0, query - (cache - kept) + 1), query + 1)
        allowed[query, [*newest, *range(min(kept, query + 1))]] = True
    with torch.no_grad(), probes.probe(model, record=False, allowed=allowed):
        logits = model(input_ids=tokens).logits
    losses = torch.nn.functional.cross_entropy(logits[0, :-1].double(), tokens[0, 1:], reduction="none")
    assert exercises.check("ex-14-streaming", (kept, losses[cache:].mean().exp().item()))
    feedback = exercises.check("ex-14-streaming", (kept, losses.mean().exp().item()))
    assert not feedback and "past the first 64" in feedback.message
    assert not exercises.check("ex-14-streaming", (3, 20.0))


@needs["smollm2"]
def test_no_scale_accepts_eager_attention_with_its_scaling_undone_and_names_the_double_division():
    model, tokenizer = checkpoints.load("smollm2")
    tokens = trained.reference_tokens(tokenizer, 128)

    def perplexity_with_scaling_times(factor):
        for layer in model.model.layers:
            layer.self_attn.scaling *= factor
        try:
            with torch.no_grad():
                logits = model(input_ids=tokens).logits
        finally:
            for layer in model.model.layers:
                layer.self_attn.scaling /= factor
        return torch.nn.functional.cross_entropy(logits[0, :-1].double(), tokens[0, 1:]).exp().item()

    assert exercises.check("ex-14-no-scale", perplexity_with_scaling_times(8.0))
    feedback = exercises.check("ex-14-no-scale", perplexity_with_scaling_times(1 / 8))
    assert not feedback and "twice" in feedback.message
