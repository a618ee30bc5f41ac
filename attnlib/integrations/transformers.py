"""attnlib as an attention backend of Hugging Face transformers.

    from attnlib.integrations.transformers import register
    register()                                    # the name "attnlib", backend "auto"
    model = AutoModelForCausalLM.from_config(config, attn_implementation="attnlib")
    model.set_attn_implementation("attnlib")      # or switch a built model

``register`` adds two functions under one name, one to each of transformers'
interfaces:

- the mask function (``AttentionMaskInterface``) hands each layer what attnlib
  cannot read off its own arguments: which keys are padding. It recognises the
  patterns transformers builds with its own factories (causal, bidirectional,
  and their sliding windows) and returns them as a :class:`StructuredMask`,
  so that causality and the window reach attnlib as ``window=`` and
  ``is_causal=``, never as a dense ``(L, S)`` mask. Any other pattern (packed
  sequences, chunked attention, overlays for image tokens, a static cache's
  empty slots), and every mask ``generate()`` builds ahead of the forward pass
  for a compileable cache (static, offloaded static, sliding window), becomes a
  dense bool mask that holds the whole pattern, as it does for transformers'
  eager path.
- the attention function (``AttentionInterface``) maps transformers' arguments
  onto attnlib's contract: ``scaling`` -> ``scale``, ``softcap`` ->
  ``softcap``, a causal layer's ``sliding_window = W`` -> ``window=(W - 1, 0)``
  aligned bottom-right (the KV cache's last query sits at its last key),
  ``s_aux`` -> ``sinks``, fewer key/value heads than query heads ->
  ``enable_gqa``, padding -> a bool ``attn_mask``, ``dropout`` ->
  ``dropout_p`` (a path that implements dropout runs it, or attnlib refuses
  by name). A keyword it does not know is refused by name, never ignored, and
  so is a call that asks for the weights (``output_attentions=True``), which
  attnlib does not return: transformers would hand back Nones or nothing.

transformers is imported here only; ``import attnlib`` never imports it.
Importing this module without transformers, or with a version outside the
supported range, raises an ImportError that says which versions and how to
install them. Supported: transformers >= 5.20, < 6 (the range declared for the extra
``attnlib[transformers]`` in pyproject.toml; tests/test_transformers_backend.py
passes with 5.20.2 and 5.24.0, the versions requirements.txt pins).
"""
from __future__ import annotations

import functools
import inspect
import sys
from dataclasses import dataclass

import torch
from packaging.version import Version

from .. import dispatch
from ..attention import scaled_dot_product_attention

SUPPORTED_VERSIONS = (Version("5.20"), Version("6"))
INSTALL_HINT = "pip install 'attnlib[transformers]' (or pip install 'transformers>=5.20,<6')"


def check_version(version: str) -> None:
    """Raise ImportError, with the supported range and how to install it, unless ``version`` is in it."""
    low, high = SUPPORTED_VERSIONS
    if not low <= Version(version) < high:
        raise ImportError(
            f"attnlib's transformers backend supports transformers >= {low}, < {high}; "
            f"found {version}; {INSTALL_HINT}"
        )


try:
    import transformers
except ModuleNotFoundError as exc:
    if exc.name != "transformers":
        raise
    raise ModuleNotFoundError(
        f"attnlib.integrations.transformers needs transformers, which is not installed; {INSTALL_HINT}",
        name="transformers",
    ) from exc
# Before the internals below, which older versions do not have (output_capturing is new in 5.x).
check_version(transformers.__version__)

from transformers import AttentionInterface, AttentionMaskInterface, masking_utils  # noqa: E402
from transformers.generation.utils import GenerationMixin  # noqa: E402
from transformers.utils import output_capturing  # noqa: E402

#: Keywords the models pass through to every attention function that attnlib
#: needs no further: what each one says reaches attnlib by another route.
ALREADY_ACCOUNTED_FOR = {
    "position_ids": "positions are in the queries and keys (RoPE) and in the mask's offsets",
    "use_cache": "the cache has already been updated; its length is in the key's shape",
    "cache_position": "the cache's offsets reach the mask function",
    "position_embeddings": "the model has applied them to the queries and keys",
    "token_type_ids": "used by the embeddings, not by attention",
    "encoder_hidden_states": "a cross-attention's keys and values are already projected from it",
    "output_router_logits": "a mixture of experts' output, not attention's",
}


@dataclass(frozen=True)
class StructuredMask:
    """What the mask function hands a layer: padding as a tensor, the pattern as arguments.

    ``key_padding`` is a bool ``(B, S)`` tensor, True for a real key (None: no
    padding). The pattern is attnlib's: ``causal``, ``window`` (``(left, right)``
    or None) and the ``causal_alignment`` both are measured in.
    ``sliding_window`` is transformers' ``W`` the window came from, so the layer's
    own ``sliding_window`` can be checked against it.
    """

    key_padding: torch.Tensor | None
    causal: bool
    window: tuple[int | None, int | None] | None
    causal_alignment: str
    sliding_window: int | None


