"""attnlib as transformers' attention backend (attnlib.integrations.transformers).

Tiny random-init models built from configs (no download), in float64, each run
three ways with the same weights:

- ``attnlib``: attn_implementation="attnlib";
- ``eager``: transformers' own eager path, whose softmax runs in float32 for the
  Llama family (so in a float64 model it rounds to float32 once per layer);
- ``eager64``: the same eager code with that one float32 softmax computed in
  float64 instead, the float64 reference that owes nothing to attnlib.

attnlib must equal ``eager64`` to float64 rounding, and so differ from ``eager``
by no more than eager's own float32 softmax does:
``|attnlib - eager| <= |eager64 - eager| + FLOAT64_SLACK``.
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, masking_utils

import attnlib
from attnlib.integrations import transformers as backend
from eager64 import float64_softmax

backend.register()

#: attnlib and eager64 evaluate one float64 formula in different orders; each output
#: passes through a few hundred roundings of eps64 = 2**-52 (two layers of matmuls over
#: widths <= 64, softmax sums, norms), each relative to the logits' size. A thousand
#: roundings' worth, relative to the largest logit, bounds that with room to spare.
FLOAT64_SLACK = 1000 * torch.finfo(torch.float64).eps

COMMON = dict(num_hidden_layers=2, vocab_size=64, initializer_range=0.3, pad_token_id=0,
              bos_token_id=1, eos_token_id=None)
DECODER = dict(COMMON, hidden_size=32, intermediate_size=64, num_attention_heads=4, head_dim=8)
WINDOW = 4
#: name -> (model type, its config's arguments, the model class)
MODELS = {
    "llama (GQA)": ("llama", dict(DECODER, num_key_value_heads=2), AutoModelForCausalLM),
    "qwen2": ("qwen2", dict(DECODER, num_key_value_heads=2), AutoModelForCausalLM),
    "mistral (sliding window)": ("mistral", dict(DECODER, num_key_value_heads=2, sliding_window=WINDOW),
                                 AutoModelForCausalLM),
    "gemma2 (soft-cap, windows)": ("gemma2", dict(DECODER, num_key_value_heads=2, sliding_window=WINDOW,
                                                  query_pre_attn_scalar=16, attn_logit_softcapping=2.0),
                                   AutoModelForCausalLM),
    "gpt-oss (sinks, windows)": ("gpt_oss", dict(DECODER, num_key_value_heads=2, sliding_window=WINDOW,
                                                 intermediate_size=16, num_local_experts=2,
                                                 num_experts_per_tok=1), AutoModelForCausalLM),
    "gpt2": ("gpt2", dict(COMMON, n_embd=32, n_head=4, n_positions=64, n_layer=2, resid_pdrop=0.0,
                          embd_pdrop=0.0, attn_pdrop=0.0), AutoModelForCausalLM),
    "bert (bidirectional)": ("bert", dict(COMMON, hidden_size=32, intermediate_size=64,
                                          num_attention_heads=4, hidden_dropout_prob=0.0,
                                          attention_probs_dropout_prob=0.0), AutoModelForMaskedLM),
}
DECODERS = [name for name in MODELS if not name.startswith("bert")]
WINDOWED = [name for name in MODELS if "window" in name]
BATCH, LENGTH = 2, 10


def build(name: str, implementation: str):
    """The model ``name`` with seeded random weights, in float64, in eval mode."""
    model_type, arguments, model_class = MODELS[name]
    config = AutoConfig.for_model(model_type, **arguments)
    torch.manual_seed(0)
    extra = {"experts_implementation": "eager"} if model_type == "gpt_oss" else {}  # float64 experts
    model = model_class.from_config(config, attn_implementation=implementation, dtype=torch.float64,
                                    **extra)
    return model.eval()


def trio(name: str) -> dict:
    """The same weights under attnlib and eager (eager64 is eager run in float64_softmax())."""
    return {"attnlib": build(name, "attnlib"), "eager": build(name, "eager")}


def inputs(padding: str | None):
    """Token ids (B, L) and a padding mask with 3 pads in the second row (None: no pads)."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 64, (BATCH, LENGTH), generator=generator)
    mask = torch.ones(BATCH, LENGTH, dtype=torch.long)
    if padding == "left":
        mask[1, :3] = 0
    elif padding == "right":
        mask[1, -3:] = 0
    ids = ids.masked_fill(mask == 0, 0)
    return ids, mask


def assert_matches_eager(attnlib_out, eager, eager64, real=None):
    """attnlib = eager64 to float64 rounding; |attnlib - eager| within eager's float32 softmax."""
    pick = (lambda t: t[real]) if real is not None else (lambda t: t)
    a, e, e64 = pick(attnlib_out), pick(eager), pick(eager64)
    slack = FLOAT64_SLACK * float(e64.abs().max())
    assert float((a - e64).abs().max()) <= slack
    if torch.isfinite(e).all():
        assert float((a - e).abs().max()) <= float((e64 - e).abs().max()) + slack


