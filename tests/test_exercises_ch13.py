"""Chapter 13's checker accepts the answer computed with attnlib and names plausible mistakes."""
import torch

import attnlib
from attnlib import exercises

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
