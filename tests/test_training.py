"""attnlib.book.training: the copy task, the model's causality and init, the statistics, learning.

Expected values are written out here (scale factors, the oracle's loss,
the entropy of uniform weights) or estimated independently of the code
under test (sample standard deviations, sample variances).
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlib.book import training
from attnlib.book.training import CopyTask, CopyTransformer, ModelConfig


def test_scale_rules_give_the_intended_factors():
    assert training.scale_for("1/sqrt(d)", 64) == 0.125
    assert training.scale_for("1", 64) == 1.0
    assert training.scale_for("1/d", 64) == 0.015625
    assert ModelConfig(head_dim=256, scale_rule="1/sqrt(d)").scale == 0.0625


def test_copy_task_layout_and_optimal_loss():
    task = CopyTask(vocab_size=5, length=4)
    inputs, targets = task.batch(3, torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (3, 8)
    assert (inputs[:, 4] == 5).all()  # the separator follows the 4 tokens
    assert torch.equal(targets[:, task.copied()], inputs[:, :4])
    # an oracle: uniform over the 5 tokens where the target is random, certain elsewhere
    oracle = torch.full((3, 8, 6), -1e9)
    oracle[:, task.random_targets(), :5] = 0.0
    certain = ~task.random_targets()
    oracle[:, certain] = oracle[:, certain].scatter(-1, targets[:, certain, None], 0.0)
    loss = F.cross_entropy(oracle.transpose(1, 2), targets).item()
    assert loss == pytest.approx(3 * math.log(5) / 8, rel=1e-6)
    assert task.optimal_loss() == pytest.approx(3 * math.log(5) / 8, rel=1e-12)


@pytest.mark.parametrize("layernorm,qk_norm,post_ln", [(True, False, False), (False, False, False),
                                                       (True, True, False), (True, False, True)])
def test_a_future_token_does_not_change_earlier_logits(layernorm, qk_norm, post_ln):
    torch.manual_seed(0)
    task = CopyTask()
    model = CopyTransformer(ModelConfig(layernorm=layernorm, qk_norm=qk_norm, post_ln=post_ln),
                            task.n_tokens, task.context)
    inputs, _ = task.batch(2, torch.Generator().manual_seed(1))
    changed = inputs.clone()
    changed[:, 20] = (changed[:, 20] + 1) % task.vocab_size
    with torch.no_grad():
        before, after = model(inputs), model(changed)
    assert torch.equal(before[:, :20], after[:, :20])
    assert (before[:, 20:] - after[:, 20:]).abs().max() > 1e-3  # the change is seen later


@pytest.mark.parametrize("init,std_times_sqrt_fan_in", [("lecun", 1.0), ("torch", 3**-0.5)])
def test_initialisation_has_the_intended_standard_deviation(init, std_times_sqrt_fan_in):
    torch.manual_seed(0)
    config = ModelConfig(init=init, head_dim=256, d_model=64)
    model = CopyTransformer(config, 17, 32)
    weight = model.blocks[0].attn.q_proj.weight  # 512 x 64: 32768 samples
    assert weight.std().item() * math.sqrt(64) == pytest.approx(std_times_sqrt_fan_in, rel=0.02)
    readout_bias = model.readout.bias
    assert (readout_bias == 0).all() == (init == "lecun")


def test_post_ln_normalises_each_sublayer_output():
    torch.manual_seed(0)
    block = training.Block(ModelConfig(post_ln=True, d_model=64))
    out = block(3 * torch.randn(2, 8, 64))
    # a LayerNorm with its initial gain 1 and bias 0 is last: mean 0, variance 1 per token
    assert out.mean(-1).abs().max() < 1e-5
    assert out.var(-1, unbiased=False).sub(1).abs().max() < 1e-3


def test_value_dim_sets_the_values_apart_from_queries_and_keys():
    attn = training.CausalSelfAttention(ModelConfig(head_dim=256, value_dim=64, n_heads=2, d_model=64))
    assert attn.q_proj.weight.shape == (512, 64) and attn.k_proj.weight.shape == (512, 64)
    assert attn.v_proj.weight.shape == (128, 64) and attn.out_proj.weight.shape == (64, 128)
    assert attn(torch.randn(1, 5, 64)).shape == (1, 5, 64)


def test_per_coordinate_variances_of_scaled_vectors():
    gen = torch.Generator().manual_seed(0)
    q = 2.0 * torch.randn(4, 2, 64, 16, generator=gen, dtype=torch.float64)  # Var(q_i) = 4
    k = 0.5 * torch.randn(4, 2, 64, 16, generator=gen, dtype=torch.float64)  # Var(k_i) = 1/4
    stats = training.attention_statistics(q, k, torch.ones(4, 2, 64, 64) / 64, scale=0.25)
    # 512 rows per coordinate: each sample variance within a few percent
    assert stats["var_q"] == pytest.approx(4.0, rel=0.05)
    assert stats["var_k"] == pytest.approx(0.25, rel=0.05)


def test_the_logged_weight_norm_is_that_of_w_q_at_initialisation():
    config = ModelConfig(head_dim=16, init="lecun")
    log = training.train(config, steps=1, log_every=1, seed=2)
    torch.manual_seed(2)
    model = CopyTransformer(config, CopyTask().n_tokens, CopyTask().context)
    expected = math.sqrt(sum(b.attn.q_proj.weight.square().sum().item() for b in model.blocks))
    assert log.weight_q[0] == pytest.approx(expected, rel=1e-6)


def test_statistics_of_uniform_attention():
    length, width = 4, 8
    q = torch.zeros(1, 1, length, width)
    k = torch.randn(1, 1, length, width, generator=torch.Generator().manual_seed(0))
    weights = torch.tensor([[1, 0, 0, 0], [1 / 2, 1 / 2, 0, 0], [1 / 3, 1 / 3, 1 / 3, 0],
                            [1 / 4, 1 / 4, 1 / 4, 1 / 4]])[None, None]
    stats = training.attention_statistics(q, k, weights, scale=1.0)
    expected_entropy = (0 + math.log(2) + math.log(3) + math.log(4)) / 4
    assert stats["entropy"] == pytest.approx(expected_entropy, rel=1e-6)
    assert training.uniform_causal_entropy(4) == pytest.approx(expected_entropy, rel=1e-12)
    assert stats["max_weight"] == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4, rel=1e-6)
    assert stats["max_abs_logit"] == 0.0 and stats["var_qk_over_d"] == 0.0


def test_statistics_of_random_unit_variance_vectors():
    width = 64
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 8, 4, 64, width, generator=gen, dtype=torch.float64)
    weights = torch.softmax(torch.randn(8, 4, 64, 64, generator=gen), -1)  # not used by Var
    stats = training.attention_statistics(q, k, weights, scale=width**-0.5)
    allowed = torch.ones(64, 64, dtype=torch.bool).tril()
    dots = torch.einsum("bhid,bhjd->bhij", q, k)[..., allowed]
    # 8 * 4 * 2080 dot products: Var/d within a few standard errors of 1
    assert stats["var_qk_over_d"] == pytest.approx(1.0, abs=0.05)
    assert stats["var_qk_over_d"] == pytest.approx(dots.var().item() / width, rel=1e-9)
    assert stats["max_abs_logit"] == pytest.approx(dots.abs().max().item() / 8, rel=1e-9)


def test_a_key_offset_moves_the_scores_between_rows_not_within_them():
    # k + c adds q_i . c to every score of row i: softmax's shift invariance
    width = 16
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 4, 2, 48, width, generator=gen, dtype=torch.float64)
    offset = torch.full((width,), 3.0, dtype=torch.float64)
    weights = torch.ones(4, 2, 48, 48) / 48  # not used by these measures
    plain = training.attention_statistics(q, k, weights, scale=0.25)
    shifted = training.attention_statistics(q, k + offset, weights, scale=0.25)
    assert shifted["within_qk_over_d"] == pytest.approx(plain["within_qk_over_d"], rel=1e-9)
    # the row means q_i . c vary with q_i: Var(q . c) / d = |c|^2 / d = 9 per unit-variance q
    assert shifted["between_qk_over_d"] - plain["between_qk_over_d"] == pytest.approx(9.0, rel=0.15)
    # the squared mean of each key coordinate is 3^2, give or take the sample mean's noise
    assert plain["mean_sq_k"] < 0.1 and shifted["mean_sq_k"] == pytest.approx(9.0, rel=0.05)
    assert shifted["mean_sq_q"] == plain["mean_sq_q"] < 0.1


def test_independent_unit_coordinates_put_the_variance_within_rows():
    width = 32
    gen = torch.Generator().manual_seed(2)
    q, k = torch.randn(2, 8, 2, 64, width, generator=gen, dtype=torch.float64)
    stats = training.attention_statistics(q, k, torch.ones(8, 2, 64, 64) / 64, scale=width**-0.5)
    # Chapter 2's model: Var(q . k) / d = 1, all of it within rows; the means 0
    assert stats["within_qk_over_d"] == pytest.approx(1.0, abs=0.08)
    assert stats["between_qk_over_d"] < 0.05
    assert stats["independent_within"] == pytest.approx(1.0, abs=0.05)
    assert stats["mean_sq_q"] < 0.05 and stats["mean_sq_k"] < 0.05


def test_a_short_run_learns_to_copy():
    torch.set_num_threads(1)
    task = CopyTask()
    log = training.train(ModelConfig(head_dim=16), task, steps=200, log_every=50, seed=0)
    assert log.step == [0, 50, 100, 150, 200]
    ln_v = math.log(task.vocab_size)
    assert log.copy_loss[0] > ln_v - 0.3  # at initialisation the copies are guesses
    assert log.copy_loss[-1] < 0.5  # far below ln 16 = 2.77: attention carries the tokens
    assert log.random_loss[-1] > ln_v - 0.3  # no model beats ln V on the random half
    assert all(len(getattr(log, name)) == 5 for name in training.TrainingLog.CURVES)
    assert all(g > 0 for g in log.grad_q + log.grad_k)
    # every logged copy loss lies in (0, 10): the first step below 10 is step 0, none is below 0
    assert log.first_step_below(10.0) == 0 and log.first_step_below(0.0) is None
    below_half = log.first_step_below(0.5)
    assert log.copy_loss[log.step.index(below_half)] < 0.5
    assert all(c >= 0.5 for s, c in zip(log.step, log.copy_loss) if s < below_half)


def test_the_logged_gradient_norm_is_that_of_w_q():
    config, task = ModelConfig(head_dim=16, n_layers=1), CopyTask()
    log = training.train(config, task, steps=1, log_every=1, seed=3)
    torch.manual_seed(3)  # the same initial weights and first batch as train's step 0
    model = CopyTransformer(config, task.n_tokens, task.context)
    inputs, targets = task.batch(32, torch.Generator().manual_seed(3))
    F.cross_entropy(model(inputs).transpose(1, 2), targets).backward()
    expected = model.blocks[0].attn.q_proj.weight.grad.norm().item()
    assert log.grad_q[0] == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("make,error,words", [
    (lambda: ModelConfig(scale_rule="sqrt"), ValueError, "scale_rule"),
    (lambda: ModelConfig(init="xavier"), ValueError, "init"),
    (lambda: ModelConfig(head_dim=0), ValueError, "head_dim"),
    (lambda: ModelConfig(head_dim=1.5), TypeError, "head_dim"),
    (lambda: ModelConfig(layernorm="yes"), TypeError, "layernorm"),
    (lambda: ModelConfig(layernorm=False, post_ln=True), ValueError, "post_ln"),
    (lambda: ModelConfig(value_dim=0), ValueError, "value_dim"),
    (lambda: CopyTask(length=1), ValueError, "length"),
    (lambda: training.scale_for("1/d", -4), ValueError, "head_dim"),
    (lambda: training.train("config"), TypeError, "config"),
    (lambda: training.train(ModelConfig(), optimizer="rmsprop"), ValueError, "optimizer"),
    (lambda: training.train(ModelConfig(), lr=-1.0), ValueError, "lr"),
    (lambda: training.train(ModelConfig(), steps=0), ValueError, "steps"),
])
def test_bad_arguments_are_named(make, error, words):
    with pytest.raises(error, match=words) as caught:
        make()
    assert "got" in str(caught.value)
