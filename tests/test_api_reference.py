"""The API reference (api.md) documents every public name, and its "Differences from torch's
SDPA" hold: each case is run through torch and attnlib here."""
import pathlib
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

import attnlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
API = (ROOT / "api.md").read_text()


def documented() -> set[str]:
    """The dotted names of api.md's autodoc entries, and of its ``py:data`` entries with their ``:module:``."""
    names = set(re.findall(r"^\.\. auto(?:function|class|data)::\s+(\S+)", API, flags=re.M))
    names |= {f"{module}.{name}" for name, module in
              re.findall(r"^\.\. py:data::\s+(\S+)\n\s+:module:\s+(\S+)", API, flags=re.M)}
    return names


def test_every_public_name_has_an_entry():
    missing = [name for name in attnlib.__all__ if f"attnlib.{name}" not in documented()]
    assert not missing, f"api.md has no autodoc entry for {missing}"


def test_every_entry_names_something_that_exists():
    import importlib

    for name in documented():
        module, _, attribute = name.rpartition(".")
        assert hasattr(importlib.import_module(module), attribute), name


def test_the_page_is_in_the_back_matter():
    toc = (ROOT / "_toc.yml").read_text()
    assert "- file: api\n" in toc.split("caption: Back matter", 1)[1]


def inputs(batch=2, heads=2, kv_batch=None, kv_heads=None, L=3, S=5, E=8):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, L, E, generator=gen)
    k = torch.randn(kv_batch or batch, kv_heads or heads, S, E, generator=gen)
    v = torch.randn(kv_batch or batch, kv_heads or heads, S, E, generator=gen)
    return q, k, v


def outcome(function, *args, **kwargs):
    """The output, or the exception's type."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return function(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - the type is the answer
        return type(error)


#: the page's "What torch accepts and attnlib refuses", one case each
TORCH_ONLY = {
    "key and value batch 1 against batch 2": (inputs(kv_batch=1), {}),
    "one key/value head without enable_gqa": (inputs(kv_heads=1), {}),
    "is_causal=True with attn_mask": (inputs(), {"is_causal": True, "attn_mask": torch.ones(3, 5, dtype=torch.bool)}),
    "a 0-d tensor scale": (inputs(), {"scale": torch.tensor(0.5)}),
    "scale=inf": (inputs(), {"scale": float("inf")}),
    "scale=nan": (inputs(), {"scale": float("nan")}),
    "dropout_p=1.0": (inputs(), {"dropout_p": 1.0}),
}


@pytest.mark.parametrize("case", TORCH_ONLY)
def test_what_torch_accepts_and_attnlib_refuses(case):
    (q, k, v), kwargs = TORCH_ONLY[case]
    assert isinstance(outcome(F.scaled_dot_product_attention, q, k, v, **kwargs), torch.Tensor)
    assert outcome(attnlib.scaled_dot_product_attention, q, k, v, **kwargs) in (TypeError, ValueError)


def test_a_one_dimensional_mask_is_attnlibs_alone():
    q, k, v = inputs()
    mask = torch.tensor([True, True, False, True, False])
    assert outcome(F.scaled_dot_product_attention, q, k, v, attn_mask=mask) is IndexError
    out = attnlib.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.expand(3, 5))
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("backend", ["naive", "tiled"])
def test_under_autocast_both_return_the_autocast_type(backend):
    q, k, v = inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = F.scaled_dot_product_attention(q, k, v)
        out = attnlib.scaled_dot_product_attention(q, k, v, backend=backend)
    assert expected.dtype == out.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)


def test_a_value_length_other_than_the_key_length_is_attnlibs_refusal():
    q, k, v = inputs()
    short_v = v[..., :4, :]
    with pytest.raises(ValueError, match="value"):
        attnlib.scaled_dot_product_attention(q, k, short_v)


def test_dropout_sends_auto_to_the_naive_path_and_says_why():
    q, k, v = inputs(L=1024, S=1024)
    dispatch = attnlib.explain(q, k, v, dropout_p=0.1)
    assert dispatch.backend == "naive" and "dropout" in dispatch.passed_over["tiled"]


@pytest.mark.parametrize("backend", ["naive", "tiled"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("where", ["key", "value"])
def test_a_non_finite_hidden_position_reaches_torchs_output_and_not_attnlibs(where, bad, backend):
    q, k, v = inputs()
    (k if where == "key" else v)[..., 4, :] = bad
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[:, 4] = False
    assert not F.scaled_dot_product_attention(q, k, v, attn_mask=mask).isfinite().all()
    assert attnlib.scaled_dot_product_attention(q, k, v, attn_mask=mask, backend=backend).isfinite().all()


def test_a_query_that_sees_no_key_gets_zero_in_both():
    q, k, v = inputs()
    mask = torch.zeros(3, 5, dtype=torch.bool)
    assert F.scaled_dot_product_attention(q, k, v, attn_mask=mask).abs().max() == 0
    assert attnlib.scaled_dot_product_attention(q, k, v, attn_mask=mask).abs().max() == 0