def _closure(function) -> dict:
    """The variables a closure captured, by name."""
    cells = function.__closure__ or ()
    return dict(zip(function.__code__.co_freevars, (cell.cell_contents for cell in cells)))


def _made_by(function, factory_output) -> bool:
    """Whether ``function`` was returned by the same factory as ``factory_output`` (same code)."""
    return getattr(function, "__code__", None) is factory_output.__code__


_AND_MASKS = masking_utils.and_masks(masking_utils.causal_mask_function)
_CAUSAL_OVERLAY = masking_utils.sliding_window_overlay(1)
_BIDIRECTIONAL_OVERLAY = masking_utils.sliding_window_bidirectional_overlay(1)


def recognised_pattern(mask_function) -> tuple[bool, int | None, bool] | None:
    """``(causal, sliding_window, window_is_bidirectional)`` of a mask function built
    by transformers' own factories, or None for any other function."""
    if mask_function is masking_utils.causal_mask_function:
        return True, None, False
    if mask_function is masking_utils.bidirectional_mask_function:
        return False, None, False
    if not _made_by(mask_function, _AND_MASKS):
        return None
    parts = _closure(mask_function).get("mask_functions", ())
    if len(parts) != 2:
        return None
    overlay, base = parts
    if base is masking_utils.causal_mask_function and _made_by(overlay, _CAUSAL_OVERLAY):
        return True, _closure(overlay)["sliding_window"], False
    if base is masking_utils.bidirectional_mask_function and _made_by(overlay, _BIDIRECTIONAL_OVERLAY):
        return False, _closure(overlay)["sliding_window"], True
    return None


def _alignment(q_offset, kv_offset, q_length: int, kv_length: int) -> str | None:
    """attnlib's causal_alignment for queries at ``q_offset..`` and keys at ``kv_offset..``
    (absolute positions), or None when neither alignment places them."""
    if not (isinstance(q_offset, int) and isinstance(kv_offset, int)):
        return None
    shift = q_offset - kv_offset
    if shift == kv_length - q_length:
        return "bottom_right"
    if shift == 0:
        return "top_left"
    return None


#: The code that builds masks ahead of the forward pass: generate() with a compileable cache
#: (static, offloaded static, sliding window) builds them in prepare_inputs_for_generation,
#: through create_masks_for_generate (which a few models override, under the same name).
#: (Unwrapped: a decorator's wrapper code is shared by every function it decorates.)
_BUILDS_AHEAD = tuple(inspect.unwrap(function).__code__ for function in (
    GenerationMixin.prepare_inputs_for_generation, masking_utils.create_masks_for_generate))


def built_ahead_of_the_forward() -> bool:
    """Whether transformers is building this mask before the forward pass, to hand it in as an
    already prepared mask, which transformers passes on only as a 4-D tensor (or a BlockMask).

    Read off the calling frames: the mask function is not told why it is called. Inside a
    compiled region the forward pass itself builds the masks, so the answer is False there.
    """
    if torch.compiler.is_compiling():
        return False
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code in _BUILDS_AHEAD or code.co_name == "create_masks_for_generate":
            return True
        frame = frame.f_back
    return False


def attnlib_mask(batch_size: int, q_length: int, kv_length: int, q_offset=0, kv_offset=0,
                 mask_function=masking_utils.causal_mask_function, attention_mask=None, **kwargs):
    """transformers' mask function for attnlib: a :class:`StructuredMask` when the pattern
    is one attnlib takes as arguments, else the dense bool ``(B, 1, L, S)`` mask.

    A mask built ahead of the forward pass (:func:`built_ahead_of_the_forward`: ``generate()``
    with a static, offloaded-static or sliding-window cache) is always the dense one, the only
    kind transformers hands on to the model unchanged."""
    pattern = recognised_pattern(mask_function)
    alignment = _alignment(q_offset, kv_offset, q_length, kv_length)
    if pattern is not None and alignment is not None and not built_ahead_of_the_forward():
        causal, sliding_window, bidirectional_window = pattern
        if sliding_window is None:
            window = None
        elif bidirectional_window:
            window = (sliding_window, sliding_window)  # |i - j| <= W
        else:
            window = (sliding_window - 1, 0)  # i - W < j <= i
        key_padding = masking_utils.prepare_padding_mask(attention_mask, kv_length, kv_offset)
        if key_padding is not None:
            key_padding = key_padding[:, kv_offset:kv_offset + kv_length]
            if bool(key_padding.all()):
                key_padding = None
        return StructuredMask(key_padding, causal, window, alignment, sliding_window)
    for skip in ("allow_is_causal_skip", "allow_is_bidirectional_skip"):
        kwargs.pop(skip, None)
    return masking_utils.sdpa_mask(
        batch_size, q_length, kv_length, q_offset, kv_offset, mask_function, attention_mask,
        allow_is_causal_skip=False, allow_is_bidirectional_skip=False, **kwargs,
    )


