"""Measurements on a trained model's attention: its queries and keys, its weights, its loss.

The functions take what :func:`attnlib.integrations.probes.probe` records of one layer
(queries ``(B, Hq, L, E)`` and keys ``(B, Hkv, S, E)``, with ``Hq`` a multiple of ``Hkv``)
and return one number per query head, averaged over the batch. ``causal`` says which
pairs the model computes: ``j <= i`` (a decoder) or all (an encoder). Only torch here;
the models come from :mod:`attnlib.checkpoints`.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch

from ..attention import attention_weights

TEXT = Path(__file__).parent / "data" / "python_reference_excerpt.txt"
#: the three sentences of Sentence-BERT's quickstart, whose similarities its documentation gives
QUICKSTART = ("The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium.")


def reference_text() -> str:
    """The English prose the chapter measures perplexity on: two chapters of the Python
    Language Reference ("Execution model", "The import system"), as CPython 3.11's
    ``pydoc_data.topics`` ships them; copyright the Python Software Foundation, PSF License.
    Stored in the library so that every Python version reads the same text."""
    return TEXT.read_text(encoding="utf-8")


def reference_tokens(tokenizer, count: int) -> torch.Tensor:
    """The first ``count`` tokens of :func:`reference_text` as ``tokenizer`` splits it, ``(1, count)``,
    the tokenizer's special tokens included (an encoder's [CLS] in front and [SEP] at the end)."""
    if not isinstance(count, int) or count < 2:
        raise ValueError(f"count must be an int >= 2, got {count!r}")
    ids = tokenizer(reference_text(), truncation=True, max_length=count, return_tensors="pt")["input_ids"]
    if ids.shape[1] != count:
        raise ValueError(f"count must be at most the text's {ids.shape[1]} tokens, got {count}")
    return ids


def _check_pair(query: torch.Tensor, key: torch.Tensor) -> None:
    if not (isinstance(query, torch.Tensor) and isinstance(key, torch.Tensor)):
        raise TypeError(f"query and key must be tensors, got {type(query).__name__} and {type(key).__name__}")
    if query.ndim != 4 or key.ndim != 4 or query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query must be (B, Hq, L, E) and key (B, Hkv, S, E) with the same E, "
                         f"got {tuple(query.shape)} and {tuple(key.shape)}")
    if query.shape[1] % key.shape[1]:
        raise ValueError(f"the query heads ({query.shape[1]}) must be a multiple of the key "
                         f"heads ({key.shape[1]})")


def key_per_query_head(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """The keys repeated so that query head ``h`` faces its group's key head ``h // (Hq/Hkv)``."""
    _check_pair(query, key)
    return key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)


def computed_pairs(length: int, causal: bool) -> torch.Tensor:
    """Bool ``(L, L)``: the query-key pairs a layer computes (``j <= i`` when ``causal``)."""
    full = torch.ones(length, length, dtype=torch.bool)
    return torch.tril(full) if causal else full


def score_variance_ratio(query: torch.Tensor, key: torch.Tensor, causal: bool) -> torch.Tensor:
    """``Var(q_i . k_j) / d_k`` per query head ``(Hq,)``, over the pairs the layer computes
    (unscaled dot products: under Chapter 2's model, unit-variance independent coordinates,
    it is 1)."""
    key = key_per_query_head(query, key)
    scores = (query.double() @ key.double().transpose(-1, -2))
    pairs = computed_pairs(scores.shape[-1], causal)
    values = scores[..., pairs]  # (B, Hq, pairs)
    return values.var(dim=-1).mean(0) / query.shape[-1]