@pytest.mark.parametrize("padding", [None, "left", "right"])
@pytest.mark.parametrize("name", MODELS)
def test_logits_equal_eager(name, padding):
    models = trio(name)
    ids, mask = inputs(padding)
    with torch.no_grad():
        logits = {key: model(input_ids=ids, attention_mask=mask).logits for key, model in models.items()}
        with float64_softmax():
            eager64 = models["eager"](input_ids=ids, attention_mask=mask).logits
    assert torch.isfinite(logits["attnlib"]).all()
    # padded positions' own outputs are not defined alike (attnlib gives 0 to a query that
    # sees no key); every real position must agree
    assert_matches_eager(logits["attnlib"], logits["eager"], eager64, real=mask.bool())


@pytest.mark.parametrize("name", DECODERS)
def test_greedy_generation_with_the_cache_is_identical(name):
    """Past the window (prompt 10 + 10 new tokens, W = 4): the sliding layers' cache drops keys."""
    models = trio(name)
    ids, mask = inputs("left")
    settings = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    tokens = models["attnlib"].generate(ids, attention_mask=mask, **settings)
    # eager in float64 turns a left-padded row into NaN (its float32 softmax of a row that is
    # all float64-min gives NaN), so left padding is compared with eager64, no padding with eager
    with float64_softmax():
        assert torch.equal(tokens, models["eager"].generate(ids, attention_mask=mask, **settings))
    full = torch.ones_like(mask)
    assert torch.equal(models["attnlib"].generate(ids, attention_mask=full, **settings),
                       models["eager"].generate(ids, attention_mask=full, **settings))
    assert tokens.shape[1] == LENGTH + 10


@pytest.mark.parametrize("name", MODELS)
def test_one_training_step_has_the_same_gradients(name):
    models = trio(name)
    ids, mask = inputs("right")
    labels = ids.masked_fill(mask == 0, -100)

    def gradients(model):
        model.train()
        model.zero_grad()
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    grads = {key: gradients(model) for key, model in models.items()}
    with float64_softmax():
        grads64 = gradients(models["eager"])
    assert grads["attnlib"].shape == grads64.shape
    assert_matches_eager(grads["attnlib"], grads["eager"], grads64)


class Spy:
    """Records the keywords each attnlib call receives from the adapter."""

    def __init__(self):
        self.calls = []

    def __call__(self, query, key, value, **arguments):
        self.calls.append(dict(arguments, query_len=query.shape[-2], key_len=key.shape[-2]))
        return attnlib.scaled_dot_product_attention(query, key, value, **arguments)


@pytest.mark.parametrize("padding", [None, "left"])
@pytest.mark.parametrize("name", WINDOWED)
def test_a_sliding_window_reaches_attnlib_as_window_not_as_a_dense_mask(name, padding, monkeypatch):
    spy = Spy()
    monkeypatch.setattr(backend, "scaled_dot_product_attention", spy)
    model = build(name, "attnlib")
    ids, mask = inputs(padding)
    with torch.no_grad():
        model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    layers = model.config.num_hidden_layers
    sliding = [layer for layer in range(layers)
               if getattr(model.config, "layer_types", None) is None
               or model.config.layer_types[layer] == "sliding_attention"]
    assert sliding, "each of these models has a sliding layer"
    for step, call in enumerate(spy.calls):
        padded = "attn_mask" in call
        if padded:  # the mask carries the padding only: no query axis, no pattern in it
            assert call["attn_mask"].dtype == torch.bool
            assert call["attn_mask"].shape == (BATCH, 1, 1, call["key_len"])
        else:
            assert call["is_causal"] is True
        full_layer_window = (None, 0) if padded else None  # causality rides on the window
        assert call.get("window") == ((WINDOW - 1, 0) if step % layers in sliding else full_layer_window)
        assert call["causal_alignment"] == "bottom_right"
    assert any("attn_mask" in call for call in spy.calls) == (padding is not None)
    decode_steps = spy.calls[layers:]
    assert decode_steps and all(call["query_len"] == 1 for call in decode_steps)
    # the cache of a sliding layer keeps W - 1 old keys, so S stops growing at W
    assert {call["key_len"] for call in decode_steps[sliding[0]::layers]} <= set(range(1, LENGTH + 7))
    if name.startswith("gpt-oss"):
        assert all(call["sinks"] is not None for call in spy.calls)
    if name.startswith("gemma2"):
        assert all(call["softcap"] == 2.0 for call in spy.calls)


