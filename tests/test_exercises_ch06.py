"""Chapter 6's checkers accept answers computed here independently and reject plausible mistakes helpfully."""
import math

import torch

from attnlib.book import exercises
from attnlib.heads import MultiHeadAttention


def test_twelve_heads():
    head_width = 768 // 12
    assert exercises.check("ex-06-twelve-heads", (head_width, math.sqrt(768) / math.sqrt(head_width)))
    feedback = exercises.check("ex-06-twelve-heads", (head_width, 768 / head_width))
    assert not feedback and "square roots" in feedback.message
    feedback = exercises.check("ex-06-twelve-heads", (768, 1.0))
    assert not feedback and "12 equal heads" in feedback.message


def gib(kv_heads, bytes_per_number=2):
    return 2 * 80 * 32768 * kv_heads * 128 * bytes_per_number / 2**30   # keys and values


def test_kv_cache_accepts_the_closed_form():
    assert exercises.check("ex-06-kv-cache", (gib(8), gib(64)))


def test_kv_cache_rejects_keys_only_and_float32():
    feedback = exercises.check("ex-06-kv-cache", (gib(8) / 2, gib(64) / 2))
    assert not feedback and "keys and the values" in feedback.message
    feedback = exercises.check("ex-06-kv-cache", (gib(8), gib(64, bytes_per_number=4)))
    assert not feedback and "mha_gib" in feedback.message and "2 bytes" in feedback.message


def test_kv_cache_rejects_decimal_gigabytes():
    feedback = exercises.check("ex-06-kv-cache", (gib(8) * 2**30 / 1e9, gib(64) * 2**30 / 1e9))
    assert not feedback and "2**30" in feedback.message


def hot_and_copy(temperature=2.5):
    torch.manual_seed(0)
    hot = MultiHeadAttention(32, 4, temperature=temperature, dtype=torch.float64)
    copy = MultiHeadAttention(32, 4, dtype=torch.float64)
    copy.load_state_dict(hot.state_dict())
    return hot, copy


def test_fold_temperature_accepts_the_folded_query_projection():
    hot, folded = hot_and_copy()
    with torch.no_grad():
        folded.q_proj.weight.copy_(hot.q_proj.weight / 2.5)
        folded.q_proj.bias.copy_(hot.q_proj.bias / 2.5)
    assert exercises.check("ex-06-fold-temperature", (hot, folded))


def test_fold_temperature_rejects_a_forgotten_bias():
    hot, folded = hot_and_copy()
    with torch.no_grad():
        folded.q_proj.weight.copy_(hot.q_proj.weight / 2.5)
    feedback = exercises.check("ex-06-fold-temperature", (hot, folded))
    assert not feedback and "bias" in feedback.message


def test_fold_temperature_rejects_a_multiplied_projection():
    hot, folded = hot_and_copy()
    with torch.no_grad():
        folded.q_proj.weight.copy_(hot.q_proj.weight * 2.5)
        folded.q_proj.bias.copy_(hot.q_proj.bias * 2.5)
    feedback = exercises.check("ex-06-fold-temperature", (hot, folded))
    assert not feedback and "multiplied" in feedback.message


def test_fold_temperature_rejects_an_unchanged_temperature():
    hot, _ = hot_and_copy()
    feedback = exercises.check("ex-06-fold-temperature", (hot, hot))
    assert not feedback and "temperature 1" in feedback.message


def test_fold_temperature_names_a_wrong_type():
    hot, _ = hot_and_copy()
    feedback = exercises.check("ex-06-fold-temperature", (hot, torch.nn.Linear(32, 32)))
    assert not feedback and "folded must be an attnlib MultiHeadAttention" in feedback.message
