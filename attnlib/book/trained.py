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


def reference_windows(tokenizer, count: int, windows: int) -> torch.Tensor:
    """``(windows, count)``: disjoint windows of :func:`reference_text`, one after the other,
    each with the tokenizer's special tokens around it as :func:`reference_tokens` puts them
    (so window 0 is ``reference_tokens(tokenizer, count)``)."""
    if not isinstance(windows, int) or windows < 1:
        raise ValueError(f"windows must be an int >= 1, got {windows!r}")
    ids = tokenizer(reference_text(), add_special_tokens=False)["input_ids"]
    plain, wrapped = (tokenizer("x", add_special_tokens=special)["input_ids"] for special in (False, True))
    start = next(i for i in range(len(wrapped)) if wrapped[i:i + len(plain)] == plain)
    before, after = wrapped[:start], wrapped[start + len(plain):]
    inner = count - len(before) - len(after) if isinstance(count, int) else 0
    if inner < 1:
        raise ValueError(f"count must be an int above the {len(before) + len(after)} special tokens, "
                         f"got {count!r}")
    if windows * inner > len(ids):
        raise ValueError(f"{windows} windows of {inner} text tokens need {windows * inner}, "
                         f"the text has {len(ids)}")
    return torch.tensor([before + ids[w * inner:(w + 1) * inner] + after for w in range(windows)])


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


def score_variance_split(query: torch.Tensor, key: torch.Tensor, causal: bool) -> dict[str, torch.Tensor]:
    """The variance of ``q_i . k_j / d_k`` over the computed pairs, per query head ``(Hq,)``,
    split by the law of total variance: ``within``, the mean over pairs of the squared
    distance of a score from its row's mean (the spread that softmax sees: a constant added
    to a whole row leaves the row's weights unchanged), and ``between``, the variance of the
    rows' means, each row weighted by its keys. Both divide by the number of pairs, so
    ``within + between`` is the pooled variance of :func:`score_variance_ratio` up to its
    ``n / (n - 1)``."""
    key = key_per_query_head(query, key)
    scores = query.double() @ key.double().transpose(-1, -2)
    pairs = computed_pairs(scores.shape[-1], causal).double()
    per_row, total = pairs.sum(-1), pairs.sum()
    row_mean = (scores * pairs).sum(-1) / per_row
    within = ((scores - row_mean[..., None]) ** 2 * pairs).sum((-1, -2)) / total
    grand_mean = (scores * pairs).sum((-1, -2)) / total
    between = (per_row * (row_mean - grand_mean[..., None]) ** 2).sum(-1) / total
    d_k = query.shape[-1]
    return {"within": within.mean(0) / d_k, "between": between.mean(0) / d_k}


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


def one_hot_shares_by_top(w: torch.Tensor, causal: bool, threshold: float = 0.9) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`one_hot_share` split by where the top weight sits: per head, the share of rows
    (with more than one key) whose top weight exceeds ``threshold`` on the first key (a
    sink), and on any other key; the two add up to :func:`one_hot_share`."""
    rows = keys_seen(w, causal) > 1
    top, where = w.amax(-1)[..., rows], w.argmax(-1)[..., rows]
    peaked = top > threshold
    return ((peaked & (where == 0)).double().mean(-1).mean(0),
            (peaked & (where != 0)).double().mean(-1).mean(0))


def top_key_pattern(w: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per head, the share of rows (from the second on) whose largest weight is on the first
    key, else on the row's own token, else on the token before it, or elsewhere."""
    where = w.argmax(-1)[..., 1:]
    row = torch.arange(1, w.shape[-2])
    first = where == 0
    kinds = {"first": first, "self": where == row, "previous": (where == row - 1) & ~first}
    kinds["elsewhere"] = ~(kinds["first"] | kinds["self"] | kinds["previous"])
    return {kind: mask.double().mean(-1).mean(0) for kind, mask in kinds.items()}


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


def window_keeping(length: int, cache: int, kept=()) -> torch.Tensor:
    """Bool ``(L, L)``: a causal cache of ``cache`` keys per query: the keys at the positions
    ``kept``, held for good once a query has reached them (StreamingLLM keeps the first ones),
    and the ``cache - len(kept)`` newest."""
    kept = sorted({int(position) for position in kept})
    if len(kept) >= cache or any(not 0 <= position < length for position in kept):
        raise ValueError(f"kept must be fewer than cache={cache} positions in [0, {length}), got {kept}")
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    held = torch.zeros(length, dtype=torch.bool)
    held[kept] = True
    return (j <= i) & ((j > i - (cache - len(kept))) | held[None, :])


