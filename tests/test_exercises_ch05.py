"""Chapter 5's checkers accept answers computed here independently and reject plausible mistakes helpfully."""
import numpy as np
import torch

from attnlib.book import exercises


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def decode_example():
    # the chapter's Q6, K6, V6
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(6, 8, generator=generator, dtype=torch.float64).numpy() for _ in range(3)]


def test_decode_one_accepts_attention_over_the_keys_so_far():
    q, k, v = decode_example()
    decoded = np.stack([softmax(q[t] @ k[:t + 1].T / np.sqrt(8)) @ v[:t + 1] for t in range(6)])
    assert exercises.check("ex-05-decode-one", (decoded, False))
    feedback = exercises.check("ex-05-decode-one", (decoded, True))
    assert not feedback and "is any key hidden" in feedback.message


def test_decode_one_rejects_queries_that_see_every_key():
    q, k, v = decode_example()
    feedback = exercises.check("ex-05-decode-one", (softmax(q @ k.T / np.sqrt(8)) @ v, False))
    assert not feedback and "keys 0..t only" in feedback.message


def float16_inputs():
    # the precision table's float16 row with S = 1024: seed 0, 256 queries, width 64
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(n, 64, generator=generator).half().numpy() for n in (256, 1024, 1024)]


def error_with_sums_in(sum_dtype, q, k, v):
    # float16 dot products accumulated term by term, the two sums over keys in sum_dtype
    scores = np.zeros((q.shape[0], k.shape[0]), np.float16)
    for e in range(q.shape[1]):
        scores = scores + q[:, e:e + 1] * k[:, e][None, :]
    scores = scores * np.float16(1 / np.sqrt(64))
    exps = np.exp(scores - scores.max(-1, keepdims=True)).astype(sum_dtype)
    total = np.zeros((q.shape[0], 1), sum_dtype)
    mixed = np.zeros((q.shape[0], v.shape[1]), sum_dtype)
    for j in range(k.shape[0]):
        total = total + exps[:, j:j + 1]
        mixed = mixed + exps[:, j:j + 1] * v[j].astype(sum_dtype)[None, :]
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    reference = softmax(q64 @ k64.T / 8) @ v64
    return np.abs((mixed / total).astype(np.float64) - reference).max()


def test_which_sum_accepts_float32_sums_and_rejects_float16_sums():
    q, k, v = float16_inputs()
    assert exercises.check("ex-05-which-sum", error_with_sums_in(np.float32, q, k, v))
    feedback = exercises.check("ex-05-which-sum", error_with_sums_in(np.float16, q, k, v))
    assert not feedback and ".float()" in feedback.message


def test_which_sum_rejects_the_error_of_float32_dot_products():
    q, k, v = float16_inputs()
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    float32_everywhere = softmax((q64 @ k64.T / 8).astype(np.float32)) @ v64.astype(np.float32)
    error = np.abs(float32_everywhere - softmax(q64 @ k64.T / 8) @ v64).max()
    feedback = exercises.check("ex-05-which-sum", error)
    assert not feedback and "keep the dot products in float16" in feedback.message


BATCH_DECODE_MASK = np.array([[[True] * 5], [[True] * 3 + [False] * 2]])


def test_batch_decode_accepts_the_padding_mask():
    assert exercises.check("ex-05-batch-decode", torch.from_numpy(BATCH_DECODE_MASK))


def test_batch_decode_rejects_an_inverted_mask():
    feedback = exercises.check("ex-05-batch-decode", ~BATCH_DECODE_MASK)
    assert not feedback and "inverted" in feedback.message


def test_batch_decode_rejects_a_top_left_causal_part():
    top_left = np.array([True, False, False, False, False])
    feedback = exercises.check("ex-05-batch-decode", BATCH_DECODE_MASK & top_left)
    assert not feedback and "every cached key is in its past" in feedback.message


def test_batch_decode_rejects_padding_at_the_start():
    feedback = exercises.check("ex-05-batch-decode", np.array([[[True] * 5], [[False] * 2 + [True] * 3]]))
    assert not feedback and "only keys 0, 1 and 2" in feedback.message


def test_batch_decode_explains_the_shape():
    feedback = exercises.check("ex-05-batch-decode", BATCH_DECODE_MASK[:, None])
    assert not feedback and "shape (2, 1, 5)" in feedback.message


def clipping_example():
    # the chapter's clipping example: seed 0, five queries and keys of width 8, causal
    generator = torch.Generator().manual_seed(0)
    q, k = (torch.randn(5, 8, generator=generator).numpy().astype(np.float64) for _ in range(2))
    return q @ k.T / np.sqrt(8), np.tril(np.ones((5, 5), dtype=bool))


def test_renormalise_accepts_the_masked_softmax_and_the_kept_mass_from_log_sum_exps():
    scores, causal = clipping_example()
    masked = softmax(np.where(causal, scores, -np.inf))
    # the derivation: the mass a row keeps is exp(lse over its allowed keys - lse over all keys)
    lse = np.log(np.exp(scores).sum(-1))
    lse_allowed = np.log(np.where(causal, np.exp(scores), 0).sum(-1))
    assert exercises.check("ex-05-renormalise", (masked, np.exp(lse_allowed - lse)))


def test_renormalise_names_the_step_a_wrong_answer_skipped():
    scores, causal = clipping_example()
    weights = softmax(scores)
    kept = (weights * causal).sum(-1)
    renormalised = weights * causal / kept[:, None]
    for wrong, hint in [((weights * causal, kept), "divide each row"), ((weights, kept), "zero the keys"),
                        ((renormalised, 1 - kept), "clipping removed"), ((renormalised, 1 / kept), "factor")]:
        feedback = exercises.check("ex-05-renormalise", wrong)
        assert not feedback and hint in feedback.message