#: Every keyword the attention function takes, for the message that refuses another one.
KNOWN_KEYWORDS = ("dropout", "scaling", "sliding_window", "softcap", "s_aux", "is_causal",
                  "output_attentions", *ALREADY_ACCOUNTED_FOR)


NO_WEIGHTS = ("output_attentions=True: attnlib's attention backend returns no weights; "
              "use attn_implementation='eager' to get them (or attnlib.attention_weights)")


def _check_keywords(keywords: dict) -> None:
    for name, value in keywords.items():
        if value is None or name in ALREADY_ACCOUNTED_FOR:  # None: the model passes nothing
            continue
        if name == "output_attentions":
            if value:
                raise ValueError(NO_WEIGHTS)
            continue
        raise TypeError(
            f"attnlib's attention backend got the keyword {name}={value!r}, which it does not "
            f"know how to honour; it takes {', '.join(sorted(KNOWN_KEYWORDS))}"
        )


def _check_no_weights_recorded() -> None:
    """Refuse a forward call that asked for the weights but did not pass the flag down.

    transformers records ``output_attentions`` from each attention module's second
    output and skips a None, so a model that keeps the flag to itself (GPT-2) would
    return an empty tuple of weights; the call's recorder says what it collects.
    """
    collecting = output_capturing._active_collector.get() or {}
    if any(key.endswith("attentions") for key in collecting):
        raise ValueError(NO_WEIGHTS)


def attnlib_attention(module: torch.nn.Module, query: torch.Tensor,
                      key: torch.Tensor, value: torch.Tensor, attention_mask,
                      dropout: float = 0.0, scaling: float | None = None,
                      sliding_window: int | None = None,
                      softcap: float | None = None,
                      s_aux: torch.Tensor | None = None,
                      is_causal: bool | None = None, *, backend: str = "auto",
                      **keywords):
    """transformers' attention function for attnlib.

    Shapes: ``query (B, Hq, L, E)``, ``key``/``value (B, Hkv, S, E)``;
    returns ``(output (B, L, Hq, E), None)``, the layout transformers
    expects (no weights).
    """
    _check_keywords(keywords)
    _check_no_weights_recorded()
    arguments = {}
    # As in transformers' eager and sdpa paths, a mask the model built
    # decides causality; the layer's is_causal speaks only when there is none
    if isinstance(attention_mask, StructuredMask):
        built_for = attention_mask.sliding_window
        if sliding_window is not None and sliding_window != built_for:
            raise ValueError(
                f"the layer's sliding_window={sliding_window} disagrees with "
                f"its mask, built for sliding_window={built_for}"
            )
        padding = attention_mask.key_padding
        keys = (key.shape[0], key.shape[-2])
        if padding is not None and padding.shape != keys:
            raise ValueError(
                f"the mask's key padding has shape {tuple(padding.shape)}, "
                f"but the keys have batch {keys[0]} and length {keys[1]}"
            )
        window = attention_mask.window
        if padding is None:
            arguments.update(is_causal=attention_mask.causal)
        else:
            arguments.update(attn_mask=padding[:, None, None, :])
            # is_causal cannot join attn_mask: the window's right edge is
            if attention_mask.causal:
                window = (window[0] if window else None, 0)
        arguments.update(window=window,
                         causal_alignment=attention_mask.causal_alignment)
    elif attention_mask is None:
        causal = is_causal
        if causal is None:
            causal = getattr(module, "is_causal", True)
        window = None
        if sliding_window is not None:
            window = ((sliding_window - 1, 0) if causal
                      else (sliding_window, sliding_window))
        arguments.update(is_causal=causal, window=window,
                         causal_alignment="bottom_right")
    elif isinstance(attention_mask, torch.Tensor):
        # dense: transformers folded the whole pattern in
        arguments.update(attn_mask=attention_mask)
    else:
        raise TypeError(
            "attention_mask must be attnlib's StructuredMask, a tensor or "
            f"None, got {type(attention_mask).__name__}; is the model's mask "
            "built by another backend?"
        )
    output = scaled_dot_product_attention(
        query, key, value, dropout_p=dropout, scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1], softcap=softcap,
        sinks=s_aux, backend=backend, **arguments,
    )
    return output.transpose(1, 2).contiguous(), None


def register(name: str = "attnlib", backend: str = "auto") -> None:
    """Make ``attn_implementation=name`` run attnlib (``backend``: "auto" or a name
    in ``attnlib.BACKENDS``) in every model that uses transformers' attention interface."""
    check_version(transformers.__version__)
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str, got {name!r}")
    if backend != "auto" and backend not in dispatch.BACKENDS:
        raise ValueError(f"backend must be 'auto' or one of {tuple(dispatch.BACKENDS)}, got {backend!r}")
    AttentionInterface.register(name, functools.partial(attnlib_attention, backend=backend))
    AttentionMaskInterface.register(name, attnlib_mask)