def sliding_window(length: int, cache: int, kept_first: int = 0) -> torch.Tensor:
    """Bool ``(L, L)``: a causal window of ``cache`` keys per query, of which the first
    ``kept_first`` are the sequence's first keys (StreamingLLM's sinks) once the window has
    moved past them, and the rest the newest."""
    if not 0 <= kept_first < cache:
        raise ValueError(f"kept_first must be in [0, cache), got {kept_first} with cache={cache}")
    return window_keeping(length, cache, range(kept_first))


def independent_split(query: torch.Tensor, key: torch.Tensor) -> dict[str, torch.Tensor]:
    """:func:`score_variance_split`'s two terms, per query head, if every coordinate of ``q``
    were independent of every other and of ``k``, each keeping its measured mean ``m`` and
    variance ``s``: ``within`` = ``sum_a (s_qa + m_qa^2) s_ka / d_k`` (one query against keys
    that vary) and ``between`` = ``sum_a s_qa m_ka^2 / d_k`` (the row mean ``q . m_k``, which
    varies only with the query). With means 0 and variances 1 they are 1 and 0."""
    key = key_per_query_head(query, key)
    q, k = query.double().transpose(0, 1).flatten(1, 2), key.double().transpose(0, 1).flatten(1, 2)
    mq, sq, mk, sk = q.mean(1), q.var(1), k.mean(1), k.var(1)
    return {"within": ((sq + mq**2) * sk).mean(-1), "between": (sq * mk**2).mean(-1)}


def independent_prediction(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """``Var(q . k) / d_k`` per query head under :func:`independent_split`'s model, its two
    terms together: ``sum_a [(s_qa + m_qa^2)(s_ka + m_ka^2) - m_qa^2 m_ka^2] / d_k``. With means
    0 and variances 1 it is Chapter 2's 1."""
    split = independent_split(query, key)
    return split["within"] + split["between"]


def before_rotation(model, input_ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A Llama-family model's queries ``(B, Hq, L, E)`` and keys ``(B, Hkv, L, E)`` of every
    layer as its projections ``q_proj`` and ``k_proj`` make them, before the rotary
    positions turn them (forward hooks; the model runs once, with its own attention)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None or not hasattr(layers[0], "self_attn") or not hasattr(layers[0].self_attn, "q_proj"):
        raise TypeError(f"model must be a Llama-family model (model.model.layers[i].self_attn.q_proj), "
                        f"got {type(model).__name__}")
    width = model.config.hidden_size // model.config.num_attention_heads
    captured, hooks = {}, []
    for number, layer in enumerate(layers):
        for part in ("q_proj", "k_proj"):
            def keep(module, inputs, output, number=number, part=part):
                captured[number, part] = output.detach().unflatten(-1, (-1, width)).transpose(1, 2)
            hooks.append(getattr(layer.self_attn, part).register_forward_hook(keep))
    try:
        with torch.no_grad():
            model(input_ids=input_ids)
    finally:
        for hook in hooks:
            hook.remove()
    return [(captured[n, "q_proj"], captured[n, "k_proj"]) for n in range(len(layers))]


def layernorm_constants(model, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For a BERT encoder's ``layer``: the parts of its queries and keys ``(H, E)`` that are
    the same for every token, ``W beta + b``, with ``beta`` the bias of the LayerNorm that
    feeds the layer (the embeddings' for layer 0) and ``W``, ``b`` the projection's weight
    and bias. A LayerNorm's output is ``gamma * x_hat + beta``: ``beta`` is in every token."""
    encoder = getattr(model, "encoder", None)
    if encoder is None or not hasattr(encoder, "layer"):
        raise TypeError(f"model must be a BERT encoder (model.encoder.layer), got {type(model).__name__}")
    if not isinstance(layer, int) or not 0 <= layer < len(encoder.layer):
        raise ValueError(f"layer must be an int in [0, {len(encoder.layer)}), got {layer!r}")
    norm = model.embeddings.LayerNorm if layer == 0 else encoder.layer[layer - 1].output.LayerNorm
    attention = encoder.layer[layer].attention.self
    heads = model.config.num_attention_heads
    return tuple((projection.weight.double() @ norm.bias.double() + projection.bias.double())
                 .detach().unflatten(0, (heads, -1)) for projection in (attention.query, attention.key))


def mean_against_constant(x: torch.Tensor, constant: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per head of ``x`` ``(B, H, L, E)``, its mean vector over the tokens against ``constant``
    ``(H, E)``, a part of it that every token shares: ``length``, ``|constant| / |mean|``, and
    ``cosine``, the cosine of the angle between them (1 and 1: the mean is the constant)."""
    mean, constant = x.double().mean((0, 2)), constant.double()
    return {"length": constant.norm(dim=-1) / mean.norm(dim=-1),
            "cosine": torch.nn.functional.cosine_similarity(mean, constant, dim=-1)}


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
