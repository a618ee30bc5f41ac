"""transformers' generate() with attnlib as the attention backend, against its own backends.

Each cache transformers offers for generation (the dynamic cache; the compileable
static, offloaded-static and sliding-window caches, for which ``generate()`` builds the
masks ahead of the forward pass), greedy and sampled (seeded), with a left-padded batch,
must give the same tokens as the reference backend: ``sdpa`` where the model has it,
``eager`` in float64 (its softmax too, :mod:`eager64`) for Gemma 2, which has no sdpa.
Tiny random-weight models built from configs (no download), in float64; the prompt
(7 tokens) is longer than the sliding window (4), so the windowed layers' caches drop keys.
"""
from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

import attnlib
from attnlib import checkpoints
from attnlib.integrations import transformers as backend
from eager64 import float64_softmax

backend.register()

DECODER = dict(num_hidden_layers=2, vocab_size=64, initializer_range=0.3, pad_token_id=0, bos_token_id=1,
               eos_token_id=None, hidden_size=32, intermediate_size=64, num_attention_heads=4, head_dim=8,
               num_key_value_heads=2)
WINDOW = 4
#: name -> (model type, config arguments, reference backend)
MODELS = {
    "llama (GQA)": ("llama", DECODER, "sdpa"),
    "mistral (sliding window)": ("mistral", dict(DECODER, sliding_window=WINDOW), "sdpa"),
    "gemma2 (soft-cap, windows)": ("gemma2", dict(DECODER, sliding_window=WINDOW, query_pre_attn_scalar=16,
                                                  attn_logit_softcapping=2.0), "eager"),
}
NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="transformers' offloaded cache moves layers with CUDA streams")
CACHES = ["dynamic", "static", pytest.param("offloaded_static", marks=NEEDS_CUDA), "sliding_window"]
#: greedy for every model and cache; sampling once per cache, each with another model
SAMPLED = {"dynamic": "gemma2 (soft-cap, windows)", "static": "llama (GQA)",
           "offloaded_static": "mistral (sliding window)", "sliding_window": "mistral (sliding window)"}
NEW_TOKENS = 6
_built: dict = {}


def build(name: str, implementation: str):
    """The model ``name`` with seeded random weights, in float64, in eval mode (one config each)."""
    if (name, implementation) not in _built:
        model_type, arguments, _ = MODELS[name]
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **arguments),
                                                 attn_implementation=implementation, dtype=torch.float64)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        _built[name, implementation] = model.to(device).eval()
    return _built[name, implementation]


def prompt(device):
    """Token ids (2, 7), the first row left-padded by 3."""
    ids = torch.randint(2, 64, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    return ids.masked_fill(mask == 0, 0).to(device), mask.to(device)


def generate(model, cache: str, sample: bool):
    ids, mask = prompt(model.device)
    settings = dict(max_new_tokens=NEW_TOKENS, do_sample=sample, pad_token_id=0,
                    cache_implementation=None if cache == "dynamic" else cache)
    if sample:
        settings.update(top_k=0, top_p=1.0, temperature=1.0)
    torch.manual_seed(1234)
    with contextlib.ExitStack() as stack:
        if model.config._attn_implementation == "eager":
            stack.enter_context(float64_softmax())
        return model.generate(ids, attention_mask=mask, **settings)


def cases():
    for cache in CACHES:
        name = cache.values[0] if hasattr(cache, "values") else cache
        marks = cache.marks if hasattr(cache, "marks") else ()
        for model in MODELS:
            yield pytest.param(model, name, False, marks=marks, id=f"{model.split()[0]}-{name}-greedy")
        yield pytest.param(SAMPLED[name], name, True, marks=marks,
                           id=f"{SAMPLED[name].split()[0]}-{name}-sampled")


@pytest.mark.filterwarnings("ignore:.*sliding_window.*deprecated")
@pytest.mark.parametrize("name, cache, sample", list(cases()))
def test_generate_gives_the_reference_backends_tokens(name, cache, sample):
    reference = MODELS[name][2]
    expected = generate(build(name, reference), cache, sample)
    with attnlib.record_dispatches() as log:
        tokens = generate(build(name, "attnlib"), cache, sample)
    assert torch.equal(tokens, expected)
    assert tokens.shape == (2, 7 + NEW_TOKENS)
    # attnlib ran in every layer at every step: the prompt, then one call per new token after the first
    assert len(log) == MODELS[name][1]["num_hidden_layers"] * NEW_TOKENS


def test_a_static_cache_gets_dense_masks_and_a_dynamic_one_structured_masks(monkeypatch):
    """generate() with a static cache builds its masks before the forward pass and hands on
    only tensors; the dynamic cache's masks come from within the forward, as attnlib's own."""
    kinds = []
    original = backend.attnlib_mask

    def spy(*args, **kwargs):
        mask = original(*args, **kwargs)
        kinds.append(type(mask).__name__)
        return mask

    monkeypatch.setattr(backend, "attnlib_mask", spy)
    backend.register()
    try:
        model = build("llama (GQA)", "attnlib")
        generate(model, "static", False)
        assert kinds and set(kinds) == {"Tensor"}
        kinds.clear()
        generate(model, "dynamic", False)
        assert set(kinds) == {"StructuredMask"}
    finally:
        monkeypatch.undo()
        backend.register()


@pytest.mark.skipif(not checkpoints.available("smollm2"), reason=checkpoints.skipped("smollm2", "the test"))
def test_smollm2_generates_sdpas_tokens_with_a_static_cache():
    model, tokenizer = checkpoints.load("smollm2", attn_implementation="sdpa")
    tokenizer.padding_side = "left"
    batch = tokenizer(["The capital of France is", "One, two, three,"], return_tensors="pt", padding=True)
    assert not bool(batch["attention_mask"].all())  # the shorter prompt is left-padded
    settings = dict(max_new_tokens=4, do_sample=False, cache_implementation="static",
                    pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
    expected = model.generate(**batch, **settings)
    model.set_attn_implementation("attnlib")
    with attnlib.record_dispatches() as log:
        tokens = model.generate(**batch, **settings)
    assert log, "attnlib did not run"
    assert torch.equal(tokens, expected), tokenizer.batch_decode(tokens[:, -4:])


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_an_unsupported_transformers_version_fails_at_import_with_the_version_message():
    """transformers 4.x lacks the internals this module imports: the version check comes first.
    Simulated: the installed transformers reports 4.57.6 before the module is imported."""
    script = textwrap.dedent("""
        import transformers
        transformers.__version__ = "4.57.6"
        try:
            import attnlib.integrations.transformers
        except ImportError as error:
            print(type(error).__name__, error)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == (
        "ImportError attnlib's transformers backend supports transformers >= 5.20, < 6; found 4.57.6; "
        "pip install 'attnlib[transformers]' (or pip install 'transformers>=5.20,<6')"), done.stderr[-2000:]


def test_without_transformers_the_import_says_how_to_install_it():
    script = textwrap.dedent("""
        import sys
        sys.modules["transformers"] = None  # as if it were not installed
        try:
            import attnlib.integrations.transformers
        except ModuleNotFoundError as error:
            print(type(error).__name__, error.name, error)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == (
        "ModuleNotFoundError transformers attnlib.integrations.transformers needs transformers, which is "
        "not installed; pip install 'attnlib[transformers]' (or pip install 'transformers>=5.20,<6')"
    ), done.stderr[-2000:]