def coordinate_statistics(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per head of ``x`` ``(B, H, L, E)``, over the tokens: the mean of the coordinates'
    squared means, the mean of their variances, and the mean absolute correlation
    between two different coordinates. Chapter 2's model: 0, 1 and 0."""
    x = x.double().transpose(0, 1).flatten(1, 2)  # (H, B*L, E)
    mean, variance = x.mean(1), x.var(1)
    centred = (x - mean[:, None]) / x.std(1)[:, None]
    correlation = centred.transpose(1, 2) @ centred / (x.shape[1] - 1)  # (H, E, E)
    e = x.shape[-1]
    off_diagonal = ~torch.eye(e, dtype=torch.bool)
    return {"mean_squared": (mean ** 2).mean(1), "variance": variance.mean(1),
            "abs_correlation": correlation[:, off_diagonal].abs().mean(1)}


def weights(query: torch.Tensor, key: torch.Tensor, scale: float, causal: bool) -> torch.Tensor:
    """Softmax weights ``(B, Hq, L, S)`` of one layer, at ``scale``, in float64."""
    key = key_per_query_head(query, key)
    return attention_weights(query.double(), key.double(), scale=scale, is_causal=causal)


def keys_seen(w: torch.Tensor, causal: bool) -> torch.Tensor:
    """``(L,)``: how many keys each row of ``w`` ``(..., L, S)`` may see (``i + 1`` when ``causal``)."""
    length, keys = w.shape[-2], w.shape[-1]
    if causal:
        return torch.arange(1, length + 1).clamp(max=keys)
    return torch.full((length,), keys)


def entropy_over_log_keys(w: torch.Tensor, causal: bool) -> torch.Tensor:
    """Per head, the mean over rows of ``H(w_i) / ln S_i`` (``S_i`` the keys row ``i`` may
    see; rows with one key are left out): 1 is uniform, 0 one-hot."""
    seen = keys_seen(w, causal)
    rows = seen > 1
    entropy = -(w * torch.log(torch.where(w > 0, w, 1.0))).sum(-1)  # 0 ln 0 = 0
    ratio = entropy[..., rows] / torch.log(seen[rows].double())
    return ratio.mean(-1).mean(0)


def one_hot_share(w: torch.Tensor, causal: bool, threshold: float = 0.9) -> torch.Tensor:
    """Per head, the share of rows (with more than one key) whose top weight exceeds ``threshold``."""
    rows = keys_seen(w, causal) > 1
    return (w.amax(-1)[..., rows] > threshold).double().mean(-1).mean(0)


def jacobian_size(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per head, the mean over rows of ``sum |J|`` = ``2 (1 - sum_j w_j^2)`` and of its
    bound ``4 (1 - max_j w_j)`` (Chapter 4)."""
    abs_sum = 2 * (1 - (w ** 2).sum(-1))
    bound = 4 * (1 - w.amax(-1))
    return abs_sum.mean((0, 2)), bound.mean((0, 2))


def key_share(w: torch.Tensor, position: int, causal: bool) -> torch.Tensor:
    """Per head, the mean weight that the queries put on key ``position`` (a decoder's queries
    before and at it are left out: they cannot see it, or see little else)."""
    first_query = position + 1 if causal else 0
    return w[..., first_query:, position].mean((0, 2))


def perplexity(logits: torch.Tensor, tokens: torch.Tensor) -> float:
    """``exp`` of the mean cross-entropy of predicting ``tokens[:, 1:]`` from ``logits[:, :-1]``."""
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).double(),
                                             tokens[:, 1:].flatten())
    return math.exp(loss.item())


def sliding_window(length: int, cache: int, kept_first: int = 0) -> torch.Tensor:
    """Bool ``(L, L)``: a causal window of ``cache`` keys per query, of which the first
    ``kept_first`` are the sequence's first keys (StreamingLLM's sinks) once the window has
    moved past them, and the rest the newest."""
    if not 0 <= kept_first < cache:
        raise ValueError(f"kept_first must be in [0, cache), got {kept_first} with cache={cache}")
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    causal = j <= i
    recent = j > i - (cache - kept_first)
    first = j < kept_first
    return causal & (recent | first)


def independent_prediction(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """``Var(q . k) / d_k`` per query head if every coordinate of ``q`` were independent of
    every other and of ``k``, each keeping its measured mean and variance:
    ``sum_c [(s_qc + m_qc^2)(s_kc + m_kc^2) - m_qc^2 m_kc^2] / d_k``. With means 0 and
    variances 1 it is Chapter 2's 1; the gap to the measured ratio is the coordinates'
    correlation."""
    key = key_per_query_head(query, key)
    q, k = query.double().transpose(0, 1).flatten(1, 2), key.double().transpose(0, 1).flatten(1, 2)
    mq, sq, mk, sk = q.mean(1), q.var(1), k.mean(1), k.var(1)
    return ((sq + mq**2) * (sk + mk**2) - mq**2 * mk**2).mean(-1)


def sentence_similarities(model, tokenizer, sentences=QUICKSTART) -> torch.Tensor:
    """Cosine similarities ``(n, n)`` of an encoder's sentence embeddings, as Sentence-BERT
    makes them: the mean of the last layer's token vectors over each sentence's tokens
    (padding left out), scaled to unit length."""
    batch = tokenizer(list(sentences), padding=True, return_tensors="pt")
    with torch.no_grad():
        tokens = model(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].to(tokens.dtype)
    embedding = torch.nn.functional.normalize((tokens * mask).sum(1) / mask.sum(1), dim=-1)
    return embedding @ embedding.T


def greedy_answer(model, tokenizer, question: str, new_tokens: int = 16) -> str:
    """A chat model's answer to ``question`` through its chat template, each token the most
    likely one, without the special tokens."""
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                           add_generation_prompt=True, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        tokens = model.generate(prompt, max_new_tokens=new_tokens, do_sample=False)
    return tokenizer.decode(tokens[0, prompt.shape[1]:], skip_special_tokens=True)
