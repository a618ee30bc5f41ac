"""attnlib.integrations.probes records what each layer hands to attention: its values too,
as the layer's own value projection computes them."""
import pytest
import torch

from attnlib import checkpoints


@pytest.mark.skipif(not checkpoints.available("minilm"), reason=checkpoints.skipped("minilm", "the test"))
def test_a_probe_records_each_layers_values_as_its_projection_computes_them():
    from attnlib.integrations import probes

    model, tokenizer = checkpoints.load("minilm")
    tokens = tokenizer("The cat sat on the mat.", return_tensors="pt")["input_ids"]
    projected = []
    hooks = [layer.attention.self.value.register_forward_hook(lambda m, i, out: projected.append(out))
             for layer in model.encoder.layer]
    try:
        with torch.no_grad(), probes.probe(model) as calls:
            model(input_ids=tokens)
    finally:
        for hook in hooks:
            hook.remove()
    heads = model.config.num_attention_heads
    assert len(calls) == len(projected) == model.config.num_hidden_layers
    for call, out in zip(calls, projected):
        expected = out.unflatten(-1, (heads, -1)).transpose(1, 2)  # (B, H, S, Ev)
        assert call.value.shape == expected.shape == call.key.shape
        assert torch.equal(call.value, expected)
