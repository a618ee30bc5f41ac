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
