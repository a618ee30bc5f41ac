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


def test_the_within_and_between_row_split_adds_up_and_a_key_mean_moves_only_the_between_part():
    """A constant added to every key shifts each row by q_i . mu (softmax ignores it): the
    within-row variance stays, the between-row variance grows, and the two add to the pooled."""
    gen = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 1, 2, 96, 16, generator=gen, dtype=torch.float64)
    shifted = k + 3.0
    for causal in (False, True):
        before = trained.score_variance_split(q, k, causal)
        after = trained.score_variance_split(q, shifted, causal)
        pairs = int(trained.computed_pairs(96, causal).sum())
        pooled = trained.score_variance_ratio(q, shifted, causal) * (pairs - 1) / pairs
        assert torch.allclose(after["within"] + after["between"], pooled, rtol=1e-12)
        assert torch.allclose(after["within"], before["within"], rtol=1e-12)
        assert torch.all(after["between"] > 5 * before["between"])
        w = trained.weights(q, k, 0.25, causal)
        assert torch.allclose(trained.weights(q, shifted, 0.25, causal), w, atol=1e-12)


def test_the_independent_split_matches_a_sample_with_key_means_and_sums_to_the_prediction():
    """Coordinates N(2, 1): within-row (1 + 4) * 1 = 5 and between-row 1 * 4 = 4 a coordinate."""
    gen = torch.Generator().manual_seed(4)
    q = 2 + torch.randn(1, 2, 2048, 16, generator=gen, dtype=torch.float64)
    k = 2 + torch.randn(1, 1, 2048, 16, generator=gen, dtype=torch.float64)
    split = trained.independent_split(q, k)
    assert torch.allclose(split["within"], torch.full((2,), 5.0, dtype=torch.float64), atol=0.3)
    assert torch.allclose(split["between"], torch.full((2,), 4.0, dtype=torch.float64), atol=0.3)
    assert torch.equal(split["within"] + split["between"], trained.independent_prediction(q, k))
    measured = trained.score_variance_split(q, k, causal=False)
    assert torch.allclose(measured["within"], split["within"], rtol=0.1)
    assert torch.allclose(measured["between"], split["between"], rtol=0.15)


def test_one_hot_rows_are_split_by_whether_their_top_key_is_the_first():
    w = torch.zeros(1, 1, 4, 4, dtype=torch.float64)
    w[0, 0, :, 0] = 1.0                    # rows 0-1 on the first key
    w[0, 0, 2] = torch.tensor([0.0, 0.0, 1.0, 0.0])  # row 2 on itself
    w[0, 0, 3] = 0.25                       # row 3 uniform
    first, elsewhere = trained.one_hot_shares_by_top(w, causal=False)
    assert (first.item(), elsewhere.item()) == (0.5, 0.25)
    assert math.isclose(first.item() + elsewhere.item(), trained.one_hot_share(w, causal=False).item())
    pattern = trained.top_key_pattern(w)
    assert {kind: share.item() for kind, share in pattern.items()} == \
        {"first": 2 / 3, "self": 1 / 3, "previous": 0.0, "elsewhere": 0.0}


def test_a_window_keeping_any_positions_holds_the_cache_size():
    allowed = trained.window_keeping(40, 8, (20, 21))
    assert torch.equal(trained.window_keeping(40, 8, range(4)), trained.sliding_window(40, 8, 4))
    assert allowed[30, [20, 21]].all() and allowed[30].sum() == 8 and not allowed[19, 20]
    assert allowed.sum(-1).max() == 8
    with pytest.raises(ValueError, match="kept must be fewer than cache=8 positions in \\[0, 40\\)"):
        trained.window_keeping(40, 8, (45,))


@pytest.mark.skipif(not checkpoints.available("smollm2"), reason=checkpoints.skipped("smollm2", "the test"))
def test_queries_before_rotation_turn_into_the_probed_ones_by_rope():
    """SmolLM2's q_proj output, rotated by the model's own rotary embedding, is what the probe
    records; the position-0 query is not turned at all."""
    from attnlib.integrations import probes
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model, tokenizer = checkpoints.load("smollm2")
    tokens = trained.reference_tokens(tokenizer, 12)
    (q0, k0), *_ = trained.before_rotation(model, tokens)
    with torch.no_grad(), probes.probe(model) as calls:
        model(input_ids=tokens)
    cos, sin = model.model.rotary_emb(q0, torch.arange(12)[None])
    q, k = apply_rotary_pos_emb(q0, k0, cos, sin)
    assert (q - calls[0].query).abs().max() < 1e-4 and (k - calls[0].key).abs().max() < 1e-4
    assert torch.allclose(q0[..., 0, :], calls[0].query[..., 0, :])
    assert not torch.allclose(q0[..., 5, :], calls[0].query[..., 5, :], atol=1e-3)


@pytest.mark.skipif(not checkpoints.available("minilm"), reason=checkpoints.skipped("minilm", "the test"))
def test_layernorm_constants_are_the_queries_of_a_token_whose_normalised_part_is_zero():
    """A hidden state equal to the LayerNorm's beta (x_hat = 0) projects to W beta + b."""
    model, tokenizer = checkpoints.load("minilm")
    c_q, c_k = trained.layernorm_constants(model, 2)
    beta = model.encoder.layer[1].output.LayerNorm.bias
    attention = model.encoder.layer[2].attention.self
    with torch.no_grad():
        assert torch.allclose(c_q.flatten().float(), attention.query(beta), atol=1e-5)
        assert torch.allclose(c_k.flatten().float(), attention.key(beta), atol=1e-5)
    assert c_q.shape == (12, 32)
    x = c_q[None, :, None].expand(1, 12, 5, 32)
    same = trained.mean_against_constant(2 * x, c_q)
    assert torch.allclose(same["length"], torch.full((12,), 0.5, dtype=torch.float64))
    assert torch.allclose(same["cosine"], torch.ones(12, dtype=torch.float64))
    windows = trained.reference_windows(tokenizer, 32, 3)
    assert torch.equal(windows[:1], trained.reference_tokens(tokenizer, 32))
    assert windows[:, 0].eq(tokenizer.cls_token_id).all() and windows[:, -1].eq(tokenizer.sep_token_id).all()
    assert not torch.equal(windows[1, 1:-1], windows[2, 1:-1])
