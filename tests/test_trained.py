"""attnlib.book.trained's measurements on inputs whose answers are known, and the probes in a model."""
import math

import pytest
import torch

from attnlib import checkpoints
from attnlib.book import trained


def test_unit_variance_independent_queries_and_keys_give_a_ratio_near_one():
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, 3, 512, 64, generator=gen, dtype=torch.float64)
    ratio = trained.score_variance_ratio(q, k, causal=False)
    # over 512 x 512 pairs that share rows, the estimate's spread is about 0.07
    assert ratio.shape == (3,) and torch.all((ratio - 1).abs() < 0.25), ratio


def test_shared_means_raise_the_ratio_as_the_independent_prediction_says():
    """Coordinates N(m, 1) with m = 2 in every coordinate: Var(q_c k_c) = (1 + 4)^2 - 16 = 9."""
    gen = torch.Generator().manual_seed(1)
    q = 2 + torch.randn(1, 2, 1024, 32, generator=gen, dtype=torch.float64)
    k = 2 + torch.randn(1, 1, 1024, 32, generator=gen, dtype=torch.float64)  # GQA: 2 query heads, 1 key head
    predicted = trained.independent_prediction(q, k)
    assert torch.allclose(predicted, torch.full((2,), 9.0, dtype=torch.float64), atol=0.8), predicted
    assert torch.allclose(trained.score_variance_ratio(q, k, causal=True), predicted, rtol=0.2)


def test_coordinate_statistics_of_a_standard_normal_and_of_a_copied_coordinate():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(1, 1, 4096, 8, generator=gen, dtype=torch.float64)
    stats = trained.coordinate_statistics(x)
    assert stats["mean_squared"].item() < 1e-2 and abs(stats["variance"].item() - 1) < 0.05
    assert stats["abs_correlation"].item() < 0.03
    x[..., 1] = x[..., 0]  # one pair of the 28 perfectly correlated
    assert trained.coordinate_statistics(x)["abs_correlation"].item() > 1 / 28


def test_entropy_share_and_jacobian_of_uniform_and_one_hot_rows():
    uniform = torch.full((1, 1, 4, 4), 0.25, dtype=torch.float64)
    assert torch.allclose(trained.entropy_over_log_keys(uniform, causal=False), torch.ones(1, dtype=torch.float64))
    assert trained.one_hot_share(uniform, causal=False).item() == 0
    size, bound = trained.jacobian_size(uniform)
    assert math.isclose(size.item(), 1.5) and math.isclose(bound.item(), 3.0)
    one_hot = torch.eye(4, dtype=torch.float64)[None, None]
    assert trained.entropy_over_log_keys(one_hot, causal=False).item() == 0
    assert trained.one_hot_share(one_hot, causal=False).item() == 1
    assert trained.jacobian_size(one_hot)[0].item() == 0


def test_a_causal_rows_entropy_is_measured_against_the_keys_it_may_see():
    w = torch.tril(torch.ones(4, 4, dtype=torch.float64))
    w = (w / w.sum(-1, keepdim=True))[None, None]  # each row uniform over its keys
    assert torch.allclose(trained.entropy_over_log_keys(w, causal=True), torch.ones(1, dtype=torch.float64))
    assert math.isclose(trained.key_share(w, 0, causal=True).item(), (1 / 2 + 1 / 3 + 1 / 4) / 3)


def test_perplexity_of_uniform_logits_is_the_vocabulary_size():
    tokens = torch.tensor([[3, 1, 4, 1, 5]])
    assert math.isclose(trained.perplexity(torch.zeros(1, 5, 10), tokens), 10.0, rel_tol=1e-12)


@pytest.mark.parametrize("kept_first", [0, 4])
def test_a_sliding_window_keeps_the_cache_size_and_the_first_keys(kept_first):
    cache, length = 8, 20
    allowed = trained.sliding_window(length, cache, kept_first)
    counts = allowed.sum(-1)
    assert counts.tolist() == [min(i + 1, cache) for i in range(length)]
    assert not torch.triu(allowed, 1).any(), "causal"
    late = allowed[cache:]
    assert bool(late[:, :kept_first].all()) and (kept_first == 0 or not late[:, kept_first].any())
    assert bool(late[torch.arange(length - cache), torch.arange(cache, length)].all()), "each query sees itself"


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="kept_first must be in \\[0, cache\\), got 8 with cache=8"):
        trained.sliding_window(10, 8, 8)
    with pytest.raises(ValueError, match="query heads \\(3\\) must be a multiple of the key heads \\(2\\)"):
        trained.score_variance_ratio(torch.zeros(1, 3, 4, 8), torch.zeros(1, 2, 4, 8), causal=True)


@pytest.mark.skipif(not checkpoints.available("minilm"), reason=checkpoints.skipped("minilm", "the test"))
def test_a_probes_scale_and_mask_are_those_of_the_model_changed_by_hand():
    """probe(scale_factor=2) equals eager with every layer's own scaling doubled; an all-True
    mask equals the encoder's own (no padding)."""
    from attnlib.integrations import probes

    model, tokenizer = checkpoints.load("minilm")
    tokens = trained.reference_tokens(tokenizer, 24)
    with torch.no_grad():
        with probes.probe(model, record=False, scale_factor=2.0, backend="naive"):
            probed = model(input_ids=tokens).last_hidden_state
        with probes.probe(model, record=False, allowed=torch.ones(24, 24, dtype=torch.bool)) as calls:
            unmasked = model(input_ids=tokens).last_hidden_state
        plain = model(input_ids=tokens).last_hidden_state
        for layer in model.encoder.layer:
            layer.attention.self.scaling *= 2
        doubled = model(input_ids=tokens).last_hidden_state
        for layer in model.encoder.layer:
            layer.attention.self.scaling /= 2
    assert calls == [] and model.config._attn_implementation == "eager"
    assert (probed - doubled).abs().max() < 1e-4 and (probed - plain).abs().max() > 1e-2
    assert (unmasked - plain).abs().max() < 1e-4
