"""Chapter 13's checkers accept the answers computed with attnlib and name plausible mistakes."""
import sympy
import torch

import attnlib
from attnlib.book import exercises
from attnlib.heads import kv_cache_bytes

SCORES = [2.0, 1.0, 0.0, -1.0]


def sink_share(window=None, sink=1.0, dtype=torch.float64):
    """What the last query's weights leave to the sink; keys chosen so that q . k_j = SCORES[j]."""
    query = torch.ones(1, 4, 1, dtype=dtype)  # one head, four queries of width 1
    key = torch.tensor(SCORES, dtype=dtype).reshape(1, 4, 1)
    weights = attnlib.attention_weights(query, key, scale=1.0, window=window,
                                        sinks=torch.tensor([sink], dtype=dtype))
    return 1 - weights[0, -1].sum().item()


def test_sink_share_accepts_attnlibs_weights():
    assert exercises.check("ex-13-sink-share", [sink_share(), sink_share(window=(1, 0))])


def test_sink_share_accepts_float32():
    answer = torch.tensor([sink_share(dtype=torch.float32), sink_share((1, 0), dtype=torch.float32)])
    assert exercises.check("ex-13-sink-share", answer)


def test_sink_share_names_the_wrong_keys():
    first_two = attnlib.attention_weights(torch.ones(1, 4, 1, dtype=torch.float64),
                                          torch.tensor(SCORES, dtype=torch.float64).reshape(1, 4, 1),
                                          scale=1.0, window=(None, 0),
                                          sinks=torch.tensor([1.0], dtype=torch.float64))[0, 1]
    feedback = exercises.check("ex-13-sink-share", [sink_share(), 1 - first_two.sum().item()])
    assert not feedback and "last two keys" in feedback.message


def test_sink_share_names_softmax_plus_one():
    feedback = exercises.check("ex-13-sink-share", [sink_share(sink=0.0), sink_share((1, 0), sink=0.0)])
    assert not feedback and "softmax plus one" in feedback.message


def test_sink_share_names_the_keys_share():
    feedback = exercises.check("ex-13-sink-share", [1 - sink_share(), 1 - sink_share((1, 0))])
    assert not feedback and "what the keys receive" in feedback.message


def test_sink_derivation_names_the_share_and_the_sign():
    zeta, lse = sympy.symbols("zeta lse", real=True)
    share = 1 / (1 + sympy.exp(lse - zeta))
    assert exercises.check("ex-13-sink-derivation", share * (1 - share))
    feedback = exercises.check("ex-13-sink-derivation", share)
    assert not feedback and "the share itself" in feedback.message
    feedback = exercises.check("ex-13-sink-derivation", -share * (1 - share))
    assert not feedback and "sign" in feedback.message


def test_window_conventions_name_each_off_by_one():
    right = (4097, 4095, 257)
    assert exercises.check("ex-13-window-conventions", right)
    for wrong, part, words in [((4096, 4095, 257), "(a)", "counts the query as well"),
                               ((4097, 4096, 257), "(b)", "only the keys before the query"),
                               ((4097, 4095, 256), "(c)", "count the query's own key")]:
        feedback = exercises.check("ex-13-window-conventions", wrong)
        assert not feedback and feedback.message.startswith(part) and words in feedback.message


def gemma_cache(sliding_positions=4095, gib=2**30):
    """The three sizes of ex-13-gemma-cache, from attnlib's kv_cache_bytes."""
    def size(global_layers, n):
        return (kv_cache_bytes(global_layers, 8, 256, n, dtype=torch.bfloat16)
                + kv_cache_bytes(42 - global_layers, 8, 256, min(n, sliding_positions), dtype=torch.bfloat16)) / gib
    return size(21, 8192), size(21, 131072), size(42, 131072)


def test_gemma_cache_accepts_float32_and_names_the_slips():
    assert exercises.check("ex-13-gemma-cache", torch.tensor(gemma_cache(), dtype=torch.float32).tolist())
    feedback = exercises.check("ex-13-gemma-cache", gemma_cache(sliding_positions=4096))
    assert not feedback and "w - 1 positions" in feedback.message
    feedback = exercises.check("ex-13-gemma-cache", gemma_cache(gib=1e9))
    assert not feedback and "2**30" in feedback.message


def streaming_mask(window=3, first=2):
    return attnlib.causal_mask(10, 10) & (attnlib.window_mask(10, 10, (window - 1, 0)) | (torch.arange(10) < first))


def test_streaming_mask_names_the_window_alone_and_a_wide_window():
    assert exercises.check("ex-13-streaming-mask", streaming_mask())
    feedback = exercises.check("ex-13-streaming-mask", streaming_mask(first=0))
    assert not feedback and "window alone" in feedback.message
    feedback = exercises.check("ex-13-streaming-mask", streaming_mask(window=4))
    assert not feedback and "one key too many" in feedback.message
    feedback = exercises.check("ex-13-streaming-mask", streaming_mask().double())
    assert not feedback and "bool array" in feedback.message