def test_the_window_is_the_one_transformers_masks_with():
    """attnlib's window=(W - 1, 0), bottom-right, is transformers' sliding-window mask."""
    for q_length, kv_length, q_offset, kv_offset in [(6, 6, 0, 0), (1, 4, 9, 6), (3, 7, 4, 0)]:
        dense = masking_utils.sdpa_mask(1, q_length, kv_length, q_offset, kv_offset,
                                        masking_utils.sliding_window_causal_mask_function(WINDOW),
                                        allow_is_causal_skip=False)
        ours = attnlib.window_mask(q_length, kv_length, (WINDOW - 1, 0), "bottom_right")
        assert torch.equal(dense[0, 0], ours & attnlib.causal_mask(q_length, kv_length, "bottom_right"))


def test_patterns_it_does_not_recognise_get_a_dense_mask():
    chunked = masking_utils.chunked_causal_mask_function(3, torch.zeros(1, dtype=torch.long))
    dense = backend.attnlib_mask(1, 5, 5, mask_function=chunked)
    expected = masking_utils.sdpa_mask(1, 5, 5, mask_function=chunked, allow_is_causal_skip=False)
    assert isinstance(dense, torch.Tensor) and torch.equal(dense, expected)
    assert backend.recognised_pattern(masking_utils.sliding_window_causal_mask_function(7)) == (True, 7, False)
    assert backend.recognised_pattern(chunked) is None


def test_dropout_reaches_attnlib_and_a_path_without_it_refuses_by_name():
    model = build("llama (GQA)", "attnlib")
    model.config.attention_dropout = 0.5
    for layer in model.model.layers:
        layer.self_attn.attention_dropout = 0.5
    ids, mask = inputs(None)
    model.train()
    model(input_ids=ids, attention_mask=mask)
    assert attnlib.last_dispatch().backend == "naive"  # the path that implements dropout
    backend.register("attnlib-tiled", backend="tiled")
    model.set_attn_implementation("attnlib-tiled")
    with pytest.raises(ValueError, match="dropout"):
        model(input_ids=ids, attention_mask=mask)


def test_unknown_keywords_and_attention_weights_are_refused_by_name():
    query = torch.zeros(1, 2, 3, 4, dtype=torch.float64)
    module = torch.nn.Module()
    with pytest.raises(TypeError, match="alibi_slopes"):
        backend.attnlib_attention(module, query, query, query, None, alibi_slopes=1.0)
    with pytest.raises(ValueError, match="output_attentions"):
        backend.attnlib_attention(module, query, query, query, None, output_attentions=True)
    mask = backend.StructuredMask(None, True, (3, 0), "bottom_right", 4)
    with pytest.raises(ValueError, match="sliding_window=5"):
        backend.attnlib_attention(module, query, query, query, mask, sliding_window=5)
    with pytest.raises(ValueError, match="backend"):
        backend.register(backend="flash")


@pytest.mark.parametrize("name", MODELS)
def test_a_model_asked_for_its_weights_refuses_by_name(name):
    """output_attentions=True reaches the attention function, which has no weights to give: the call
    fails naming the argument, where it would otherwise hand back a tuple of Nones (Chapter 13)."""
    model = build(name, "attnlib")
    ids, mask = inputs(None)
    with pytest.raises(ValueError, match="output_attentions=True"):
        model(input_ids=ids, attention_mask=mask, output_attentions=True)


def test_output_layout_is_batch_length_heads_width():
    query = torch.randn(2, 4, 3, 8, dtype=torch.float64)
    key = torch.randn(2, 2, 5, 8, dtype=torch.float64)
    output, weights = backend.attnlib_attention(torch.nn.Module(), query, key, key, None, is_causal=False)
    assert output.shape == (2, 3, 4, 8) and weights is None
    expected = attnlib.scaled_dot_product_attention(query, key, key, enable_gqa=True, backend="naive")
    assert torch.equal(output, expected.transpose(1, 2))


def test_from_pretrained_with_attn_implementation_runs_attnlib(tmp_path):
    """A checkpoint saved to disk (nothing downloaded) loads with attn_implementation="attnlib"."""
    built = build("gpt-oss (sinks, windows)", "attnlib")
    built.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="attnlib",
                                                  dtype=torch.float64, experts_implementation="eager")
    assert loaded.config._attn_implementation == "attnlib"
    ids, mask = inputs("left")
    with torch.no_grad():
        expected = built(input_ids=ids, attention_mask=mask).logits
        got = loaded.eval()(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(got, expected)


def test_the_installed_transformers_is_in_the_supported_range():
    low, high = backend.SUPPORTED_VERSIONS
    assert low <= backend.Version(transformers.__version__) < high


def test_import_attnlib_never_imports_transformers():
    code = "import sys, attnlib; assert 'transformers' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
